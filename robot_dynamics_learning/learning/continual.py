"""
Continual (lifelong) learning: a trainer thread beside a streaming predictor.

Seed 001 (Rueckert et al.) observes that small mini-batches (128 windows) make an LSTM inverse
dynamics model cheap enough to keep improving for the robot's whole life. This module runs
that loop online:

- `ContinualTrainer` owns the training copy of the model and runs in its own thread: it draws
  mini-batches of windows from a `StreamingBuffer`, clips gradients, refuses any step whose
  loss, gradient or resulting weights are not finite (so no NaN ever reaches the weights the
  predictor sees), checkpoints periodically through an injected `save` callable, and hands new
  weights to the predictor by an atomic swap: a deep copy of the model, published under a
  lock with a version number. Message callbacks never wait for a training step.
- `StreamingPredictor` runs `model.step` once per message with a recurrent state carried
  across messages, and picks up the newest published copy between messages.
- `ContinualLearner` ties both together with the prequential error: each new sample is
  predicted before it is added to the buffer.

A compute budget (`updates_per_sample`) bounds training work per incoming sample, so the
per-sample cost is known and does not grow with the robot's age.
"""
import copy
from dataclasses import dataclass
import functools
import threading
import time
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

import numpy as np
from robot_dynamics_learning.core_types import SequenceBatch
from robot_dynamics_learning.learning.buffer import BufferConfig, StreamingBuffer
from robot_dynamics_learning.learning.prequential import (PrequentialError, VARIANCE_SCALE_KEY,
                                                          VarianceCalibration)
from robot_dynamics_learning.models.base import DynamicsModel
from robot_dynamics_learning.params import check_ranges, setting
import torch

SaveFunction = Callable[[DynamicsModel, dict], object]
LossFunction = Callable[[DynamicsModel, SequenceBatch], torch.Tensor]


@dataclass(frozen=True)
class TrainerConfig:
    """Settings of the continual trainer (seed 001: batches of 128 windows)."""

    batch_size: int = setting(128, 'windows per mini-batch', 1, 4096)
    learning_rate: float = setting(3e-3, 'Adam learning rate', 1e-9, 1.0)
    grad_clip: float = setting(1.0, 'maximum global gradient norm', 1e-6, 1e6)
    warmup_samples: int = setting(1000, 'samples before the first update; the normalisation '
                                  'is fitted on them (unless resumed from a checkpoint)', 1,
                                  100_000_000)
    updates_per_sample: float = setting(0.05, 'training budget: updates per received sample '
                                        '(0: as fast as possible)', 0.0, 100.0)
    publish_every: int = setting(5, 'updates between weight hand-overs to the predictor', 1,
                                 100000)
    checkpoint_every_s: float = setting(30.0, 'seconds between checkpoints (0: none)', 0.0,
                                        1e9)
    prequential_window: int = setting(5000, 'samples in the sliding prequential nMSE', 2,
                                      100_000_000)
    renormalize_factor: float = setting(10.0, 'refit the normalisation when a channel spreads '
                                        'this many times wider than at the fit (a robot that '
                                        'started at rest); 0: never', 0.0, 1e6)
    max_renormalizations: int = setting(3, 'refits of the normalisation at most', 0, 1000)
    max_cpu_share: float = setting(1.0, "share of one core's wall time the trainer thread may "
                                   'use: after an update of d seconds it pauses d (1 / share '
                                   '- 1), leaving the message callback (and a simulator or '
                                   'controller beside it) the CPU it needs at 1 kHz on a small '
                                   'machine; the thread only, not `train_pending`', 0.01, 1.0)

    def __post_init__(self) -> None:
        """Reject values that cannot work, naming the bad value."""
        check_ranges(self)


class Published(NamedTuple):
    """
    Weights handed to predictors.

    version: increases with every hand-over. model: an immutable copy (eval mode, no grad).
    state: the model's recurrent state after the history samples up to `seq` (None: the
    predictor warms the state up itself from its history).
    """

    version: int
    model: DynamicsModel
    state: Any = None
    seq: Optional[int] = None


