"""
`Trajectory` from the user's own recordings: arrays, CSV or npz files with named columns.

A column spec maps a trajectory field ('time', 'q', 'qd', 'qdd', 'tau', 'observations',
'actions') to column names or shell patterns, matched in file order and stacked, e.g.
`{'q': ['Position*'], 'tau': ['Torque[0-9]']}`. Missing qd and qdd are derived from q and qd
with the package's zero-phase Savitzky-Golay differentiator (`signals.offline`). A time
column whose name ends in '_ns' holds nanoseconds (as `rdl bag export` writes stamp_ns),
one ending in '_ms' or '_us' (or '[ms]', '(us)') milli- or microseconds (`time_unit`).
"""
import csv
import fnmatch
import glob
import gzip
import itertools
import logging
import math
import os
from pathlib import Path
import re
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union
import warnings
import zipfile

import numpy as np
from robot_dynamics_learning.data.trajectory import (check_time, default_joint_names, JOINT_FIELDS,
                                                     Trajectory)
from robot_dynamics_learning.signals.offline import savgol_at_stamps

FIELDS = ('time', 'q', 'qd', 'qdd', 'tau', 'observations', 'actions')
# Differentiator window: 31 ms suits 250 Hz-1 kHz arms (Kinova 31 ms, Schunk 44 ms).
DEFAULT_DERIVATIVE_WINDOW_S = 0.031
ColumnSpec = Mapping[str, Union[str, Sequence[str]]]
LOG = logging.getLogger(__name__)
# A time step over this many median periods (lost samples, a paused logger) cuts a recording.
GAP_PERIODS = 3.0
# Periods spread wider than this ratio get a warning: the derivative filters assume one period.
IRREGULAR_PERIODS = 1.5
# A derivative window under this many periods is widened to 5 samples: likely a time unit slip.
MIN_WINDOW_PERIODS = 2
# Joint samples further apart than this (median, s) are no dynamics recording: its time
# column holds another unit (epoch nanoseconds read as seconds gave periods of 1e6 s).
MAX_PERIOD_S = 60.0
# Model tensors are float32: a larger value would turn into inf there, so it is skipped too.
FLOAT32_MAX = float(np.finfo(np.float32).max)
# A live joint value (rad, m, their derivatives, N m) beyond this is garbage, not motion: a
# driver's sentinel or a units slip. Nodes skip such samples: float32 squares overflow from
# 1.8e19, and a model fed 3e38 (float32's largest, a common "unknown") published inf.
JOINT_VALUE_LIMIT = 1e9
MIN_ROWS = 2
# The columns of `rdl bag export` (data/cli.py) for a JointState topic (time: 'stamp_ns').
EXPORT_COLUMNS = {'q': ['position', 'position_*'],
                  'qd': ['velocity', 'velocity_*'], 'tau': ['effort', 'effort_*']}
NANOSECONDS_SUFFIX = '_ns'
# Time columns found without --columns, lower-cased, in order of preference.
TIME_NAMES = ('time', 't', 'timestamp', 'stamp', 'time_*', 'timestamp_*', 'stamp_*',
              'time (*', 'time [[]*')


def parse_columns(items: Sequence[str]) -> Dict[str, List[str]]:
    """Parse CLI items 'field=pattern,pattern' into a column spec, naming a bad item."""
    spec: Dict[str, List[str]] = {}
    for item in items:
        field, sep, patterns = item.partition('=')
        field = field.strip()
        if not sep or field not in FIELDS or not patterns.strip():
            raise ValueError(f"column item {item!r} must be 'field=pattern[,pattern]' with "
                             f'field one of {list(FIELDS)}')
        spec.setdefault(field, []).extend(p.strip() for p in patterns.split(',') if p.strip())
    return spec


def default_columns(names: Sequence[str]) -> Dict[str, List[str]]:
    """
    Columns named like the fields: 'q', 'q_*' or 'q1' ... 'q99'; time by `TIME_NAMES`.

    Numbered columns take one or two digits only, so 'q1_desired' beside 'q1' is not taken.

    A field without such columns takes those `rdl bag export` writes ('position' or
    'position_*', 'velocity...', 'effort...'; time 'stamp_ns'): our own export must load as
    it is.
    """
    spec = {}
    for field in FIELDS:
        if field == 'time':
            time = time_column(names)
            if time is not None:
                spec[field] = [glob.escape(time)]
            continue
        numbered = [f'{field}[0-9]', f'{field}[0-9][0-9]']   # q1 ... q99, in joint order
        for patterns in ([field, f'{field}_*', *numbered], EXPORT_COLUMNS.get(field, [])):
            if any(fnmatch.fnmatchcase(name, p) for name in names for p in patterns):
                spec[field] = patterns
                break
    return spec


