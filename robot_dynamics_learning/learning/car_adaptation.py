"""
Online adaptation of the car model to the surface it drives on (issue 22, seed 003's outlook).

Two parts, both ROS-free (nodes/car_model_learner.py is their thin wrapper):

- `CarTransitions` turns header-stamped states and commands into model-step transitions
  (o_t, u_t, o_{t+h}) on the stamps' time axis, never on a wall-clock timer: a transition
  starts at a command's stamp plus `command_delay_s` (a new command value; the same one held
  opens the next step h after the last, so that held steps chain), its start and end states
  are interpolated linearly between the received states at t and t + h (yaw unwrapped).
  command_delay_s is the time from a command's stamp until the states show its effect: a
  causal estimator's lag (car_state_estimator: about window_s / 2) plus the actuation delay.
  Without it a step would mostly show the previous command (a 40 ms lag is 80 % of a 50 ms
  step) and fine-tuning would teach the model that. Dropped and counted: non-finite inputs,
  states or commands not newer than the last, a bracket of states further apart than
  max_gap_s, a command replaced by a different one before h / 2 (the transition would mostly
  show another command). A state stamped more than 1 s before the last is a time reset (a
  looping bag): everything pending is forgotten. Memory is bounded (the newest
  `STATE_HISTORY` states, `PENDING` open transitions). With `smooth_s` > 0 the start and end
  states are not interpolated but read from a centred (zero-phase) quadratic fit over the
  states within +-smooth_s of the stamp: a fixed-lag smoother, so a transition completes
  smooth_s later and its states carry less of the estimator's noise.
- `CarAdaptation` feeds them to `learning.continual.ContinualTrainer` (bounded streaming
  buffer of recent transitions plus a reservoir of older ones; NaN refusal, gradient
  clipping, a budget of updates per transition, atomic checkpoints through `save`), which
  owns the training copy of the model and publishes immutable copies: the MPC swaps those in
  (car_mpc: the newest checkpoint file in checkpoint_dir; bench/car_adaptation.py:
  `published()` directly). With `rollout_steps` k > 1 the loss is open loop
  (`window_rollout_loss`): windows of k consecutive transitions (a transition that does not
  start h +- `CHAIN_TOLERANCE` x h after the one before begins a new window) are rolled out
  from their first state with their k commands, the loss of
  `control/car_training.rollout_loss` (relative L1 of the velocities along the window plus
  position_weight x the mean position error), as `control/refine.py` fine-tunes offline: the
  MPC plans 20 steps with the model, and a one-step loss does not weigh how errors add up.
- Each transition also updates `learning/car_grip.GripEstimator` (`grip_estimate`): the
  lateral acceleration the surface holds, which the MPC's grip bound takes
  (car_model_learner publishes it on `car/grip`).
"""
import bisect
from dataclasses import dataclass
import functools
import math
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

import numpy as np
from robot_dynamics_learning.core_types import SequenceBatch
from robot_dynamics_learning.learning.buffer import BufferConfig, StreamingBuffer
from robot_dynamics_learning.learning.car_grip import GripConfig, GripEstimator
from robot_dynamics_learning.learning.continual import (ContinualTrainer, Published,
                                                        SaveFunction, TrainerConfig)
from robot_dynamics_learning.models.car_base import CarModel, relative_l1
from robot_dynamics_learning.params import build_from, setting
import torch

STATE_HISTORY = 512   # newest states kept for interpolation (2 s at 240 Hz)
PENDING = 64          # open transitions waiting for their end state
TIME_RESET_S = 1.0    # a state this much older than the last one restarts the stream
MAX_SMOOTH_S = 0.5    # widest half window of the fixed-lag smoother (inside STATE_HISTORY)
# A transition that does not start h +- CHAIN_TOLERANCE x h after the one before begins a
# new rollout window (stamp jitter, a gap).
CHAIN_TOLERANCE = 0.25


