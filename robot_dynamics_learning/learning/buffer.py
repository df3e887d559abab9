"""
Streaming sample buffer for lifelong learning: recent ring plus a reservoir of older windows.

Why two parts: training only on the most recent data adapts fast to a new payload but forgets
the old one (catastrophic forgetting); training only on a uniform sample of the whole life
adapts slowly. A batch therefore mixes windows from a ring of the newest samples with windows
from a reservoir that holds a uniform sample (Vitter's Algorithm R) of every window seen.

Memory is bounded and preallocated: the ring holds `recent_capacity` samples, the reservoir
`reservoir_windows` windows of `window` steps. Randomness comes from an injected
`numpy.random.Generator` so that runs are reproducible.

Windows never cross a gap or a reset: every sample carries a segment id, and a new segment
starts when time goes backwards or stands still, when the step exceeds `gap_factor` times the
nominal period (dropped messages, a pause, a slower rate), or when the caller calls `reset()`
(a looping bag, a re-homed robot). Shorter steps never break a window: with random message
loss they are normal, and a faster rate is simply followed. The nominal period is an
exponential average of every step (each clipped to gap_factor x the average), restarted only
by a reset or time going backwards, so a lasting slower rate or a steady share of dropped
messages costs a few breaks and is then followed.
"""
from dataclasses import dataclass
import threading
from typing import Optional

import numpy as np
from robot_dynamics_learning.core_types import SequenceBatch
from robot_dynamics_learning.params import check_ranges, setting
import torch


@dataclass(frozen=True)
class BufferConfig:
    """Sizes and segmentation rules of a `StreamingBuffer`."""

    window: int = setting(32, 'steps per training window (recurrent models see this many '
                          'consecutive samples)', 1, 1000)
    recent_capacity: int = setting(20000, 'samples in the ring of recent data', 10,
                                   10_000_000)
    reservoir_windows: int = setting(2000, 'windows kept from the whole past (0: none)', 0,
                                     1_000_000)
    reservoir_stride: int = setting(16, 'a completed window is offered to the reservoir every '
                                    'this many samples', 1, 1_000_000)
    recent_fraction: float = setting(0.5, 'share of each batch from recent data (the rest '
                                     'from the reservoir)', 0.0, 1.0)
    gap_factor: float = setting(3.0, 'a step this many times the nominal period breaks '
                                'windows (starts a new segment)', 1.01, 1e9)

    def __post_init__(self) -> None:
        """Reject sizes that cannot work, naming the bad value."""
        check_ranges(self)
        if self.recent_capacity < self.window:
            raise ValueError(f'recent_capacity ({self.recent_capacity}) must be >= window '
                             f'({self.window})')


