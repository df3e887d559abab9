"""
Train/test splits of recordings that never share a sample between the two sides.

- time: the first fraction of every recording trains, the rest tests (extrapolation in time);
- blocks: recordings cut into blocks of `size` samples, every k-th block tests (tests inside
  the training ranges; blocks do not overlap, so no row is on both sides);
- files: named recordings test, the others train.
`split_validation` holds out validation data from the training side the same way.
`parse_split` reads the CLI form: 'time:0.8', 'blocks:500:4', 'files:test*.csv,other.csv'.
"""
import fnmatch
from pathlib import Path
import re
from typing import Callable, List, Sequence, Tuple

import numpy as np
from robot_dynamics_learning.data.trajectory import Trajectory

Split = Tuple[List[Trajectory], List[Trajectory]]
# Shortest piece kept: a block needs two rows to give one (input, target) sample.
MIN_ROWS = 2
# A validation block of `split_validation` spans this many training windows, and at least
# this many samples (one-step models: held samples must not sit between fitted neighbours).
VALIDATION_BLOCK_WINDOWS = 4
VALIDATION_BLOCK_MIN_ROWS = 200


def split_time(trajectories: Sequence[Trajectory], train_fraction: float) -> Split:
    """Split every recording at `train_fraction` of its samples: head trains, tail tests."""
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f'train_fraction must be in (0, 1), got {train_fraction}')
    heads, tails = [], []
    for trajectory in trajectories:
        cut = int(train_fraction * len(trajectory))
        heads.append(trajectory.segment(0, cut))
        tails.append(trajectory.segment(cut, len(trajectory)))
    return ([t for t in heads if len(t) >= MIN_ROWS], [t for t in tails if len(t) >= MIN_ROWS])


def cut_blocks(trajectories: Sequence[Trajectory], size: int,
               min_rows: int = MIN_ROWS) -> List[Trajectory]:
    """Cut recordings into consecutive, non-overlapping blocks of `size` rows (short ones go)."""
    if size < MIN_ROWS:
        raise ValueError(f'block size must be >= {MIN_ROWS}, got {size}')
    blocks = [t.segment(start, min(start + size, len(t))) for t in trajectories
              for start in range(0, len(t), size)]
    return [block for block in blocks if len(block) >= max(min_rows, MIN_ROWS)]


def split_blocks(trajectories: Sequence[Trajectory], size: int, every: int = 4,
                 shuffle_seed: int = None, min_rows: int = MIN_ROWS) -> Split:
    """
    Every `every`-th block (the last of each group) tests; the other blocks train.

    With `shuffle_seed` the training blocks come in a fixed random order (so that the first N
    samples span several motions); the test blocks keep their order.
    """
    if every < 2:
        raise ValueError(f'every must be >= 2, got {every}')
    blocks = cut_blocks(trajectories, size)
    train = [b for i, b in enumerate(blocks) if i % every != every - 1 and len(b) >= min_rows]
    test = [b for i, b in enumerate(blocks) if i % every == every - 1 and len(b) >= min_rows]
    if shuffle_seed is not None:
        order = np.random.default_rng(shuffle_seed).permutation(len(train))
        train = [train[i] for i in order]
    return train, test


def file_name(source: str) -> str:
    """
    Return the file name in a trajectory's source, without row ranges '[a:b]' and choices.

    E.g. '/d/run 1.csv[0:500]' and '/d/run 1.csv (torque=Torque)' give 'run 1.csv' (names may
    hold spaces: only a trailing '(key=value)' and bracketed ranges are annotations).
    """
    return Path(re.sub(r'( \([^()]*=[^()]*\)|\[[0-9:]*\])+$', '', source)).name


def split_files(trajectories: Sequence[Trajectory], test_patterns: Sequence[str]) -> Split:
    """Test the recordings whose file name matches a pattern; train on the others."""
    def is_test(trajectory: Trajectory) -> bool:
        return any(fnmatch.fnmatchcase(file_name(trajectory.source), p) for p in test_patterns)

    test = [t for t in trajectories if is_test(t)]
    if not test or len(test) == len(trajectories):
        raise ValueError(f'files split {list(test_patterns)} must leave recordings on both '
                         f'sides; it picked {len(test)} of {len(trajectories)}')
    return [t for t in trajectories if not is_test(t)], test


