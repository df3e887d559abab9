"""
arm_controller: PD plus model feed-forward along a reference (control/arm_feedforward.py).

Subscribes `joint_states` (sensor-data QoS; joints matched by name to the URDF's, bad messages
counted by reason) and answers each accepted state with one torque command,
`std_msgs/Float64MultiArray` on `command_topic` (`/effort_controller/commands`, URDF joint
order: the ros2_control JointGroupEffortController contract, so mujoco_arm, Gazebo with
gz_ros2_control and a real driver all take it). `feedforward`: `none` (PD only), `urdf` (the
URDF's rigid body) or `learned` (the newest checkpoint of `checkpoint_dir`, written by
dynamics_learner, polled every `poll_period_s` by a thread of its own and swapped in between
messages; the URDF model until the first one loads). A watchdog (100 Hz) sends zero torque
while the newest state is older than `stale_timeout_s` on the node clock (sim time with
use_sim_time, which cannot change at run time); after that the controller restarts with a new
approach from a newer state.
`/diagnostics` (1 Hz): counters, the tracking RMSE over the last second (rad) and the model
in use.
"""
from pathlib import Path
import threading
from typing import List, Optional

from diagnostic_msgs.msg import DiagnosticArray
import numpy as np
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from robot_dynamics_learning.control.arm_controller_params import ArmControllerNodeConfig
from robot_dynamics_learning.control.arm_feedforward import (ArmController,
                                                             LearnedFeedforward,
                                                             no_feedforward,
                                                             RigidBodyFeedforward)
from robot_dynamics_learning.data.joint_velocity import velocity_need, VelocitySource
from robot_dynamics_learning.dynamics import load_urdf
from robot_dynamics_learning.nodes.car_diagnostics import publish_counters
from robot_dynamics_learning.nodes.conversions import (announce_arrival_times, arrival_ns,
                                                       FieldNeed, float64_array_msg,
                                                       JointStateParser, parse_or_warn)
from robot_dynamics_learning.nodes.parameters import declare_config, refuse_clock_changes
from robot_dynamics_learning.nodes.runtime import spin_node
from robot_dynamics_learning.resources import resource
from robot_dynamics_learning.signals.causal import CausalDifferentiator
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
import torch

ERROR_WINDOW = 1000   # states in the tracking RMSE of the diagnostics


