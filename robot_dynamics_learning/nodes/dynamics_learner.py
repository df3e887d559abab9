"""
dynamics_learner: learns the arm's inverse dynamics online and publishes predicted torques.

Subscribes `/joint_states` (sensor-data QoS) and, with `torque_source: command`, a
`std_msgs/Float64MultiArray` torque-command topic, whose array is in the order of
`command_joint_names` (the effort controller's `joints`), matched to the learned joints by
name. With joint_names unset the joint set is chosen, not taken from the first message: the
set with the most joints among the messages of the first `joint_settle_s` (held meanwhile,
then learned from), so that a gripper's joint_state_broadcaster sharing /joint_states with
the arm's cannot decide by starting first; other sets are then refused, named in a warning.
For every accepted message it predicts the torque first (prequential), publishes
`~/predicted_torques` (JointState, effort = prediction, header stamp copied from the input)
and `~/predicted_torques_std` for models with variance, then stores the sample for the
trainer thread (learning/continual.py). Bad messages are skipped, counted by reason and
logged; the node never stops on them. Diagnostics (counts, training loss, prequential
nMSE, latency) go to `/diagnostics` and the log periodically.
Checkpoints: atomic, the last N kept, resumed at start (learning/checkpoint.py); a
checkpoint_dir that holds another joint set's or model's run is left alone (no checkpoints).
A lifecycle node (nodes/lifecycle.py): configure builds the learner (at the first message
when joint_names is unset), inactive it neither predicts nor learns, cleanup stops training
with a last checkpoint and frees the model; autostart (default) activates it at start.

Kept fast for a 1 kHz stream on a small CPU: the node spins on a SingleThreadedExecutor
(less per-message overhead than the multi-threaded one), reuses one outgoing message per
topic, lets the trainer thread use at most `train_cpu_share` of a core, and shortens the
interpreter's GIL switch interval so the callback does not wait a whole 5 ms slice for the
trainer thread to hand the GIL over.
"""
import functools
import json
import math
import os
from pathlib import Path
import time
from typing import Dict, FrozenSet, List, Optional, Sequence

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
import numpy as np
from rclpy.exceptions import InvalidTopicNameException
from rclpy.qos import HistoryPolicy, qos_profile_sensor_data, QoSProfile, ReliabilityPolicy
from robot_dynamics_learning.data.joint_velocity import velocity_need, VelocitySource
from robot_dynamics_learning.data.messages import JointSetChoice, Reason, Result
from robot_dynamics_learning.learning.checkpoint import (CheckpointDirectory, CheckpointMismatch,
                                                         save_to_directory)
from robot_dynamics_learning.learning.continual import ContinualLearner, InverseDynamicsStream
from robot_dynamics_learning.learning.learner_params import (DynamicsLearnerConfig,
                                                             model_config_class,
                                                             model_settings, uncommanded)
from robot_dynamics_learning.learning.prequential import (LatencyLog, Recorder,
                                                          saved_variance_scale)
from robot_dynamics_learning.learning.stream_audit import StreamAudit
from robot_dynamics_learning.learning.trainer_process import ProcessConfig, ProcessLearner
from robot_dynamics_learning.models.registry import build_model, urdf_robot
from robot_dynamics_learning.nodes.conversions import (announce_arrival_times, ArrayParser,
                                                       arrival_ns, FieldNeed, JointStateParser,
                                                       JointValueGuard, output_stamp,
                                                       PredictedTorquePublisher)
from robot_dynamics_learning.nodes.lifecycle import ManagedNode
from robot_dynamics_learning.nodes.parameters import (declare_config, declare_stamp_bounds,
                                                      refuse_clock_changes)
from robot_dynamics_learning.nodes.runtime import spin_node, take_pending
from robot_dynamics_learning.signals.causal import CausalDifferentiator
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
import torch

# The trainer process's final checkpoint may take this long: a node has 2 s to end after
# SIGINT (launch escalates to SIGTERM after 5 s); past it the periodic checkpoints remain.
TRAINER_STOP_TIMEOUT_S = 1.2
OTHER_SETS_KEPT = 16   # distinct refused joint sets remembered for the warning


