"""
car_sim: the drifting RC car simulator (sim/car.py) with emulated motion capture.

Subscribes the car command (`geometry_msgs/Twist`, `TwistStamped` or `sensor_msgs/Joy` on
`command`, chosen by `command_type`; mapping as in data/messages.CommandMapping) and publishes
mocap poses (`geometry_msgs/PoseStamped`, sensor-data QoS) at `mocap_rate_hz` with noise,
dropouts (frames not published) and optional jumps. Ground truth goes out on `~/true_pose`
and `~/true_twist` (body velocities) for evaluation. A command older than command_timeout_s
is replaced by zero throttle and steering (the car rolls to a stop).
"""
import math
import threading
import time

from geometry_msgs.msg import PoseStamped, TwistStamped
import numpy as np
from rclpy._rclpy_pybind11 import RCLError
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from robot_dynamics_learning.control.track import load_track_spec, Track
from robot_dynamics_learning.nodes.conversions import (parse_or_warn, planar_pose_msg,
                                                       subscribe_commands, time_msg)
from robot_dynamics_learning.nodes.parameters import declare_config
from robot_dynamics_learning.nodes.runtime import spin_node
from robot_dynamics_learning.sim.car import car_step, CarParams, emulate_mocap
from robot_dynamics_learning.sim.car_sim_params import CarSimConfig


class CarSimNode(Node):
    """Runs the car simulator in real time in its own thread; publishes mocap poses."""

    def __init__(self) -> None:
        super().__init__('car_sim')

        config = declare_config(self, CarSimConfig)
        command_type = config.command_type
        self.rate = config.mocap_rate_hz
        self.params = CarParams(dt=1.0 / self.rate)
        self.noise = config.mocap_noise()
        self.rng = np.random.default_rng(config.seed)
        self.timeout = config.command_timeout_s
        self.frame_id = config.frame_id
        self.state = np.zeros((1, 6))
        if config.track_file:
            track = Track(load_track_spec(config.track_file))
            self.state[0, :3] = track.pose_at(config.start_s)
        else:
            self.state[0, :3] = config.start_pose
        self._lock = threading.Lock()
        self._command = np.zeros(2)
        self._command_time = -math.inf
        self.published = 0
        self.dropped = 0
        self.pub_pose = self.create_publisher(PoseStamped, 'mocap_pose', qos_profile_sensor_data)
        self.pub_true_pose = self.create_publisher(PoseStamped, '~/true_pose', 10)
        self.pub_true_twist = self.create_publisher(TwistStamped, '~/true_twist', 10)
        self.parser = subscribe_commands(self, config, self._on_command)
        self.create_timer(5.0, self._log)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name='car_sim', daemon=True)
        self._thread.start()
        self.get_logger().info(f'car simulator at {self.rate:.0f} Hz, mocap dropout '
                               f'{self.noise.dropout:.1%}, commands as {command_type}')

    def _on_command(self, msg) -> None:
        command = parse_or_warn(self, self.parser, msg, 'command')
        if command is None:
            return
        with self._lock:
            self._command = np.clip([command.throttle, command.steering], -1.0, 1.0)
            self._command_time = time.monotonic()

    def _log(self) -> None:
        self.get_logger().info(
            f'published {self.published} mocap poses, dropped {self.dropped}; state '
            f'{np.round(self.state[0], 2).tolist()}; commands {self.parser.counter.summary()}')

    def _run(self) -> None:
        period = 1.0 / self.rate
        next_time = time.monotonic()
        while not self._stop.is_set():
            next_time += period
            delay = next_time - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            elif delay < -0.1:  # far behind (machine stalled): resynchronise, do not burst
                next_time = time.monotonic()
            with self._lock:
                fresh = time.monotonic() - self._command_time <= self.timeout
                command = self._command.copy() if fresh else np.zeros(2)
            self.state, _ = car_step(self.state, command[None], self.params)
            stamp_ns = self.get_clock().now().nanoseconds
            valid, poses = emulate_mocap(self.state, self.noise, self.rng)
            try:
                if valid[0]:
                    self.pub_pose.publish(planar_pose_msg(stamp_ns, *poses[0], self.frame_id))
                    self.published += 1
                else:
                    self.dropped += 1
                self.pub_true_pose.publish(planar_pose_msg(stamp_ns, *self.state[0, :3],
                                                           self.frame_id))
                twist = TwistStamped()
                twist.header.stamp = time_msg(stamp_ns)
                twist.header.frame_id = 'base_link'
                twist.twist.linear.x, twist.twist.linear.y = self.state[0, 3], self.state[0, 4]
                twist.twist.angular.z = self.state[0, 5]
                self.pub_true_twist.publish(twist)
            except RCLError:  # an external shutdown ended the context before destroy_node
                return

    def destroy_node(self) -> None:
        """Stop the simulation thread first."""
        self._stop.set()
        self._thread.join(timeout=5.0)
        super().destroy_node()


def main(args=None) -> None:
    """Run the node (console script `car_sim`)."""
    spin_node(CarSimNode, args)


if __name__ == '__main__':
    main()
