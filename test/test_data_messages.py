"""Message parsing and validation on real rclpy message classes and rosbags message classes."""
import math
from types import SimpleNamespace

from geometry_msgs.msg import PoseStamped, Twist, TwistStamped
from hypothesis import given, settings, strategies as st
import numpy as np
import pytest
from robot_dynamics_learning.data.messages import (
    ArrayParser, CarCommandParser, CommandMapping, FieldNeed, JointStateParser, PoseParser,
    quaternion_from_yaw, Reason, RejectionCounter, Result, StampCheck, yaw_from_quaternion)
from rosbags.typesys import get_typestore, Stores
from sensor_msgs.msg import JointState, Joy
from std_msgs.msg import Float64MultiArray

NAMES = ['j1', 'j2', 'j3']
STORE = get_typestore(Stores.ROS2_JAZZY)


class RclpyFactory:
    """Builds messages with the rclpy classes (as the nodes receive them)."""

    @staticmethod
    def joint_state(stamp_ns, names, position=(), velocity=(), effort=()):
        msg = JointState()
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(stamp_ns), 10**9)
        msg.name = list(names)
        msg.position = [float(v) for v in position]
        msg.velocity = [float(v) for v in velocity]
        msg.effort = [float(v) for v in effort]
        return msg

    @staticmethod
    def pose(stamp_ns, position, quaternion):
        msg = PoseStamped()
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(stamp_ns), 10**9)
        msg.header.frame_id = 'world'
        p, o = msg.pose.position, msg.pose.orientation
        p.x, p.y, p.z = (float(v) for v in position)
        o.x, o.y, o.z, o.w = (float(v) for v in quaternion)
        return msg

    @staticmethod
    def twist(linear_x, angular_z, stamp_ns=None):
        twist = Twist()
        twist.linear.x, twist.angular.z = float(linear_x), float(angular_z)
        if stamp_ns is None:
            return twist
        msg = TwistStamped()
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(stamp_ns), 10**9)
        msg.twist = twist
        return msg

    @staticmethod
    def joy(stamp_ns, axes):
        msg = Joy()
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(stamp_ns), 10**9)
        msg.axes = [float(v) for v in axes]
        return msg

    @staticmethod
    def array(values, offset=0):
        msg = Float64MultiArray()
        msg.data = [float(v) for v in values]
        msg.layout.data_offset = offset
        return msg


class RosbagsFactory:
    """Builds the same messages with the rosbags (typestore) classes, as bags deliver them."""

    @staticmethod
    def header(stamp_ns, frame_id=''):
        sec, nanosec = divmod(int(stamp_ns), 10**9)
        return STORE.types['std_msgs/msg/Header'](
            stamp=STORE.types['builtin_interfaces/msg/Time'](sec=sec, nanosec=nanosec),
            frame_id=frame_id)

    @classmethod
    def joint_state(cls, stamp_ns, names, position=(), velocity=(), effort=()):
        return STORE.types['sensor_msgs/msg/JointState'](
            header=cls.header(stamp_ns), name=list(names),
            position=np.array(position, float), velocity=np.array(velocity, float),
            effort=np.array(effort, float))

    @classmethod
    def pose(cls, stamp_ns, position, quaternion):
        types = STORE.types
        return types['geometry_msgs/msg/PoseStamped'](
            header=cls.header(stamp_ns, 'world'), pose=types['geometry_msgs/msg/Pose'](
                position=types['geometry_msgs/msg/Point'](*map(float, position)),
                orientation=types['geometry_msgs/msg/Quaternion'](*map(float, quaternion))))

    @classmethod
    def twist(cls, linear_x, angular_z, stamp_ns=None):
        vector = STORE.types['geometry_msgs/msg/Vector3']
        twist = STORE.types['geometry_msgs/msg/Twist'](
            linear=vector(float(linear_x), 0.0, 0.0), angular=vector(0.0, 0.0, float(angular_z)))
        if stamp_ns is None:
            return twist
        return STORE.types['geometry_msgs/msg/TwistStamped'](header=cls.header(stamp_ns),
                                                             twist=twist)

    @classmethod
    def joy(cls, stamp_ns, axes):
        return STORE.types['sensor_msgs/msg/Joy'](
            header=cls.header(stamp_ns), axes=np.array(axes, np.float32),
            buttons=np.zeros(0, np.int32))

    @staticmethod
    def array(values, offset=0):
        layout = STORE.types['std_msgs/msg/MultiArrayLayout'](dim=[], data_offset=offset)
        return STORE.types['std_msgs/msg/Float64MultiArray'](
            layout=layout, data=np.array(values, float))


@pytest.fixture(params=[RclpyFactory, RosbagsFactory], ids=['rclpy', 'rosbags'])
def make(request):
    return request.param


def test_joint_state_by_name_subset_reorder_and_extra(make):
    parser = JointStateParser(['j3', 'j1'])
    msg = make.joint_state(5, ['j1', 'j2', 'j3', 'extra'], [1, 2, 3, 4], [10, 20, 30, 40], [])
    result = parser.parse(msg)
    assert result.ok
    assert result.value.stamp_ns == 5
    np.testing.assert_array_equal(result.value.position, [3.0, 1.0])
    np.testing.assert_array_equal(result.value.velocity, [30.0, 10.0])
    assert result.value.effort is None
    assert parser.counter.as_dict() == {'accepted': 1}


