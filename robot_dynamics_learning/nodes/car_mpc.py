"""
car_mpc: receding-horizon MPC that drives the RC car around a race track (control/mpc.py).

Inputs: `car/pose` (PoseStamped) and `car/twist` (TwistStamped, body velocities) from
car_state_estimator, sensor-data QoS. Output: `command` as `geometry_msgs/Twist` with
linear.x = throttle / throttle_scale and angular.z = steering / steering_scale (normalised
DART convention: throttle in [throttle_min, throttle_max], steering in [-1, 1], positive
left; the inverse of data/messages.CommandMapping), plus, with publish_gz_cmd, `cmd_vel_gz`
(Twist: linear.x speed in m/s, angular.z yaw rate in rad/s from the plan's first predicted
step) for Gazebo's AckermannSteering.
Safety: the solver timer runs at rate_hz in a mutually exclusive callback group; a watchdog
(100 Hz, own group) sends the brake command as soon as the newest complete state (pose and
twist with the same stamp) is older than stale_timeout_s, judged by its header stamp against
the node clock (sim time with use_sim_time), not by when it was received: a late-delivered old
state stays stale. A state whose stamp is not newer than the last one is dropped and counted,
one stamped more than stale_timeout_s in the future too, and after a brake the node only
drives again from a state stamped after the one the brake was judged on. A tick whose solve
misses budget_s, fails, or finds the state stale sends the brake too.
use_sim_time cannot change at run time (refused): without /clock it would stop both timers.
Counters (commands, brake_*, rejected_*) and solve-time percentiles go to /diagnostics twice
a second.
"""
import functools
from pathlib import Path
import threading
from typing import Optional

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped, Twist, TwistStamped
import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from robot_dynamics_learning.control.car_training import load_car_model
from robot_dynamics_learning.control.mpc import MPCConfig, TrackMPC
from robot_dynamics_learning.control.nlp import make_optimizer, SOLVERS
from robot_dynamics_learning.control.track import load_track_spec, Track
from robot_dynamics_learning.learning.checkpoint import CheckpointDirectory
from robot_dynamics_learning.nodes.car_diagnostics import publish_counters
from robot_dynamics_learning.nodes.conversions import (CarCommand, CommandMapping, PoseParser,
                                                       stamp_to_ns, twist_msg)
from robot_dynamics_learning.nodes.parameters import declare as declare_parameter
from robot_dynamics_learning.nodes.parameters import refuse_clock_changes
from robot_dynamics_learning.nodes.runtime import spin_node
import torch