class ObservationHistory:
    """
    The newest `size` (observation, action) pairs seen by a predictor, numbered 1, 2, ...

    Why: a recurrent state computed with old weights means little to new weights, so on every
    hand-over the state is rebuilt by running the new model over recent inputs (see
    `StreamingPredictor`). Thread-safe: the predictor appends, the trainer reads.
    """

    def __init__(self, n_obs: int, n_act: int, size: int) -> None:
        self._obs = np.zeros((size, n_obs), np.float32)
        self._act = np.zeros((size, n_act), np.float32)
        self._lock = threading.Lock()
        self.count = 0
        self._start = 0     # first sequence number after the last reset

    def append(self, observation: np.ndarray, action: Optional[np.ndarray]) -> int:
        """Store one pair; return its sequence number."""
        with self._lock:
            slot = self.count % self._obs.shape[0]
            self._obs[slot] = observation
            if self._act.shape[1]:
                self._act[slot] = action
            self.count += 1
            return self.count

    def reset(self) -> None:
        """Forget the past (a discontinuity): `since` never reaches before this point."""
        with self._lock:
            self._start = self.count

    def since(self, seq: int) -> Tuple[np.ndarray, np.ndarray, int]:
        """
        Return (observations, actions, first) for samples after `seq` (at most `size`).

        first is the sequence number of the first returned sample minus one, i.e. `seq` when
        everything since then is still stored.
        """
        with self._lock:
            size = self._obs.shape[0]
            first = max(seq, self.count - size, self._start)
            index = np.arange(first, self.count) % size
            return self._obs[index].copy(), self._act[index].copy(), first


def _replay(model: DynamicsModel, state: Any, observations: np.ndarray, actions: np.ndarray
            ) -> Tuple[Any, Optional[Tuple[torch.Tensor, Optional[torch.Tensor]]]]:
    """Step `model` over (k, n_obs) observations; return the state and the last output."""
    output = None
    for k in range(observations.shape[0]):
        step = _torch_step(model, state, observations[k],
                           actions[k] if actions.shape[1] else None)
        state = step.state
        output = (step.prediction, step.variance)
    return state, output


def _torch_step(model: DynamicsModel, state: Any, observation: np.ndarray,
                action: Optional[np.ndarray]) -> Any:
    """One `model.step` on a single sample given as numpy rows, without autograd."""
    # from_numpy on a fresh float32 row: no dtype dispatch in torch, and no buffer a model
    # could keep in its state and see overwritten by the next message.
    obs = torch.from_numpy(np.array(observation, np.float32).reshape(1, -1))
    act = (None if action is None
           else torch.from_numpy(np.array(action, np.float32).reshape(1, -1)))
    with torch.inference_mode():
        return model.step(state, obs, act)


def _all_finite(tensors) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors)


