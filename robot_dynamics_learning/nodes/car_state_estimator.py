"""
car_state_estimator: mocap PoseStamped -> smoothed planar pose and body-frame velocities.

Subscribes `mocap_pose` (`geometry_msgs/PoseStamped`, sensor-data QoS, e.g. remapped to
`/vrpn_mocap/<body>/pose`). Every pose is validated twice: the message parser (data/messages:
NaN, bad quaternion, zero or backward stamps, stamps more than max_future_stamp_s ahead of the
node clock: one such pose would otherwise hide every real one after it) and the estimator
(signals/mocap: out-of-order stamps, jumps beyond max_speed * dt + jump_margin). Accepted poses
feed causal local polynomial fits of position and yaw (`MocapEstimator`: a straight line
or a parabola evaluated at the newest stamp, the velocity rotated with the heading of the
same instant); accepted poses publish (at most publish_rate_hz times a
second, so that subscribers are not flooded at the mocap rate) `car/pose` (PoseStamped,
smoothed) and `car/twist` (TwistStamped: linear.x = vx, linear.y = vy in the car frame (m/s),
angular.z = yaw rate (rad/s)), both with the mocap stamp. Rejections are counted per reason,
logged and published on /diagnostics (keys parser_<reason> and rejected_<reason>) twice a
second.
"""
import functools

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped, TwistStamped
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from robot_dynamics_learning.nodes.car_diagnostics import publish_counters
from robot_dynamics_learning.nodes.conversions import (parse_or_warn, planar_pose_msg,
                                                       PoseParser, time_msg)
from robot_dynamics_learning.nodes.parameters import declare as declare_parameter
from robot_dynamics_learning.nodes.parameters import (declare_stamp_bounds,
                                                      refuse_clock_changes)
from robot_dynamics_learning.nodes.runtime import spin_node
from robot_dynamics_learning.signals.mocap import (emulated_mocap_config, MocapEstimator,
                                                   MocapEstimatorConfig)


class CarStateEstimatorNode(Node):
    """Thin wrapper: parse, estimate (signals/mocap.py), publish."""

    def __init__(self) -> None:
        super().__init__('car_state_estimator')

        declare = functools.partial(declare_parameter, self)

        # Defaults for car_sim's emulated mocap (what the launch files and tests drive); a
        # real Vicon: order 2, window_s 0.12 (docs/results_car.md section 8).
        defaults = emulated_mocap_config()
        declare('window_s', defaults.window_s, 'causal fit window of the positions (s)', 0.005,
                1.0)
        declare('yaw_window_s', defaults.yaw_window_s or 0.0, 'causal fit window of the yaw '
                '(s); 0 = window_s', 0.0, 1.0)
        declare('order', defaults.order, 'polynomial order of the fits: 2 = evaluated at the '
                'newest stamp (no delay), 1 = a straight line (delay about half the window, '
                'least noise)', 1, 2)
        declare('min_samples', 4, 'poses needed in the window before publishing', 2, 1000)
        declare('max_speed', 8.0, 'fastest plausible car speed for jump rejection (m/s)', 0.1,
                100.0)
        declare('jump_margin', 0.1, 'extra distance allowed between poses (m)', 0.0, 10.0)
        declare('relock_after', 10, 'consecutive jumps after which the new position is '
                'accepted (the body was moved)', 1, 10000)
        declare('frame_id', 'world', 'frame of the published pose')
        declare('publish_rate_hz', 100.0, 'most estimates published per second (every pose '
                'is still filtered); 0 = one per accepted pose', 0.0, 10000.0)
        get = self.get_parameter
        self.estimator = MocapEstimator(MocapEstimatorConfig(
            window_s=get('window_s').value, yaw_window_s=get('yaw_window_s').value or None,
            order=get('order').value,
            min_samples=get('min_samples').value, max_speed=get('max_speed').value,
            jump_margin=get('jump_margin').value, relock_after=get('relock_after').value))
        refuse_clock_changes(self)
        self.parser = PoseParser(bounds=declare_stamp_bounds(self, max_future_s=0.5))
        self.frame_id = get('frame_id').value
        rate = float(get('publish_rate_hz').value)
        self.publish_period_ns = int(1e9 / rate) if rate > 0 else 0
        self._last_publish_ns = None
        self.pub_pose = self.create_publisher(PoseStamped, 'car/pose', qos_profile_sensor_data)
        self.pub_twist = self.create_publisher(TwistStamped, 'car/twist',
                                               qos_profile_sensor_data)
        self.create_subscription(PoseStamped, 'mocap_pose', self._on_pose,
                                 qos_profile_sensor_data)
        self.pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        self.create_timer(0.5, self._diagnostics)
        self.create_timer(5.0, self._log)

    def counters(self) -> dict:
        """Message-parser and estimator counters in one dict."""
        return {**{f'parser_{k}': v for k, v in self.parser.counter.as_dict().items()},
                **self.estimator.counters}

    def _on_pose(self, msg: PoseStamped) -> None:
        sample = parse_or_warn(self, self.parser, msg, 'pose')
        if sample is None:
            return
        reason = self.estimator.update(sample.stamp_ns * 1e-9, sample.position[0],
                                       sample.position[1], sample.yaw)
        if reason is not None:
            self.get_logger().warn(f'pose rejected by the estimator ({reason})',
                                   throttle_duration_sec=2.0)
            return
        estimate = self.estimator.estimate()
        if estimate is None:
            return
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

    def _diagnostics(self) -> None:
        counters = self.counters()
        rejected = sum(v for k, v in counters.items()
                       if k.startswith('rejected') or (k.startswith('parser_')
                                                       and k != 'parser_accepted'))
        publish_counters(self, self.pub_diag, counters, warn=rejected > 0,
                         message=f'{rejected} poses rejected')

    def _log(self) -> None:
        self.get_logger().info(f'counters {self.counters()}')


def main(args=None) -> None:
    """Run the node (console script `car_state_estimator`)."""
    spin_node(CarStateEstimatorNode, args)


if __name__ == '__main__':
    main()
