"""
numpy <-> rclpy messages for the nodes.

Parsing (with validation and rejection counting) lives ROS-free in `data/messages.py` and is
re-exported here, so a node imports one module; this module adds the building of outgoing
rclpy messages. Units as in the messages (SI); stamps are integer nanoseconds.
"""
import array
import importlib
from typing import Optional, Sequence

from builtin_interfaces.msg import Time
from geometry_msgs.msg import PoseStamped, Twist, TwistStamped
import numpy as np
from rclpy.node import Node
from robot_dynamics_learning.data.loading import JOINT_VALUE_LIMIT
from robot_dynamics_learning.data.messages import (
    ArrayParser, CarCommand, CarCommandParser, CarCommandSettings, CommandMapping, FieldNeed,
    JointSample, JointStateParser, PoseParser, PoseSample, quaternion_from_yaw, Reason,
    RejectionCounter, Result, stamp_to_ns, StampCheck)
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState, Joy
from std_msgs.msg import Float64MultiArray

__all__ = [
    'ArrayParser', 'CarCommand', 'CarCommandParser', 'CommandMapping', 'FieldNeed',
    'JointSample', 'JointStateParser', 'PoseParser', 'PoseSample', 'Reason',
    'RejectionCounter', 'Result', 'StampCheck', 'stamp_to_ns', 'time_msg', 'clock_msg',
    'joint_state_msg', 'PredictedTorquePublisher', 'pose_stamped_msg', 'planar_pose_msg',
    'twist_msg', 'twist_stamped_msg', 'joy_msg', 'float64_array_msg', 'subscribe_commands',
    'JointValueGuard',
]
# The car command types a node may take on `command` (config field `command_type`).
COMMAND_MESSAGES = {'twist': Twist, 'twist_stamped': TwistStamped, 'joy': Joy}


def arrival_ns(node: Node, parser) -> Optional[int]:
    """Return the node clock's time for a parser that may stamp with it (`StampSource`)."""
    return node.get_clock().now().nanoseconds if parser.times.wants_arrival else None


def announce_arrival_times(node: Node, parser, topic: str) -> None:
    """Log once that a topic's stamps are unset and arrival times stand in."""
    if parser.times.news():
        node.get_logger().warn(f'{node.resolve_topic_name(topic)}: header stamps are 0 (the '
                               'driver leaves them unset): using arrival times on the node '
                               'clock (stamp_source auto; set header to refuse them)')


def output_stamp(msg, parser, stamp_ns: int) -> Time:
    """Return the stamp an output for `msg` carries: its header's, or the arrival time used."""
    return time_msg(stamp_ns) if parser.times.receipt else msg.header.stamp


def parse_or_warn(node: Node, parser, msg, what: str, arrival: Optional[int] = None):
    """
    Return the parser's value for `msg`, or None after a throttled warning naming the reason.

    The parser counts every rejection by reason (its `counter`); the warning says why in one
    line, at most every 2 s, so a flood of bad messages cannot flood the log. arrival: when
    the message arrived, for a parser that may stamp with it.
    """
    result = parser.parse(msg, arrival)
    if result.ok:
        return result.value
    node.get_logger().warn(f'{what} rejected ({result.reason.value}: {result.detail})',
                           throttle_duration_sec=2.0)
    return None


class JointValueGuard:
    """
    Skips and counts samples with a value beyond `JOINT_VALUE_LIMIT`: the arm nodes' check.

    A garbage velocity, or the acceleration differentiated from a large one: the models
    compute in float32, where a finite float64 beyond 3.4e38 became inf and the model's
    check of its input ended the node, and where 3e38 itself passed and the published
    torque was inf.
    """

    def __init__(self) -> None:
        self.skipped = 0

    def accepts(self, node: Node, *arrays: Optional[np.ndarray]) -> bool:
        """Return True when every value (None: no values) fits; else count and log the skip."""
        if all(a is None or bool(np.all(np.abs(a) <= JOINT_VALUE_LIMIT)) for a in arrays):
            return True
        self.skipped += 1
        node.get_logger().warn(f'skipped a sample with a value beyond {JOINT_VALUE_LIMIT:g} '
                               f'({self.skipped} so far): a joint value or its derivative, not '
                               'motion', throttle_duration_sec=2.0)
        return False


def message_class(msgtype: str) -> type:
    """Return the rclpy class of 'pkg/msg/Type' (its Python package must be installed)."""
    package, _, name = msgtype.split('/')
    try:
        return getattr(importlib.import_module(f'{package}.msg'), name)
    except (ImportError, AttributeError):
        raise ValueError(f'message type {msgtype} is not installed for rclpy') from None


def subscribe_commands(node: Node, config: CarCommandSettings, callback,
                       **options) -> CarCommandParser:
    """
    Subscribe `command` in the type `config.command_type` names; return its parser.

    `config`: a car node's config (`CarCommandSettings`). The parser leaves stamps to the
    caller's own checks.
    """
    node.create_subscription(COMMAND_MESSAGES[config.command_type], 'command', callback, 10,
                             **options)
    return CarCommandParser(config.mapping(), check_stamps=False)


def time_msg(stamp_ns: int) -> Time:
    """Return integer nanoseconds as a builtin_interfaces/Time (sec is int32: until 2038)."""
    sec, nanosec = divmod(int(stamp_ns), 1_000_000_000)
    if not -2**31 <= sec < 2**31:
        raise ValueError(f'stamp {stamp_ns} ns does not fit builtin_interfaces/Time (int32 s)')
    return Time(sec=sec, nanosec=nanosec)


def clock_msg(stamp_ns: int) -> Clock:
    """Return a rosgraph_msgs/Clock for /clock."""
    return Clock(clock=time_msg(stamp_ns))