def time_column(names: Sequence[str]) -> Optional[str]:
    """
    Return the column that `TIME_NAMES` finds first (in any case: 'Time' is common), if any.

    A one-letter name must be 't' itself: a lone 'T' is as often a temperature.
    """
    for pattern in TIME_NAMES:
        found = [name for name in names
                 if fnmatch.fnmatchcase(name.lower() if len(name) > 1 else name, pattern)]
        if found:
            return found[0]
    return None


def _select(table: Mapping[str, np.ndarray], patterns: Sequence[str], field: str,
            source: str) -> Tuple[np.ndarray, List[str]]:
    """Stack the table's columns matching `patterns` (in table order) into (T, k); their names."""
    chosen = [name for pattern in patterns for name in table
              if fnmatch.fnmatchcase(name, pattern)]
    chosen = list(dict.fromkeys(chosen))
    if not chosen:
        raise ValueError(f'{source}: no column matches {list(patterns)} for {field}; '
                         f'columns are {list(table)[:20]}')
    parts = []
    for name in chosen:
        array = np.asarray(table[name])
        if array.dtype.kind not in 'biuf' or array.ndim not in (1, 2):
            raise ValueError(f'{source}: column {name!r} for {field} must hold real numbers of '
                             f'shape (T,) or (T, k), not {array.dtype} {array.shape}')
        parts.append(array.astype(np.float64).reshape(array.shape[0], -1))
    if len({p.shape[0] for p in parts}) > 1:
        raise ValueError(f'{source}: columns {chosen} for {field} differ in length')
    return np.concatenate(parts, axis=1), chosen


def _pieces(time: np.ndarray, bad: np.ndarray) -> List[Tuple[int, int]]:
    """Row ranges [a, b) without bad rows or time gaps over `GAP_PERIODS` median periods."""
    good = np.flatnonzero(~bad)
    if good.size < 2:
        return [(int(i), int(i) + 1) for i in good]
    steps = np.diff(time[good])
    period = float(np.median(steps[np.diff(good) == 1])) if np.any(np.diff(good) == 1) else 0.0
    cut = (np.diff(good) > 1) | (steps > GAP_PERIODS * period)
    starts = np.concatenate([[0], np.flatnonzero(cut) + 1])
    stops = np.concatenate([np.flatnonzero(cut) + 1, [good.size]])
    return [(int(good[a]), int(good[b - 1]) + 1) for a, b in zip(starts, stops)]


def trajectories_from_table(table: Mapping[str, np.ndarray],
                            columns: Optional[ColumnSpec] = None, dt: Optional[float] = None,
                            joint_names: Optional[Sequence[str]] = None,
                            derivative_window_s: float = DEFAULT_DERIVATIVE_WINDOW_S,
                            source: str = 'table', derive: bool = True) -> List[Trajectory]:
    """
    Build the contiguous pieces of a recording as `Trajectory`s from columns (T,) or (T, k).

    Time comes from the 'time' column (also when `columns` names none) or, without one, from
    `dt`. Rows with a NaN, an inf or an absurd value (`_skipped_rows`) are skipped and
    counted in a warning; the recording is cut there and at time steps over `GAP_PERIODS`
    median periods, so that no derivative, window or previous torque bridges a hole. Pieces
    too short to differentiate are dropped (logged). Missing qd / qdd are the Savitzky-Golay
    derivatives of q / qd over `derivative_window_s` (with `derive` False they stay missing,
    for `derive_missing` after a split: a zero-phase derivative taken before it would let
    the rows next to a boundary see samples across it). Raises ValueError naming the source
    on a missing, doubly used or non-numeric column, a bad time or dt, or no usable rows.
    """
    arrays, time, bad_time, names = _field_arrays(table, columns, dt, source)
    width = next((a.shape[1] for f, a in arrays.items() if f in JOINT_FIELDS), 0)
    joint_names = joint_names or _named_joints(table, names, width)
    bad = _skipped_rows(arrays, bad_time, source)
    check_time(time[~bad], source, rows=np.flatnonzero(~bad))
    _check_period(time[~bad], names.get('time', ['--dt'])[0], source)
    needs_derivative = _needs_derivative(*(arrays.get(f) for f in ('q', 'qd', 'qdd')))
    pieces = _usable_pieces(time, bad, derivative_window_s if needs_derivative else None,
                            source)
    whole = len(pieces) == 1 and pieces[0] == (0, time.size)
    return [trajectory_from_arrays(time[a:b], joint_names=joint_names,
                                   derivative_window_s=derivative_window_s,
                                   source=source if whole else f'{source}[{a}:{b}]',
                                   derive=derive, **{f: v[a:b] for f, v in arrays.items()})
            for a, b in pieces]


