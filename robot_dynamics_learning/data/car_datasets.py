"""
Car model data: mocap drives -> transitions at the model step h, and the splits of them.

`car_dataset` turns drives (poses [x, y, yaw] and commands at the mocap rate, any rate from
about 20 Hz up) into model transitions; the gap threshold and the smoothing window follow
the detected sample rate of each drive, so a 20 Hz recording is not cut into pieces at every
sample (not even among 240 Hz ones).
`CarDataset.split_blocks` holds back whole blocks of driving (validation for early stopping,
a test split for a user's own data); `dart_split` is the fixed DART file split.
"""
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from robot_dynamics_learning.core_types import SequenceBatch
from robot_dynamics_learning.data.datasets import load_rc_car, rc_car_files
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.signals.mocap import offline_body_states
import torch

# A step longer than this many median sample periods, and than MIN_GAP_S, is a gap in the
# recording (0.05 s: what the 100 Hz DART data and the 240 Hz simulator always used).
GAP_PERIODS = 5.0
MIN_GAP_S = 0.05
# The offline smoothing window spans at least this many samples (0.1 s at 100 Hz; 20 Hz
# data gets 0.25 s: fewer samples in the window would leave the mocap noise in the labels).
WINDOW_SAMPLES = 5
# Glitches are a few states: a twentieth of them (DART: none) over 10 times max_speed is a
# unit error (positions in mm), whose standstills alone would otherwise be kept.
UNIT_ERROR_SHARE, UNIT_ERROR_FACTOR = 0.05, 10.0
# Degrees scale yaw rates by 57 only: a car turning at 1-3 rad/s then reads over max_yaw_rate
# (15 rad/s, beyond any car; DART: none), which 10 times it would miss. So a twentieth of the
# states over max_yaw_rate itself is a unit error (yaw in degrees).
YAW_UNIT_ERROR_FACTOR = 1.0
MAX_YAW_RATE = 15.0   # rad/s: faster states are mocap glitches (the default of max_yaw_rate)
# No mocap streams slower than this (s per sample): a longer median period is a time in ms.
MAX_SAMPLE_PERIOD_S = 1.0
MIN_WINDOW_S = 0.1
# Held-out DART drives: one free-driving and one steering-identification recording (the
# rest, 15 files and about 12 minutes, train). Chosen so both kinds of driving are tested.
DART_TEST_FILES = ('car_1_Datarecording_09_16_2024_10_12_05.csv',
                   'car_1_Datarecording_09_25_2024_09_50_18.csv')


