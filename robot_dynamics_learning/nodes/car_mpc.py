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
A lifecycle node (nodes/lifecycle.py): configure loads the model and warms up the MPC,
deactivate sends the brake command and stops commanding, cleanup frees the MPC; with
autostart (default) it configures and activates itself at start.
Grip: with grip_weight > 0 the node takes the surface's lateral-acceleration limit from
`car/grip` (std_msgs/Float64, m/s^2: car_model_learner's online estimate); each tick solves
with the newest one (a value that is not positive is refused and counted in rejected_grip;
the last good one stays in force). Until one arrives, lateral_accel_max (0: no bound).
With grip_speed_profile (default) the limit also sets the speed targets along the track
(`TrackMPC.speed_profile`: slow before a turn, not in it).
Model updates: with checkpoint_dir, the newest `car_model_*.pt` car_model_learner wrote there
is loaded every reload_period_s if it holds the model type and config in use (else refused
once, logged and counted in model_refused).
Counters (commands, brake_*, rejected_*, grip_updates, model_reloads, model_refused) and
solve-time percentiles go to /diagnostics twice a second.
"""
import math
from pathlib import Path
import threading

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped, Twist, TwistStamped
import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.qos import qos_profile_sensor_data
from robot_dynamics_learning.control.car_mpc_params import CarMPCConfig
from robot_dynamics_learning.control.car_supervisor import BRAKE, CarSupervisor, SKIP, SOLVE
from robot_dynamics_learning.control.car_training import load_car_model
from robot_dynamics_learning.control.mpc import TrackMPC
from robot_dynamics_learning.control.optimizer import make_optimizer
from robot_dynamics_learning.control.track import load_track_spec, Track
from robot_dynamics_learning.learning.checkpoint import CheckpointDirectory
from robot_dynamics_learning.nodes.car_diagnostics import publish_counters
from robot_dynamics_learning.nodes.car_model_learner import CAR_CHECKPOINT_PREFIX
from robot_dynamics_learning.nodes.conversions import (CarCommand, CommandMapping,
                                                       parse_or_warn, PoseParser, stamp_to_ns,
                                                       twist_msg)
from robot_dynamics_learning.nodes.lifecycle import ManagedNode
from robot_dynamics_learning.nodes.parameters import declare_config, refuse_clock_changes
from robot_dynamics_learning.nodes.runtime import file_version, spin_node
from std_msgs.msg import Float64
import torch


class CarMPCNode(ManagedNode):
    """Thin lifecycle wrapper around TrackMPC with stale-state and budget safety."""

    def __init__(self) -> None:
        super().__init__('car_mpc')

        self.params = params = declare_config(self, CarMPCConfig)
        refuse_clock_changes(self)   # sim time without /clock would stop the watchdog
        torch.set_num_threads(params.torch_threads)
        self.mapping = CommandMapping(throttle_scale=params.throttle_scale,
                                      steering_scale=params.steering_scale)
        self.config = params.mpc_config()
        self.delay_compensation = params.delay_compensation
        self.actuation_delay = params.actuation_delay_s
        self.checkpoints = (CheckpointDirectory(Path(params.checkpoint_dir),
                                                prefix=CAR_CHECKPOINT_PREFIX)
                            if params.checkpoint_dir else None)
        self._refused = None   # `file_version` of the newest checkpoint, refused once
        self.period = 1.0 / params.rate_hz
        self.mpc = self.supervisor = None   # built by configure
        self.counts = {}
        self._lock = threading.Lock()
        self._solve_lock = threading.Lock()
        self.pose_parser = PoseParser(check_stamps=False)   # stamps: the supervisor's
        self.solve_times = []
        self.delays = []
        self._grip = None   # the newest car/grip value, applied by the next tick
        self.grip_counts = {'grip_updates': 0, 'rejected_grip': 0}
        self.pub_command = self.create_publisher(Twist, 'command', 10)
        self.pub_gz = (self.create_publisher(Twist, 'cmd_vel_gz', 10)
                       if params.publish_gz_cmd else None)
        inputs = MutuallyExclusiveCallbackGroup()
        self.create_subscription(PoseStamped, 'car/pose', self._on_pose, qos_profile_sensor_data,
                                 callback_group=inputs)
        self.create_subscription(TwistStamped, 'car/twist', self._on_twist,
                                 qos_profile_sensor_data, callback_group=inputs)
        if self.config.grip_weight > 0:
            self.create_subscription(Float64, 'car/grip', self._on_grip, 10,
                                     callback_group=inputs)
        self.create_timer(self.period, self._tick,
                          callback_group=MutuallyExclusiveCallbackGroup())
        self.create_timer(0.01, self._watchdog, callback_group=MutuallyExclusiveCallbackGroup())
        self.pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        self.create_timer(0.5, self._diagnostics, callback_group=inputs)
        self.create_timer(5.0, self._log, callback_group=inputs)
        if self.checkpoints is not None:
            self.create_timer(params.reload_period_s, self._reload, callback_group=inputs)
        self.autostart()

    def configure(self) -> None:
        """Load the model and track, build and warm up the MPC, start the supervisor."""
        params = self.params
        model, self.model_path = self._initial_model(params.checkpoint)
        if abs(model.h - self.period) > 1e-6:
            self.get_logger().warn(f'model step h={model.h} s differs from the control period '
                                   f'{self.period} s: predictions assume h')
        self.track = Track(load_track_spec(Path(params.track_file)))
        optimizer = make_optimizer(params.solver, self.config.horizon, params.iterations,
                                   params.candidates, refine_candidates=params.refine_candidates)
        mpc = TrackMPC(model, self.track, self.config, optimizer)
        warm = mpc.warm_up()
        self.get_logger().info(f'MPC ready on {self.track.spec.name} ({self.track.length:.1f} m'
                               f' lap), model {self.model_path}, warm-up {warm:.1f} s')
        supervisor = CarSupervisor(params.stale_timeout_s,
                                   lambda: self.get_clock().now().nanoseconds)
        supervisor.counts.update(model_reloads=0, model_refused=0, brake_inactive=0,
                                 late_ticks=0, warm_start_ticks=0)
        with self._lock:
            self.mpc, self.supervisor, self.counts = mpc, supervisor, supervisor.counts

    def deactivate(self) -> None:
        """Send the brake command: an inactive controller leaves the car braked."""
        with self._lock:
            self._publish_brake('inactive')

    def cleanup(self) -> None:
        """Free the MPC and its model."""
        with self._lock, self._solve_lock:
            self.mpc = self.supervisor = None

    def _initial_model(self, checkpoint: str):
        """
        Return (model, path): the newest car model of checkpoint_dir that loads, else checkpoint.

        A corrupt newest file (a learner killed while saving, a half copy) must not keep the
        MPC from starting while older good ones, or the given checkpoint, are there.
        """
        errors = []
        for path in reversed(self.checkpoints.paths() if self.checkpoints is not None else []):
            try:
                return load_car_model(path), path
            except (ValueError, OSError) as error:
                errors.append(str(error))
                self.get_logger().error(f'not loaded at start, trying an older one: {error}')
        if not checkpoint:
            raise ValueError('give checkpoint or a checkpoint_dir that holds a car model'
                             + (f' (none of its files loads: {errors})' if errors else ''))
        return load_car_model(Path(checkpoint)), Path(checkpoint)

    def _reload(self) -> None:
        if self.mpc is None:
            return
        paths = self.checkpoints.paths()
        if not paths or paths[-1] == self.model_path:
            return
        newest = file_version(paths[-1])
        if newest is None or newest == self._refused:
            return   # refused (logged, counted) once, unless the file changes
        try:
            model = load_car_model(paths[-1])
            current = self.mpc.model
            # The weights go into the MPC's model: another model type or config (h, layer
            # sizes) would not load (an error that ended the node) or would predict wrongly.
            if type(model) is not type(current) or model.config != current.config:
                raise ValueError(f'{paths[-1]} holds {model.config}, the MPC runs '
                                 f'{current.config}')
        except (ValueError, OSError) as error:   # OSError: gone, a symlink loop, no access
            self._refused = newest
            self.counts['model_refused'] += 1
            self.get_logger().error(f'kept the current model: {error}')
            return
        with self._solve_lock:
            self.mpc.load_state_dict(model.state_dict())
        self.model_path = paths[-1]
        self.counts['model_reloads'] += 1
        self.get_logger().info(f'loaded car model {paths[-1]}')

    def _on_pose(self, msg: PoseStamped) -> None:
        # The shared parser: a zero or garbage quaternion is refused, not turned into a yaw.
        pose = parse_or_warn(self, self.pose_parser, msg, 'pose')
        if pose is None:
            return
        self._offer('pose', msg.header.stamp, (pose.position[0], pose.position[1], pose.yaw))

    def _on_twist(self, msg: TwistStamped) -> None:
        self._offer('twist', msg.header.stamp,
                    (msg.twist.linear.x, msg.twist.linear.y, msg.twist.angular.z))

    def _offer(self, topic: str, stamp, values: tuple) -> None:
        stamp_ns = stamp_to_ns(stamp)
        with self._lock:
            if self.supervisor is None:   # unconfigured
                return
            reason = self.supervisor.offer(topic, stamp_ns, values)
        if reason is not None:
            self.get_logger().warn(f'dropped a state message: {reason} (stamp {stamp_ns} ns)',
                                   throttle_duration_sec=2.0)

    def _on_grip(self, msg: Float64) -> None:
        if not (math.isfinite(msg.data) and msg.data > 0):
            self.grip_counts['rejected_grip'] += 1
            self.get_logger().warn(f'refused a grip estimate of {msg.data} m/s^2',
                                   throttle_duration_sec=2.0)
            return
        self._grip = float(msg.data)
        self.grip_counts['grip_updates'] += 1

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
            if self.active and self.supervisor.watchdog():
                self._publish_brake('stale')

    def _tick(self) -> None:
        with self._lock:
            if not self.active:   # inactive: no command at all (deactivate sent the brake)
                return
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
            if self._grip is not None:
                self.mpc.set_lateral_accel_max(self._grip)
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
        if self.supervisor is None:
            return
        braking = self.supervisor.braking or not self.active
        message = 'inactive' if not self.active else 'braking' if braking else 'driving'
        publish_counters(self, self.pub_diag, {**self._counts(), **self._timing()},
                         warn=braking, message=message)

    def _counts(self) -> dict:
        """Return the supervisor's counters and the rejected poses by reason."""
        rejected = dict(self.pose_parser.counter.rejected)   # one C-level copy: no lock
        return {**self.counts, **self.grip_counts,
                **{f'rejected_pose_{reason.value}': n for reason, n in rejected.items()}}

    def _log(self) -> None:
        self.get_logger().info(f'{self._counts()}; {self._timing()}')


def main(args=None) -> None:
    """Run the node (console script `car_mpc`)."""
    spin_node(CarMPCNode, args, threads=3)


if __name__ == '__main__':
    main()
