"""
The continual trainer in a process of its own, for nodes that answer at 1 kHz.

Why: a trainer thread shares the interpreter lock with the message callback. Every torch call
of the callback gives the lock up and must win it back from the trainer's Python code, and
the trainer's CPU time competes at the callback's priority: at 1 kHz on a 2-core machine the
thread version delivered predictions 1.9 ms (p50) and 12 ms (p99) after the input's stamp.
In its own process, at a lower scheduling priority (`nice`), training takes only the CPU the
callback, the simulator and the controller leave.

`TrainerProcess` is what `ContinualLearner` talks to instead of a `ContinualTrainer` thread:
- samples go to the child in blocks (at most `block` samples or `flush_s` old) through a
  multiprocessing queue; the child mirrors the predictor's `ObservationHistory` from them, so
  sequence numbers agree on both sides;
- the child runs an ordinary `ContinualTrainer` and sends every published copy back as a
  numpy state dict, with the recurrent state warmed up on the mirrored history and the
  sequence number it belongs to; a receiver thread rebuilds the model in this process and
  publishes it for the `StreamingPredictor` (atomic swap, as with the thread);
- counters come back with every hand-over and at least twice a second;
- `stop(checkpoint=True)` flushes the samples, lets the child finish its step and write the
  final checkpoint. The child exits by itself when its parent dies (`kill -9`), so a
  restarted node never shares the checkpoint folder with an orphan.
"""
import copy
from dataclasses import dataclass, field
import functools
import multiprocessing
import os
import queue
import threading
import time
from typing import Any, Callable, Dict, Optional

import numpy as np
from robot_dynamics_learning.learning.buffer import StreamingBuffer
from robot_dynamics_learning.learning.checkpoint import checkpoint_payload, model_from_payload
from robot_dynamics_learning.learning.continual import (ContinualLearner, ContinualTrainer,
                                                        LearnerConfig, ObservationHistory,
                                                        Published, save_with_physics,
                                                        save_with_variance_scale,
                                                        SaveFunction, trainer_stats)
from robot_dynamics_learning.models.base import DynamicsModel
from robot_dynamics_learning.params import check_ranges, setting
from robot_dynamics_learning.processes import die_with_parent, start_child
import torch

STATS_PERIOD_S = 0.5


@dataclass(frozen=True)
class ProcessConfig:
    """How the trainer process runs."""

    nice: int = setting(10, 'scheduling niceness added to the child (higher yields the CPU '
                        'to the node)', 0, 19)
    block: int = setting(16, 'samples per message to the child', 1, 100000)
    flush_s: float = setting(0.005, 'the oldest sample waits at most this long before its '
                             'block is sent anyway (s)', 0.0, 10.0)
    threads: int = setting(1, 'torch intra-op threads of the child', 1, 64)
    stop_timeout_s: float = setting(20.0, "how long `stop` waits for the child's final "
                                    'checkpoint (s)', 0.001, 3600.0)

    def __post_init__(self) -> None:
        """Reject values that cannot work, naming the bad value."""
        check_ranges(self)


@dataclass
class _ChildSpec:
    """Everything the child needs to rebuild the trainer (picklable)."""

    payload: Dict[str, Any]
    split_physics: bool
    n_obs: int
    n_act: int
    n_target: int
    config: LearnerConfig
    rng: np.random.Generator
    save: Optional[SaveFunction]
    fit_normalization: bool
    start_step: int
    process: ProcessConfig
    parent_pid: int = field(default_factory=os.getpid)


# The messages between parent and child (pickled through multiprocessing queues).
@dataclass(frozen=True)
class SampleBlock:
    """
    Parent -> child: samples in arrival order, and what the parent keeps for checkpoints.

    physics_state: the newest payload estimate (hybrid); variance_scale: the newest
    calibration scale of the published variance (`VarianceCalibration`).
    """

    stamps: np.ndarray
    observations: np.ndarray
    actions: np.ndarray
    targets: np.ndarray
    has_target: np.ndarray
    physics_state: Optional[np.ndarray]
    variance_scale: Optional[np.ndarray] = None


@dataclass(frozen=True)
class SegmentBreak:
    """Parent -> child: a discontinuity (reset, gap, time going backwards)."""


