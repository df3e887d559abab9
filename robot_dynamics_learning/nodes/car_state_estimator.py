"""
car_state_estimator: mocap PoseStamped -> smoothed planar pose and body-frame velocities.

Subscribes `mocap_pose` (`geometry_msgs/PoseStamped`, sensor-data QoS, e.g. remapped to
`/vrpn_mocap/<body>/pose`; `pose_type` takes TransformStamped as vicon_bridge sends it,
PoseWithCovarianceStamped or nav_msgs/Odometry instead). Every pose is validated twice: the
message parser (data/messages: NaN, bad quaternion, zero or backward stamps, stamps more
than max_future_stamp_s ahead of the node clock: one such pose would otherwise hide every
real one after it) and the estimator
(signals/mocap: out-of-order stamps, jumps beyond max_speed * dt + jump_margin). A stamp
time_reset_s or more backwards, or ten backwards stamps in a row (a looping bag, a restarted
simulation), restarts the estimate (counted in time_resets). Accepted poses
feed causal local polynomial fits of position and yaw (`MocapEstimator`: a straight line or a
parabola evaluated at the newest stamp, the velocity rotated with the heading of the same
instant). With `command_type` set the node also subscribes `command` (Twist, TwistStamped or
Joy, as car_mpc publishes and car_sim reads them) and the yaw and yaw rate come from a Kalman
filter whose model the steering command drives (`CommandedEstimator`, signals/yaw_filter.py),
placed in time by the header stamp (Twist: arrival on the node clock); without a fresh command
the fit answers. Accepted poses publish (at most publish_rate_hz times a second, so that
subscribers are not flooded at the mocap rate) `car/pose` (PoseStamped, smoothed) and
`car/twist` (TwistStamped: linear.x = vx, linear.y = vy in the car frame (m/s), angular.z = yaw
rate (rad/s)), both with the mocap stamp. Rejections are counted per reason, logged and
published on /diagnostics (keys parser_<reason>, rejected_<reason>, command_parser_<reason>,
command_rejected_<reason>; fit_fallback counts poses answered by the fit) twice a second.
Parameters: `CarStateEstimatorConfig` (control/car_estimator_params.py).
"""
import math
from typing import Optional

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped, TwistStamped
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from robot_dynamics_learning.control.car_estimator_params import CarStateEstimatorConfig
from robot_dynamics_learning.data.car_heading import (MAX_TILT_DEG, tilt_deg, tilt_problem,
                                                      TravelMonitor)
from robot_dynamics_learning.data.messages import POSE_TYPE_NAMES
from robot_dynamics_learning.nodes.car_diagnostics import publish_counters
from robot_dynamics_learning.nodes.conversions import (announce_arrival_times, arrival_ns,
                                                       message_class, parse_or_warn,
                                                       planar_pose_msg, PoseParser,
                                                       subscribe_commands, time_msg)
from robot_dynamics_learning.nodes.parameters import (declare_config, declare_stamp_bounds,
                                                      refuse_clock_changes)
from robot_dynamics_learning.nodes.runtime import spin_node
from robot_dynamics_learning.signals.estimator_check import window_for_rate
from robot_dynamics_learning.signals.yaw_filter import CommandedEstimator


