"""
Loaders for the real robot recordings in `../shared/data/` (see its README).

Every loader returns `Trajectory` objects in SI units. Set RDL_DATA_DIR to point elsewhere;
without either, a source checkout falls back to its trimmed fixtures (test/fixtures/data).
"""
import bisect
import csv
import json
import logging
import os
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np

from robot_dynamics_learning.data.loading import read_table
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.resources import source_root
from robot_dynamics_learning.signals.offline import savgol_derivative

LOG = logging.getLogger(__name__)
# The columns of a DART CSV that a car drive needs (the others, IMU and encoder, are unused).
RC_CAR_COLUMNS = ('vicon time', 'vicon x', 'vicon y', 'vicon yaw', 'throttle', 'steering',
                  'safety_value')

KINOVA_JOINTS = [f'joint_{i}' for i in range(1, 8)]
KINOVA_TRAIN_FILES = ('RunTrajectory1.csv', 'RecordTrajectory_quadratic.csv')
KINOVA_TEST_FILES = ('opti_traj_testing1.csv', 'opti_traj_testing2.csv')
KINOVA_DT = 1e-3
# Window of the Savitzky-Golay differentiator that turns velocity into acceleration (Kinova).
KINOVA_ACC_WINDOW_S = 0.031
SCHUNK_JOINTS = [f'arm_{i}_joint' for i in range(1, 7)]
SCHUNK_ACC_WINDOW_S = 0.044  # 11 samples at 250 Hz
PNEUMATIC_JOINTS = [f'pam_joint_{i}' for i in range(1, 5)]
PNEUMATIC_DT = 0.01
# Trimmed copies of the real recordings (provenance in its PROVENANCE.md), for the tests.
FIXTURE_DATA = Path('test') / 'fixtures' / 'data'


def shared_data_dir() -> Path:
    """
    Return the real-data folder.

    Order: $RDL_DATA_DIR; else ../shared/data beside the repository (the full recordings);
    else the trimmed fixtures in test/fixtures/data of a source checkout (a few files of each
    set, enough for the tests: `full_data_available()` says which one is in use).
    """
    env = os.environ.get('RDL_DATA_DIR')
    if env:
        return Path(env)
    root = source_root()
    if root is not None and (root.parent / 'shared' / 'data').is_dir():
        return root.parent / 'shared' / 'data'
    if root is not None and (root / FIXTURE_DATA).is_dir():
        return root / FIXTURE_DATA
    raise FileNotFoundError('no real-robot data: set RDL_DATA_DIR to a copy of the shared '
                            'data (kinova_gen3/, pneumatic_arm/, schunk_lwa4p/, rc_car_dart/)')


def full_data_available() -> bool:
    """Return False when only the trimmed test fixtures are there (benchmarks need full sets)."""
    try:
        folder = shared_data_dir()
    except FileNotFoundError:
        return False
    root = source_root()
    return root is None or folder.resolve() != (root / FIXTURE_DATA).resolve()


def require_full_data(purpose: str) -> None:
    """Raise FileNotFoundError unless the full recordings are there (not only the fixtures)."""
    if not full_data_available():
        raise FileNotFoundError(f'{purpose} needs the full real-robot recordings; only the '
                                'trimmed test fixtures were found: set RDL_DATA_DIR to a copy '
                                'of the shared data')


def load_kinova(path: Path, torque: str = 'Torque') -> Trajectory:
    """
    Load one Kinova Gen3 CSV (1 kHz) as inverse-dynamics data.

    torque selects the target column family: 'Torque' (default; torque from motor current,
    valid on all 7 joints), 'TorqueCur' (nearly equal) or 'TorqueSm' (joint torque sensors;
    joint 1 reads exactly 0 throughout every recording, so it is unusable as a target).
    qdd is the Savitzky-Golay derivative (cubic, 31 ms window, zero phase) of the measured
    velocity.
    """
    if torque not in ('TorqueSm', 'Torque', 'TorqueCur'):
        raise ValueError(f"unknown Kinova torque column family '{torque}'")
    columns = read_table(Path(path))

    def stack(prefix: str) -> np.ndarray:
        return np.stack([columns[f'{prefix}{i}'] for i in range(1, 8)], axis=1)

    qd = stack('Velocity')
    time = np.arange(qd.shape[0]) * KINOVA_DT
    qdd = savgol_derivative(qd, KINOVA_DT, KINOVA_ACC_WINDOW_S, order=3, deriv=1)
    return Trajectory(time=time, joint_names=list(KINOVA_JOINTS), q=stack('Position'), qd=qd,
                      qdd=qdd, tau=stack(torque),
                      units={'q': 'rad', 'qd': 'rad/s', 'qdd': 'rad/s^2', 'tau': 'N m'},
                      source=f'{path} (torque={torque})')