class ArmControllerNode(Node):
    """Parse -> ArmController -> publish; the checkpoint poll runs in its own thread."""

    def __init__(self) -> None:
        super().__init__('arm_controller')

        self.config = config = declare_config(self, ArmControllerNodeConfig)
        refuse_clock_changes(self)   # sim time without /clock would stop the watchdog
        torch.set_num_threads(config.torch_threads)
        name = config.urdf or 'panda.urdf'
        urdf = Path(name) if '/' in name else resource(f'urdf/{name}')
        robot = load_urdf(urdf)
        self.joint_names = list(robot.joint_names)
        self.mode = config.feedforward
        self.learned: Optional[LearnedFeedforward] = None
        feedforward = no_feedforward
        if self.mode != 'none':
            feedforward = RigidBodyFeedforward(urdf)
        if self.mode == 'learned':
            if not config.checkpoint_dir:
                raise ValueError('feedforward learned needs checkpoint_dir')
            self.learned = LearnedFeedforward(
                Path(config.checkpoint_dir), self.joint_names, fallback=feedforward,
                differentiator=CausalDifferentiator(len(self.joint_names),
                                                    window=config.accel_window))
            feedforward = self.learned
        limits = robot.joint_limits
        self.controller = ArmController(config.controller_config(), feedforward,
                                        limits.lower.numpy(), limits.upper.numpy(),
                                        limits.effort.numpy())
        # Efforts, when the driver sends them, score new checkpoints (LearnedFeedforward).
        self.velocities = VelocitySource(len(self.joint_names), config.velocity_source,
                                         config.velocity_window)
        self.parser = JointStateParser(
            self.joint_names, velocity=velocity_need(config.velocity_source),
            effort=FieldNeed.OPTIONAL if self.learned is not None else FieldNeed.IGNORE,
            stamp_source=config.stamp_source)
        self._errors = np.zeros(ERROR_WINDOW)
        self._lock = threading.Lock()
        self.pub_command = self.create_publisher(Float64MultiArray, config.command_topic,
                                                 10)
        self.pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        self.create_subscription(JointState, 'joint_states', self._on_joint_state,
                                 qos_profile_sensor_data)
        self.create_timer(0.01, self._watchdog)
        self.create_timer(1.0, self._diagnostics)
        self._stop = threading.Event()
        self._poller = None
        if self.learned is not None:
            self._poll()
            self._poller = threading.Thread(target=self._poll_loop, name='checkpoint_poll',
                                            args=(config.poll_period_s,), daemon=True)
            self._poller.start()
        self.get_logger().info(f'feed-forward {self.mode} on {urdf.name}, '
                               f'{config.trajectory} trajectory, commands on '
                               f'{config.command_topic}')

    def _poll(self) -> None:
        line = self.learned.poll()
        if line is not None:
            (self.get_logger().error if 'not loaded' in line else self.get_logger().info)(line)

    def _poll_loop(self, period: float) -> None:
        while not self._stop.wait(period):
            self._poll()

    def _now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    def _on_joint_state(self, msg: JointState) -> None:
        sample = parse_or_warn(self, self.parser, msg, 'joint state',
                               arrival_ns(self, self.parser))
        announce_arrival_times(self, self.parser, 'joint_states')
        if sample is None:
            return
        stamp = sample.stamp_ns * 1e-9
        velocity = self.velocities.velocity(stamp, sample.position, sample.velocity)
        if velocity is None:   # the fit from positions warms up
            return
        if self.learned is not None and sample.effort is not None:
            self.learned.observe(stamp, sample.position, velocity, sample.effort)
        with self._lock:
            torque = self.controller.on_state(sample.stamp_ns, self._now_ns(), sample.position,
                                              velocity)
            if torque is None:
                return
            count = self.controller.counts['commands']
            self._errors[count % ERROR_WINDOW] = float(np.mean(self.controller.last_error ** 2))
        self.pub_command.publish(float64_array_msg(torque))

    def _watchdog(self) -> None:
        with self._lock:
            was_braking = self.controller.braking
            brake = self.controller.watchdog(self._now_ns())
        if brake is None:
            return
        if not was_braking:
            self.get_logger().warn('joint states stale: zero torque')
        self.pub_command.publish(float64_array_msg(brake))

    def _diagnostics(self) -> None:
        with self._lock:
            values = dict(self.controller.counts)
            count = min(values['commands'], ERROR_WINDOW)
            braking = self.controller.braking
            rmse = float(np.sqrt(self._errors[:count].mean())) if count else float('nan')
        values.update({f'messages_{k}': v for k, v in self.parser.counter.as_dict().items()})
        values.update(feedforward=self.mode, tracking_rmse_rad=round(rmse, 6),
                      **self.velocities.diagnostics())
        if self.learned is not None:
            values.update(checkpoint=str(self.learned.path), loads=self.learned.loads,
                          load_errors=self.learned.load_errors,
                          checkpoints_refused=self.learned.refused,
                          urdf_fallback_calls=self.learned.fallback_calls)
        publish_counters(self, self.pub_diag, values, warn=braking,
                         message='braking' if braking else 'tracking',
                         hardware_id='arm_controller')

    def destroy_node(self) -> None:
        """Stop the checkpoint poll first."""
        self._stop.set()
        if self._poller is not None:
            self._poller.join(timeout=5.0)
        super().destroy_node()


def main(args: Optional[List[str]] = None) -> None:
    """Run the node (console script `arm_controller`)."""
    spin_node(ArmControllerNode, args)


if __name__ == '__main__':
    main()