class ContinualTrainer:
    """
    Trains `model` in a background thread on batches from `buffer`.

    The trainer is the only writer of `model`; readers get immutable published copies through
    `published()`. With `fit_normalization` the model's normalisation statistics are fitted
    once on the warm-up samples (a resumed model keeps its own). `save(model, metadata)` is
    called from the trainer thread (periodically and on `stop`) and must write atomically
    (learning/checkpoint.py does). `loss(model, batch)`: the training loss instead of
    `model.loss` (the car learner's open-loop loss over windows); the same guards apply.
    """

    def __init__(self, model: DynamicsModel, buffer: StreamingBuffer, config: TrainerConfig,
                 save: Optional[SaveFunction] = None, fit_normalization: bool = True,
                 start_step: int = 0, history: Optional[ObservationHistory] = None,
                 loss: Optional[LossFunction] = None) -> None:
        self.model = model
        self._loss = loss
        self.buffer = buffer
        self.history = history
        self.config = config
        self._save = save
        self._prepared = not fit_normalization
        self._fitted_std: Optional[torch.Tensor] = None
        self.renormalizations = 0
        self.renormalized_at_sample = 0   # samples received at the last refit (0: none)
        self._drift_seen_at: Optional[int] = None   # samples received when a refit was due
        # A model with nothing to learn (rigid_body without learnable parameters) only
        # predicts: no optimiser, and no update is ever due.
        self._trainable = any(p.requires_grad for p in model.parameters())
        self._optimizer = (torch.optim.Adam(model.parameters(), lr=config.learning_rate)
                           if self._trainable else None)
        self._lock = threading.Lock()
        self._published = Published(0, self._snapshot())
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.steps = start_step
        self._steps_this_run = 0
        self._attempts = 0
        self.rejected_steps = 0
        self.last_loss = float('nan')
        self.busy_seconds = 0.0
        self.checkpoints_written = 0
        self.last_error = ''
        # Called with every new `Published` copy (a trainer process sends it to its parent).
        self.on_publish: Optional[Callable[[Published], None]] = None

    def _snapshot(self) -> DynamicsModel:
        snapshot = copy.deepcopy(self.model).eval()
        for parameter in snapshot.parameters():
            parameter.requires_grad_(False)
        return snapshot

    def published(self) -> Published:
        """Return the newest weights handed to predictors."""
        with self._lock:
            return self._published

    def start(self) -> None:
        """Start the trainer thread (daemon: a dying process does not wait for it)."""
        if self._thread is not None:
            raise RuntimeError('trainer already started')
        self._thread = threading.Thread(target=self.run_until_stopped, name='continual_trainer',
                                        daemon=True)
        self._thread.start()

    def stop(self, checkpoint: bool = True, timeout: float = 10.0) -> None:
        """Stop the thread after its current step; write a final checkpoint if asked."""
        self.request_stop()
        if self._thread is not None:
            self._thread.join(timeout)
        if checkpoint:
            self.checkpoint_now()

    def request_stop(self) -> None:
        """Make `run_until_stopped` return after the current update."""
        self._stop.set()

    def checkpoint_now(self) -> None:
        """Write a checkpoint if there is a save function and this run trained at all."""
        if self._save is not None and self._steps_this_run:
            self._checkpoint()

    def _budget_allows(self) -> bool:
        rate = self.config.updates_per_sample
        received = self.buffer.total - self.config.warmup_samples
        # Refused attempts spend budget too, so a bad stretch cannot loop forever.
        return rate == 0 or self._attempts < rate * received

    def _due(self) -> bool:
        return (self._trainable and self.buffer.total >= self.config.warmup_samples
                and self._budget_allows()
                and self.buffer.valid_windows() > 0)

    def _update(self) -> float:
        """Take one budgeted update; return the seconds it took."""
        self._attempts += 1
        started = time.perf_counter()
        try:
            if not self._prepared or self._statistics_drifted():
                self._fit_normalization()
            self.train_step(self.buffer.sample(self.config.batch_size))
        except (ValueError, RuntimeError) as error:   # a model refusing a batch
            self._refuse(f'{type(error).__name__}: {error}')
        elapsed = time.perf_counter() - started
        self.busy_seconds += elapsed
        return elapsed

    def _fit_normalization(self) -> None:
        """
        Fit the model's normalisation: first on the warm-up, a refit on all the ring holds.

        A refit on all recent data, not the newest second: a second of varied motion scales
        the joints it does not move by little spread (docs/continual.md, "Refitting").
        """
        recent = self.buffer.recent(self.buffer.config.recent_capacity if self._prepared
                                    else max(self.config.warmup_samples, 2))
        self.model.fit_normalization(recent)
        self._fitted_std = self._spread(recent)
        if self._prepared:
            self.renormalizations += 1
            self.renormalized_at_sample = self.buffer.total
        self._prepared = True
        self._drift_seen_at = None
        self._publish()

    @staticmethod
    def _spread(batch: SequenceBatch) -> torch.Tensor:
        """
        Per-channel std of the observations of a (1, T, .) batch: how widely the robot moves.

        Not the targets: a payload change steps the torque, which spreads a stretch across
        the step 10x wider than a smooth motion's torque (the plain LSTM, offline replay at
        1 kHz: refitted 0.4 s after the +2 kg), and a refit then hits the model just when it
        has to adapt.
        """
        return batch.observations[0].std(dim=0)

    def _statistics_drifted(self) -> bool:
        """
        Return True when a refit is due now: the motion spread far wider than the fit saw.

        A robot usually starts at rest: statistics fitted then (velocities near zero) would
        scale later motion to huge normalised values. Checked before every update on the
        newest warm-up-sized stretch (0.15-0.3 ms for 500-1000 samples, against 10-20 ms an
        update), not every 100th: a refit changes what the network computes, and a sparse
        check caught the motion whenever it first fell into a wide stretch, once just after a
        payload change (docs/continual.md, "Refitting the normalisation"). A channel whose
        std grew past `renormalize_factor` times its fitted std (floored at 1e-3 of the
        largest fitted std) makes a refit due; it runs once a warm-up's worth of samples has
        come since, so that the motion is in it, at most `max_renormalizations` times.
        """
        stretch = max(self.config.warmup_samples, 2)
        if self._drift_seen_at is not None:
            return self.buffer.total - self._drift_seen_at >= stretch
        factor = self.config.renormalize_factor
        if (not factor or self._fitted_std is None
                or self.renormalizations >= self.config.max_renormalizations):
            return False
        now = self._spread(self.buffer.recent(stretch))
        floor = 1e-3 * self._fitted_std.max()
        if bool((now > factor * torch.maximum(self._fitted_std, floor)).any()):
            self._drift_seen_at = self.buffer.total
        return False

    def train_pending(self) -> int:
        """
        Run, in the calling thread, the updates the budget allows now; return how many.

        For offline replay (benchmarks, `rdl` runs) where results must not depend on thread
        scheduling; needs updates_per_sample > 0. Do not mix with `start()`.
        """
        if self.config.updates_per_sample == 0:
            raise ValueError('train_pending needs updates_per_sample > 0 (a finite budget)')
        done = 0
        while self._due():
            self._update()
            done += 1
        return done

    def run_until_stopped(self) -> None:
        """Train within the budget until `request_stop` (the body of the trainer thread)."""
        last_checkpoint = time.monotonic()
        pause = 1.0 / self.config.max_cpu_share - 1.0
        while not self._stop.is_set():
            if not self._due():
                self._stop.wait(0.002)
                continue
            elapsed = self._update()
            if pause > 0.0:
                self._stop.wait(elapsed * pause)
            every = self.config.checkpoint_every_s
            if self._save is not None and every and time.monotonic() - last_checkpoint > every:
                self._checkpoint()
                last_checkpoint = time.monotonic()

    def train_step(self, batch: SequenceBatch) -> bool:
        """
        Take one guarded optimiser step on `batch`; return False if it was refused.

        Refused (and counted in `rejected_steps`): non-finite inputs, loss or gradient norm.
        If the weights still turn non-finite after the step, they are restored from the last
        published copy. The predictor never sees a non-finite weight.
        """
        self.model.train()
        if not _all_finite(batch[:3]):
            return self._refuse('non-finite batch')
        loss = self._loss(self.model, batch) if self._loss else self.model.loss(batch)[0]
        if not bool(torch.isfinite(loss)):
            return self._refuse(f'non-finite loss {float(loss)}')
        self._optimizer.zero_grad(set_to_none=True)
        loss.backward()
        parameters = [p for p in self.model.parameters() if p.requires_grad]
        norm = torch.nn.utils.clip_grad_norm_(parameters, self.config.grad_clip)
        if not bool(torch.isfinite(norm)):
            self._optimizer.zero_grad(set_to_none=True)
            return self._refuse(f'non-finite gradient norm {float(norm)}')
        self._optimizer.step()
        if not _all_finite(self.model.state_dict().values()):
            with self._lock:
                good = self._published.model.state_dict()
            self.model.load_state_dict(good)
            self._optimizer = torch.optim.Adam(self.model.parameters(),
                                               lr=self.config.learning_rate)
            return self._refuse('non-finite weights after step (restored)')
        self.last_loss = float(loss.detach())
        self.steps += 1
        self._steps_this_run += 1
        if self._steps_this_run % self.config.publish_every == 0:
            self._publish()
        return True

    def _refuse(self, reason: str) -> bool:
        self.rejected_steps += 1
        self.last_error = reason
        return False

    def _publish(self) -> None:
        """Hand over a copy, with its state warmed up on the predictor's recent inputs."""
        snapshot = self._snapshot()
        state, seq = None, None
        if self.history is not None:
            observations, actions, first = self.history.since(0)
            state, _ = _replay(snapshot, snapshot.init_state(1), observations, actions)
            seq = first + observations.shape[0]
        with self._lock:
            self._published = Published(self._published.version + 1, snapshot, state, seq)
            published = self._published
        if self.on_publish is not None:
            self.on_publish(published)

    def _checkpoint(self) -> None:
        try:
            self._save(self._snapshot(), {'steps': self.steps, 'samples': self.buffer.total,
                                          'last_loss': self.last_loss})
            self.checkpoints_written += 1
        except OSError as error:   # a full disk must not end training; report it instead
            self.last_error = f'checkpoint failed: {error}'