def parse_split(spec: str) -> Callable[[Sequence[Trajectory]], Split]:
    """Return the split named by 'time:F', 'blocks:SIZE[:EVERY]' or 'files:PATTERN[,...]'."""
    kind, _, rest = spec.partition(':')
    try:
        if kind == 'time':
            fraction = float(rest or 0.8)
            split_time([], fraction)  # validate now, before any data is read
            return lambda trajectories: split_time(trajectories, fraction)
        if kind == 'blocks':
            parts = [int(v) for v in rest.split(':') if v] if rest else [500]
            size, every = parts[0], parts[1] if len(parts) > 1 else 4
            if size < MIN_ROWS or every < 2:
                raise ValueError('size >= 2 and every >= 2')
            return lambda trajectories: split_blocks(trajectories, size, every)
        if kind == 'files' and rest:
            patterns = [p for p in rest.split(',') if p]
            return lambda trajectories: split_files(trajectories, patterns)
    except ValueError as error:
        raise ValueError(f'bad split {spec!r}: {error}') from None
    raise ValueError(f"bad split {spec!r}: use 'time:0.8', 'blocks:500:4' or "
                     "'files:PATTERN[,PATTERN]'")


def split_validation(trajectories: Sequence[Trajectory], window: int,
                     val_fraction: float = 0.2) -> Split:
    """
    Return (fit, validation) recordings: every k-th one validates, k = round(1 / val_fraction).

    With fewer than 2 k recordings they are cut into blocks of `VALIDATION_BLOCK_WINDOWS`
    windows and at least `VALIDATION_BLOCK_MIN_ROWS` samples (fewer where that leaves under
    2 k blocks, never under one window) and every k-th block validates; the blocks between
    two of those stay one piece for fitting (no window lost at their joins). Why: the last
    share of a recording is one motion, not a sample of all of them. Early stopping on it
    stopped too soon (LSTM sample-size curves, 3 seeds, docs/results.md: Kinova nMSE 1.69 at
    3000 samples and 3.69 at 1000 with the last 20 % of the windows validating, 1.07 and 2.95
    with every fifth block; Schunk at 1000 samples 0.45 and 0.39). The validation side is
    empty when the recordings hold fewer than k blocks (callers then fall back, e.g. to
    `learning.training.split_windows`).
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f'val_fraction must be in (0, 1), got {val_fraction}')
    every = max(2, int(round(1.0 / val_fraction)))
    if len(trajectories) >= 2 * every:
        return ([t for i, t in enumerate(trajectories) if i % every != every - 1],
                [t for i, t in enumerate(trajectories) if i % every == every - 1])
    rows = sum(len(t) for t in trajectories)   # small data: smaller blocks, >= 2 validate
    block = max(VALIDATION_BLOCK_WINDOWS * window, VALIDATION_BLOCK_MIN_ROWS)
    size = max(window + 2, min(block, rows // (2 * every)))
    fit, held, count = [], [], 0
    for trajectory in trajectories:
        start = 0   # of the fitting run: the blocks between two held ones stay one piece
        for begin in range(0, len(trajectory) - size + 1, size):
            if count % every == every - 1:
                fit.append(trajectory.segment(start, begin))
                held.append(trajectory.segment(begin, begin + size))
                start = begin + size
            count += 1
        fit.append(trajectory.segment(start, len(trajectory)))
    return [t for t in fit if len(t) >= window + 2], held


def first_samples(trajectories: Sequence[Trajectory], n: int) -> List[Trajectory]:
    """Return the first n (input, target) samples of the recordings, in order."""
    out, left = [], n
    for trajectory in trajectories:
        if left <= 0:
            break
        rows = min(len(trajectory), left + 1)
        if rows >= MIN_ROWS:
            out.append(trajectory.segment(0, rows))
        left -= rows - 1
    return out


def downsample(trajectories: Sequence[Trajectory], every: int) -> List[Trajectory]:
    """Keep every `every`-th sample (e.g. 1 kHz -> 100 Hz: a controller's period)."""
    if every < 1:
        raise ValueError(f'every must be >= 1, got {every}')
    out = []
    for t in trajectories:
        arrays = {name: None if getattr(t, name) is None else getattr(t, name)[::every]
                  for name in Trajectory.ARRAY_FIELDS}
        out.append(Trajectory(time=t.time[::every], joint_names=list(t.joint_names),
                              units=dict(t.units), source=f'{t.source}[::{every}]', **arrays))
    return out