class CommandOrder:
    """
    Puts a torque command in the learned joints' order: ros2_control's `joints` order.

    An effort controller's command array follows its `joints` parameter, which need not be
    the order of /joint_states: by index the torques of two joints would swap silently. Names
    are given by command_joint_names (unset: the learned order); the parser checks length
    and values, a learned joint the names lack rejects every command (missing_joint).
    """

    def __init__(self, command_names: Optional[Sequence[str]], size: Optional[int]) -> None:
        self.command_names = list(command_names or ())
        self.parser = ArrayParser(len(self.command_names) or size)
        self.index: Optional[np.ndarray] = None
        self.missing: List[str] = []

    def bind(self, joints: Sequence[str]) -> List[str]:
        """Map to the learned `joints`; return those the command lacks (commands refused)."""
        if not self.command_names:
            self.parser.size = len(joints)
            self.index = None
            return []
        self.missing = uncommanded(joints, self.command_names)
        lookup = {name: i for i, name in enumerate(self.command_names)}
        self.index = (None if self.missing
                      else np.array([lookup[name] for name in joints], dtype=np.intp))
        return self.missing

    def parse(self, msg: Float64MultiArray) -> Result:
        """Return the command in the learned order, or its (counted) rejection."""
        if self.missing:
            return self.parser.counter.count(Result(
                reason=Reason.MISSING_JOINT, detail=f'command_joint_names {self.command_names}'
                f' lack the learned joints {self.missing}'))
        result = self.parser.parse(msg)
        if not result.ok or self.index is None:
            return result
        return Result(result.value[self.index])

    def diagnostics(self) -> Dict[str, int]:
        """Return commands_accepted, commands_rejected and commands_<reason>."""
        counter = self.parser.counter
        values = {f'commands_{key}': n for key, n in counter.as_dict().items()}
        values['commands_rejected'] = counter.total_rejected
        return values


