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
fails, whose plan fails the safety checks, or that finds the state stale sends the brake too;
one that misses budget_s drives on the best plan found so far (`degrade`, the default;
counted in late_ticks and warm_start_ticks), or brakes with degrade false.
use_sim_time cannot change at run time (refused): without /clock it would stop both timers.
Counters (commands, brake_*, rejected_*) and solve-time percentiles go to /diagnostics twice
a second.
"""
import functools
from pathlib import Path
import threading

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped, Twist, TwistStamped
import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from robot_dynamics_learning.control.car_supervisor import BRAKE, CarSupervisor, SKIP, SOLVE
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
        declare('candidates', 32, 'line-search step sizes per iteration (line_search; the '
                'coarse ones when refine_candidates > 0)', 1, 4096)
        declare('refine_candidates', 16, 'finer step sizes around the best coarse one '
                '(line_search; 0: one batch of candidates, as seed 003 with 512)', 0, 4096)
        declare('budget_s', 0.05, 'compute budget per tick (s); iterations that would end '
                'after 70 % of it are skipped', 0.001, 1.0)
        declare('degrade', True, 'over budget, drive on the best plan so far (or the shifted '
                'previous plan) instead of braking; false: a late tick brakes')
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
            compiled=get('compile').value, degrade=get('degrade').value,
            line_search_threads=get('line_search_threads').value)
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
                                   get('iterations').value, get('candidates').value,
                                   refine_candidates=get('refine_candidates').value)
        self.mpc = TrackMPC(model, self.track, self.config, optimizer)
        warm = self.mpc.warm_up()
        self.get_logger().info(f'MPC ready on {self.track.spec.name} ({self.track.length:.1f} m'
                               f' lap), model {self.model_path}, warm-up {warm:.1f} s')
        self._lock = threading.Lock()
        self._solve_lock = threading.Lock()
        self.pose_parser = PoseParser(check_stamps=False)   # stamps: the supervisor's
        self.supervisor = CarSupervisor(float(get('stale_timeout_s').value),
                                        lambda: self.get_clock().now().nanoseconds)
        self.counts = self.supervisor.counts
        self.counts.update(model_reloads=0, late_ticks=0, warm_start_ticks=0)
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
        self._offer('pose', msg.header.stamp, (pose.position[0], pose.position[1], pose.yaw))

    def _on_twist(self, msg: TwistStamped) -> None:
        self._offer('twist', msg.header.stamp,
                    (msg.twist.linear.x, msg.twist.linear.y, msg.twist.angular.z))

    def _offer(self, topic: str, stamp, values: tuple) -> None:
        stamp_ns = stamp_to_ns(stamp)
        with self._lock:
            reason = self.supervisor.offer(topic, stamp_ns, values)
        if reason is not None:
            self.get_logger().warn(f'dropped a state message: {reason} (stamp {stamp_ns} ns)',
                                   throttle_duration_sec=2.0)

    def _publish_brake(self, reason: str) -> None:
        """Publish the brake command and count why (call with the lock held)."""
        if self.supervisor.brake(reason):
            self.get_logger().warn(f'braking: {reason}')
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
            if self.supervisor.watchdog():
                self._publish_brake('stale')

    def _tick(self) -> None:
        with self._lock:
            decision = self.supervisor.before_solve()
            if decision.action == BRAKE:
                self._publish_brake(decision.reason)
            if decision.action != SOLVE:
                return
        recent = self.solve_times[-20:]
        delay = (self.supervisor.expected_delay(
            decision.stamp_ns, float(np.median(recent)) if recent else self.config.budget_s,
            self.config.budget_s, self.actuation_delay) if self.delay_compensation else 0.0)
        with self._solve_lock:
            result = self.mpc.solve(decision.state, delay_s=delay)
        self.delays.append(delay)
        self.solve_times.append(result.seconds)
        with self._lock:
            after = self.supervisor.after_solve(decision.stamp_ns, result.ok, result.reason)
            if after.action == SKIP:
                self.mpc.reset()  # the solve stored its plan after the brake's reset
            elif after.action == BRAKE:
                self._publish_brake(after.reason)
                if after.reason == 'failure':
                    self.get_logger().error(f'MPC failed: {result.reason}',
                                            throttle_duration_sec=2.0)
            else:
                if result.reason in ('late', 'warm_start'):
                    self.counts[f'{result.reason}_ticks'] += 1
                command = CarCommand(None, float(result.command[0]), float(result.command[1]))
                self.pub_command.publish(twist_msg(command, self.mapping))
                if self.pub_gz is not None:
                    gz = Twist()
                    gz.linear.x = float(result.predicted[0, 3])
                    gz.angular.z = float(result.predicted[0, 5])
                    self.pub_gz.publish(gz)

    def _timing(self) -> dict:
        times = np.asarray(self.solve_times[-200:]) * 1e3
        if not times.size:
            return {}
        return {'solve_ms_p50': round(float(np.percentile(times, 50)), 2),
                'solve_ms_p99': round(float(np.percentile(times, 99)), 2),
                'delay_ms_p50': round(float(np.median(self.delays[-200:])) * 1e3, 2)}

    def _diagnostics(self) -> None:
        braking = self.supervisor.braking
        publish_counters(self, self.pub_diag, {**self.counts, **self._timing()},
                         warn=braking, message='braking' if braking else 'driving')

    def _log(self) -> None:
        self.get_logger().info(f'{self.counts}; {self._timing()}')


def main(args=None) -> None:
    """Run the node (console script `car_mpc`)."""
    spin_node(CarMPCNode, args, threads=3)


if __name__ == '__main__':
    main()