def _check_period(time: np.ndarray, column: str, source: str) -> None:
    """Refuse a median sample period over `MAX_PERIOD_S`: a time column not in seconds."""
    if time.size < 2:
        return
    period = float(np.median(np.diff(time)))
    if period > MAX_PERIOD_S:
        raise ValueError(f'{source}: samples {period:.3g} s apart ({column!r} read as seconds):'
                         ' is time in ms, us or ns? rename the column with a _ms, _us or _ns '
                         'suffix, or give the sample period with --dt')


def _field_arrays(table: Mapping[str, np.ndarray], columns: Optional[ColumnSpec],
                  dt: Optional[float], source: str
                  ) -> Tuple[Dict[str, np.ndarray], np.ndarray, np.ndarray, Dict[str, List[str]]]:
    """
    Return the data of the fields `columns` names in `table`.

    ({field: (T, k)} without time, time (T,), rows whose time is not finite, {field: the
    column names stacked, in order}).
    """
    if dt is not None and not (math.isfinite(dt) and dt > 0):
        raise ValueError(f'{source}: dt must be a positive number of seconds, got {dt}')
    if dt is not None and columns and 'time' in columns:
        raise ValueError(f'{source}: give a time column or dt, not both')
    spec = dict(columns) if columns else default_columns(list(table))
    if dt is not None:   # dt overrides a time column found by name
        spec.pop('time', None)
    elif 'time' not in spec:   # a time column serves without dt, named or not
        spec.update({k: v for k, v in default_columns(list(table)).items() if k == 'time'})
    unknown = sorted(set(spec) - set(FIELDS))
    if unknown:
        raise ValueError(f'{source}: unknown field(s) {unknown}; fields are {list(FIELDS)}')
    arrays, owner = {}, {}
    for field, patterns in spec.items():
        arrays[field], names = _select(table, [patterns] if isinstance(patterns, str)
                                       else patterns, field, source)
        for name in names:
            if name in owner:
                raise ValueError(f'{source}: column {name!r} matches both {owner[name]} and '
                                 f'{field}; make the patterns exclusive')
            owner[name] = field
    if not set(arrays) - {'time'}:
        raise ValueError(f'{source}: no data columns; name them with --columns field=pattern '
                         f'(columns are {list(table)[:20]})')
    lengths = {field: array.shape[0] for field, array in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f'{source}: fields differ in length: {lengths}')
    rows = next(iter(lengths.values()))
    names = {field: [n for n, f in owner.items() if f == field] for field in arrays}
    _pair_joints_by_name(arrays, names, source)
    widths = {field: arrays[field].shape[1] for field in JOINT_FIELDS if field in arrays}
    if len(set(widths.values())) > 1:   # name the columns: a pattern took too many or few
        raise ValueError(f'{source}: the joint fields differ in width: ' + '; '.join(
            f'{field} {width} from {names[field][:20]}' for field, width in widths.items()))
    if 'time' in arrays:
        if arrays['time'].shape[1] != 1:
            raise ValueError(f'{source}: time must be one column, {spec["time"]} matches '
                             f'{[n for n, f in owner.items() if f == "time"]}')
        time = arrays.pop('time')[:, 0] * time_unit(names['time'][0])
        if names['time'][0].endswith(NANOSECONDS_SUFFIX):
            time = _nanoseconds_to_seconds(np.asarray(table[names['time'][0]]).reshape(-1))
        elif not (columns and 'time' in columns) and _counts_samples(time):
            raise ValueError(f'{source}: the time column {names["time"][0]!r} counts samples '
                             '(0, 1, 2, ...), not seconds; give the sample period with --dt, '
                             'or name a time column in seconds with --columns time=NAME')
        return arrays, time, ~np.isfinite(time), names
    if dt is None:
        raise ValueError(f'{source}: no time column (none of the columns {list(table)[:20]} is '
                         f'named like {list(TIME_NAMES)}, in any case); name it with '
                         '--columns time=NAME (a name ending in _ns, _ms or _us is in nano-, '
                         'milli- or microseconds) or give '
                         'the sample period with --dt')
    return arrays, np.arange(rows) * float(dt), np.zeros(rows, dtype=bool), names


def _joint_keys(columns: Sequence[str]) -> List[str]:
    """Return what tells a field's columns apart: each name less their common prefix, suffix."""
    prefix = os.path.commonprefix(list(columns))
    suffix = os.path.commonprefix([c[len(prefix):][::-1] for c in columns])[::-1]
    return [c[len(prefix):len(c) - len(suffix)] for c in columns]