class StreamingPredictor:
    """
    One `model.step` per message with the recurrent state carried across messages.

    Called from one thread (the message callback). Before each step it checks `source()` for
    newer weights. A recurrent state belongs to the weights that produced it, so on a switch
    the new model's state is rebuilt: from the state the trainer computed on this history up
    to sample `seq`, stepping only the few samples since; or, without one, by running the new
    model over the whole history (`history_size` samples, e.g. one training window).
    A model with a `numpy_stepper()` (the LSTM and the split hybrid) is stepped through it:
    the same math without torch's per-call dispatch.
    """

    def __init__(self, source: Callable[[], Published], n_obs: int, n_act: int,
                 history_size: int = 32) -> None:
        self._source = source
        self._n_obs = n_obs
        self.history = ObservationHistory(n_obs, n_act, history_size)
        published = source()
        self._version = published.version
        self._adopt(published.model, published.model.init_state(1))

    def _adopt(self, model: DynamicsModel, state: Any) -> None:
        """Use `model` from now on, continuing from its (torch) `state`."""
        self._model = model
        self._stepper = model.numpy_stepper()
        self._state = state if self._stepper is None else self._stepper.state_from(state)

    @property
    def version(self) -> int:
        """Return the version of the weights in use."""
        return self._version

    def reset(self) -> None:
        """Forget the recurrent state (after a gap, a reset or time going backwards)."""
        self._adopt(self._model, self._model.init_state(1))
        self.history.reset()

    def predict(self, observation: np.ndarray,
                action: Optional[np.ndarray] = None) -> Tuple[np.ndarray, Optional[np.ndarray]]:
        """Return (mean (n_target,), variance (n_target,) or None) for one observation."""
        self.history.append(observation, action)
        published = self._source()
        if published.version == self._version:
            return self._step(observation, action)
        model, seq = published.model, published.seq
        state = published.state if seq is not None else model.init_state(1)
        observations, actions, first = self.history.since(seq or 0)
        if seq is not None and first != seq:   # the history moved past it: warm up anew
            state = model.init_state(1)
        self._version = published.version
        self._adopt(model, state)
        # Catch up over the samples since `seq` (this one included) with the new weights.
        for k in range(observations.shape[0]):
            output = self._step(observations[k], actions[k] if actions.shape[1] else None)
        return output

    def _step(self, observation: np.ndarray, action: Optional[np.ndarray]
              ) -> Tuple[np.ndarray, Optional[np.ndarray]]:
        """Advance the state by one sample; return (mean, variance or None)."""
        if self._stepper is not None:
            observation = np.asarray(observation, np.float32)
            if observation.shape != (self._n_obs,) or not np.isfinite(observation).all():
                raise ValueError(f'observation must be {self._n_obs} finite values, got '
                                 f'{observation}')
            mean, self._state = self._stepper.step(self._state, observation)
            return mean, self._stepper.variance(observation)
        step = _torch_step(self._model, self._state, observation, action)
        self._state = step.state
        mean, variance = step.prediction, step.variance
        return mean[0].numpy(), None if variance is None else variance[0].numpy()


