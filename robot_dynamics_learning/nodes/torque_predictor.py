"""
torque_predictor: predicted torques from a checkpoint, without training (deployment).

Loads the newest valid checkpoint of `checkpoint_dir` (learning/checkpoint.py: weights_only
load, joint order checked, a corrupt newest file logged and skipped for the previous one),
then for every accepted `/joint_states` message publishes `~/predicted_torques` (and
`~/predicted_torques_std` for models with variance), header stamp copied from the input.
The std is calibrated (`learning.prequential.VarianceCalibration`): from the scale the learner
saved in the checkpoint, then, where messages carry measured efforts, from this node's own
errors on them.
A timer polls the folder and swaps in a newer checkpoint between messages, keeping the
recurrent state, so a learner elsewhere (another machine, a GPU) can feed many predictors.
A lifecycle node (nodes/lifecycle.py): configure loads the checkpoint, inactive it publishes
nothing, cleanup frees the model; autostart (default) activates it at start.
"""
from pathlib import Path
import threading
import time
from typing import Optional

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.qos import qos_profile_sensor_data
from robot_dynamics_learning.data.joint_velocity import velocity_need, VelocitySource
from robot_dynamics_learning.learning.checkpoint import CheckpointDirectory
from robot_dynamics_learning.learning.continual import (InverseDynamicsStream, Published,
                                                        StreamingPredictor)
from robot_dynamics_learning.learning.learner_params import TorquePredictorConfig
from robot_dynamics_learning.learning.prequential import (LatencyLog, PrequentialError,
                                                          saved_variance_scale,
                                                          VarianceCalibration)
from robot_dynamics_learning.models.base import DynamicsModel
from robot_dynamics_learning.nodes.conversions import (announce_arrival_times, arrival_ns,
                                                       FieldNeed, JointStateParser,
                                                       JointValueGuard, output_stamp,
                                                       PredictedTorquePublisher)
from robot_dynamics_learning.nodes.lifecycle import ManagedNode
from robot_dynamics_learning.nodes.parameters import (declare_config, declare_stamp_bounds,
                                                      refuse_clock_changes)
from robot_dynamics_learning.nodes.runtime import file_version, spin_node
from robot_dynamics_learning.signals.causal import CausalDifferentiator
from sensor_msgs.msg import JointState
import torch