class Transition(NamedTuple):
    """One model step: state (6,) at `stamp` (s), command (2,), state h later (6,)."""

    stamp: float
    state: np.ndarray
    command: np.ndarray
    next_state: np.ndarray


class CarTransitions:
    """Header-stamped states and commands -> `Transition`s of step h (module docstring)."""

    def __init__(self, h: float, max_gap_s: float = 0.1, command_delay_s: float = 0.0,
                 smooth_s: float = 0.0) -> None:
        if not (math.isfinite(h) and h > 0 and math.isfinite(max_gap_s) and max_gap_s > 0):
            raise ValueError(f'h and max_gap_s must be finite and > 0, got {h}, {max_gap_s}')
        if not (math.isfinite(command_delay_s) and 0.0 <= command_delay_s <= 1.0):
            raise ValueError(f'command_delay_s must be in [0, 1] s, got {command_delay_s}')
        if not (math.isfinite(smooth_s) and 0.0 <= smooth_s <= MAX_SMOOTH_S):
            raise ValueError(f'smooth_s must be in [0, {MAX_SMOOTH_S}] s, got {smooth_s}')
        self.h = h
        self.max_gap_s = max_gap_s
        self.delay = command_delay_s
        self.smooth_s = smooth_s
        self._stamps: List[float] = []
        self._states: List[np.ndarray] = []
        self._pending: List[list] = []   # [start stamp, command, next command's stamp or inf]
        self._command: Optional[tuple] = None   # newest (stamp, command)
        self._opened = -math.inf                # stamp of the newest opened transition
        self.counts = {'states': 0, 'commands': 0, 'transitions': 0, 'time_resets': 0,
                       'dropped_non_finite': 0, 'dropped_out_of_order': 0, 'dropped_gap': 0,
                       'dropped_command_changed': 0, 'dropped_overflow': 0}

    def reset(self) -> None:
        """Forget states, commands and open transitions (a gap in the stream, a new run)."""
        self._stamps.clear()
        self._states.clear()
        self._pending.clear()
        self._command = None
        self._opened = -math.inf

    def add_command(self, stamp: float, command: Sequence[float]) -> None:
        """Take the command in force from `stamp` (s) on: (throttle, steering)."""
        command = np.asarray(command, dtype=np.float64)
        stamp = stamp + self.delay   # when the states start to show it
        if command.shape != (2,) or not (np.all(np.isfinite(command)) and math.isfinite(stamp)):
            self.counts['dropped_non_finite'] += 1
            return
        if self._command is not None and stamp < self._command[0]:
            self.counts['dropped_out_of_order'] += 1
            return
        self.counts['commands'] += 1
        changed = self._command is None or not np.array_equal(command, self._command[1])
        if changed:
            for entry in self._pending:   # a different command ends the open ones
                entry[2] = min(entry[2], stamp)
        self._command = (stamp, command)
        if changed or stamp - self._opened >= self.h - 1e-9:
            start = stamp
            if not changed and stamp - self._opened < 2 * self.h:
                start = self._opened + self.h   # held since: the steps chain exactly h apart
            if len(self._pending) >= PENDING:
                self._pending.pop(0)
                self.counts['dropped_overflow'] += 1
            self._pending.append([start, command, math.inf])
            self._opened = start

    def add_state(self, stamp: float, state: Sequence[float]) -> List[Transition]:
        """Take a (6,) state [x, y, yaw, vx, vy, r] at `stamp` (s); return completed steps."""
        state = np.asarray(state, dtype=np.float64)
        if state.shape != (6,) or not (np.all(np.isfinite(state)) and math.isfinite(stamp)):
            self.counts['dropped_non_finite'] += 1
            return []
        if self._stamps and stamp <= self._stamps[-1]:
            if stamp < self._stamps[-1] - TIME_RESET_S:
                self.counts['time_resets'] += 1
                self.reset()
            else:
                self.counts['dropped_out_of_order'] += 1
                return []
        self.counts['states'] += 1
        self._stamps.append(stamp)
        self._states.append(state)
        if len(self._stamps) > 2 * STATE_HISTORY:
            del self._stamps[:STATE_HISTORY], self._states[:STATE_HISTORY]
        return self._complete(stamp)

    def _complete(self, newest: float) -> List[Transition]:
        done = []
        while self._pending and self._pending[0][0] + self.h + self.smooth_s <= newest:
            start, command, replaced = self._pending.pop(0)
            if replaced < start + 0.5 * self.h:
                self.counts['dropped_command_changed'] += 1
                continue
            at = self._smoothed if self.smooth_s else self._at
            first, last = at(start), at(start + self.h)
            if first is None or last is None:
                self.counts['dropped_gap'] += 1
                continue
            last[2] = first[2] + (last[2] - first[2] + math.pi) % (2 * math.pi) - math.pi
            done.append(Transition(start, first, command.copy(), last))
        self.counts['transitions'] += len(done)
        return done

    def _at(self, stamp: float) -> Optional[np.ndarray]:
        """Return the state interpolated at `stamp`, None without a close enough bracket."""
        k = bisect.bisect_left(self._stamps, stamp)
        if k < len(self._stamps) and self._stamps[k] == stamp:
            return self._states[k].copy()
        if k == 0 or k == len(self._stamps):
            return None
        t0, t1 = self._stamps[k - 1], self._stamps[k]
        if t1 - t0 > self.max_gap_s:
            return None
        a, b = self._states[k - 1], self._states[k].copy()
        b[2] = a[2] + (b[2] - a[2] + math.pi) % (2 * math.pi) - math.pi
        return a + (stamp - t0) / (t1 - t0) * (b - a)

    def _smoothed(self, stamp: float) -> Optional[np.ndarray]:
        """
        Return a centred quadratic fit of the states within +-smooth_s of `stamp` there.

        None unless the window holds states on both sides with no gap over max_gap_s
        (a straight line with fewer than 4 states).
        """
        low = bisect.bisect_left(self._stamps, stamp - self.smooth_s)
        high = bisect.bisect_right(self._stamps, stamp + self.smooth_s)
        times = np.asarray(self._stamps[low:high]) - stamp
        if (times.size < 2 or times[0] > 0 or times[-1] < 0
                or np.max(np.diff(times), initial=0.0) > self.max_gap_s):
            return None
        states = np.stack(self._states[low:high])
        states[:, 2] = states[0, 2] + np.unwrap(states[:, 2] - states[0, 2])
        order = 2 if times.size >= 4 else 1
        basis = np.vander(times / self.smooth_s, order + 1, increasing=True)
        coefficients, *_ = np.linalg.lstsq(basis, states, rcond=None)
        return coefficients[0].copy()   # the fit's value at the stamp (time 0)