class StreamingBuffer:
    """
    Thread-safe bounded buffer of (observation, action, target) samples.

    `append` is O(1) (called from message callbacks); `sample` builds a `SequenceBatch` of
    (B, T, .) float32 windows for the trainer thread. Shapes: observations n_obs,
    actions n_act (0 allowed), targets n_target per sample.
    """

    def __init__(self, n_obs: int, n_act: int, n_target: int, config: BufferConfig,
                 rng: np.random.Generator) -> None:
        self.config = config
        self.n_obs, self.n_act, self.n_target = n_obs, n_act, n_target
        self._rng = rng
        self._lock = threading.Lock()
        cap, k, t = config.recent_capacity, config.reservoir_windows, config.window
        self._obs = np.zeros((cap, n_obs), np.float32)
        self._act = np.zeros((cap, n_act), np.float32)
        self._target = np.zeros((cap, n_target), np.float32)
        self._segment = np.zeros(cap, np.int64)
        self._res_obs = np.zeros((k, t, n_obs), np.float32)
        self._res_act = np.zeros((k, t, n_act), np.float32)
        self._res_target = np.zeros((k, t, n_target), np.float32)
        self._res_filled = 0
        self._res_offered = 0
        self._count = 0            # samples ever appended (logical index of the next one)
        self._segment_id = 0
        self._segment_start = 0    # logical index where the current segment began
        self._last_time: Optional[float] = None
        self._nominal_dt: Optional[float] = None
        self.breaks = 0            # segments started because of gaps, rate changes or resets

    @property
    def total(self) -> int:
        """Return the number of samples ever appended."""
        return self._count

    @property
    def reservoir_size(self) -> int:
        """Return the number of windows currently in the reservoir."""
        return self._res_filled

    def reset(self) -> None:
        """Start a new segment: no window will join samples before and after this call."""
        with self._lock:
            self._new_segment(forget_rate=True)

    def _new_segment(self, forget_rate: bool = False) -> None:
        self._segment_id += 1
        self._segment_start = self._count
        if forget_rate:
            self._nominal_dt = None
        self.breaks += 1

    def append(self, time: float, observation: np.ndarray, action: np.ndarray,
               target: np.ndarray) -> None:
        """
        Store one sample taken at `time` seconds; start a new segment on a gap or rate change.

        Values must be finite (the caller validates messages); a non-finite value raises
        ValueError naming the field rather than poisoning later batches.
        """
        for name, value in (('observation', observation), ('action', action),
                            ('target', target)):
            if not np.isfinite(value).all():   # the method: no np.all dispatch per message
                raise ValueError(f'{name} holds non-finite values: {value}')
        with self._lock:
            self._update_segment(float(time))
            slot = self._count % self.config.recent_capacity
            self._obs[slot] = observation
            self._act[slot] = action
            self._target[slot] = target
            self._segment[slot] = self._segment_id
            self._count += 1
            length = self._count - self._segment_start
            if (self.config.reservoir_windows and length >= self.config.window
                    and self._count % self.config.reservoir_stride == 0):
                self._offer_to_reservoir()

    def _update_segment(self, time: float) -> None:
        last = self._last_time
        self._last_time = time
        if last is None:
            return
        dt = time - last
        factor = self.config.gap_factor
        if dt <= 0.0:
            self._new_segment(forget_rate=True)
            return
        nominal = self._nominal_dt
        if nominal is not None and dt > nominal * factor:
            self._new_segment()
        # The nominal period follows every step (clipped, so one long gap barely moves it):
        # a lasting rate change, or a steady share of dropped messages, stops breaking
        # windows after a few dozen samples.
        if nominal is None:
            self._nominal_dt = dt
        else:
            self._nominal_dt = 0.97 * nominal + 0.03 * min(dt, factor * nominal)

    def _offer_to_reservoir(self) -> None:
        """Algorithm R over windows: every offered window is kept with probability K / seen."""
        k = self.config.reservoir_windows
        self._res_offered += 1
        if self._res_filled < k:
            slot = self._res_filled
            self._res_filled += 1
        else:
            slot = int(self._rng.integers(self._res_offered))
            if slot >= k:
                return
        index = self._ring_indices(np.array([self._count - self.config.window]))[0]
        self._res_obs[slot] = self._obs[index]
        self._res_act[slot] = self._act[index]
        self._res_target[slot] = self._target[index]

    def _ring_indices(self, starts: np.ndarray) -> np.ndarray:
        """Map logical window starts (B,) to ring slots (B, T)."""
        steps = np.arange(self.config.window)
        return (starts[:, None] + steps[None, :]) % self.config.recent_capacity

    def _valid_recent_starts(self) -> np.ndarray:
        """Return logical starts of every ring window that lies inside one segment."""
        cap, t = self.config.recent_capacity, self.config.window
        oldest = max(0, self._count - cap)
        starts = np.arange(oldest, self._count - t + 1)
        if starts.size == 0:
            return starts
        # Segment ids only grow, so equal ids at both ends mean one segment throughout.
        same = self._segment[starts % cap] == self._segment[(starts + t - 1) % cap]
        return starts[same]

    def valid_windows(self) -> int:
        """Return how many windows a batch could be drawn from (ring + reservoir)."""
        with self._lock:
            return int(self._valid_recent_starts().size) + self._res_filled

    def sample(self, batch_size: int) -> Optional[SequenceBatch]:
        """
        Draw a batch of `batch_size` windows, (B, T, .) float32 tensors, or None if empty.

        round(recent_fraction x B) windows come from the ring and the rest from the
        reservoir; when one side is empty the other provides all of them.
        """
        if batch_size < 1:
            raise ValueError(f'batch_size must be >= 1, got {batch_size}')
        with self._lock:
            starts = self._valid_recent_starts()
            n_recent = int(round(self.config.recent_fraction * batch_size))
            if self._res_filled == 0:
                n_recent = batch_size
            if starts.size == 0:
                n_recent = 0
            n_reservoir = batch_size - n_recent
            if n_recent == 0 and self._res_filled == 0:
                return None
            parts = []
            if n_recent:
                chosen = starts[self._rng.integers(starts.size, size=n_recent)]
                index = self._ring_indices(chosen)
                parts.append((self._obs[index], self._act[index], self._target[index]))
            if n_reservoir:
                chosen = self._rng.integers(self._res_filled, size=n_reservoir)
                parts.append((self._res_obs[chosen], self._res_act[chosen],
                              self._res_target[chosen]))
        obs, act, target = (np.concatenate([part[i] for part in parts]) for i in range(3))
        return SequenceBatch(torch.from_numpy(obs), torch.from_numpy(act),
                             torch.from_numpy(target))

    def recent(self, count: int) -> SequenceBatch:
        """Return the newest `count` samples as one (1, count, .) window (normalisation fits)."""
        with self._lock:
            count = min(count, self._count, self.config.recent_capacity)
            index = np.arange(self._count - count, self._count) % self.config.recent_capacity
            obs, act, target = self._obs[index], self._act[index], self._target[index]
        return SequenceBatch(torch.from_numpy(obs)[None], torch.from_numpy(act)[None],
                             torch.from_numpy(target)[None])