def _pair_joints_by_name(arrays: Dict[str, np.ndarray], names: Dict[str, List[str]],
                         source: str) -> None:
    """
    Put each joint field's columns in the joint order of the first (q, then qd, qdd, tau).

    Why: q_a, q_b beside tau_b, tau_a trained joint a on joint b's torque. Fields whose
    columns name the same joints (what is left of each name without the field's common
    prefix and suffix: 'a', 'b'; '1', '2' of Position1 and TorqueSm1) are reordered in place
    (arrays and names); fields that name them otherwise keep their order.
    """
    keyed = {field: _joint_keys(names[field]) for field in JOINT_FIELDS
             if field in arrays and len(names[field]) == arrays[field].shape[1] > 1}
    if not keyed:
        return
    first, order = next(iter(keyed.items()))
    for field, keys in keyed.items():
        if keys == order or sorted(keys) != sorted(order) or len(set(keys)) < len(keys):
            continue
        index = [keys.index(key) for key in order]
        arrays[field] = arrays[field][:, index]
        names[field] = [names[field][i] for i in index]
        LOG.warning('%s: the %s columns list the joints in another order than the %s '
                    'columns: paired by name (%s)', source, field, first,
                    ', '.join(names[field][:8]) + (' ...' if len(index) > 8 else ''))


def _named_joints(table: Mapping[str, np.ndarray], names: Mapping[str, Sequence[str]],
                  width: int) -> Optional[List[str]]:
    """
    Return the joint names the file gives, else None (the joints are unnamed).

    An npz of `rdl bag export` holds a `joint_names` array; a CSV names them in its joint
    columns, as the export writes them ('position_<joint>') or as users do
    ('q_shoulder_pan', ...). Numbered columns (q_1, q_2, ...) name no joint.
    """
    field = next((f for f in JOINT_FIELDS if f in names), None)
    if field is None:
        return None
    columns = names[field]
    listed = np.asarray(table.get('joint_names', ()))
    if listed.dtype.kind == 'U' and listed.ndim == 1 and listed.size == width and \
            len(set(listed.tolist())) == width:
        return [str(n) for n in listed]
    prefixes = [f'{field}_'] + [p[:-1] for p in EXPORT_COLUMNS.get(field, []) if p.endswith('*')]
    for prefix in prefixes:
        if all(c.startswith(prefix) for c in columns):
            joints = [c[len(prefix):] for c in columns]
            if len(joints) == width and all(joints) and len(set(joints)) == width and \
                    not all(j.isdigit() for j in joints):
                return joints
    return None


def time_unit(name: str) -> float:
    """
    Return the seconds per unit a time column's name states ('time_ms', 'Time [us]'), else 1.

    Why: 'time_ms' is found as a time column by name; read as seconds, a 100 Hz recording
    would be one sample every 10 s and every derivative 1e6 times too small. Nanoseconds
    ('_ns') are read apart, exactly (`_nanoseconds_to_seconds`).
    """
    found = re.search(r'[_\s(\[](ms|msec|us|usec|\u00b5s)[)\]]?$', name.strip().lower())
    return 1.0 if found is None else (1e-3 if found.group(1).startswith('m') else 1e-6)


def _nanoseconds_to_seconds(stamps: np.ndarray) -> np.ndarray:
    """
    Return nanosecond stamps as seconds since the first, subtracted in integers where exact.

    Epoch stamps (1.7e18 ns) as float64 resolve 256 ns: a 1 kHz period then varies by 3e-4,
    and the derivatives divide by it.
    """
    if stamps.dtype.kind in 'iu' and stamps.size:
        return (stamps - stamps[0]).astype(np.float64) * 1e-9
    seconds = stamps.astype(np.float64)
    finite = seconds[np.isfinite(seconds)]
    return (seconds - (finite[0] if finite.size else 0.0)) * 1e-9


def _counts_samples(time: np.ndarray) -> bool:
    """Return whether a time column is a sample index: every step exactly 1 (Kinova's 'Time')."""
    steps = np.diff(time[np.isfinite(time)])
    return steps.size > 0 and bool(np.all(steps == 1.0))


def _skipped_rows(arrays: Mapping[str, np.ndarray], bad_time: np.ndarray,
                  source: str) -> np.ndarray:
    """
    Return the rows holding NaN, inf or an absurd value; log their counts.

    Absurd: a joint field (q, qd, qdd, tau) beyond `JOINT_VALUE_LIMIT` (a logger's sentinel:
    it would set the normalisation), any other beyond float32's largest.
    """
    bad_cells = {field: ~(np.abs(array) <= (JOINT_VALUE_LIMIT if field in JOINT_FIELDS
                                            else FLOAT32_MAX))
                 for field, array in arrays.items()}
    bad = bad_time | np.any([b.any(axis=1) for b in bad_cells.values()], axis=0)
    if bad.any():
        counts = {'time': int(bad_time.sum()), **{f: int(b.sum()) for f, b in bad_cells.items()}}
        LOG.warning('%s: skipped %d of %d rows holding NaN, inf or |value| > %.3g (%.3g in '
                    'observations and actions; cells: %s); first at data row %d', source,
                    int(bad.sum()), bad.size, JOINT_VALUE_LIMIT, FLOAT32_MAX,
                    {f: n for f, n in counts.items() if n}, int(np.argmax(bad)))
    return bad