@dataclass(frozen=True)
class CarAdaptationConfig(GripConfig):
    """
    Settings of online car-model adaptation (car_model_learner's learning settings).

    Transitions come from `CarTransitions` (h, max_gap_s, command_delay_s); the updates from
    the continual trainer on a buffer of recent and reservoir transitions; rollout_steps > 1
    trains the open-loop loss over k steps (`window_rollout_loss`) instead of the one-step
    loss; smooth_s > 0 reads the states from a fixed-lag smoother. The grip_* settings and
    the car's steering geometry are the grip estimate's (`GripConfig`, inherited).
    """

    h: float = setting(0.05, 'model step = step of the transitions (s)', 0.005, 1.0)
    max_gap_s: float = setting(0.1, 'widest gap between states a transition may interpolate '
                               'over (s)', 0.005, 1.0)
    command_delay_s: float = setting(0.04, 'time from the stamp of a command until the states '
                                     'show it: the estimator lag (about its window_s / 2) '
                                     'plus actuation (s)', 0.0, 1.0)
    min_transitions: int = setting(200, 'transitions collected before training starts (the '
                                   'normalisation of a new model is fitted on them)', 1,
                                   1000000)
    batch_size: int = setting(128, 'transitions (or windows) per update', 1, 100000)
    learning_rate: float = setting(5e-4, 'Adam learning rate', 1e-7, 1.0)
    grad_clip: float = setting(1.0, 'largest gradient norm', 1e-6, 1e6)
    updates_per_transition: float = setting(1.0, 'budget: most updates per received '
                                            'transition (0: as fast as the CPU share '
                                            'allows)', 0.0, 1000.0)
    recent_capacity: int = setting(600, 'transitions in the ring of the newest driving '
                                   '(recent_capacity x h s: the current surface)', 1,
                                   10000000)
    reservoir_transitions: int = setting(5000, 'uniform sample of older transitions '
                                         '(windows) kept against forgetting', 0, 10000000)
    recent_fraction: float = setting(0.8, 'share of a batch from the ring', 0.0, 1.0)
    publish_every: int = setting(20, 'updates between weight hand-overs', 1, 100000)
    save_period_s: float = setting(10.0, 'checkpoint period (s)', 0.5, 36000.0)
    train_cpu_share: float = setting(0.5, 'share of one core the training thread may use',
                                     0.01, 1.0)
    rollout_steps: int = setting(1, 'consecutive transitions per training window: 1 trains '
                                 'the one-step loss, k > 1 the open-loop loss over k steps '
                                 '(what the MPC plans with)', 1, 1000)
    position_weight: float = setting(1.0, 'weight (1/m) of the mean position error in the '
                                     'open-loop loss', 0.0, 1000.0)
    smooth_s: float = setting(0.0, 'half window of the fixed-lag smoother of the states (s): '
                              'a centred quadratic fit instead of interpolation; transitions '
                              'complete this much later (0: off)', 0.0, MAX_SMOOTH_S)

    def __post_init__(self) -> None:
        """Refuse settings that cannot work, naming them."""
        GripConfig.__post_init__(self)
        if self.rollout_steps > self.recent_capacity:
            raise ValueError(f'rollout_steps must be in [1, recent_capacity], got '
                             f'{self.rollout_steps}')

    def trainer(self) -> TrainerConfig:
        """Return the continual trainer's settings (its checks name a bad value)."""
        return TrainerConfig(batch_size=self.batch_size, learning_rate=self.learning_rate,
                             grad_clip=self.grad_clip, warmup_samples=self.min_transitions,
                             updates_per_sample=self.updates_per_transition,
                             publish_every=self.publish_every,
                             checkpoint_every_s=self.save_period_s, renormalize_factor=0.0,
                             max_cpu_share=self.train_cpu_share)

    def grip(self) -> GripConfig:
        """Return the grip estimate's settings."""
        return build_from(GripConfig, self)

    def buffer(self) -> BufferConfig:
        """Return the buffer's settings: windows of rollout_steps (CarAdaptation breaks them)."""
        return BufferConfig(window=self.rollout_steps, recent_capacity=self.recent_capacity,
                            reservoir_windows=self.reservoir_transitions, reservoir_stride=1,
                            recent_fraction=self.recent_fraction, gap_factor=1e6)