@dataclass(frozen=True)
class StopRequest:
    """Parent -> child: finish the step, checkpoint if `checkpoint`, then exit."""

    checkpoint: bool


@dataclass(frozen=True)
class WeightsHandOver:
    """Child -> parent: published weights, the warmed-up state, its sequence number, stats."""

    version: int
    state_dict: Dict[str, np.ndarray]
    state: Any
    seq: Optional[int]
    stats: Dict[str, Any]


@dataclass(frozen=True)
class StatsReport:
    """Child -> parent: the trainer's counters; `final` on the child's last word."""

    stats: Dict[str, Any]
    final: bool = False


def to_numpy(value: Any) -> Any:
    """Return `value` with every tensor of (nested named) tuples, lists and dicts as numpy."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy().copy()
    return _map_nested(to_numpy, value)


def to_torch(value: Any) -> Any:
    """Inverse of `to_numpy`."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    return _map_nested(to_torch, value)


def _map_nested(function: Callable[[Any], Any], value: Any) -> Any:
    if isinstance(value, tuple) and hasattr(value, '_fields'):
        return type(value)(*(function(item) for item in value))
    if isinstance(value, (tuple, list)):
        return type(value)(function(item) for item in value)
    if isinstance(value, dict):
        return {key: function(item) for key, item in value.items()}
    return value


class _Latest:
    """The newest value the parent sent (payload estimate, calibration scale) for checkpoints."""

    def __init__(self, value: np.ndarray) -> None:
        self.value = value

    def state(self) -> np.ndarray:
        return self.value


class SampleForwarder:
    """
    Collects (stamp, observation, action, target or None) rows and sends them in blocks.

    Called from the message callback: `add` copies one row into preallocated arrays; a full
    (or `flush_s` old) block goes to the queue, whose feeder thread pickles it.
    """

    def __init__(self, samples: Any, n_obs: int, n_act: int, n_target: int,
                 config: ProcessConfig) -> None:
        self._queue = samples
        self._config = config
        size = config.block
        self._stamp = np.zeros(size)
        self._obs = np.zeros((size, n_obs), np.float32)
        self._act = np.zeros((size, n_act), np.float32)
        self._target = np.zeros((size, n_target), np.float32)
        self._has_target = np.zeros(size, bool)
        self._count = 0
        self._oldest = 0.0
        # What lives here and goes with each block for checkpoints: the hybrid's payload
        # estimate and the calibration scale.
        self.physics_state: Optional[Callable[[], np.ndarray]] = None
        self.variance_scale: Optional[Callable[[], np.ndarray]] = None

    def add(self, stamp: float, observation: np.ndarray, action: np.ndarray,
            target: Optional[np.ndarray]) -> None:
        """Queue one sample (target None: predicted only, kept for the history)."""
        k = self._count
        if k == 0:
            self._oldest = time.monotonic()
        self._stamp[k] = stamp
        self._obs[k] = observation
        if self._act.shape[1]:
            self._act[k] = action
        self._has_target[k] = target is not None
        if target is not None:
            self._target[k] = target
        self._count = k + 1
        if self._count == self._stamp.size or time.monotonic() - self._oldest > \
                self._config.flush_s:
            self.flush()

    def flush(self) -> None:
        """Send what is collected."""
        k = self._count
        if not k:
            return
        physics = None if self.physics_state is None else self.physics_state()
        scale = None if self.variance_scale is None else self.variance_scale()
        self._queue.put(SampleBlock(self._stamp[:k].copy(), self._obs[:k].copy(),
                                    self._act[:k].copy(), self._target[:k].copy(),
                                    self._has_target[:k].copy(), physics, scale))
        self._count = 0

    def reset(self) -> None:
        """Send the pending samples, then a discontinuity marker."""
        self.flush()
        self._queue.put(SegmentBreak())


