"""
`Trajectory` from the user's own recordings: arrays, CSV or npz files with named columns.

A column spec maps a trajectory field ('time', 'q', 'qd', 'qdd', 'tau', 'observations',
'actions') to column names or shell patterns, matched in file order and stacked, e.g.
`{'q': ['Position*'], 'tau': ['Torque[0-9]']}`. Missing qd and qdd are derived from q and qd
with the package's zero-phase Savitzky-Golay differentiator (`signals.offline`).
"""
import csv
import fnmatch
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.signals.offline import savgol_derivative

FIELDS = ('time', 'q', 'qd', 'qdd', 'tau', 'observations', 'actions')
# Differentiator window: 31 ms suits 250 Hz-1 kHz arms (Kinova 31 ms, Schunk 44 ms).
DEFAULT_DERIVATIVE_WINDOW_S = 0.031
ColumnSpec = Mapping[str, Union[str, Sequence[str]]]


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
    """Columns named like the fields: 'q' or 'q_*' (and 'time' or 't') where the table has them."""
    spec = {}
    for field in FIELDS:
        patterns = [field, f'{field}_*'] + (['t'] if field == 'time' else [])
        if any(fnmatch.fnmatchcase(name, p) for name in names for p in patterns):
            spec[field] = patterns
    return spec


def _select(table: Mapping[str, np.ndarray], patterns: Sequence[str], field: str,
            source: str) -> np.ndarray:
    """Stack the table's columns matching `patterns` (in table order) into (T, k)."""
    chosen = [name for pattern in patterns for name in table
              if fnmatch.fnmatchcase(name, pattern)]
    chosen = list(dict.fromkeys(chosen))
    if not chosen:
        raise ValueError(f'{source}: no column matches {list(patterns)} for {field}; '
                         f'columns are {list(table)[:20]}')
    parts = [np.asarray(table[name], dtype=np.float64) for name in chosen]
    return np.concatenate([p.reshape(p.shape[0], -1) for p in parts], axis=1)


def trajectory_from_table(table: Mapping[str, np.ndarray], columns: Optional[ColumnSpec] = None,
                          dt: Optional[float] = None, joint_names: Optional[Sequence[str]] = None,
                          derivative_window_s: float = DEFAULT_DERIVATIVE_WINDOW_S,
                          source: str = 'table') -> Trajectory:
    """
    Build a `Trajectory` from named arrays (T,) or (T, k) chosen by `columns`.

    Time comes from the 'time' column or, without one, from `dt`. Missing qd / qdd are the
    Savitzky-Golay derivatives of q / qd over `derivative_window_s`. Raises ValueError naming
    the source on a missing column, a non-finite value or inconsistent lengths.
    """
    spec = dict(columns) if columns else default_columns(list(table))
    unknown = sorted(set(spec) - set(FIELDS))
    if unknown:
        raise ValueError(f'{source}: unknown field(s) {unknown}; fields are {list(FIELDS)}')
    arrays = {field: _select(table, [patterns] if isinstance(patterns, str) else patterns,
                             field, source) for field, patterns in spec.items()}
    for field, array in arrays.items():
        if not np.isfinite(array).all():
            bad = int((~np.isfinite(array)).sum())
            raise ValueError(f'{source}: {field} holds {bad} non-finite value(s)')
    if 'time' in arrays:
        time = arrays.pop('time')[:, 0]
    elif dt is not None and dt > 0:
        length = next(iter(arrays.values())).shape[0] if arrays else 0
        time = np.arange(length) * float(dt)
    else:
        raise ValueError(f'{source}: give a time column or a positive dt')
    return trajectory_from_arrays(time, joint_names=joint_names,
                                  derivative_window_s=derivative_window_s, source=source,
                                  **arrays)


def trajectory_from_arrays(time: np.ndarray, q: Optional[np.ndarray] = None,
                           qd: Optional[np.ndarray] = None, qdd: Optional[np.ndarray] = None,
                           tau: Optional[np.ndarray] = None,
                           observations: Optional[np.ndarray] = None,
                           actions: Optional[np.ndarray] = None,
                           joint_names: Optional[Sequence[str]] = None,
                           derivative_window_s: float = DEFAULT_DERIVATIVE_WINDOW_S,
                           source: str = 'arrays') -> Trajectory:
    """Return a validated `Trajectory`, deriving qd from q and qdd from qd where missing."""
    time = np.asarray(time, dtype=np.float64)
    if time.size > 1 and (qd is None and q is not None or qdd is None and
                          (qd is not None or q is not None)):
        period = float(np.median(np.diff(time)))
        if qd is None and q is not None:
            qd = savgol_derivative(np.asarray(q, np.float64), period, derivative_window_s,
                                   order=3, deriv=1)
        if qdd is None:
            qdd = savgol_derivative(np.asarray(qd, np.float64), period, derivative_window_s,
                                    order=3, deriv=1)
    width = next((np.shape(a)[1] for a in (q, qd, tau) if a is not None and np.ndim(a) == 2), 0)
    names = list(joint_names) if joint_names else [f'joint_{i + 1}' for i in range(width)]
    return Trajectory(time=time, joint_names=names, q=q, qd=qd, qdd=qdd, tau=tau,
                      observations=observations, actions=actions, source=source)


def read_table(path: Union[str, Path]) -> Dict[str, np.ndarray]:
    """Read a numeric CSV (header row) or an npz file into {name: array}."""
    path = Path(path)
    if path.suffix == '.npz':
        with np.load(path, allow_pickle=False) as data:
            return {name: np.asarray(data[name]) for name in data.files}
    if path.suffix not in ('.csv', '.txt'):
        raise ValueError(f'{path}: expected a .csv or .npz file')
    with open(path, newline='') as handle:
        reader = csv.reader(handle)
        header = [name.strip() for name in next(reader, [])]
        try:
            rows = [[float(v) for v in row] for row in reader if row]
        except ValueError as error:
            raise ValueError(f'{path}: non-numeric cell ({error})') from None
    if not header or any(len(row) != len(header) for row in rows):
        raise ValueError(f'{path}: every row must have the {len(header)} header columns')
    values = np.array(rows, dtype=np.float64).reshape(len(rows), len(header))
    return {name: values[:, i] for i, name in enumerate(header)}


def load_trajectory(path: Union[str, Path], columns: Optional[ColumnSpec] = None,
                    dt: Optional[float] = None, joint_names: Optional[Sequence[str]] = None,
                    derivative_window_s: float = DEFAULT_DERIVATIVE_WINDOW_S) -> Trajectory:
    """Load one CSV or npz recording as a `Trajectory` (see `trajectory_from_table`)."""
    return trajectory_from_table(read_table(path), columns, dt, joint_names,
                                 derivative_window_s, source=str(path))