def trainer_stats(trainer: ContinualTrainer, buffer: StreamingBuffer) -> Dict[str, Any]:
    """Return the trainer's and its buffer's counters under their diagnostics names."""
    return {'samples': buffer.total, 'segment_breaks': buffer.breaks,
            'reservoir_windows': buffer.reservoir_size, 'train_steps': trainer.steps,
            'rejected_steps': trainer.rejected_steps, 'training_loss': trainer.last_loss,
            'renormalizations': trainer.renormalizations,
            'renormalized_at_sample': trainer.renormalized_at_sample,
            'train_seconds': trainer.busy_seconds,
            'checkpoints_written': trainer.checkpoints_written, 'last_error': trainer.last_error}


def save_with_physics(save: SaveFunction, physics: Any, model: DynamicsModel,
                      metadata: dict) -> object:
    """Write the current payload estimate into the snapshot, then checkpoint it."""
    model.payload.copy_(torch.from_numpy(physics.state()))
    return save(model, metadata)


def save_with_variance_scale(save: SaveFunction, scale: Callable[[], np.ndarray],
                             model: DynamicsModel, metadata: dict) -> object:
    """Checkpoint with the newest calibration scale (`VarianceCalibration`) in the metadata."""
    return save(model, {**metadata, VARIANCE_SCALE_KEY: [float(v) for v in scale()]})