class TrainerProcess:
    """
    Parent-side handle of a `ContinualTrainer` running in a child process.

    Offers what `ContinualLearner` uses of a trainer (`published`, `start`, `stop`), plus
    `forwarder` (the sample sink) and `stats`: the child's newest `trainer_stats`.
    """

    def __init__(self, model: DynamicsModel, n_obs: int, n_act: int, n_target: int,
                 config: LearnerConfig, rng: np.random.Generator,
                 save: Optional[SaveFunction], fit_normalization: bool, start_step: int,
                 process: ProcessConfig, split_physics: bool) -> None:
        context = multiprocessing.get_context('spawn')   # no fork of a process with DDS threads
        self._samples = context.Queue()
        self._results = context.Queue()
        # Set at stop: the child then skips the samples still queued (they would never be
        # trained on) and reaches the stop message at once.
        self._stop_requested = context.Event()
        self._spec = _ChildSpec(checkpoint_payload(model), split_physics, n_obs, n_act,
                                n_target, config, rng, save, fit_normalization, start_step,
                                process)
        self._process = context.Process(target=_child_main, name='continual_trainer',
                                        args=(self._spec, self._samples, self._results,
                                              self._stop_requested),
                                        daemon=True)
        self._template = copy.deepcopy(model).eval()
        for parameter in self._template.parameters():
            parameter.requires_grad_(False)
        self._lock = threading.Lock()
        self._published = Published(0, self._template)
        self.stats: Dict[str, Any] = {'samples': 0, 'segment_breaks': 0,
                                      'reservoir_windows': 0, 'train_steps': start_step,
                                      'rejected_steps': 0, 'training_loss': float('nan'),
                                      'renormalizations': 0, 'renormalized_at_sample': 0,
                                      'train_seconds': 0.0,
                                      'checkpoints_written': 0, 'last_error': ''}
        self._stopped = threading.Event()
        self._receiver: Optional[threading.Thread] = None
        self.forwarder = SampleForwarder(self._samples, n_obs, n_act, n_target, process)
        self.history: Optional[ObservationHistory] = None   # set by ContinualLearner

    def published(self) -> Published:
        """Return the newest weights handed over by the child."""
        with self._lock:
            return self._published

    def start(self) -> None:
        """Start the child and the thread that receives its hand-overs."""
        start_child(self._process)
        self._receiver = threading.Thread(target=self._receive, name='trainer_receiver',
                                          daemon=True)
        self._receiver.start()

    def stop(self, checkpoint: bool = True, timeout: Optional[float] = None) -> None:
        """Send the pending samples, stop the child (after its final checkpoint if asked)."""
        if self._receiver is None:
            return
        self.forwarder.flush()
        self._stop_requested.set()
        self._samples.put(StopRequest(checkpoint))
        timeout = self._spec.process.stop_timeout_s if timeout is None else timeout
        if self._stopped.wait(timeout):
            self._process.join(timeout=0.5)   # it has sent its last word and is exiting
        if self._process.is_alive():
            self._process.kill()   # checkpoints are written atomically: none is left half
            self._process.join(timeout=1.0)
            self.stats['last_error'] = 'trainer process did not stop in time: killed'
        self._samples.cancel_join_thread()
        self._receiver.join(timeout=0.5)

    def _receive(self) -> None:
        """Rebuild each handed-over model here and publish it; keep the counters current."""
        while not self._stopped.is_set():
            try:
                message = self._results.get(timeout=0.5)
            except queue.Empty:
                if not self._process.is_alive():
                    self.stats['last_error'] = (f'trainer process exited (code '
                                                f'{self._process.exitcode}); predicting with '
                                                'the last weights')
                    self._stopped.set()
                continue
            if isinstance(message, WeightsHandOver):
                model = copy.deepcopy(self._template)
                model.load_state_dict(to_torch(message.state_dict))
                with self._lock:
                    self._published = Published(message.version, model,
                                                to_torch(message.state), message.seq)
            self.stats = message.stats
            if isinstance(message, StatsReport) and message.final:
                self._stopped.set()