def load_kinova_split(torque: str = 'Torque', root: Optional[Path] = None):
    """Return (train, test) lists: identification files vs. validation files."""
    folder = Path(root or shared_data_dir()) / 'kinova_gen3'
    train = [load_kinova(folder / name, torque) for name in KINOVA_TRAIN_FILES]
    test = [load_kinova(folder / name, torque) for name in KINOVA_TEST_FILES]
    return train, test


def load_pneumatic(root: Optional[Path] = None, cumulative_actions: bool = True,
                   limit: Optional[int] = None) -> List[Trajectory]:
    """
    Load the pneumatic-arm episodes (100 Hz) as forward-dynamics data.

    observations are the 4 joint angles (ob[:, 0:4], the paper's observation); actions are the
    8 pressure increments, summed over time when cumulative_actions (as the paper's code does).
    Episodes are sorted by file name for reproducible splits.
    """
    folder = Path(root or shared_data_dir()) / 'pneumatic_arm'
    files = sorted(folder.glob('*.json'))[:limit]
    if not files:
        raise FileNotFoundError(f'no pneumatic-arm episodes in {folder}')
    trajectories = []
    for path in files:
        episode = json.loads(path.read_text())
        observations = np.asarray(episode['ob'], dtype=np.float64)[:, :4]
        actions = np.asarray(episode['action'], dtype=np.float64)
        if cumulative_actions:
            actions = np.cumsum(actions, axis=0)
        n = min(observations.shape[0], actions.shape[0])  # a few episodes hold one extra action
        observations, actions = observations[:n], actions[:n]
        time = np.arange(observations.shape[0]) * PNEUMATIC_DT
        trajectories.append(Trajectory(
            time=time, joint_names=list(PNEUMATIC_JOINTS), q=observations,
            observations=observations, actions=actions,
            units={'q': 'rad', 'observations': 'rad', 'actions': 'pressure (a.u.)'},
            source=str(path)))
    return trajectories


def load_schunk(root: Optional[Path] = None, runs: Optional[Sequence[int]] = None
                ) -> List[Trajectory]:
    """
    Load Schunk LWA 4P runs (250 Hz) as forward- and inverse-dynamics data.

    observations are [q, qd] (12), actions the 6 motor torques (also `tau`). `input.csv` has
    one row fewer than the states, so the last state is dropped: action t acts between state
    t and t+1. qdd is the Savitzky-Golay derivative (cubic, 44 ms window, zero phase) of the
    measured velocity.
    """
    folder = Path(root or shared_data_dir()) / 'schunk_lwa4p'
    if runs is None:
        runs = sorted(int(p.name.split('_')[1]) for p in folder.glob('measurement_*'))
    trajectories = []
    for run in runs:
        run_dir = folder / f'measurement_{run}'
        states = np.loadtxt(run_dir / 'trajectory.csv', delimiter=',', ndmin=2)
        inputs = np.loadtxt(run_dir / 'input.csv', delimiter=',', ndmin=2)
        time = np.loadtxt(run_dir / 'time.csv', delimiter=',', ndmin=1)
        n = min(states.shape[0], inputs.shape[0], time.shape[0])
        qdd = savgol_derivative(states[:n, 6:12], float(np.median(np.diff(time[:n]))),
                                SCHUNK_ACC_WINDOW_S, order=3, deriv=1)
        trajectories.append(Trajectory(
            time=time[:n], joint_names=list(SCHUNK_JOINTS), q=states[:n, :6],
            qd=states[:n, 6:12], qdd=qdd, tau=inputs[:n], observations=states[:n],
            actions=inputs[:n],
            units={'q': 'rad', 'qd': 'rad/s', 'qdd': 'rad/s^2', 'tau': 'N m',
                   'actions': 'N m'},
            source=str(run_dir)))
    if not trajectories:
        raise FileNotFoundError(f'no Schunk runs in {folder}')
    return trajectories


def split_pneumatic(episodes: Sequence[Trajectory], train_share: float = 0.8
                    ) -> Tuple[List[Trajectory], List[Trajectory]]:
    """(train, test) pneumatic episodes: the first `train_share` in sorted order train."""
    cut = int(round(len(episodes) * train_share))
    return list(episodes[:cut]), list(episodes[cut:])


def split_schunk(runs: Sequence[Trajectory]) -> Tuple[List[Trajectory], List[Trajectory]]:
    """
    (train, test) Schunk runs: every fifth run from the third tests, the others train.

    Runs 1-79 move near one configuration and run 80 alone sweeps every joint, so testing on
    the last runs measures extrapolation to run 80. The last training run (run 80 for the
    full set) goes first, so a validation split cut from the last windows stays in range.
    """
    train = [run for i, run in enumerate(runs) if i % 5 != 2]
    return train[-1:] + train[:-1], [run for i, run in enumerate(runs) if i % 5 == 2]