@dataclass(frozen=True)
class LearnerConfig:
    """Buffer and trainer settings of a `ContinualLearner`."""

    buffer: BufferConfig = BufferConfig()
    trainer: TrainerConfig = TrainerConfig()


class ContinualLearner:
    """
    Predict-then-learn on a stream of (time, observation, action, target) samples.

    `observe` is what a message callback calls: O(1) apart from one `model.step` (and, for
    a model whose `split_physics` splits (the hybrid), one rigid-body regressor and RLS step).
    Training happens in the trainer thread started by `start()` (in a process of its own
    with `learning.trainer_process.ProcessLearner`).
    """

    def __init__(self, model: DynamicsModel, n_obs: int, n_act: int, n_target: int,
                 config: LearnerConfig, rng: np.random.Generator,
                 save: Optional[SaveFunction] = None, fit_normalization: bool = True,
                 start_step: int = 0, variance_scale: Optional[np.ndarray] = None) -> None:
        self.config = config
        # The published variance's calibration (a resumed learner starts from the saved one);
        # every checkpoint stores the scale of its time for prediction-only nodes.
        self.calibration = VarianceCalibration(n_target, config.trainer.prequential_window,
                                               prior=variance_scale)
        # A hybrid model splits off its physics (rigid body + online payload estimate): the
        # new residual model then learns tau - physics, stored with the payload estimate of
        # its time.
        split = model.split_physics()
        self.physics = None if split is None else split.physics
        model = model if split is None else split.residual
        self.buffer: Optional[StreamingBuffer] = None
        self.trainer = self._make_trainer(model, n_obs, n_act, n_target, rng, save,
                                          fit_normalization, start_step)
        self.predictor = StreamingPredictor(self.trainer.published, n_obs, n_act,
                                            config.buffer.window)
        self.trainer.history = self.predictor.history
        self.prequential = PrequentialError(n_target, config.trainer.prequential_window)
        self.unscored = 0   # predictions with a NaN or inf: neither scored nor published
        self._n_act = n_act

    def _variance_scale(self) -> np.ndarray:
        """Return the calibration scale (a copy: the trainer may save from another thread)."""
        return self.calibration.scale.copy()

    def _make_trainer(self, model: DynamicsModel, n_obs: int, n_act: int, n_target: int,
                      rng: np.random.Generator, save: Optional[SaveFunction],
                      fit_normalization: bool, start_step: int) -> Any:
        """Return the trainer: a `ContinualTrainer` thread on a local buffer."""
        if save is not None:
            save = functools.partial(save_with_variance_scale, save, self._variance_scale)
        if self.physics is not None and save is not None:
            save = functools.partial(save_with_physics, save, self.physics)
        self.buffer = StreamingBuffer(n_obs, n_act, n_target, self.config.buffer, rng)
        return ContinualTrainer(model, self.buffer, self.config.trainer, save,
                                fit_normalization, start_step)

    def _store(self, stamp: float, observation: np.ndarray, action: np.ndarray,
               target: Optional[np.ndarray]) -> None:
        """Keep a predicted sample for training (target None: it has no torque)."""
        if target is not None:
            self.buffer.append(stamp, observation, action, target)

    def _trainer_stats(self) -> Dict[str, Any]:
        return trainer_stats(self.trainer, self.buffer)

    def start(self) -> None:
        """Start training in the background."""
        self.trainer.start()

    def stop(self, checkpoint: bool = True) -> None:
        """Stop training (and checkpoint)."""
        self.trainer.stop(checkpoint)

    def reset(self) -> None:
        """Mark a discontinuity: new buffer segment and a fresh recurrent state."""
        self.buffer.reset()
        self.predictor.reset()

    def observe(self, stamp: float, observation: np.ndarray, action: Optional[np.ndarray],
                target: Optional[np.ndarray]) -> Tuple[np.ndarray, Optional[np.ndarray]]:
        """
        Predict for this sample, then score and store it; return (mean, variance or None).

        stamp: seconds; observation (n_obs,); action (n_act,) or None when n_act is 0;
        target (n_target,) or None when the torque of this sample is unknown (predict only).
        """
        act = np.zeros(self._n_act) if action is None else action
        if self.physics is not None:
            return self._observe_split(stamp, observation, act, target)
        mean, variance = self.predictor.predict(observation, act if self._n_act else None)
        if target is not None:
            self._score(mean, variance, target)
        self._store(stamp, observation, act, target)
        return mean, self._calibrated(variance)

    def _observe_split(self, stamp: float, observation: np.ndarray, action: np.ndarray,
                       target: Optional[np.ndarray]) -> Tuple[np.ndarray, Optional[np.ndarray]]:
        """Physics plus the residual network; store the residual target tau - physics."""
        physics = self.physics.predict(observation)
        residual, variance = self.predictor.predict(observation, action if self._n_act else None)
        mean = residual + physics
        if target is None:
            self._store(stamp, observation, action, None)
            return mean, self._calibrated(variance)
        self._score(mean, variance, target)
        self._store(stamp, observation, action, target - physics)
        self.physics.update(target - residual)
        return mean, self._calibrated(variance)

    def _score(self, mean: np.ndarray, variance: Optional[np.ndarray],
               target: np.ndarray) -> None:
        """Score a prediction made before training on its sample (error and variance)."""
        if not np.all(np.isfinite(mean)):   # one inf would spoil the running error for good
            self.unscored += 1
            return
        self.prequential.update(mean, target)
        if variance is not None:
            self.calibration.update(mean - target, variance)

    def _calibrated(self, variance: Optional[np.ndarray]) -> Optional[np.ndarray]:
        """Return the variance scaled to the prequential errors (`VarianceCalibration`)."""
        return None if variance is None else self.calibration.apply(variance)

    def diagnostics(self) -> dict:
        """Return counters and metrics (floats and ints) for the log and the status topic."""
        return {**self._trainer_stats(), 'prequential_nmse': self.prequential.nmse(),
                'weights_version': self.predictor.version, 'predictions_unscored': self.unscored,
                **({} if self.physics is None
                   else {'payload_mass_change_kg': float(self.physics.state()[0]),
                         'payload_resets': self.physics.resets,
                         'payload_false_alarms': self.physics.false_alarms,
                         'payload_recalls': self.physics.recalls})}