class CarStateEstimatorNode(Node):
    """Thin wrapper: parse, estimate (signals/yaw_filter.py, signals/mocap.py), publish."""

    def __init__(self) -> None:
        super().__init__('car_state_estimator')
        config = declare_config(self, CarStateEstimatorConfig)
        self.estimator = CommandedEstimator(config.mocap_config(), config.yaw_model())
        self.yaw_offset = math.radians(config.yaw_offset_deg)
        self.travel = TravelMonitor()
        self.heading_warnings = 0
        self.tilted_poses = 0
        self._throttle: Optional[float] = None
        self._unanswered = 0   # accepted poses in a row without an estimate
        self._previous_ns = None
        refuse_clock_changes(self)
        # A pose stamp time_reset_s or more backwards (a looping bag, a restarted simulation),
        # or a run of backwards stamps (`StampBounds.relock_after`), restarts the estimate.
        bounds = declare_stamp_bounds(self, max_future_s=0.5, reset_after_s=config.time_reset_s)
        self.time_resets = 0
        self.parser = PoseParser(bounds=bounds, stamp_source=config.stamp_source)
        self.max_future_ns = bounds.max_future_ns
        self.frame_id = config.frame_id
        rate = float(config.publish_rate_hz)
        self.publish_period_ns = int(1e9 / rate) if rate > 0 else 0
        self._last_publish_ns = None
        self.pub_pose = self.create_publisher(PoseStamped, 'car/pose', qos_profile_sensor_data)
        self.pub_twist = self.create_publisher(TwistStamped, 'car/twist',
                                               qos_profile_sensor_data)
        self.create_subscription(message_class(POSE_TYPE_NAMES[config.pose_type]), 'mocap_pose',
                                 self._on_pose, qos_profile_sensor_data)
        self.command_parser = None
        self.command_future = 0
        if config.command_type:
            # Stamps are checked by the estimator (late, out of order) and here (future).
            self.command_parser = subscribe_commands(self, config, self._on_command)
        self.pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        self.create_timer(0.5, self._diagnostics)
        self.create_timer(5.0, self._log)

    def counters(self) -> dict:
        """Message-parser and estimator counters in one dict."""
        counters = {**{f'parser_{k}': v for k, v in self.parser.counter.as_dict().items()},
                    **self.estimator.counters, 'time_resets': self.time_resets,
                    'heading_warnings': self.heading_warnings,
                    'rejected_tilted': self.tilted_poses}
        if self.command_parser is not None:
            counters.update({f'command_parser_{k}': v
                             for k, v in self.command_parser.counter.as_dict().items()})
            counters['command_rejected_future'] = self.command_future
        return counters

    def _on_command(self, msg) -> None:
        command = parse_or_warn(self, self.command_parser, msg, 'command')
        if command is None:
            return
        now_ns = self.get_clock().now().nanoseconds
        stamp_ns = now_ns if command.stamp_ns is None else command.stamp_ns   # Twist: arrival
        if self.max_future_ns is not None and stamp_ns - now_ns > self.max_future_ns:
            self.command_future += 1
            self.get_logger().warn('command rejected (stamp ahead of the clock)',
                                   throttle_duration_sec=2.0)
            return
        reason = self.estimator.update_command(stamp_ns * 1e-9, command.throttle,
                                               command.steering)
        if reason is None:
            self._throttle = command.throttle
        if reason is not None:
            self.get_logger().warn(f'command rejected by the estimator ({reason})',
                                   throttle_duration_sec=2.0)

    def _on_pose(self, msg: object) -> None:
        sample = parse_or_warn(self, self.parser, msg, 'pose', arrival_ns(self, self.parser))
        announce_arrival_times(self, self.parser, 'mocap_pose')
        if sample is None:
            return
        if tilt_deg(sample.quaternion) > MAX_TILT_DEG:   # no yaw: the MPC must not steer on it
            self.tilted_poses += 1
            self.get_logger().warn(f'pose rejected: {tilt_problem(sample.quaternion[None])}',
                                   throttle_duration_sec=10.0)
            return
        if sample.time_reset:
            self.time_resets += 1
            self.estimator.reset()
            self._last_publish_ns = None
            self.get_logger().warn('pose stamps went back in time: the estimate restarts')
        reason = self.estimator.update(sample.stamp_ns * 1e-9, sample.position[0],
                                       sample.position[1], sample.yaw + self.yaw_offset)
        if reason is not None:
            self.get_logger().warn(f'pose rejected by the estimator ({reason})',
                                   throttle_duration_sec=2.0)
            return
        estimate = self.estimator.estimate()
        previous, self._previous_ns = self._previous_ns, sample.stamp_ns
        if estimate is None:
            self._unanswered += 1
            if self._unanswered == 4 * self.estimator.config.min_samples and previous:
                self._warn_window((sample.stamp_ns - previous) * 1e-9)
            return
        self._unanswered = 0
        self._check_heading(estimate.state)
        if (self._last_publish_ns is not None
                and sample.stamp_ns - self._last_publish_ns < self.publish_period_ns):
            return
        self._last_publish_ns = sample.stamp_ns
        state = estimate.state
        self.pub_pose.publish(planar_pose_msg(sample.stamp_ns, state[0], state[1], state[2],
                                              self.frame_id))
        twist = TwistStamped()
        twist.header.stamp = time_msg(sample.stamp_ns)
        twist.header.frame_id = 'base_link'
        twist.twist.linear.x, twist.twist.linear.y = float(state[3]), float(state[4])
        twist.twist.angular.z = float(state[5])
        self.pub_twist.publish(twist)

    def _check_heading(self, state) -> None:
        """Warn when the car travels off its heading: the rigid body's x axis is not forward."""
        problem = self.travel.add(float(state[3]), float(state[4]), self._throttle)
        if problem is not None:
            self.heading_warnings += 1
            self.get_logger().warn(problem)

    def _warn_window(self, period_s: float) -> None:
        """Say which window would answer: slow mocap (20 Hz) leaves too few poses in it."""
        config = self.estimator.config
        need = window_for_rate(config, period_s)
        self.get_logger().warn(
            f'{self._unanswered} poses and no estimate: the fit windows (window_s '
            f'{config.window_s:g} s, yaw_window_s {config.yaw_window_s or config.window_s:g} s)'
            f' hold fewer than min_samples {config.min_samples} poses {period_s * 1e3:.0f} ms '
            f'apart; set window_s (and yaw_window_s) to at least {need.window_s:.3f} s')

    def _diagnostics(self) -> None:
        counters = self.counters()
        rejected = sum(v for k, v in counters.items()
                       if k.startswith('rejected') or (k.startswith('parser_')
                                                       and k != 'parser_accepted'))
        commands = sum(v for k, v in counters.items()
                       if k.startswith('command_rejected') or (
                           k.startswith('command_parser_') and k != 'command_parser_accepted'))
        publish_counters(self, self.pub_diag, counters, warn=rejected + commands > 0,
                         message=f'{rejected} poses, {commands} commands rejected')

    def _log(self) -> None:
        self.get_logger().info(f'counters {self.counters()}')


def main(args=None) -> None:
    """Run the node (console script `car_state_estimator`)."""
    spin_node(CarStateEstimatorNode, args)


if __name__ == '__main__':
    main()