def increasing_rows(time: np.ndarray) -> np.ndarray:
    """
    Return a mask of the fewest rows to drop so that `time` strictly increases.

    The longest increasing subsequence: dropping every row behind the running maximum let one
    row stamped far ahead hide the rest of a recording. Of equally long ones it keeps the
    earliest rows, as a running check would (of 10, 5, 80: 10 and 80).
    """
    return _latest_increasing_rows(-np.asarray(time)[::-1])[::-1]


def _latest_increasing_rows(time: np.ndarray) -> np.ndarray:
    """Return the longest increasing subsequence, of equally long ones the latest rows."""
    tails: List[int] = []    # tails[k]: the row ending the best increasing run of k + 1 rows
    tail_times: List[float] = []
    before = np.full(len(time), -1)
    for row, t in enumerate(time.tolist()):
        k = bisect.bisect_left(tail_times, t)
        if k:
            before[row] = tails[k - 1]
        if k == len(tails):
            tails.append(row)
            tail_times.append(t)
        else:
            tails[k], tail_times[k] = row, t
    keep = np.zeros(len(time), dtype=bool)
    row = tails[-1] if tails else -1
    while row >= 0:
        keep[row] = True
        row = before[row]
    return keep


def load_rc_car(path: Path) -> Trajectory:
    """
    Load one DART RC-car CSV: Vicon pose (~100 Hz) and normalised commands.

    observations are [x, y, yaw] (m, m, rad, yaw unwrapped over its finite values: one NaN
    must not make every later yaw NaN); actions are [throttle in [0, 1], steering in [-1, 1]]
    with throttle zeroed where safety_value == 0 (as the source's loader does). A user's file
    is damaged in ordinary ways: rows that do not parse (a truncated last line) are skipped,
    rows before the first Vicon sample and the fewest rows whose removal makes the Vicon time
    increase (`increasing_rows`) are dropped, each counted in a warning. Non-finite values
    stay in for `car_dataset`, which drops and counts them. ValueError if the file is not a
    Vicon recording.
    """
    try:
        with open(path, newline='', encoding='utf-8-sig') as handle:
            reader = csv.reader(handle)
            header = [name.strip() for name in next(reader, [])]
            missing = [c for c in RC_CAR_COLUMNS if c not in header]
            if missing:
                raise ValueError(f'{path}: no column(s) {missing} (IMU/encoder-only recording?)')
            columns = [header.index(c) for c in RC_CAR_COLUMNS]
            rows, malformed = [], 0
            for row in reader:
                try:
                    if row:
                        rows.append([float(row[i]) for i in columns])
                except (ValueError, IndexError):
                    malformed += 1
    except UnicodeDecodeError:
        raise ValueError(f'{path}: not a text CSV file') from None
    if not rows:
        raise ValueError(f'{path}: no readable data rows ({malformed} malformed)')
    time, x, y, yaw, throttle, steering, safety = np.array(rows).T
    stamped = np.isfinite(time) & (time > 0)   # rows before the first Vicon sample: time 0
    keep = np.zeros(len(time), dtype=bool)
    keep[np.flatnonzero(stamped)[increasing_rows(time[stamped])]] = True
    skipped = {'malformed rows': malformed,
               'rows without a finite time': int((~np.isfinite(time)).sum()),
               'rows with a repeated or backwards time': int((stamped & ~keep).sum())}
    if any(skipped.values()):
        LOG.warning('%s: skipped %s', path,
                    ', '.join(f'{n} {k}' for k, n in skipped.items() if n))
    if keep.sum() < 2:
        raise ValueError(f'{path}: fewer than two rows with a Vicon time')
    yaw = yaw[keep]
    finite = np.isfinite(yaw)
    yaw[finite] = np.unwrap(yaw[finite])
    time = time[keep]
    return Trajectory(time=time - time[0], observations=np.stack([x[keep], y[keep], yaw], 1),
                      actions=np.stack([np.where(safety == 0, 0.0, throttle)[keep],
                                        steering[keep]], 1),
                      units={'observations': 'm, m, rad',
                             'actions': 'throttle [0,1], steering [-1,1]'},
                      source=str(path))


def rc_car_files(root: Optional[Path] = None) -> List[Path]:
    """
    DART CSV files that carry Vicon poses, sorted (two folders are IMU/encoder only).

    Both layouts of the DART repository: <set>/<file>.csv and <set>/csv/<file>.csv.
    """
    folder = Path(root or shared_data_dir()) / 'rc_car_dart'
    return [path for path in sorted([*folder.glob('*/*.csv'), *folder.glob('*/csv/*.csv')])
            if is_vicon_csv(path)]


def is_vicon_csv(path: Path) -> bool:
    """Return whether a CSV's header names a Vicon time (IMU/encoder-only files have none)."""
    # errors='replace': a binary file named .csv has no Vicon header, it is not a crash
    with open(path, encoding='utf-8-sig', errors='replace') as handle:
        return 'vicon time' in handle.readline()