class DynamicsLearnerNode(ManagedNode):
    """Thin ROS wrapper around `ContinualLearner` (all learning is ROS-free)."""

    def __init__(self) -> None:
        super().__init__('dynamics_learner')
        self.params = params = declare_config(self, DynamicsLearnerConfig,
                                              {'model_config': model_config_class})
        self.model_type = params.model
        # Checked at start, naming the model: not at the first message.
        self.model_config = model_settings(params.model, params.model_config, params.urdf)
        torch.set_num_threads(params.torch_threads)
        names = list(params.joint_names or ())
        self._urdf_joints: Optional[List[str]] = None
        self.robot = robot = urdf_robot(self.model_type, self.model_config)
        if not names and robot is not None:
            # Physics models need the URDF's joint order: messages are reordered by name.
            names = self._urdf_joints = list(robot.joint_names)
        self.torque_source = params.torque_source
        # Stamps bounded against the node clock; a jump back by time_reset_s is a reset,
        # flagged by the parser only once the whole message is valid.
        refuse_clock_changes(self)
        self.parser = JointStateParser(names or None, position=FieldNeed.REQUIRED,
                                       velocity=velocity_need(params.velocity_source),
                                       effort=FieldNeed.OPTIONAL,
                                       bounds=declare_stamp_bounds(
                                           self, reset_after_s=params.time_reset_s),
                                       stamp_source=params.stamp_source)
        self.commands = CommandOrder(params.command_joint_names, len(names) or None)
        if self.torque_source == 'command' and names:
            uncommanded(names, params.command_joint_names, raise_error=True)   # URDF joints
        self.joint_sets = JointSetChoice(params.joint_settle_s)
        self.other_joint_sets: Dict[FrozenSet[str], int] = {}
        self.build_error = ''   # the model could not be built for the adopted joints
        self.time_resets = 0
        self.predict_only = 0
        self.learner: Optional[ContinualLearner] = None
        self.stream: Optional[InverseDynamicsStream] = None
        self.velocities: Optional[VelocitySource] = None
        self.checkpoints: Optional[CheckpointDirectory] = None
        self._last_command: Optional[np.ndarray] = None
        self.latency = LatencyLog()
        self._last_log = -math.inf   # the first rejection is always logged
        self.record: Optional[Recorder] = None

        self.predictions = PredictedTorquePublisher(self)
        self.pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        # Sensor-data QoS (best effort, volatile) with a deeper queue than its 5: a burst from
        # a publisher that fell behind is absorbed instead of dropped, while the depth still
        # bounds the backlog (queue_depth samples, 20 ms at 1 kHz by default).
        qos = QoSProfile(depth=params.queue_depth,
                         reliability=qos_profile_sensor_data.reliability,
                         durability=qos_profile_sensor_data.durability)
        if params.lockstep:   # evaluation: every message, none dropped while training
            qos = QoSProfile(depth=params.queue_depth, history=HistoryPolicy.KEEP_ALL,
                             reliability=ReliabilityPolicy.RELIABLE)
        self.drain_max = params.drain_max
        self.subscription = self.create_subscription(JointState, 'joint_states',
                                                     self._on_joint_state, qos)
        if self.torque_source == 'command':
            try:
                self.create_subscription(Float64MultiArray, params.command_topic,
                                         self._on_command, 10)
            except InvalidTopicNameException as error:   # one line at start, no traceback
                raise ValueError(f'command_topic {params.command_topic!r} is not a valid '
                                 f'topic name: {error}') from None
        self.create_timer(params.diagnostics_period_s, self._publish_diagnostics)
        self._names = names
        self._adopted = False   # joint_names unset: chosen by JointSetChoice
        self.inactive_dropped = 0
        self.status_write_errors = 0
        self.checkpoint_dir_refused = 0   # 1: checkpoint_dir holds another run (no saving)
        self.plausible = JointValueGuard()
        self.audit: Optional[StreamAudit] = None
        self.autostart()

    def configure(self) -> None:
        """Build the learner now if the joint names are known (else at the first message)."""
        self._refuse_paths()
        if self._names:
            self._build(self._names)
        self.get_logger().info(
            f"learning '{self.model_type}' inverse dynamics from {self.torque_source} on "
            f"{self.resolve_topic_name('joint_states')}")

    def _refuse_paths(self) -> None:
        """Refuse at start a path of the wrong kind: else each write fails, or only the last."""
        params = self.params
        folder = params.checkpoint_dir
        if folder and Path(folder).exists() and not Path(folder).is_dir():
            raise ValueError(f'checkpoint_dir {folder} is a file, not a folder')
        for name in ('status_path', 'record_path'):
            path = getattr(params, name)
            if path and Path(path).is_dir():
                raise ValueError(f'{name} {path} is a folder: give a file name in it')

    def cleanup(self) -> None:
        """Stop training with a last checkpoint and free the model."""
        if self.learner is not None:
            self.learner.stop(checkpoint=True)
        self.learner = self.stream = self.checkpoints = self.audit = None

    def _build(self, names: List[str], audit: Optional[StreamAudit] = None) -> None:
        """Create model, learner and checkpoint folder once the joint names are known."""
        params = self.params
        n = len(names)
        self.joint_names = names
        if audit is None:
            self.audit = StreamAudit(self.robot, names, measured=self.torque_source == 'effort')
            self.audit_reported, self.refusal_logged = False, ''
        torch.manual_seed(params.seed)
        model, start_step, fitted, variance_scale = None, 0, False, None
        if params.checkpoint_dir:
            self.checkpoints = CheckpointDirectory(params.checkpoint_dir,
                                                   params.keep_checkpoints)
            loaded = None
            if self.checkpoints.paths():
                try:
                    loaded = self.checkpoints.load_latest(names, self.model_type)
                except CheckpointMismatch as error:
                    # Another robot's or model's run: saving here would prune its files.
                    self.checkpoints, self.checkpoint_dir_refused = None, 1
                    self.get_logger().error(
                        f'checkpoint_dir {params.checkpoint_dir} holds another run '
                        f'({error}): learning WITHOUT checkpoints, so that none of its files '
                        'is pruned; give this robot and model a checkpoint_dir of their own')
                except ValueError as error:
                    self.get_logger().error(f'cannot resume, starting fresh: {error}')
            if loaded is not None and params.resume:
                model, fitted = loaded.model, True
                start_step = int(loaded.metadata.get('steps', 0))
                variance_scale, why = saved_variance_scale(loaded.metadata, n)
                self.get_logger().info(f'resumed from {loaded.path} (step {start_step})'
                                       + (f'; variance calibration restarts: {why}'
                                          if variance_scale is None else ''))
        if model is None:
            model = self._new_model(n)
        urdf_joints = model.joint_names
        if urdf_joints is not None and tuple(urdf_joints) != tuple(names):
            raise ValueError(f'joint_names {names} differ from the URDF joints {urdf_joints} '
                             f'of model {self.model_type}')
        config = params.learner_config()
        save = (None if self.checkpoints is None
                else functools.partial(save_to_directory, self.checkpoints, names))

        if params.record_path:
            try:
                self.record = Recorder(params.record_max_samples, n)
            except MemoryError:
                raise ValueError(f'record_max_samples {params.record_max_samples} of {n} '
                                 'joints do not fit in memory') from None
        rng = np.random.default_rng(params.seed)
        if params.trainer_process and not params.lockstep:
            self.learner = ProcessLearner(
                model, 3 * n, n, n, config, rng, save=save, fit_normalization=not fitted,
                start_step=start_step,
                process=ProcessConfig(nice=params.trainer_nice,
                                      threads=params.torch_threads,
                                      stop_timeout_s=TRAINER_STOP_TIMEOUT_S),
                variance_scale=variance_scale)
        else:
            self.learner = ContinualLearner(model, 3 * n, n, n, config, rng, save=save,
                                            fit_normalization=not fitted,
                                            start_step=start_step,
                                            variance_scale=variance_scale)
        self.stream = InverseDynamicsStream(n, CausalDifferentiator(
            n, window=params.accel_window))
        self.velocities = VelocitySource(n, params.velocity_source, params.velocity_window)
        if self.velocities.deriving:
            self.get_logger().info('velocities differentiated from the positions '
                                   f'(velocity_source positions, {params.velocity_window} '
                                   'samples)')
        if self.commands.bind(names):   # adopted joints that the command lacks
            self.get_logger().error(
                f'command_joint_names {self.commands.command_names} lack the joints '
                f'{self.commands.missing} of /joint_states: every torque command is refused '
                "(commands_missing_joint); list every learned joint in the controller's order")
        self.predictions.set_joint_names(names)
        if not params.lockstep:   # in lockstep the callback trains (train_pending)
            self.learner.start()

    def _new_model(self, n: int):
        """Build a fresh model for n joints; a failure (memory) is a ValueError naming it."""
        try:
            return build_model(self.model_type, self.model_config, 3 * n, n, n)
        except (MemoryError, RuntimeError) as error:   # torch: allocation failed
            raise ValueError(f"cannot build model '{self.model_type}' ({self.model_config}) "
                             f'for {n} joints: {error}') from None

    def _on_command(self, msg: Float64MultiArray) -> None:
        if not self.active or self.learner is None:
            # Before the first joint state (joint_names unset) no size can be checked: a
            # command of another length would become the next sample's torque target.
            return
        result = self.commands.parse(msg)
        if result.ok:
            self._last_command = result.value
            return
        self.get_logger().warn(
            f'torque command rejected ({result.reason.value}: {result.detail}); commands '
            f'{self.commands.parser.counter.summary()}', throttle_duration_sec=2.0)

    def _on_joint_state(self, msg: JointState) -> None:
        if not self.active:   # inactive: no prediction, no learning
            self.inactive_dropped += 1
            return
        self._handle_joint_state(msg)
        # Messages that queued up meanwhile (after a stall) are handled here, not one
        # executor round trip each: the backlog drains about twice as fast.
        for _ in range(self.drain_max):
            msg = take_pending(self.subscription)
            if msg is None:
                return
            self._handle_joint_state(msg)

    def _handle_joint_state(self, msg: JointState) -> None:
        arrival = arrival_ns(self, self.parser)
        if self.parser.joint_names is not None:
            self._learn_from(msg, arrival)
            return
        refused = self.joint_sets.offer((msg, arrival), time.monotonic(), names=msg.name)
        if refused is not None:
            self._log_rejection(self.parser.counter.count(refused), msg)
        self._adopt_when_settled()

    def _adopt_when_settled(self) -> None:
        """Adopt the chosen joint set once the window has passed; learn from the held messages."""
        if self.parser.joint_names is not None or not self.joint_sets.ready(time.monotonic()):
            return
        names, others = self.joint_sets.choose()
        self.parser.joint_names = list(names)
        self._adopted = True
        if others:
            listed = '; '.join(f'{list(other)} ({count} messages)' for other, count in others)
            self.get_logger().warn(
                f'{self.resolve_topic_name("joint_states")} carries {len(others) + 1} joint '
                f'sets: learning {list(names)}, the one with the most joints; ignoring '
                f'{listed}. Set joint_names to choose')
        else:
            self.get_logger().info(f'learning the joints {list(names)} (adopted from '
                                   f'{self.resolve_topic_name("joint_states")}; set '
                                   'joint_names to fix them)')
        for message, arrival in self.joint_sets.take_held():
            self._learn_from(message, arrival, held=True)

    def _learn_from(self, msg: JointState, arrival: Optional[int], held: bool = False
                    ) -> None:
        """Predict, publish and learn one message; held: waited for the joint choice."""
        received = time.perf_counter()
        if self.build_error:
            return
        result = self.parser.parse(msg, arrival)
        announce_arrival_times(self, self.parser, 'joint_states')
        if not result.ok:
            self._log_rejection(result, msg)
            return
        sample = result.value
        if sample.time_reset:
            self._time_reset()
        held = self.audit is not None and self.audit.problem is not None
        if self.learner is None and not held and not self._build_at_first_message():
            return
        torque = sample.effort if self.torque_source == 'effort' else self._last_command
        if torque is None:
            self.predict_only += 1
        stamp = sample.stamp_ns * 1e-9
        velocity = self._velocity(stamp, sample)
        if velocity is None:
            return
        if self.audit.add(stamp, sample.position, velocity, torque):
            self._report_audit()
        if self.learner is None:   # held: the audit refused the newest window
            return
        features = self.stream.sample(stamp, sample.position, velocity, torque)
        if features is None:
            return
        observation, action, target = features
        if not self.plausible.accepts(self, observation, action, target):
            return
        mean, variance = self.learner.observe(stamp, observation, action, target)
        self.predictions.publish(output_stamp(msg, self.parser, sample.stamp_ns), mean,
                                 variance)
        if self.params.lockstep:
            self.learner.trainer.train_pending()
        if not held:   # a held message's age is the settling window, not the node's latency
            now_ns = self.get_clock().now().nanoseconds
            self.latency.add(time.perf_counter() - received, (now_ns - sample.stamp_ns) * 1e-9)
        if self.record is not None and target is not None:
            self.record.add(stamp, target, mean, self.learner.prequential.nmse())

    def _velocity(self, stamp: float, sample) -> Optional[np.ndarray]:
        """Return the sample's velocity (measured or derived), None while the fit warms up."""
        deriving = self.velocities.deriving
        velocity = self.velocities.velocity(stamp, sample.position, sample.velocity)
        if self.velocities.deriving and not deriving:
            self.get_logger().warn(
                f'{self.resolve_topic_name("joint_states")} carries no velocity: '
                f'differentiating the positions (velocity_source {self.params.velocity_source},'
                f' {self.params.velocity_window} samples)')
        return velocity

    def _report_audit(self) -> None:
        """
        Log the data audit's news; a refusal holds learning and predicting, a pass resumes.

        On a refusal the learner is dropped without a checkpoint (nothing learned from the
        refused samples is kept) and the next window is judged; the first that passes builds
        it again (from the newest checkpoint, if any). A robot whose controller starts after
        the learner gave a brake's torques for the first window: a refusal for good stopped
        learning for the whole run.
        """
        audit = self.audit
        warnings = audit.new_warnings()
        for warning in warnings:
            self.get_logger().warn(warning)
        if audit.problem:
            if self.learner is not None:
                self.learner.stop(checkpoint=False)
                self.learner = None
            if audit.problem != self.refusal_logged:   # said once per reason
                self.refusal_logged = audit.problem
                self.get_logger().error(
                    f'not learning: data refused: {audit.problem}; the next {audit.size} '
                    'samples are judged again, learning resumes when they pass')
            return
        if self.learner is None:
            self._build(list(self.joint_names), audit)
            self.audit_reported, self.refusal_logged = True, ''
            self.get_logger().info(f'data audit: {audit.size} samples passed after '
                                   f'{audit.refusals} refused window(s): learning resumes')
            return
        still = (f'; the velocities of {audit.unmoved} are judged once they move'
                 if audit.unmoved else '')
        if not self.audit_reported:
            self.audit_reported = True
            self.get_logger().info(f'data audit of the first {audit.size} samples passed'
                                   + (' with warnings' if warnings else '') + still)
        elif audit.last_judged:
            self.get_logger().info(f'data audit: the velocities of {audit.last_judged} judged '
                                   'now that they moved' + (' (warnings above)' if warnings
                                                            else '') + still)

    def _build_at_first_message(self) -> bool:
        """Build the learner for the adopted joints; a failure stops learning, not the node."""
        try:
            self._build(list(self.parser.joint_names))
        except ValueError as error:
            self.build_error = str(error)
            self.get_logger().error(f'not learning: {error}')
            return False
        return True

    def _time_reset(self) -> None:
        """Reset learning state: a valid message went back in time by time_reset_s or more."""
        self.time_resets += 1
        if self.learner is not None:
            self.learner.reset()
            self.stream.reset()
            self.velocities.reset()
        self.get_logger().warn('time went back by more than time_reset_s: treated as a reset '
                               '(looping bag or restarted clock)')

    def _log_rejection(self, result, msg: JointState) -> None:
        if result.reason == Reason.MISSING_JOINT and self._adopted:
            self._warn_other_joint_set(msg)
            return
        if result.reason == Reason.MISSING_JOINT and self._urdf_joints is not None:
            self._urdf_joints = None   # said once, in one line, naming both sets
            self.get_logger().error(
                f'the joint_states joints {list(msg.name)} do not match the URDF joints '
                f"{self.joint_names} of model '{self.model_type}': set urdf (or model_config "
                'urdf) to this robot, or use a model without a URDF (lstm)')
        now = time.monotonic()
        if now - self._last_log > 1.0:   # throttled: a flood of bad messages must not flood logs
            self._last_log = now
            self.get_logger().warn(f'rejected joint state ({result.reason.value}): '
                                   f'{result.detail}; {self.parser.counter.summary()}')

    def _warn_other_joint_set(self, msg: JointState) -> None:
        """Name a joint set refused after adoption (another publisher), throttled."""
        key = frozenset(str(name) for name in msg.name)
        if key in self.other_joint_sets or len(self.other_joint_sets) < OTHER_SETS_KEPT:
            self.other_joint_sets[key] = self.other_joint_sets.get(key, 0) + 1
        self.get_logger().warn(
            f'ignoring joint states with the joints {list(msg.name)[:20]} '
            f'({self.parser.counter.rejected.get(Reason.MISSING_JOINT, 0)} messages of other '
            f'joint sets so far): learning {self.parser.joint_names}, the joint set adopted at '
            'start; set joint_names to choose the joints', throttle_duration_sec=10.0)

    def diagnostics(self) -> dict:
        """Return every counter and metric as a flat dict."""
        values = {f'messages_{key}': value
                  for key, value in self.parser.counter.as_dict().items()}
        values.update(time_resets=self.time_resets, predict_only=self.predict_only,
                      inactive_dropped=self.inactive_dropped,
                      status_write_errors=self.status_write_errors,
                      checkpoint_dir_refused=self.checkpoint_dir_refused,
                      samples_out_of_range=self.plausible.skipped,
                      predictions_not_finite=self.predictions.not_finite,
                      other_joint_sets=len(self.other_joint_sets),
                      held_for_joint_choice=len(self.joint_sets.held),
                      data_audit='pending' if self.audit is None else self.audit.state,
                      audit_refused_windows=0 if self.audit is None else self.audit.refusals,
                      audit_unmoved_joints=0 if self.audit is None else len(self.audit.unmoved),
                      **({} if self.velocities is None else self.velocities.diagnostics()),
                      **self.commands.diagnostics())
        if self.checkpoints is not None:
            values.update({f'checkpoints_skipped_{reason}': n
                           for reason, n in self.checkpoints.skipped.items()})
        values.update(self.latency.summary())
        if self.learner is not None:
            values.update(self.learner.diagnostics())
        return values

    def _publish_diagnostics(self) -> None:
        if self.active:   # a stream that stopped inside the settling window
            self._adopt_when_settled()
        values = self.diagnostics()
        status = DiagnosticStatus(name=f'{self.get_name()}: continual learning',
                                  hardware_id=self.get_fully_qualified_name())
        error = values.get('last_error', '') or self.build_error or (
            f'data refused: {self.audit.problem}' if self.audit is not None
            and self.audit.problem else '')
        status.level = DiagnosticStatus.WARN if error else DiagnosticStatus.OK
        status.message = error or ('learning' if self.active else 'inactive')
        status.values = [KeyValue(key=key, value=f'{value:.6g}' if isinstance(value, float)
                                  else str(value)) for key, value in values.items()]
        array = DiagnosticArray(status=[status])
        array.header.stamp = self.get_clock().now().to_msg()
        self.pub_diag.publish(array)
        if self.params.status_path:
            self._write_status(values)
        # The hybrid's payload estimate and how often a payload change restarted it.
        payload = ('' if 'payload_mass_change_kg' not in values else
                   f", payload {values['payload_mass_change_kg']:+.2f} kg "
                   f"({values['payload_resets']} change(s) detected, "
                   f"{values['payload_false_alarms']} undone, "
                   f"{values['payload_recalls']} recalled)")
        self.get_logger().info(
            f"{self.parser.counter.summary()}; samples {values.get('samples', 0)}, "
            f"steps {values.get('train_steps', 0)}, loss {values.get('training_loss', 0):.4g}, "
            f"prequential nMSE {values.get('prequential_nmse', float('nan')):.4g}, "
            f"latency p50 {values['latency_p50_ms']:.3f} ms p99 {values['latency_p99_ms']:.3f}"
            f' ms{payload}')

    def _write_status(self, values: dict) -> None:
        path = Path(self.params.status_path)
        partial = path.with_name(path.name + '.partial')
        try:
            partial.write_text(json.dumps({**values,
                                           'last_stamp_ns': self.parser.stamps.last_ns},
                                          default=float))   # numpy scalars
            os.replace(partial, path)   # a reader never sees half a file
        except OSError as error:   # a missing folder or a full disk must not end learning
            self.status_write_errors += 1
            self.get_logger().error(f'status not written ({self.status_write_errors} '
                                    f'times): {error}', throttle_duration_sec=10.0)

    def destroy_node(self) -> None:
        """
        Write the record, stop training with a last checkpoint, then free the model.

        The record first: freeing the learner once ended in a native crash (a CI run, 29 Nov,
        exit -11 inside `cleanup`, cause not found), which would have lost it.
        """
        if self.record is not None:
            try:
                path = self.record.save(self.params.record_path, self.joint_names)
                self.get_logger().info(f'recorded {self.record.count} samples to {path}')
            except OSError as error:   # the node must still end cleanly
                self.get_logger().error(f'record not written: {error}')
        self.cleanup()
        super().destroy_node()


def main(args=None) -> None:
    """Run the node (console script `dynamics_learner`)."""
    spin_node(DynamicsLearnerNode, args)  # training has its own thread


if __name__ == '__main__':
    main()
