"""Outgoing rclpy messages: built from numpy, parsed back by the shared parsers, CDR-compatible."""
from hypothesis import given, settings, strategies as st
import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message
from robot_dynamics_learning.nodes.conversions import (
    ArrayParser, CarCommand, CarCommandParser, clock_msg, CommandMapping, float64_array_msg,
    joint_state_msg, JointStateParser, joy_msg, planar_pose_msg, PoseParser, time_msg,
    twist_msg, twist_stamped_msg)
from rosbags.typesys import get_typestore, Stores
from sensor_msgs.msg import JointState

STORE = get_typestore(Stores.ROS2_JAZZY)


def test_time_and_clock():
    stamp = time_msg(1_700_000_000_123_456_789)
    assert (stamp.sec, stamp.nanosec) == (1_700_000_000, 123_456_789)
    assert clock_msg(5).clock.nanosec == 5
    with pytest.raises(ValueError, match='int32'):
        time_msg(2**31 * 10**9)


def test_joint_state_roundtrip_and_shape_error():
    names = ['a', 'b']
    msg = joint_state_msg(42, names, np.array([1.0, 2.0]), None, np.array([3.0, 4.0]))
    assert list(msg.velocity) == []
    sample = JointStateParser(names).parse(msg).value
    assert sample.stamp_ns == 42 and sample.velocity is None
    np.testing.assert_array_equal(sample.effort, [3.0, 4.0])
    with pytest.raises(ValueError, match=r'position must have shape \(2,\)'):
        joint_state_msg(1, names, np.zeros(3))


def test_pose_twist_joy_array_roundtrip():
    pose = PoseParser().parse(planar_pose_msg(9, 1.5, -2.0, 0.75)).value
    np.testing.assert_array_equal(pose.position, [1.5, -2.0, 0.0])
    assert pose.yaw == pytest.approx(0.75, abs=1e-12)
    mapping = CommandMapping(throttle_axis=2, steering_axis=0, throttle_scale=4.0,
                             steering_scale=0.5)
    command = CarCommand(None, 0.5, -0.25)
    for msg in (twist_msg(command, mapping), twist_stamped_msg(3, command, mapping),
                joy_msg(4, command, mapping)):
        parsed = CarCommandParser(mapping).parse(msg).value
        assert (parsed.throttle, parsed.steering) == (0.5, -0.25)
    np.testing.assert_array_equal(
        ArrayParser(3).parse(float64_array_msg(np.array([1.0, 2.0, 3.0]))).value, [1, 2, 3])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=8),
       st.integers(1, 2**31 * 10**9 - 1))
def test_property_rclpy_cdr_reads_in_rosbags(values, stamp_ns):
    """Check that rclpy's CDR of a JointState reads bit-exactly in rosbags, and back."""
    names = [f'joint_{i}' for i in range(len(values))]
    array = np.array(values)
    raw = serialize_message(joint_state_msg(stamp_ns, names, array, array, array))
    other = STORE.deserialize_cdr(raw, 'sensor_msgs/msg/JointState')
    sample = JointStateParser(names).parse(other).value
    assert sample.stamp_ns == stamp_ns
    np.testing.assert_array_equal(sample.position, array)
    back = deserialize_message(bytes(STORE.serialize_cdr(other, 'sensor_msgs/msg/JointState')),
                               JointState)
    np.testing.assert_array_equal(np.array(back.effort), array)