def _doubles(values: Optional[np.ndarray], n: int, field: str) -> array.array:
    """(n,) float64 -> array('d') (the fast path of the message setter); None -> empty."""
    if values is None:
        return array.array('d')
    values = np.ascontiguousarray(values, dtype=np.float64)
    if values.shape != (n,):
        raise ValueError(f'{field} must have shape ({n},), got {values.shape}')
    return array.array('d', values.tobytes())


def joint_state_msg(stamp_ns: int, names: Sequence[str], position: Optional[np.ndarray] = None,
                    velocity: Optional[np.ndarray] = None, effort: Optional[np.ndarray] = None,
                    frame_id: str = '') -> JointState:
    """Build a JointState; arrays (n,) in the order of names, None gives an empty field."""
    n = len(names)
    msg = JointState()
    msg.header.stamp = time_msg(stamp_ns)
    msg.header.frame_id = frame_id
    msg.name = [str(name) for name in names]
    msg.position = _doubles(position, n, 'position')
    msg.velocity = _doubles(velocity, n, 'velocity')
    msg.effort = _doubles(effort, n, 'effort')
    return msg


class PredictedTorquePublisher:
    """
    `~/predicted_torques` and `~/predicted_torques_std` (JointState, effort) of a node.

    One outgoing message per topic, built once the joint names are known: per sample only
    the stamp (the input's) and the effort change, so the hot path allocates no messages.
    A prediction with a NaN or inf is not published, only counted (`not_finite`): a
    controller must not act on it.
    """

    def __init__(self, node: Node, depth: int = 10) -> None:
        self._torque_pub = node.create_publisher(JointState, '~/predicted_torques', depth)
        self._std_pub = node.create_publisher(JointState, '~/predicted_torques_std', depth)
        self._torque: Optional[JointState] = None
        self._std: Optional[JointState] = None
        self.not_finite = 0

    def set_joint_names(self, names: Sequence[str]) -> None:
        """Build the two reused messages for `names`."""
        self._torque = joint_state_msg(0, names)
        self._std = joint_state_msg(0, names)

    def publish(self, stamp: Time, mean: np.ndarray, variance: Optional[np.ndarray]) -> None:
        """Publish the torques (n,) and, where the model gives a variance, their std."""
        finite_variance = variance is None or bool(np.all(np.isfinite(variance)))
        if not (np.all(np.isfinite(mean)) and finite_variance):
            self.not_finite += 1
            return
        n = len(self._torque.name)
        self._torque.header.stamp = stamp
        self._torque.effort = _doubles(mean, n, 'predicted torque')
        self._torque_pub.publish(self._torque)
        if variance is not None:
            self._std.header.stamp = stamp
            self._std.effort = _doubles(np.sqrt(np.maximum(variance, 0.0)), n,
                                        'predicted torque variance')
            self._std_pub.publish(self._std)


def pose_stamped_msg(stamp_ns: int, position: Sequence[float], quaternion: Sequence[float],
                     frame_id: str = 'world') -> PoseStamped:
    """Build a PoseStamped from position (3,) in m and quaternion (4,) [x, y, z, w]."""
    msg = PoseStamped()
    msg.header.stamp = time_msg(stamp_ns)
    msg.header.frame_id = frame_id
    p, o = msg.pose.position, msg.pose.orientation
    p.x, p.y, p.z = (float(v) for v in position)
    o.x, o.y, o.z, o.w = (float(v) for v in quaternion)
    return msg


def planar_pose_msg(stamp_ns: int, x: float, y: float, yaw: float,
                    frame_id: str = 'world') -> PoseStamped:
    """Build a PoseStamped of a planar pose (x, y in m, yaw in rad about z, z = 0)."""
    return pose_stamped_msg(stamp_ns, (x, y, 0.0), quaternion_from_yaw(yaw), frame_id)


def twist_msg(command: CarCommand, mapping: CommandMapping = CommandMapping()) -> Twist:
    """Car command -> Twist, the inverse of `CommandMapping`: linear.x, angular.z."""
    msg = Twist()
    msg.linear.x = float(command.throttle) / mapping.throttle_scale
    msg.angular.z = float(command.steering) / mapping.steering_scale
    return msg


def twist_stamped_msg(stamp_ns: int, command: CarCommand,
                      mapping: CommandMapping = CommandMapping(),
                      frame_id: str = 'base_link') -> TwistStamped:
    """Car command -> TwistStamped (same mapping as `twist_msg`)."""
    msg = TwistStamped()
    msg.header.stamp = time_msg(stamp_ns)
    msg.header.frame_id = frame_id
    msg.twist = twist_msg(command, mapping)
    return msg


def joy_msg(stamp_ns: int, command: CarCommand, mapping: CommandMapping = CommandMapping()
            ) -> Joy:
    """Car command -> Joy with the mapped axes set and every other axis 0."""
    axes = [0.0] * (max(mapping.throttle_axis, mapping.steering_axis) + 1)
    axes[mapping.throttle_axis] = float(command.throttle) / mapping.throttle_scale
    axes[mapping.steering_axis] = float(command.steering) / mapping.steering_scale
    msg = Joy()
    msg.header.stamp = time_msg(stamp_ns)
    msg.axes = axes
    return msg


def float64_array_msg(values: np.ndarray) -> Float64MultiArray:
    """(m,) float64 -> Float64MultiArray with an empty layout (as ros2_control expects)."""
    values = np.ascontiguousarray(values, dtype=np.float64).ravel()
    msg = Float64MultiArray()
    msg.data = array.array('d', values.tobytes())
    return msg