def _child_main(spec: _ChildSpec, samples: Any, results: Any, stop_requested: Any) -> None:
    """Entry point of the trainer process."""
    die_with_parent(spec.parent_pid)
    os.nice(spec.process.nice)
    torch.set_num_threads(spec.process.threads)
    model = model_from_payload(spec.payload, source='trainer hand-over')[0]
    physics = None
    scale = _Latest(np.ones(spec.n_target))
    save = spec.save
    if save is not None:
        save = functools.partial(save_with_variance_scale, save, scale.state)
    if spec.split_physics:
        split = model.split_physics()
        model, physics = split.residual, _Latest(split.physics.state())
        if save is not None:
            save = functools.partial(save_with_physics, save, physics)
    buffer = StreamingBuffer(spec.n_obs, spec.n_act, spec.n_target, spec.config.buffer,
                             spec.rng)
    history = ObservationHistory(spec.n_obs, spec.n_act, spec.config.buffer.window)
    trainer = ContinualTrainer(model, buffer, spec.config.trainer, save,
                               spec.fit_normalization, spec.start_step, history)
    last_stats = [time.monotonic()]

    def hand_over(published: Published) -> None:
        results.put(WeightsHandOver(published.version, to_numpy(published.model.state_dict()),
                                    to_numpy(published.state), published.seq,
                                    trainer_stats(trainer, buffer)))
        last_stats[0] = time.monotonic()

    trainer.on_publish = hand_over
    final_checkpoint = [False]

    def receive() -> None:
        while True:
            try:
                message = samples.get(timeout=0.2)
            except queue.Empty:
                if os.getppid() != spec.parent_pid:   # the node died: no checkpoint
                    os._exit(0)
                continue
            if isinstance(message, SampleBlock):
                if not stop_requested.is_set():
                    _store(message, buffer, history)
                # Skipped samples or not, the final checkpoint keeps the newest values.
                if physics is not None and message.physics_state is not None:
                    physics.value = message.physics_state
                if message.variance_scale is not None:
                    scale.value = message.variance_scale
            elif isinstance(message, SegmentBreak):
                buffer.reset()
                history.reset()
            elif isinstance(message, StopRequest):
                final_checkpoint[0] = message.checkpoint
                trainer.request_stop()
                return
            if time.monotonic() - last_stats[0] > STATS_PERIOD_S:
                results.put(StatsReport(trainer_stats(trainer, buffer)))
                last_stats[0] = time.monotonic()

    receiver = threading.Thread(target=receive, name='samples', daemon=True)
    receiver.start()
    trainer.run_until_stopped()
    receiver.join()
    if final_checkpoint[0]:
        trainer.checkpoint_now()
    results.put(StatsReport(trainer_stats(trainer, buffer), final=True))


def _store(block: SampleBlock, buffer: StreamingBuffer, history: ObservationHistory) -> None:
    """Append one block of samples to the child's buffer and history mirror."""
    for k in range(block.stamps.shape[0]):
        history.append(block.observations[k], block.actions[k])
        if block.has_target[k]:
            buffer.append(float(block.stamps[k]), block.observations[k], block.actions[k],
                          block.targets[k])


class ProcessLearner(ContinualLearner):
    """
    `ContinualLearner` whose trainer runs in a child process (`TrainerProcess`).

    Same `observe`, `reset`, `diagnostics`, `start` and `stop`; every observed sample (with
    or without a target) goes to the child, which keeps the buffer. `train_pending` (offline
    replay with an exact budget) is only offered by the thread version.
    """

    def __init__(self, model: DynamicsModel, n_obs: int, n_act: int, n_target: int,
                 config: LearnerConfig, rng: np.random.Generator,
                 save: Optional[SaveFunction] = None, fit_normalization: bool = True,
                 start_step: int = 0, process: ProcessConfig = ProcessConfig(),
                 variance_scale: Optional[np.ndarray] = None) -> None:
        self.process_config = process
        super().__init__(model, n_obs, n_act, n_target, config, rng, save, fit_normalization,
                         start_step, variance_scale)

    def _make_trainer(self, model: DynamicsModel, n_obs: int, n_act: int, n_target: int,
                      rng: np.random.Generator, save: Optional[SaveFunction],
                      fit_normalization: bool, start_step: int) -> TrainerProcess:
        trainer = TrainerProcess(model, n_obs, n_act, n_target, self.config, rng, save,
                                 fit_normalization, start_step, self.process_config,
                                 split_physics=self.physics is not None)
        if self.physics is not None:
            trainer.forwarder.physics_state = self.physics.state
        trainer.forwarder.variance_scale = self._variance_scale
        return trainer

    def _store(self, stamp: float, observation: np.ndarray, action: np.ndarray,
               target: Optional[np.ndarray]) -> None:
        self.trainer.forwarder.add(stamp, observation, action, target)

    def _trainer_stats(self) -> Dict[str, Any]:
        return self.trainer.stats

    def reset(self) -> None:
        """Mark a discontinuity: in the child's buffer and in the recurrent state."""
        self.trainer.forwarder.reset()
        self.predictor.reset()
