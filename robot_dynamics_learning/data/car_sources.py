"""
A user's own car recordings: rosbag2 folders and DART-style CSV trees -> car drives.

Bags: PoseStamped mocap poses plus Joy, Twist or TwistStamped commands, with the topics,
Joy axes, scales and the Joy deadman button as options (`BagOptions`). Both sources take a
yaw offset (a mocap rigid body whose x axis is not the car's forward) and are checked for it
(`data/car_heading.py`): a car that travels sideways or backward against its heading is
refused, naming the offset to set. CSV trees: any
folder holding DART-style CSV files with Vicon columns at any depth (the DART repository's
`<set>/<file>.csv` and `<set>/csv/<file>.csv` layouts both work); files without Vicon columns
(IMU-only recordings) are skipped. A user's data is damaged in ordinary ways (a truncated
last line, a mocap NaN, a file that is not a recording at all): what is skipped is logged
with its reason and count, and only data that is unusable as a whole is an error.
"""
import dataclasses
from dataclasses import dataclass, field
import logging
import math
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np
from robot_dynamics_learning.data import bag_io
from robot_dynamics_learning.data.car_heading import judge_drives
from robot_dynamics_learning.data.datasets import is_vicon_csv, load_rc_car
from robot_dynamics_learning.data.messages import CommandMapping
from robot_dynamics_learning.data.trajectory import Trajectory

LOG = logging.getLogger(__name__)
SOURCES = ('sim', 'dart', 'bag', 'csv')


@dataclass(frozen=True)
class BagOptions:
    """
    How to read a user's car recordings.

    Bags: topics, command mapping and deadman button (Joy index, None: none). Bags and CSV
    files: yaw_offset_deg, added to the mocap yaw; heading_check, refuse recordings whose
    car travels off its heading (`car_heading.HeadingVerdict`).
    """

    pose_topic: str = bag_io.CAR_POSE_TOPIC
    command_topic: str = bag_io.CAR_COMMAND_TOPIC
    mapping: CommandMapping = field(default_factory=CommandMapping)
    safety_button: Optional[int] = None
    typestore: str = 'jazzy'
    yaw_offset_deg: float = 0.0
    heading_check: bool = True

    def __post_init__(self) -> None:
        """Refuse a negative button index: Python would read it from the end of the list."""
        if self.safety_button is not None and not (
                isinstance(self.safety_button, int) and self.safety_button >= 0):
            raise ValueError(f'safety_button must be a Joy button index >= 0, got '
                             f'{self.safety_button}')
        if not (math.isfinite(self.yaw_offset_deg) and abs(self.yaw_offset_deg) <= 360):
            raise ValueError(f'yaw_offset_deg must be within +-360 degrees, got '
                             f'{self.yaw_offset_deg}')


def oriented(drives: List[Trajectory], options: BagOptions) -> List[Trajectory]:
    """Return the drives with the yaw offset added, refused if they travel off their heading."""
    if options.yaw_offset_deg:
        offset = np.array([0.0, 0.0, math.radians(options.yaw_offset_deg)])
        drives = [dataclasses.replace(d, observations=d.observations + offset) for d in drives]
    if options.heading_check:
        problem = judge_drives(drives).problem()
        if problem is not None:
            raise ValueError(problem)
    return drives


def car_csv_files(root: Path) -> List[Path]:
    """Return the CSV files under `root` (any depth) that carry Vicon poses, sorted."""
    root = Path(root)
    if root.is_file():
        candidates = [root]
    elif root.is_dir():
        candidates = sorted(root.rglob('*.csv'))
    else:
        raise FileNotFoundError(f'no CSV file or folder at {root}')
    with_vicon = [path for path in candidates if is_vicon_csv(path)]
    if not with_vicon:
        raise FileNotFoundError(f"{root}: no CSV file with a 'vicon time' column (DART "
                                f'layout: <set>/<file>.csv or <set>/csv/<file>.csv)')
    return with_vicon


def load_car_csvs(files: Sequence[Path], options: BagOptions = BagOptions()
                  ) -> List[Trajectory]:
    """Load DART-style CSV files; one unreadable or without throttle is skipped, with why."""
    drives, reasons = [], []
    for path in files:
        try:
            drives.append(with_throttle(load_rc_car(path)))
        except (ValueError, OSError) as error:
            LOG.warning('skipping %s', error)
            reasons.append(str(error))
    if not drives:   # the first reason in the error: the warnings may scroll away or be off
        raise ValueError(f'none of the {len(files)} CSV files could be read; the first: '
                         f'{reasons[0]}')
    return oriented(drives, options)


def with_throttle(drive: Trajectory) -> Trajectory:
    """Return a CSV drive, refused when its throttle, masked by safety_value, is 0 throughout."""
    throttle = drive.actions[:, 0]
    if not np.any(np.abs(throttle) > 0):   # NaN too
        raise ValueError(bag_io.no_throttle(
            drive.source, f'safety_value is never 1 or the throttle is 0 in all {throttle.size} '
                          'rows', 'check the safety_value and throttle columns'))
    return drive


def load_car_bags(paths: Sequence[Path], options: BagOptions = BagOptions(),
                  progress: bool = False) -> List[Trajectory]:
    """
    Read one drive per bag folder (poses + commands, see `bag_io.read_car_trajectory`).

    A bag that cannot be used (a recording killed before it wrote metadata.yaml, a topic
    missing or of another type) is skipped with its reason, as a damaged CSV file is: one
    such bag among many ended the whole run. None usable: the (first) reason is the error.
    """
    drives, reasons = [], []
    for path in paths:
        try:
            drives.append(bag_io.read_car_trajectory(
                path, options.pose_topic, options.command_topic, options.mapping,
                options.safety_button, options.typestore, progress))
        except (ValueError, OSError) as error:
            if len(paths) > 1:   # one bag alone: its reason is the error
                LOG.warning('skipping bag %s: %s', path, error)
            reasons.append(str(error))
    if not drives:
        raise ValueError(reasons[0] if len(reasons) == 1 else
                         f'none of the {len(reasons)} bags could be read; the first: '
                         f'{reasons[0]}')
    return oriented(drives, options)


def car_source_files(source: str, paths: Sequence[Path]) -> List[Path]:
    """Return the recordings of a user source: bag folders, or the CSV files under paths."""
    if not paths:
        raise ValueError(f"source '{source}' needs data paths (--data)")
    if source == 'bag':
        files = [Path(p) for p in paths]
    elif source == 'csv':
        files = [f for root in paths for f in car_csv_files(root)]
    else:
        raise ValueError(f"unknown user data source '{source}'; use 'bag' or 'csv'")
    unique = {f.resolve(): f for f in files}   # a file named twice is one recording
    return list(unique.values())


def load_car_drives(source: str, paths: Sequence[Path], options: BagOptions = BagOptions(),
                    progress: bool = False, exclude: Sequence[Path] = ()) -> List[Trajectory]:
    """
    Load drives of a user source: 'bag' (bag folders) or 'csv' (files or folder trees).

    exclude: recordings never to load (the test files, which may lie inside a --data tree:
    training on them would score the model on its own training data).
    """
    files = car_source_files(source, paths)
    held = {Path(p).resolve() for p in exclude}
    kept = [f for f in files if f.resolve() not in held]
    if len(kept) < len(files):
        LOG.warning('not training on %d test recording(s) found under the training data',
                    len(files) - len(kept))
    if not kept:
        raise ValueError('every training recording is also a test recording; give other '
                         '--data than --test-data')
    if source == 'bag':
        return load_car_bags(kept, options, progress)
    return load_car_csvs(kept, options)