class CarMPCNode(Node):
    """Thin wrapper around TrackMPC with stale-state and budget safety."""

    def __init__(self) -> None:
        super().__init__('car_mpc')

        declare = functools.partial(declare_parameter, self)

        declare('track_file', 'config/tracks/oval.yaml', 'race track YAML (control/track.py)')
        declare('checkpoint', 'config/models/car_mlp_sim.pt', 'car model checkpoint (used '
                'when checkpoint_dir is empty or holds none yet)')
        declare('checkpoint_dir', '', 'folder of car_model_learner checkpoints; the newest is '
                'loaded and re-checked every reload_period_s (empty: none)')
        declare('reload_period_s', 5.0, 'how often checkpoint_dir is checked (s)', 0.5, 3600.0)
        declare('rate_hz', 20.0, 'control rate (the model step h should equal 1 / rate_hz)',
                1.0, 200.0)
        declare('horizon', 20, 'optimised steps', 2, 200)
        declare('target_speed', 1.5, 'speed along the track (m/s)', 0.05, 10.0)
        declare('solver', 'line_search', f'trajectory optimiser: {list(SOLVERS)} (line_search: '
                'seed 003, gradient step + batched line search; ipopt: IPOPT via CasADi on the '
                'same cost, docs/results_car.md compares them)')
        declare('iterations', 3, 'solver iterations per tick', 1, 100)
        declare('candidates', 512, 'line-search step sizes per iteration (line_search)', 1,
                4096)
        declare('budget_s', 0.05, 'compute budget per tick; a slower solve brakes (s)', 0.001,
                1.0)
        declare('stale_timeout_s', 0.1, 'brake when no state arrived for this long (s)', 0.01,
                5.0)
        declare('throttle_min', -1.0, 'lowest throttle command', -1.0, 1.0)
        declare('throttle_max', 1.0, 'highest throttle command', -1.0, 1.0)
        declare('steering_limit', 1.0, 'largest |steering| command', 0.0, 1.0)
        declare('brake_throttle', 0.0, 'throttle of the brake command (steering 0)', -1.0, 1.0)
        declare('throttle_scale', 1.0, 'Twist linear.x = throttle / throttle_scale')
        declare('steering_scale', 1.0, 'Twist angular.z = steering / steering_scale')
        declare('publish_gz_cmd', False, 'also publish cmd_vel_gz (speed, yaw rate) for Gazebo')
        declare('compile', False, 'torch.compile the cost (faster; the first start compiles '
                'for a minute or more)')
        declare('torch_threads', 1, 'torch intra-op threads', 1, 64)
        declare('line_search_threads', 0, 'threads sharing the batched line-search rollouts '
                '(2 where a second core is free: about 1.6x faster line searches; 0: 2 with 4 '
                'or more usable cores, else 1)', 0, 64)
        declare('delay_compensation', True, 'plan from the state predicted (model plus the '
                'committed command) at the time the command will apply: the state age plus '
                'the expected solve time plus actuation_delay_s')
        declare('actuation_delay_s', 0.0, 'transport and actuation delay added to the '
                'predicted latency (s)', 0.0, 0.5)
        get = self.get_parameter
        refuse_clock_changes(self)   # sim time without /clock would stop the watchdog
        torch.set_num_threads(int(get('torch_threads').value))
        self.mapping = CommandMapping(throttle_scale=get('throttle_scale').value,
                                      steering_scale=get('steering_scale').value)
        steer = float(get('steering_limit').value)
        self.config = MPCConfig(
            horizon=get('horizon').value, target_speed=get('target_speed').value,
            throttle_limits=(get('throttle_min').value, get('throttle_max').value),
            steering_limits=(-steer, steer),
            brake_command=(get('brake_throttle').value, 0.0), budget_s=get('budget_s').value,
            compiled=get('compile').value,
            line_search_threads=get('line_search_threads').value)
        self.stale_timeout = float(get('stale_timeout_s').value)
        self.delay_compensation = bool(get('delay_compensation').value)
        self.actuation_delay = float(get('actuation_delay_s').value)
        self.checkpoints = (CheckpointDirectory(Path(get('checkpoint_dir').value))
                            if get('checkpoint_dir').value else None)
        model, self.model_path = self._initial_model(get('checkpoint').value)
        period = 1.0 / float(get('rate_hz').value)
        if abs(model.h - period) > 1e-6:
            self.get_logger().warn(f'model step h={model.h} s differs from the control period '
                                   f'{period} s: predictions assume h')
        self.track = Track(load_track_spec(Path(get('track_file').value)))
        optimizer = make_optimizer(get('solver').value, self.config.horizon,
                                   get('iterations').value, get('candidates').value)
        self.mpc = TrackMPC(model, self.track, self.config, optimizer)
        warm = self.mpc.warm_up()
        self.get_logger().info(f'MPC ready on {self.track.spec.name} ({self.track.length:.1f} m'
                               f' lap), model {self.model_path}, warm-up {warm:.1f} s')
        self._lock = threading.Lock()
        self._solve_lock = threading.Lock()
        self.pose_parser = PoseParser(check_stamps=False)   # stamps: _accept, per topic
        self._pose: Optional[tuple] = None
        self._twist: Optional[tuple] = None
        self._state: Optional[tuple] = None  # newest complete (stamp_ns, (6,) state)
        self._brake_stamp = -1  # stamp of the state the last brake was judged on
        self._braking = False
        self.counts = {'ticks': 0, 'commands': 0, 'brake_stale': 0, 'brake_budget': 0,
                       'brake_failure': 0, 'model_reloads': 0, 'rejected_out_of_order': 0,
                       'rejected_future_stamp': 0, 'rejected_non_finite': 0,
                       'skipped_after_brake': 0}
        self.solve_times = []
        self.delays = []
        self.pub_command = self.create_publisher(Twist, 'command', 10)
        self.pub_gz = (self.create_publisher(Twist, 'cmd_vel_gz', 10)
                       if get('publish_gz_cmd').value else None)
        inputs = MutuallyExclusiveCallbackGroup()
        self.create_subscription(PoseStamped, 'car/pose', self._on_pose, qos_profile_sensor_data,
                                 callback_group=inputs)
        self.create_subscription(TwistStamped, 'car/twist', self._on_twist,
                                 qos_profile_sensor_data, callback_group=inputs)
        self.create_timer(period, self._tick, callback_group=MutuallyExclusiveCallbackGroup())
        self.create_timer(0.01, self._watchdog, callback_group=MutuallyExclusiveCallbackGroup())
        self.pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        self.create_timer(0.5, self._diagnostics, callback_group=inputs)
        self.create_timer(5.0, self._log, callback_group=inputs)
        if self.checkpoints is not None:
            self.create_timer(get('reload_period_s').value, self._reload, callback_group=inputs)

    def _initial_model(self, checkpoint: str):
        if self.checkpoints is not None and self.checkpoints.paths():
            path = self.checkpoints.paths()[-1]
            return load_car_model(path), path
        if not checkpoint:
            raise ValueError('give checkpoint or a checkpoint_dir that holds a car model')
        return load_car_model(Path(checkpoint)), Path(checkpoint)

    def _reload(self) -> None:
        paths = self.checkpoints.paths()
        if not paths or paths[-1] == self.model_path:
            return
        try:
            model = load_car_model(paths[-1])
        except (ValueError, FileNotFoundError) as error:
            self.get_logger().error(f'kept the current model: {error}')
            return
        with self._solve_lock:
            self.mpc.load_state_dict(model.state_dict())
        self.model_path = paths[-1]
        self.counts['model_reloads'] += 1
        self.get_logger().info(f'loaded car model {paths[-1]}')

    def _on_pose(self, msg: PoseStamped) -> None:
        # The shared parser: a zero or garbage quaternion is refused, not turned into a yaw.
        result = self.pose_parser.parse(msg)
        if not result.ok:
            key = f'rejected_pose_{result.reason.value}'
            with self._lock:
                self.counts[key] = self.counts.get(key, 0) + 1
            self.get_logger().warn(f'dropped a pose: {result.reason.value} ({result.detail})',
                                   throttle_duration_sec=2.0)
            return
        pose = result.value
        values = (pose.position[0], pose.position[1], pose.yaw)
        with self._lock:
            if self._accept(msg.header.stamp, values, self._pose):
                self._pose = (stamp_to_ns(msg.header.stamp), values)
                self._combine()

    def _on_twist(self, msg: TwistStamped) -> None:
        values = (msg.twist.linear.x, msg.twist.linear.y, msg.twist.angular.z)
        with self._lock:
            if self._accept(msg.header.stamp, values, self._twist):
                self._twist = (stamp_to_ns(msg.header.stamp), values)
                self._combine()

    def _accept(self, stamp, values: tuple, last: Optional[tuple]) -> bool:
        """
        Check one input (call with the lock held); count and log why it is dropped.

        Dropped: non-finite values, a stamp not newer than the last message of the same topic
        (out of order or repeated), a stamp more than stale_timeout_s ahead of the node clock
        (it would keep the state fresh after the source stopped).
        """
        stamp_ns = stamp_to_ns(stamp)
        if not np.all(np.isfinite(values)):
            reason = 'non_finite'
        elif last is not None and stamp_ns <= last[0]:
            reason = 'out_of_order'
        elif stamp_ns - self._now_ns() > self.stale_timeout * 1e9:
            reason = 'future_stamp'
        else:
            return True
        self.counts[f'rejected_{reason}'] += 1
        self.get_logger().warn(f'dropped a state message: {reason} (stamp {stamp_ns} ns)',
                               throttle_duration_sec=2.0)
        return False

    def _combine(self) -> None:
        """Form the complete state when pose and twist share a stamp (lock held)."""
        if self._pose is not None and self._twist is not None \
                and self._pose[0] == self._twist[0]:
            self._state = (self._pose[0], np.array([*self._pose[1], *self._twist[1]]))

    def _now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    def _stale(self) -> bool:
        """Return True without a complete state stamped within stale_timeout_s of now."""
        return self._state is None or \
            self._now_ns() - self._state[0] > self.stale_timeout * 1e9

    def _publish_brake(self, reason: str) -> None:
        """Publish the brake command and count why (call with the lock held)."""
        self.counts[f'brake_{reason}'] += 1
        if not self._braking:
            self.get_logger().warn(f'braking: {reason}')
        self._braking = True
        self._brake_stamp = -1 if self._state is None else self._state[0]
        # TrackMPC is not thread-safe: while a tick solves, its reset waits for the tick,
        # which resets after the solve (it sees the brake stamp); the brake is not delayed.
        if self._solve_lock.acquire(blocking=False):
            try:
                self.mpc.reset()
            finally:
                self._solve_lock.release()
        brake = CarCommand(None, *self.config.brake_command)
        self.pub_command.publish(twist_msg(brake, self.mapping))
        if self.pub_gz is not None:
            self.pub_gz.publish(Twist())

    def _watchdog(self) -> None:
        with self._lock:
            if not self._braking and self._stale():
                self._publish_brake('stale')

    def _tick(self) -> None:
        self.counts['ticks'] += 1
        with self._lock:
            if self._stale():
                self._publish_brake('stale')
                return
            stamp_ns, state = self._state
            if stamp_ns <= self._brake_stamp:  # braked on this state: wait for a newer one
                self.counts['skipped_after_brake'] += 1
                return
        delay = self._expected_delay(stamp_ns) if self.delay_compensation else 0.0
        with self._solve_lock:
            result = self.mpc.solve(state, delay_s=delay)
        self.delays.append(delay)
        self.solve_times.append(result.seconds)
        with self._lock:
            if self._stale():
                self._publish_brake('stale')
            elif stamp_ns <= self._brake_stamp:  # a brake came during the solve
                self.counts['skipped_after_brake'] += 1
                self.mpc.reset()  # the solve stored its plan after the brake's reset
            elif not result.ok:
                self._publish_brake('budget' if result.reason == 'budget' else 'failure')
                if result.reason != 'budget':
                    self.get_logger().error(f'MPC failed: {result.reason}',
                                            throttle_duration_sec=2.0)
            else:
                self._braking = False
                command = CarCommand(None, float(result.command[0]), float(result.command[1]))
                self.pub_command.publish(twist_msg(command, self.mapping))
                if self.pub_gz is not None:
                    gz = Twist()
                    gz.linear.x = float(result.predicted[0, 3])
                    gz.angular.z = float(result.predicted[0, 5])
                    self.pub_gz.publish(gz)
                self.counts['commands'] += 1

    def _expected_delay(self, stamp_ns: int) -> float:
        """
        Seconds from the state's stamp until this tick's command applies (bounded).

        The state's age on the node clock (the stamps are the mocap clock; equal clocks are
        assumed) plus the median of the recent solve times plus actuation_delay_s.
        """
        age = (self._now_ns() - stamp_ns) * 1e-9
        age = min(max(age, 0.0), self.stale_timeout)
        recent = self.solve_times[-20:]
        solve = float(np.median(recent)) if recent else self.config.budget_s
        return min(age + min(solve, self.config.budget_s) + self.actuation_delay, 0.5)

    def _timing(self) -> dict:
        times = np.asarray(self.solve_times[-200:]) * 1e3
        if not times.size:
            return {}
        return {'solve_ms_p50': round(float(np.percentile(times, 50)), 2),
                'solve_ms_p99': round(float(np.percentile(times, 99)), 2),
                'delay_ms_p50': round(float(np.median(self.delays[-200:])) * 1e3, 2)}

    def _diagnostics(self) -> None:
        publish_counters(self, self.pub_diag, {**self.counts, **self._timing()},
                         warn=self._braking, message='braking' if self._braking else 'driving')

    def _log(self) -> None:
        self.get_logger().info(f'{self.counts}; {self._timing()}')


def main(args=None) -> None:
    """Run the node (console script `car_mpc`)."""
    spin_node(CarMPCNode, args, threads=3)


if __name__ == '__main__':
    main()