class CarDataset:
    """
    Transitions of one or more drives at the model step h: arrays of (N, 6), (N, 2), (N, 6).

    `segments` keeps, per drive, the index range of consecutive samples so that open-loop
    windows never cross a gap between recordings. `info` records how the data was made
    (detected rate, gap threshold, smoothing window), for reports.
    """

    def __init__(self, observations: np.ndarray, actions: np.ndarray, h: float,
                 segments: List[Tuple[int, int]],
                 info: Optional[Dict[str, float]] = None) -> None:
        self.observations = observations
        self.actions = actions
        self.h = h
        self.segments = segments
        self.info = dict(info or {})

    @property
    def duration_s(self) -> float:
        """Seconds of driving covered by the transitions."""
        return float(sum(b - a - 1 for a, b in self.segments) * self.h)

    def transitions(self) -> SequenceBatch:
        """All (obs_t, u_t, obs_{t+1}) pairs as a batch with T = 1."""
        index = np.concatenate([np.arange(a, b - 1) for a, b in self.segments])
        return _batch(self.observations[index, None], self.actions[index, None],
                      self.observations[index + 1, None])

    def windows(self, length: int, stride: int) -> SequenceBatch:
        """Windows of `length` steps: observations (B, length + 1, 6), actions (B, length, 2)."""
        starts = [s for a, b in self.segments for s in range(a, b - length, stride)]
        if not starts:
            raise ValueError(f'no drive is longer than {length} steps of {self.h} s')
        obs = np.stack([self.observations[s:s + length + 1] for s in starts])
        act = np.stack([self.actions[s:s + length] for s in starts])
        return _batch(obs, act, obs[:, 1:])

    def subset(self, ranges: Sequence[Tuple[int, int]]) -> 'CarDataset':
        """Return the samples of `ranges` (index ranges inside segments) as a new data set."""
        ranges = [(a, b) for a, b in ranges if b - a >= 2]
        if not ranges:
            return CarDataset(self.observations[:0], self.actions[:0], self.h, [], self.info)
        index = np.concatenate([np.arange(a, b) for a, b in ranges])
        bounds = np.cumsum([0] + [b - a for a, b in ranges])
        return CarDataset(self.observations[index], self.actions[index], self.h,
                          list(zip(bounds[:-1].tolist(), bounds[1:].tolist())), self.info)

    def split_blocks(self, block_s: float, every: int, offset: int, guard: int = 0
                     ) -> Tuple['CarDataset', 'CarDataset']:
        """
        Return (rest, held) where held is every `every`-th block of `block_s` seconds.

        Blocks never span two drives but are counted over all drives in order (block k is
        held when k % every == offset), so that a recording cut by dropouts or glitches into
        pieces shorter than `every` blocks still holds blocks back. Whole blocks keep
        open-loop windows inside one split: no held sample is trained on.
        guard: steps of the rest dropped next to each held block, so that states smoothed
        over a window (zero phase) on the rest's side never saw a held pose.
        """
        if block_s <= 0 or every < 2 or not 0 <= offset < every or guard < 0:
            raise ValueError(f'need block_s > 0, every >= 2, 0 <= offset < every, guard >= 0; '
                             f'got {block_s}, {every}, {offset}, {guard}')
        steps = max(2, int(round(block_s / self.h)))
        rest, held = [], []
        counted = 0
        for a, b in self.segments:
            blocks = [(start, min(start + steps, b)) for start in range(a, b, steps)]
            is_held = [(counted + k) % every == offset for k in range(len(blocks))]
            counted += len(blocks)
            kept = []
            for k, (start, stop) in enumerate(blocks):
                if is_held[k]:
                    held.append((start, stop))
                    continue
                start += guard if k > 0 and is_held[k - 1] else 0
                stop -= guard if k + 1 < len(blocks) and is_held[k + 1] else 0
                kept.append((start, stop))
            rest += _merge(kept)   # per drive: the next drive's first block never joins it
        return self.subset(rest), self.subset(held)