def window_rollout_loss(model: CarModel, batch: SequenceBatch,
                        position_weight: float = 1.0) -> torch.Tensor:
    """
    Open-loop loss of (B, k) windows of consecutive transitions (the buffer's batches).

    The model rolls out from each window's first state with its k commands; the loss is the
    relative L1 (Eq. 11) of the predicted velocities against the k end states plus
    position_weight x their mean position error (m), as `control/car_training.rollout_loss`.
    """
    predicted = model.rollout(batch.observations[:, 0], batch.actions).mean
    true = batch.targets
    position = torch.linalg.norm(predicted[..., :2] - true[..., :2], dim=-1).mean()
    return (relative_l1(true[..., 3:], predicted[..., 3:], model.loss_eps)
            + position_weight * position)


class CarAdaptation:
    """
    Stamped states and commands in, fine-tuned car-model weights out (module docstring).

    fit_normalization: fit the model's normalisation on the first transitions (a new model);
    False keeps a loaded checkpoint's. `save(model, metadata)` writes a checkpoint
    atomically (from the trainer thread, or from `train_pending`'s caller).
    """

    def __init__(self, model: CarModel, config: CarAdaptationConfig, rng: np.random.Generator,
                 save: Optional[SaveFunction] = None, fit_normalization: bool = False) -> None:
        if abs(model.h - config.h) > 1e-9:
            raise ValueError(f'the model step h={model.h} differs from the learner h={config.h}')
        if not any(parameter.requires_grad for parameter in model.parameters()):
            raise ValueError('the car model has no trainable parameters (an MPC freezes its '
                             'own: give the learner a copy of its own)')
        self.config = config
        self.transitions = CarTransitions(config.h, config.max_gap_s, config.command_delay_s,
                                          config.smooth_s)
        self.buffer = StreamingBuffer(6, 2, 6, config.buffer(), rng)
        self.grip = GripEstimator(config.grip())
        self._last_start = -math.inf   # stamp of the newest buffered transition
        loss = None
        if config.rollout_steps > 1:
            loss = functools.partial(window_rollout_loss, position_weight=config.position_weight)
        self.trainer = ContinualTrainer(model, self.buffer, config.trainer(), save,
                                        fit_normalization, loss=loss)

    def add_command(self, stamp: float, command: Sequence[float]) -> None:
        """Take a command in force from `stamp` (s)."""
        self.transitions.add_command(stamp, command)

    def add_state(self, stamp: float, state: Sequence[float]) -> int:
        """Take a state stamped `stamp` (s); return the transitions it completed."""
        done = self.transitions.add_state(stamp, state)
        for step in done:
            h = self.config.h
            if abs(step.stamp - self._last_start - h) > CHAIN_TOLERANCE * h:
                self.buffer.reset()   # a window would take these transitions as h apart
            self._last_start = step.stamp
            self.buffer.append(step.stamp, step.state, step.command, step.next_state)
            self.grip.update(step.command, step.next_state)
        return len(done)

    def grip_estimate(self) -> float:
        """Return the lateral acceleration the surface holds (m/s^2; the ceiling: no evidence)."""
        return self.grip.estimate

    def train_pending(self) -> int:
        """Run the updates the budget allows now, in this thread (offline replay, benches)."""
        return self.trainer.train_pending()

    def start(self) -> None:
        """Train in a background thread (the node)."""
        self.trainer.start()

    def stop(self, checkpoint: bool = True, timeout: float = 1.5) -> None:
        """Stop the thread after its current update; write a last checkpoint if asked."""
        self.trainer.stop(checkpoint, timeout)

    def published(self) -> Published:
        """Return the newest weights handed over (version 0: the initial model)."""
        return self.trainer.published()

    def diagnostics(self) -> Dict[str, float]:
        """Return the counters of the transitions and the trainer."""
        trainer = self.trainer
        return {**self.transitions.counts, 'buffered': self.buffer.total,
                'train_steps': trainer.steps, 'rejected_steps': trainer.rejected_steps,
                'training_loss': trainer.last_loss,
                'checkpoints_written': trainer.checkpoints_written,
                'weights_version': self.published().version, **self.grip.diagnostics()}


def weights_swapper(adaptation: CarAdaptation, load: Callable[[dict], None]
                    ) -> Callable[[], bool]:
    """Return swap(): load the newest published weights once per version; True on a swap."""
    seen = [adaptation.published().version]

    def swap() -> bool:
        published = adaptation.published()
        if published.version == seen[0]:
            return False
        load(published.model.state_dict())
        seen[0] = published.version
        return True
    return swap