def _usable_pieces(time: np.ndarray, bad: np.ndarray, derivative_window_s: Optional[float],
                   source: str) -> List[Tuple[int, int]]:
    """
    Row ranges between skipped rows and time gaps, long enough to differentiate; logged.

    derivative_window_s: the window of a derivative still to take (None: none is taken).
    """
    def long_enough(a: int, b: int) -> bool:
        if derivative_window_s is None:
            return b - a >= MIN_ROWS
        return b - a >= _derivative_rows(time[a:b], derivative_window_s)

    pieces = [(a, b) for a, b in _pieces(time, bad) if long_enough(a, b)]
    valid, kept = int((~bad).sum()), sum(b - a for a, b in pieces)
    if kept < valid:
        LOG.warning('%s: dropped %d valid rows in pieces too short to differentiate (cut at '
                    'skipped rows or time gaps over %g periods)', source, valid - kept,
                    GAP_PERIODS)
    if not pieces:
        needed = (f'more than the {derivative_window_s} s window of the qd / qdd derivative'
                  if derivative_window_s is not None else f'at least {MIN_ROWS}')
        raise ValueError(f'{source}: no usable stretch of rows ({bad.size} rows, '
                         f'{int(bad.sum())} skipped); a recording needs contiguous valid rows, '
                         f'{needed}')
    if len(pieces) > 1:
        LOG.warning('%s: cut into %d pieces at skipped rows or time gaps over %g periods',
                    source, len(pieces), GAP_PERIODS)
    steps = np.concatenate([np.diff(time[a:b]) for a, b in pieces])
    if steps.size and steps.max() > IRREGULAR_PERIODS * steps.min():
        LOG.warning('%s: irregular sampling, periods %.3g to %.3g s (median %.3g s); '
                    'derivatives are taken on an even resampling', source, steps.min(),
                    steps.max(), np.median(steps))
    if derivative_window_s is not None and steps.size and \
            derivative_window_s < MIN_WINDOW_PERIODS * np.median(steps):
        LOG.warning('%s: the %g s window of the qd / qdd derivative spans under %d sample '
                    'periods of %.3g s and widens to 5 samples: is time in seconds (a sample '
                    'index as time gives qdd in rad per sample squared)? Else set '
                    'data.acc_window_s', source, derivative_window_s, MIN_WINDOW_PERIODS,
                    np.median(steps))
    return pieces


def _needs_derivative(q: Optional[np.ndarray], qd: Optional[np.ndarray],
                      qdd: Optional[np.ndarray]) -> bool:
    """Return whether qd or qdd is missing and can be derived from q or qd."""
    return (qd is None and q is not None) or (qdd is None and (qd is not None or
                                                               q is not None))


def derive_missing(trajectory: Trajectory,
                   derivative_window_s: float = DEFAULT_DERIVATIVE_WINDOW_S) -> Trajectory:
    """Return `trajectory` with missing qd / qdd derived on its own samples only."""
    if not _needs_derivative(trajectory.q, trajectory.qd, trajectory.qdd):
        return trajectory
    derived = trajectory_from_arrays(
        trajectory.time, **{f: getattr(trajectory, f) for f in Trajectory.ARRAY_FIELDS},
        joint_names=trajectory.joint_names, derivative_window_s=derivative_window_s,
        source=trajectory.source)
    derived.units = dict(trajectory.units)
    return derived


def derive_each(trajectories: Sequence[Trajectory], derivative_window_s: float,
                label: str) -> List[Trajectory]:
    """
    Return `derive_missing` of each recording; drop (and log) those too short to derive.

    Why: rows skipped for a NaN cut a recording into pieces, and a time split then left a
    tail of 20 rows whose derivative ended the whole run. label: which side ('training').
    """
    kept, dropped = [], []
    for trajectory in trajectories:
        short = (_needs_derivative(trajectory.q, trajectory.qd, trajectory.qdd)
                 and len(trajectory) < _derivative_rows(trajectory.time, derivative_window_s))
        (dropped if short else kept).append(trajectory)
    if dropped:
        LOG.warning('%s data: dropped %d pieces (%d rows) too short to derive qd / qdd over '
                    '%g s: %s', label, len(dropped), sum(len(t) for t in dropped),
                    derivative_window_s, ', '.join(t.source for t in dropped[:5])
                    + (' ...' if len(dropped) > 5 else ''))
    return [derive_missing(t, derivative_window_s) for t in kept]