def test_joint_state_adopts_first_names(make):
    parser = JointStateParser()
    assert parser.parse(make.joint_state(1, NAMES, [1, 2, 3])).ok
    assert parser.joint_names == NAMES
    reordered = parser.parse(make.joint_state(2, ['j3', 'j2', 'j1'], [3, 2, 1]))
    np.testing.assert_array_equal(reordered.value.position, [1.0, 2.0, 3.0])


@pytest.mark.parametrize('case, reason', [
    ({'position': [1, float('nan'), 3]}, Reason.NON_FINITE),
    ({'position': [1, 2, float('inf')]}, Reason.NON_FINITE),
    ({'position': [1, 2]}, Reason.ARRAY_LENGTH),
    ({'position': [1, 2, 3], 'velocity': [1]}, Reason.ARRAY_LENGTH),
    ({'names': ['j1', 'j2']}, Reason.MISSING_JOINT),
    ({'names': ['j1', 'j2', 'j3', 'j1'], 'position': [1, 2, 3, 4]}, Reason.DUPLICATE_JOINT),
    ({'position': []}, Reason.MISSING_FIELD),
    ({'effort': []}, Reason.MISSING_FIELD),
    ({'stamp_ns': 0}, Reason.ZERO_STAMP),
])
def test_joint_state_rejections(make, case, reason):
    parser = JointStateParser(NAMES, effort=FieldNeed.REQUIRED)
    args = {'stamp_ns': 100, 'names': NAMES, 'position': [1, 2, 3], 'velocity': [],
            'effort': [4, 5, 6]}
    args.update(case)
    names = args.pop('names')
    stamp = args.pop('stamp_ns')
    result = parser.parse(make.joint_state(stamp, names, **args))
    assert not result.ok and result.value is None
    assert result.reason == reason and result.detail
    assert parser.counter.rejected == {reason: 1} and parser.counter.accepted == 0


def test_nan_in_ignored_or_extra_joint_is_accepted(make):
    parser = JointStateParser(['j1', 'j2'], velocity=FieldNeed.IGNORE)
    msg = make.joint_state(1, ['j1', 'j2', 'j3'], [1, 2, float('nan')], [float('nan')] * 3)
    assert parser.parse(msg).ok


def test_stamps_backwards_repeated_and_recovery(make):
    parser = JointStateParser(NAMES)
    assert parser.parse(make.joint_state(200, NAMES, [1, 2, 3])).ok
    assert parser.parse(make.joint_state(100, NAMES, [1, 2, 3])).reason == \
        Reason.STAMP_BACKWARDS
    assert parser.parse(make.joint_state(200, NAMES, [1, 2, 3])).reason == \
        Reason.STAMP_REPEATED
    # A rejected message does not advance the state: the bad one below is skipped, then 300 ok.
    assert parser.parse(make.joint_state(400, NAMES, [1, float('nan'), 3])).reason == \
        Reason.NON_FINITE
    assert parser.parse(make.joint_state(300, NAMES, [1, 2, 3])).ok
    parser.reset()
    assert parser.parse(make.joint_state(50, NAMES, [1, 2, 3])).ok
    assert parser.counter.summary() == \
        'accepted 3, rejected 3 (non_finite 1, stamp_backwards 1, stamp_repeated 1)'


def test_malformed_object_never_raises():
    parser = JointStateParser(NAMES)
    result = parser.parse(SimpleNamespace(name=NAMES))
    assert result.reason == Reason.MALFORMED and 'AttributeError' in result.detail
    assert PoseParser().parse(object()).reason == Reason.MALFORMED
    assert ArrayParser().parse(SimpleNamespace(layout=None, data=[1.0])).reason == \
        Reason.MALFORMED


def test_parser_configuration_errors():
    with pytest.raises(ValueError, match='unique'):
        JointStateParser(['a', 'a'])
    with pytest.raises(ValueError, match='at least one'):
        JointStateParser(NAMES, position='ignore', velocity='ignore', effort='ignore')
    with pytest.raises(ValueError, match='steering_scale'):
        CommandMapping(steering_scale=0.0)
    with pytest.raises(ValueError, match='throttle_axis'):
        CommandMapping(throttle_axis=-1)