class TorquePredictorNode(ManagedNode):
    """Prediction-only counterpart of dynamics_learner."""

    def __init__(self) -> None:
        super().__init__('torque_predictor')

        self.params = params = declare_config(self, TorquePredictorConfig)
        torch.set_num_threads(params.torch_threads)
        folder = params.checkpoint_dir
        if not folder:
            raise ValueError('parameter checkpoint_dir must name a folder of checkpoints')
        self.checkpoints = CheckpointDirectory(Path(folder))
        refuse_clock_changes(self)
        self._bounds = declare_stamp_bounds(self, reset_after_s=params.time_reset_s)
        self._last_log = time.monotonic()
        self._accel_window = params.accel_window
        self._history_size = params.history_size
        self._lock = threading.Lock()
        self._model: Optional[DynamicsModel] = None
        self._version = 0
        self._loaded_path: Optional[Path] = None
        self._tried: Optional[tuple] = None   # `file_version` of the newest file tried
        self.loads = 0
        self.load_errors = 0
        self.time_resets = 0
        self.plausible = JointValueGuard()
        self.joint_names = None
        self.parser: Optional[JointStateParser] = None
        self.predictor: Optional[StreamingPredictor] = None
        self.stream: Optional[InverseDynamicsStream] = None
        self.velocities: Optional[VelocitySource] = None
        self.prequential: Optional[PrequentialError] = None
        self.calibration: Optional[VarianceCalibration] = None
        self.latency = LatencyLog()
        self.predictions = PredictedTorquePublisher(self)
        self.pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        self.create_subscription(JointState, 'joint_states', self._on_joint_state,
                                 qos_profile_sensor_data,
                                 callback_group=MutuallyExclusiveCallbackGroup())
        self.create_timer(params.poll_period_s, self._poll,
                          callback_group=MutuallyExclusiveCallbackGroup())
        self.create_timer(params.diagnostics_period_s, self._publish_diagnostics,
                          callback_group=MutuallyExclusiveCallbackGroup())
        self.autostart()

    def configure(self) -> None:
        """Load the newest valid checkpoint (later ones are polled for while configured)."""
        self._load_newest()

    def cleanup(self) -> None:
        """Free the model; the next configure loads the newest checkpoint again."""
        with self._lock:
            self._model = None
            self.predictor = None
        self._loaded_path = self._tried = None

    def _poll(self) -> None:
        if self.configured:
            self._load_newest()

    def _load_newest(self) -> None:
        """Load the newest valid checkpoint if it is not the one in use."""
        paths = self.checkpoints.paths()
        newest = file_version(paths[-1]) if paths else None
        if newest is None or newest == self._tried:
            return   # a refused newest file is refused (logged, counted) once, not every poll
        self._tried = newest
        try:
            loaded = self.checkpoints.load_latest(self.joint_names)
        except (ValueError, FileNotFoundError, OSError) as error:
            self.load_errors += 1
            self.get_logger().error(f'checkpoint not loaded, keeping the current model: {error}')
            return
        if loaded.path == self._loaded_path and loaded.path != paths[-1]:
            return   # the newest file was refused: the model in use stays
        for parameter in loaded.model.parameters():
            parameter.requires_grad_(False)
        with self._lock:
            if self.joint_names is None:
                self.joint_names = list(loaded.joint_names)
                n = len(self.joint_names)
                params = self.params
                self.parser = JointStateParser(
                    self.joint_names, velocity=velocity_need(params.velocity_source),
                    effort=FieldNeed.OPTIONAL, bounds=self._bounds,
                    stamp_source=params.stamp_source)
                self.stream = InverseDynamicsStream(
                    n, CausalDifferentiator(n, window=self._accel_window))
                self.velocities = VelocitySource(n, params.velocity_source,
                                                 params.velocity_window)
                self.prequential = PrequentialError(n)
                self.calibration = VarianceCalibration(n)
                self.predictions.set_joint_names(self.joint_names)
            scale, why = saved_variance_scale(loaded.metadata, len(self.joint_names))
            if scale is not None:
                self.calibration.set_prior(scale)
            self._model = loaded.model
            self._version += 1
        self._loaded_path = loaded.path
        self.loads += 1
        self.get_logger().info(f'using checkpoint {loaded.path} '
                               f"(step {loaded.metadata.get('steps', '?')})"
                               + ('' if scale is not None else f'; std uncalibrated: {why}'))

    def _published(self) -> Published:
        with self._lock:
            return Published(self._version, self._model)

    def _on_joint_state(self, msg: JointState) -> None:
        received = time.perf_counter()
        if not self.active or self._model is None:
            return   # inactive, or no checkpoint yet: nothing to predict with
        if self.predictor is None:
            model = self._model
            self.predictor = StreamingPredictor(self._published, model.n_obs, model.n_act,
                                                self._history_size)
        result = self.parser.parse(msg, arrival_ns(self, self.parser))
        announce_arrival_times(self, self.parser, 'joint_states')
        if not result.ok:
            now = time.monotonic()
            if now - self._last_log > 1.0:   # throttled: a flood must not flood the log
                self._last_log = now
                self.get_logger().warn(f'rejected joint state ({result.reason.value}): '
                                       f'{result.detail}; {self.parser.counter.summary()}')
            return
        sample = result.value
        if sample.time_reset:   # only a valid message resets (the parser checked it whole)
            self.time_resets += 1
            self.stream.reset()
            self.velocities.reset()
            self.predictor.reset()
        stamp = sample.stamp_ns * 1e-9
        velocity = self.velocities.velocity(stamp, sample.position, sample.velocity)
        if velocity is None:
            return
        features = self.stream.sample(stamp, sample.position, velocity, sample.effort)
        if features is None:
            return
        observation, action, target = features
        if not self.plausible.accepts(self, observation, action, target):
            return
        mean, variance = self.predictor.predict(observation, action)
        calibrated = None if variance is None else self.calibration.apply(variance)
        self.predictions.publish(output_stamp(msg, self.parser, sample.stamp_ns), mean,
                                 calibrated)
        if target is not None and np.all(np.isfinite(mean)):   # NaN: not published either
            self.prequential.update(mean, target)
            if variance is not None:
                self.calibration.update(mean - target, variance)
        now_ns = self.get_clock().now().nanoseconds
        self.latency.add(time.perf_counter() - received, (now_ns - sample.stamp_ns) * 1e-9)

    def _publish_diagnostics(self) -> None:
        values = {'checkpoint': str(self._loaded_path), 'loads': self.loads,
                  'load_errors': self.load_errors, 'time_resets': self.time_resets,
                  'samples_out_of_range': self.plausible.skipped,
                  'predictions_not_finite': self.predictions.not_finite,
                  **{f'checkpoints_skipped_{reason}': n
                     for reason, n in self.checkpoints.skipped.items()}}
        if self.parser is not None:
            values.update({f'messages_{k}': v for k, v in self.parser.counter.as_dict().items()})
            values['nmse'] = self.prequential.nmse()
            values['variance_scale_mean'] = float(self.calibration.scale.mean())
            values.update(self.velocities.diagnostics())
        values.update(self.latency.summary())
        status = DiagnosticStatus(name=f'{self.get_name()}: torque prediction',
                                  hardware_id=self.get_fully_qualified_name(),
                                  level=DiagnosticStatus.OK if self._model is not None
                                  else DiagnosticStatus.WARN,
                                  message='predicting' if self._model is not None
                                  else 'waiting for a checkpoint')
        status.values = [KeyValue(key=k, value=f'{v:.6g}' if isinstance(v, float) else str(v))
                         for k, v in values.items()]
        array = DiagnosticArray(status=[status])
        array.header.stamp = self.get_clock().now().to_msg()
        self.pub_diag.publish(array)


def main(args=None) -> None:
    """Run the node (console script `torque_predictor`)."""
    spin_node(TorquePredictorNode, args, threads=2)


if __name__ == '__main__':
    main()