class InverseDynamicsStream:
    """
    Turns joint samples into inverse-dynamics samples for `ContinualLearner.observe`.

    observation x_t = [q, qd, qdd] (3 n; qdd from a causal differentiator of the measured
    velocity, so it is available at the message's own time with the differentiator's
    documented delay), action = the torque of the previous sample tau_{t-1} (n; zeros at the
    start of a segment), target tau_t (n) or None when the sample carries no torque.
    `differentiator` is a `signals.causal.CausalDifferentiator` over the n velocities
    (`update(time_s, value)` returns the derivative (n,), or None while warming up).
    """

    def __init__(self, n_joints: int, differentiator) -> None:
        self.n = n_joints
        self._differentiator = differentiator
        self._previous_torque = np.zeros(n_joints)

    def reset(self) -> None:
        """Start over after a gap or a time reset."""
        self._differentiator.reset()
        self._previous_torque = np.zeros(self.n)

    def sample(self, stamp: float, position: np.ndarray, velocity: np.ndarray,
               torque: Optional[np.ndarray]
               ) -> Optional[Tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]]:
        """Return (observation, action, target) or None while the differentiator warms up."""
        acceleration = self._differentiator.update(stamp, velocity)
        action = self._previous_torque
        if torque is not None:
            self._previous_torque = torque
        if acceleration is None:
            return None
        observation = np.concatenate([position, velocity, acceleration])
        return observation, action, torque