def test_pose(make):
    parser = PoseParser()
    yaw = 2.5
    q = quaternion_from_yaw(yaw)
    result = parser.parse(make.pose(7, [1, 2, 3], q))
    assert result.ok and result.value.frame_id == 'world'
    np.testing.assert_array_equal(result.value.position, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(result.value.quaternion, q)
    assert result.value.yaw == pytest.approx(yaw, abs=1e-12)
    assert parser.parse(make.pose(8, [1, 2, 3], [0, 0, 0, 0])).reason == Reason.BAD_QUATERNION
    assert parser.parse(make.pose(8, [1, float('nan'), 3], q)).reason == Reason.NON_FINITE
    assert parser.parse(make.pose(6, [1, 2, 3], q)).reason == Reason.STAMP_BACKWARDS
    assert parser.parse(make.pose(0, [1, 2, 3], q)).reason == Reason.ZERO_STAMP
    far = parser.parse(make.pose(9, [1e300, 2, 3], q))   # finite garbage, not a place
    assert far.reason == Reason.OUT_OF_RANGE and '1e+08 m' in far.detail
    assert parser.parse(make.pose(10, [4.5e5, 5.4e6, 300.0], q)).ok   # UTM: a place


def test_commands_twist_stamped_and_joy(make):
    mapping = CommandMapping(throttle_axis=4, steering_axis=0, throttle_scale=0.5,
                             steering_scale=-2.0)
    parser = CarCommandParser(mapping)
    plain = parser.parse(make.twist(0.8, 0.25))
    assert plain.ok and plain.value.stamp_ns is None
    assert (plain.value.throttle, plain.value.steering) == (0.4, -0.5)
    stamped = parser.parse(make.twist(0.2, -0.5, stamp_ns=10))
    assert stamped.value.stamp_ns == 10 and stamped.value.steering == 1.0
    joy = parser.parse(make.joy(11, [0.25, 0, 0, 0, 1.0]))
    assert (joy.value.throttle, joy.value.steering) == (0.5, -0.5)
    assert parser.parse(make.joy(12, [0.25, 0.0])).reason == Reason.MISSING_AXIS
    assert parser.parse(make.twist(float('nan'), 0.0)).reason == Reason.NON_FINITE
    huge = parser.parse(make.twist(0.2, 1e100))   # overflowed the yaw filter's cubic term
    assert huge.reason == Reason.OUT_OF_RANGE and 'steering_scale' in huge.detail
    assert parser.parse(make.twist(0.2, -2.5)).value.steering == 5.0   # a scale, not garbage
    assert parser.parse(make.joy(5, [0.0] * 5)).reason == Reason.STAMP_BACKWARDS


def test_float64_array(make):
    parser = ArrayParser(size=3)
    result = parser.parse(make.array([9, 1, 2, 3], offset=1))
    np.testing.assert_array_equal(result.value, [1.0, 2.0, 3.0])
    assert parser.parse(make.array([1, 2])).reason == Reason.WRONG_SIZE
    assert parser.parse(make.array([1, float('-inf'), 2])).reason == Reason.NON_FINITE
    assert ArrayParser().parse(make.array([1.0] * 5)).ok


def test_stamp_check_and_counter_directly():
    check = StampCheck(allow_repeated=True)
    assert check.check(5) is None
    check.accept(5)
    assert check.check(5) is None
    assert check.check(4).reason == Reason.STAMP_BACKWARDS
    counter = RejectionCounter()
    counter.count(Result(value=1))
    counter.count(Result(reason=Reason.NON_FINITE, detail='x'))
    assert counter.as_dict() == {'accepted': 1, 'non_finite': 1}
    assert counter.last_detail[Reason.NON_FINITE] == 'x' and counter.total_rejected == 1


finite = st.floats(-1e6, 1e6, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(st.permutations(['a', 'b', 'c', 'd', 'e']),
       st.lists(finite, min_size=5, max_size=5), st.integers(1, 4))
def test_property_reordering_matches_names(order, values, k):
    """Whatever the message order, each output value belongs to the requested joint."""
    wanted = ['e', 'a', 'c', 'b', 'd'][:k]
    truth = dict(zip(order, values))
    for make in (RclpyFactory, RosbagsFactory):
        result = JointStateParser(wanted).parse(make.joint_state(1, order, values))
        assert result.ok
        np.testing.assert_array_equal(result.value.position, [truth[n] for n in wanted])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=3, max_size=3),
       st.integers(0, 5))
def test_property_accept_iff_valid(values, length_delta):
    """Accepted exactly when every value is finite and the length matches the names."""
    values = (values * 3)[:3 + length_delta] if length_delta else values
    msg = RosbagsFactory.joint_state(1, NAMES, values)
    result = JointStateParser(NAMES).parse(msg)
    valid = len(values) == 3 and all(math.isfinite(v) for v in values)
    assert result.ok == valid
    if not valid:
        assert result.reason in (Reason.NON_FINITE, Reason.ARRAY_LENGTH)


@settings(max_examples=60, deadline=None)
@given(st.floats(-math.pi + 1e-9, math.pi), st.floats(0.995, 1.005))
def test_property_yaw_roundtrip_and_norm_invariance(yaw, scale):
    q = quaternion_from_yaw(yaw) * scale
    assert yaw_from_quaternion(*q) == pytest.approx(yaw, abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 10**12), min_size=1, max_size=30))
def test_property_accepted_stamps_strictly_increase(stamps):
    parser = JointStateParser(NAMES)
    accepted = [s for s in stamps
                if parser.parse(RosbagsFactory.joint_state(s, NAMES, [0, 0, 0])).ok]
    assert all(b > a for a, b in zip(accepted, accepted[1:]))
    assert parser.counter.accepted + parser.counter.total_rejected == len(stamps)