def _merge(ranges: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """Join index ranges that touch (consecutive training blocks form one drive again)."""
    merged: List[Tuple[int, int]] = []
    for a, b in ranges:
        if merged and merged[-1][1] == a:
            merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    return merged


def _batch(obs: np.ndarray, act: np.ndarray, target: np.ndarray) -> SequenceBatch:
    return SequenceBatch(torch.as_tensor(obs, dtype=torch.float32),
                         torch.as_tensor(act, dtype=torch.float32),
                         torch.as_tensor(target, dtype=torch.float32))


def sample_period(trajectories: Sequence[Trajectory]) -> float:
    """Return the median sample period (s) over all drives: the mocap rate is 1 / it."""
    steps = [np.diff(t.time) for t in trajectories if len(t) > 1]
    if not steps:
        raise ValueError(f'{len(trajectories)} drives and none has two samples: no data to '
                         'detect the sample rate from')
    return float(np.median(np.concatenate(steps)))


def _finite_rows(trajectories: Sequence[Trajectory]) -> Tuple[List[Trajectory], int]:
    """Drop samples with a NaN or inf pose or command (a gap then splits the drive there)."""
    out, dropped = [], 0
    for trajectory in trajectories:
        if trajectory.observations is None or trajectory.actions is None:
            raise ValueError(f'{trajectory.source}: needs observations and actions')
        finite = (np.all(np.isfinite(trajectory.observations), axis=1)
                  & np.all(np.isfinite(trajectory.actions), axis=1))
        dropped += int((~finite).sum())
        if finite.all():
            out.append(trajectory)
        elif finite.sum() > 1:
            out.append(Trajectory(time=trajectory.time[finite],
                                  observations=trajectory.observations[finite],
                                  actions=trajectory.actions[finite],
                                  units=dict(trajectory.units), source=trajectory.source))
    return out, dropped


def _check_time_unit(trajectories: Sequence[Trajectory], periods: Sequence[float]) -> None:
    """
    Refuse a drive sampled slower than any mocap: its time is in ms, not s.

    Why: the drive then read as hours of driving, cut into nothing at every sample, and the
    error blamed too little driving.
    """
    for trajectory, period in zip(trajectories, periods):
        if period > MAX_SAMPLE_PERIOD_S:
            raise ValueError(f'{trajectory.source}: a sample every {period:g} s '
                             f'({1.0 / period:.3g} Hz) is slower than any mocap: time in ms? '
                             'Convert it to seconds')


def split_at_gaps(trajectories: Sequence[Trajectory], max_gap_s: float,
                  min_duration_s: float = 0.2) -> List[Trajectory]:
    """Split drives where samples are missing for more than max_gap_s; drop short pieces."""
    pieces = []
    for trajectory in trajectories:
        if trajectory.observations is None or trajectory.actions is None:
            raise ValueError(f'{trajectory.source}: needs observations and actions')
        cuts = np.flatnonzero(np.diff(trajectory.time) > max_gap_s) + 1
        bounds = [0, *cuts.tolist(), len(trajectory)]
        pieces += [trajectory.segment(a, b) for a, b in zip(bounds[:-1], bounds[1:])
                   if b - a >= 5 and trajectory.time[b - 1] - trajectory.time[a]
                   >= min_duration_s]
    return pieces


def car_dataset(trajectories: Sequence[Trajectory], h: float, fine_dt: float = 0.01,
                window_s: Optional[float] = None, max_gap_s: Optional[float] = None,
                max_speed: float = 8.0, max_yaw_rate: float = MAX_YAW_RATE
                ) -> CarDataset:
    """
    Turn mocap drives (observations [x, y, yaw], actions, 20-240 Hz) into model transitions.

    Samples with a non-finite pose or command are dropped (counted in info
    'dropped_non_finite'); drives are split at gaps longer than max_gap_s (default
    GAP_PERIODS median periods of the drive, at least MIN_GAP_S);
    poses are Savitzky-Golay smoothed and differentiated over window_s (default the larger
    of MIN_WINDOW_S and WINDOW_SAMPLES periods) on a `fine_dt` grid (offline, zero phase),
    then sampled every h seconds; the action of a step is the mean command over it. Runs of
    states faster than max_speed (m/s) or max_yaw_rate (rad/s), mocap glitches, are cut out
    (counted in info 'cut_too_fast'); unit errors (positions in mm, yaw in degrees, time in
    ms) are refused, naming the unit.
    """
    stride = int(round(h / fine_dt))
    if stride < 1 or abs(stride * fine_dt - h) > 1e-9:
        raise ValueError(f'h ({h}) must be a multiple of fine_dt ({fine_dt})')
    trajectories, dropped = _finite_rows(trajectories)
    period = sample_period(trajectories)
    # Per drive: a 20 Hz file among 240 Hz ones would be cut at every sample by their gap.
    periods = [sample_period([t]) if len(t) > 1 else period for t in trajectories]
    _check_time_unit(trajectories, periods)
    gaps = [max(MIN_GAP_S, GAP_PERIODS * p) if max_gap_s is None else float(max_gap_s)
            for p in periods]
    windows = [max(MIN_WINDOW_S, WINDOW_SAMPLES * p) if window_s is None else window_s
               for p in periods]
    info = {'rate_hz': 1.0 / period, 'rate_hz_min': 1.0 / max(periods),
            'rate_hz_max': 1.0 / min(periods), 'max_gap_s': max(gaps),
            'window_s': max(windows), 'dropped_non_finite': dropped}
    pieces = [(piece, window) for trajectory, gap, window in zip(trajectories, gaps, windows)
              for piece in split_at_gaps([trajectory], gap, max(0.2, 2 * window))]
    observations, actions, segments = [], [], []
    count = too_fast = absurd = spinning = judged = 0
    for trajectory, window in pieces:
        grid, states = offline_body_states(trajectory.time, trajectory.observations, fine_dt,
                                           window)
        commands = np.stack([np.interp(grid, trajectory.time, trajectory.actions[:, i])
                             for i in range(trajectory.actions.shape[1])], axis=1)
        steps = (len(grid) - 1) // stride
        if steps < 2:
            continue
        coarse = states[:steps * stride + 1:stride][:steps]
        mean_cmd = commands[:steps * stride].reshape(steps, stride, -1).mean(axis=1)
        # Mocap glitches show as impossible velocities: keep only runs of plausible states.
        speed = np.hypot(coarse[:, 3], coarse[:, 4])
        absurd += int((speed > UNIT_ERROR_FACTOR * max_speed).sum())
        spinning += int((np.abs(coarse[:, 5]) > YAW_UNIT_ERROR_FACTOR * max_yaw_rate).sum())
        judged += len(speed)
        plausible = ((speed < max_speed)
                     & (np.abs(coarse[:, 5]) < max_yaw_rate))
        too_fast += int((~plausible).sum())
        edges = np.flatnonzero(np.diff(np.concatenate([[0], plausible.astype(int), [0]])))
        for a, b in zip(edges[::2], edges[1::2]):
            if b - a < 2:
                continue
            observations.append(coarse[a:b])
            actions.append(mean_cmd[a:b])
            segments.append((count, count + b - a))
            count += b - a
    info['cut_too_fast'] = too_fast
    if absurd > UNIT_ERROR_SHARE * judged:
        raise ValueError(f'{absurd} of {judged} states are faster than '
                         f'{UNIT_ERROR_FACTOR * max_speed:g} m/s, {UNIT_ERROR_FACTOR:g} times '
                         f'--max-speed: positions in mm (a mocap streaming millimetres)? '
                         'Convert them to metres')
    if spinning > UNIT_ERROR_SHARE * judged:
        raise ValueError(f'{spinning} of {judged} states turn faster than '
                         f'{YAW_UNIT_ERROR_FACTOR * max_yaw_rate:g} rad/s (--max-yaw-rate): '
                         'yaw in degrees? Convert it to radians')
    if not observations:   # name both causes: a too low max_speed also leaves no transition
        raise ValueError(f'no drive is long enough for one transition (detected '
                         f'{1.0 / period:.1f} Hz, gaps over {max(gaps):.3f} s split drives; '
                         f'{too_fast} states faster than {max_speed:g} m/s or '
                         f'{max_yaw_rate:g} rad/s were cut out)')
    return CarDataset(np.concatenate(observations), np.concatenate(actions), h, segments, info)


def dart_split(h: float, root: Optional[Path] = None) -> Tuple[CarDataset, CarDataset]:
    """Return (train, test) `CarDataset`s of the DART recordings with Vicon (file split)."""
    files = rc_car_files(root)
    if not files:
        raise FileNotFoundError('no DART RC-car recordings with Vicon poses found')
    train = [load_rc_car(f) for f in files if f.name not in DART_TEST_FILES]
    test = [load_rc_car(f) for f in files if f.name in DART_TEST_FILES]
    if not test:
        raise FileNotFoundError(f'the DART test files {DART_TEST_FILES} are missing')
    return car_dataset(train, h), car_dataset(test, h)