def continuous_angles(q: np.ndarray) -> np.ndarray:
    """
    Return joint positions (T, n) without the 2 pi jumps of angles wrapped to (-pi, pi].

    Why: a continuous joint turning past pi is reported wrapped; its derivative would be a
    spike of -2 pi / dt. No joint moves pi in one sample, so the unwrapping is safe for all.
    """
    return np.unwrap(np.asarray(q, np.float64), axis=0)


def _derivative_rows(time: np.ndarray, window_s: float) -> int:
    """Rows the Savitzky-Golay derivative of `savgol_derivative` needs at this sample rate."""
    if time.size < 2:
        return MIN_ROWS
    return max(int(round(window_s / float(np.median(np.diff(time))))) | 1, 5)


def trajectory_from_table(table: Mapping[str, np.ndarray], columns: Optional[ColumnSpec] = None,
                          dt: Optional[float] = None, joint_names: Optional[Sequence[str]] = None,
                          derivative_window_s: float = DEFAULT_DERIVATIVE_WINDOW_S,
                          source: str = 'table') -> Trajectory:
    """
    Return the recording as one `Trajectory` (see `trajectories_from_table`).

    Raises ValueError where skipped rows or time gaps cut it into pieces: one trajectory
    across them would differentiate and window over the holes.
    """
    pieces = trajectories_from_table(table, columns, dt, joint_names, derivative_window_s,
                                     source)
    if len(pieces) > 1:
        raise ValueError(f'{source}: skipped non-finite rows or time gaps cut the recording '
                         f'into {len(pieces)} pieces; read it with trajectories_from_table or '
                         'load_trajectories')
    return pieces[0]


def trajectory_from_arrays(time: np.ndarray, q: Optional[np.ndarray] = None,
                           qd: Optional[np.ndarray] = None, qdd: Optional[np.ndarray] = None,
                           tau: Optional[np.ndarray] = None,
                           observations: Optional[np.ndarray] = None,
                           actions: Optional[np.ndarray] = None,
                           joint_names: Optional[Sequence[str]] = None,
                           derivative_window_s: float = DEFAULT_DERIVATIVE_WINDOW_S,
                           source: str = 'arrays', derive: bool = True) -> Trajectory:
    """Return a validated `Trajectory`, deriving qd from q and qdd from qd where missing."""
    time = np.asarray(time, dtype=np.float64)
    check_time(time, source)   # before the derivatives divide by its period
    if derive and _needs_derivative(q, qd, qdd):
        if time.size < _derivative_rows(time, derivative_window_s):
            raise ValueError(f'{source}: {time.size} samples are too few to derive qd / qdd '
                             f'over {derivative_window_s} s (after a split: use larger blocks)')
        if qd is None and q is not None:
            qd = savgol_at_stamps(time, continuous_angles(q), derivative_window_s, deriv=1)
        if qdd is None:
            qdd = savgol_at_stamps(time, np.asarray(qd, np.float64), derivative_window_s,
                                   deriv=1)
    width = next((np.shape(a)[1] for a in (q, qd, tau) if a is not None and np.ndim(a) == 2), 0)
    names = list(joint_names) if joint_names else default_joint_names(width)
    return Trajectory(time=time, joint_names=names, q=q, qd=qd, qdd=qdd, tau=tau,
                      observations=observations, actions=actions, source=source)


