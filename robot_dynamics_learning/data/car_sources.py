"""
A user's own car recordings: rosbag2 folders and DART-style CSV trees -> car drives.

Bags: PoseStamped mocap poses plus Joy, Twist or TwistStamped commands, with the topics,
Joy axes, scales and the Joy deadman button as options (`BagOptions`). CSV trees: any
folder holding DART-style CSV files with Vicon columns at any depth (the DART repository's
`<set>/<file>.csv` and `<set>/csv/<file>.csv` layouts both work); files without Vicon columns
(IMU-only recordings) are skipped. A user's data is damaged in ordinary ways (a truncated
last line, a mocap NaN, a file that is not a recording at all): what is skipped is logged
with its reason and count, and only data that is unusable as a whole is an error.
"""
from dataclasses import dataclass, field
import logging
from pathlib import Path
from typing import List, Optional, Sequence

from robot_dynamics_learning.data import bag_io
from robot_dynamics_learning.data.datasets import is_vicon_csv, load_rc_car
from robot_dynamics_learning.data.messages import CommandMapping
from robot_dynamics_learning.data.trajectory import Trajectory

LOG = logging.getLogger(__name__)
SOURCES = ('sim', 'dart', 'bag', 'csv')


@dataclass(frozen=True)
class BagOptions:
    """Topics, command mapping and deadman button (Joy index, None: none) of car bags."""

    pose_topic: str = bag_io.CAR_POSE_TOPIC
    command_topic: str = bag_io.CAR_COMMAND_TOPIC
    mapping: CommandMapping = field(default_factory=CommandMapping)
    safety_button: Optional[int] = None
    typestore: str = 'jazzy'

    def __post_init__(self) -> None:
        """Refuse a negative button index: Python would read it from the end of the list."""
        if self.safety_button is not None and not (
                isinstance(self.safety_button, int) and self.safety_button >= 0):
            raise ValueError(f'safety_button must be a Joy button index >= 0, got '
                             f'{self.safety_button}')


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


def load_car_csvs(files: Sequence[Path]) -> List[Trajectory]:
    """Load DART-style CSV files; a file that cannot be read is skipped with its reason."""
    drives, reasons = [], []
    for path in files:
        try:
            drives.append(load_rc_car(path))
        except (ValueError, OSError) as error:
            LOG.warning('skipping %s', error)
            reasons.append(str(error))
    if not drives:   # the first reason in the error: the warnings may scroll away or be off
        raise ValueError(f'none of the {len(files)} CSV files could be read; the first: '
                         f'{reasons[0]}')
    return drives


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
    return drives


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
    return load_car_csvs(kept)