def read_table(path: Union[str, Path]) -> Dict[str, np.ndarray]:
    """
    Read a numeric CSV (header row) or an npz file into {name: array}; ValueError if not.

    CSV as loggers and spreadsheets write them: comma, semicolon or tab separated (told by
    the header), gzip-compressed (.csv.gz), lines starting with '#' skipped, empty and 'NA'
    cells read as NaN (`trajectories_from_table` skips and counts their rows), and a last line
    cut short (a logger stopped mid-write) dropped with a warning.
    """
    path = Path(path)
    if path.suffix.lower() == '.npz':
        try:
            with np.load(path, allow_pickle=False) as data:
                return {name: np.asarray(data[name]) for name in data.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
            if isinstance(error, FileNotFoundError):
                raise
            raise ValueError(f'{path}: not a readable npz file of numeric arrays '
                             f'({type(error).__name__})') from None
    if _text_suffix(path) not in ('.csv', '.txt'):
        raise ValueError(f'{path}: expected a .csv, .csv.gz or .npz file')
    try:
        with _open_text(path) as handle:
            first = next(_data_lines(handle), None)
        if first is None:
            raise ValueError(f'{path}: empty file')
        delimiter = _delimiter(first[1])
        fast = _read_plain_csv(path, first[1], delimiter)
        if fast is not None:
            return fast
        with _open_text(path) as handle:   # the careful reader: every line, numbered
            numbered = list(_data_lines(handle))
            rows = [(n, row) for (n, _), row in
                    zip(numbered, csv.reader((line for _, line in numbered),
                                             delimiter=delimiter))]
    except (UnicodeDecodeError, OSError, EOFError, csv.Error) as error:
        if isinstance(error, FileNotFoundError):
            raise
        raise ValueError(f'{path}: not a text CSV ({type(error).__name__}: {error})') from None
    header = [name.strip() for name in rows[0][1]]
    doubled = sorted({name for name in header if header.count(name) > 1})
    if doubled:
        raise ValueError(f'{path}: header names {doubled} more than once')
    if len(rows) > 2 and len(rows[-1][1]) < len(header):
        LOG.warning('%s: the last line (%d) has %d of %d cells (a logger stopped '
                    'mid-write?): skipped', path, rows[-1][0], len(rows[-1][1]), len(header))
        rows = rows[:-1]
    values = np.empty((len(rows) - 1, len(header)))
    for i, (line, row) in enumerate(rows[1:]):
        if len(row) != len(header):
            raise ValueError(f'{path}: line {line} has {len(row)} cells, the header '
                             f'{len(header)}' + _separator_hint(delimiter, row))
        try:
            values[i] = [_cell(v) for v in row]
        except ValueError:
            cell = next(k for k, v in enumerate(row) if not _is_number(v))
            raise ValueError(f'{path}: line {line}, column {header[cell]!r}: non-numeric cell '
                             f'{row[cell]!r}' + _separator_hint(delimiter, row)) from None
    if not values.shape[0]:
        raise ValueError(f'{path}: no data rows under the header')
    table = {name: values[:, i] for i, name in enumerate(header)}
    for k, name in enumerate(header):
        if name.endswith(NANOSECONDS_SUFFIX):
            try:
                table[name] = np.array([int(row[k]) for _, row in rows[1:]], np.int64)
            except (ValueError, OverflowError):
                pass   # empty or float cells: the float column stands (rows skipped as NaN)
    return table


def _data_lines(handle) -> Iterator[Tuple[int, str]]:
    """
    Yield (line number, line) of a text file, less blank lines and '#' comments.

    A comment right above a first line of numbers is its header: `np.savetxt` writes the
    header as '# time,q_0,...' unless told `comments=''`.
    """
    comment, first = None, True
    for number, line in enumerate(handle, 1):
        stripped = line.strip()
        if stripped.startswith('#'):
            comment = (number, stripped.lstrip('#').strip())
        elif stripped:
            if first and comment is not None and all(
                    _is_number(cell) for cell in re.split('[,;\t]', stripped)):
                yield comment
            first, comment = False, None
            yield number, line.rstrip('\r\n')


def _text_suffix(path: Path) -> str:
    """Return the suffix of the text inside: '.csv' for data.csv and data.csv.gz."""
    suffixes = [s.lower() for s in path.suffixes]
    return suffixes[-2] if suffixes[-1:] == ['.gz'] and len(suffixes) > 1 else path.suffix.lower()


def _open_text(path: Path):
    """Open a CSV (gzip-compressed if it ends in .gz) as text; a BOM (Excel) is dropped."""
    if path.suffix.lower() == '.gz':
        return gzip.open(path, 'rt', encoding='utf-8-sig', newline='')
    return open(path, encoding='utf-8-sig', newline='')


def _delimiter(header: str) -> str:
    """Return the header's separator: ',' unless it holds none and ';' or a tab instead."""
    if ',' in header:
        return ','
    return next((d for d in (';', '\t') if d in header), ',')


def _separator_hint(delimiter: str, row: Sequence[str]) -> str:
    """Say what a bad row may mean: decimal commas, or another separator than the header's."""
    if delimiter != ',' and any(re.fullmatch(r'\s*-?\d+,\d+\s*', cell) for cell in row):
        return '; numbers with a decimal comma? write them with a decimal point'
    if any(d in cell for cell in row for d in {',', ';', '\t'} - {delimiter}):
        return '; the rows use another separator than the header?'
    return ''


def _read_plain_csv(path: Path, header_line: str, delimiter: str
                    ) -> Optional[Dict[str, np.ndarray]]:
    """
    Read a CSV of numbers only with numpy's C parser; None where the careful reader must.

    A 112 MB, 200 000-row file took 8 s and 430 MB with the cell-by-cell reader, 1.6 s and
    38 MB here (the lines stream from the file). Empty cells, text, quotes or ragged rows
    fall back (None).
    """
    header = [name.strip() for name in next(csv.reader([header_line], delimiter=delimiter))]

    def numbers(dtype: type, **options) -> np.ndarray:
        with _open_text(path) as handle, warnings.catch_warnings():
            warnings.simplefilter('ignore', UserWarning)   # no rows: the careful reader says
            rows = (line for _, line in itertools.islice(_data_lines(handle), 1, None))
            return np.loadtxt(rows, delimiter=delimiter, ndmin=2, comments=None, dtype=dtype,
                              **options)

    try:
        values = numbers(np.float64)
    except ValueError:
        return None
    if values.shape[0] == 0 or values.shape[1] != len(header) or len(set(header)) < len(header):
        return None
    table = {name: values[:, i] for i, name in enumerate(header)}
    stamps = [i for i, name in enumerate(header) if name.endswith(NANOSECONDS_SUFFIX)]
    if stamps:
        try:
            exact = numbers(np.int64, usecols=stamps)
        except (ValueError, OverflowError):
            exact = None   # not integer text: the float column stands
        if exact is not None and exact.shape[0] == values.shape[0]:
            table.update({header[i]: exact[:, k] for k, i in enumerate(stamps)})
    return table


# Cells that mean "no value" (R, Excel, pandas): read as NaN, their rows skipped and counted.
MISSING_CELLS = frozenset({'', 'na', 'n/a', '#n/a', 'null', 'none', 'nil'})


def _cell(text: str) -> float:
    """Read one CSV cell; an empty or 'NA' one is NaN, then skipped with its row."""
    return math.nan if text.strip().lower() in MISSING_CELLS else float(text)


def _is_number(text: str) -> bool:
    """Return whether `_cell` reads the cell (to name the first bad cell of a row)."""
    try:
        _cell(text)
    except ValueError:
        return False
    return True


def load_trajectories(path: Union[str, Path], columns: Optional[ColumnSpec] = None,
                      dt: Optional[float] = None, joint_names: Optional[Sequence[str]] = None,
                      derivative_window_s: float = DEFAULT_DERIVATIVE_WINDOW_S,
                      derive: bool = True) -> List[Trajectory]:
    """Load one CSV or npz recording as its contiguous pieces (`trajectories_from_table`)."""
    return trajectories_from_table(read_table(path), columns, dt, joint_names,
                                   derivative_window_s, source=str(path), derive=derive)


def load_files(paths: Sequence[Union[str, Path]], columns: Optional[ColumnSpec] = None,
               dt: Optional[float] = None,
               derivative_window_s: float = DEFAULT_DERIVATIVE_WINDOW_S,
               derive: bool = True, order: Optional[Mapping[str, Sequence[str]]] = None
               ) -> List[Trajectory]:
    """
    Load several recordings as their pieces, matching each field's columns by name.

    A pattern takes columns in each file's own order: a file holding the first file's
    columns in another order would swap its joints silently, so it is read in the first
    file's order, or in `order` ({field: column names}, e.g. a training's `file_columns`).
    Files with other columns keep their own (widths are the caller's check).
    """
    trajectories: List[Trajectory] = []
    first = {field: [glob.escape(n) for n in v] for field, v in (order or {}).items()}
    for path in paths:
        table = read_table(path)
        names = _field_arrays(table, columns, dt, str(path))[3]
        first = first or {field: [glob.escape(n) for n in v] for field, v in names.items()}
        same = names.keys() == first.keys() and all(
            sorted(glob.escape(n) for n in names[field]) == sorted(first[field])
            for field in names)
        trajectories += trajectories_from_table(table, first if same else columns, dt,
                                                derivative_window_s=derivative_window_s,
                                                source=str(path), derive=derive)
    return trajectories


def file_columns(path: Union[str, Path], columns: Optional[ColumnSpec] = None,
                 dt: Optional[float] = None) -> Dict[str, List[str]]:
    """Return the column names each field takes from `path` ({field: names, in order})."""
    return _field_arrays(read_table(path), columns, dt, str(path))[3]


def load_trajectory(path: Union[str, Path], columns: Optional[ColumnSpec] = None,
                    dt: Optional[float] = None, joint_names: Optional[Sequence[str]] = None,
                    derivative_window_s: float = DEFAULT_DERIVATIVE_WINDOW_S) -> Trajectory:
    """Load one CSV or npz recording as a `Trajectory` (see `trajectory_from_table`)."""
    return trajectory_from_table(read_table(path), columns, dt, joint_names,
                                 derivative_window_s, source=str(path))
