"""
A user's own car recordings: rosbag2 folders and DART-style CSV trees -> car drives.

Bags: PoseStamped mocap poses plus Joy, Twist or TwistStamped commands, with the topics,
Joy axes, scales and the Joy deadman button as options (`BagOptions`). CSV trees: any
folder holding DART-style CSV files with Vicon columns at any depth (the DART repository's
`<set>/<file>.csv` and `<set>/csv/<file>.csv` layouts both work); files without Vicon columns
(IMU-only recordings) are skipped.
"""
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence

from robot_dynamics_learning.data import bag_io
from robot_dynamics_learning.data.datasets import load_rc_car
from robot_dynamics_learning.data.messages import CommandMapping
from robot_dynamics_learning.data.trajectory import Trajectory

SOURCES = ('sim', 'dart', 'bag', 'csv')


@dataclass(frozen=True)
class BagOptions:
    """Topics, command mapping and deadman button (Joy index, None: none) of car bags."""

    pose_topic: str = bag_io.CAR_POSE_TOPIC
    command_topic: str = bag_io.CAR_COMMAND_TOPIC
    mapping: CommandMapping = field(default_factory=CommandMapping)
    safety_button: Optional[int] = None
    typestore: str = 'jazzy'


def car_csv_files(root: Path) -> List[Path]:
    """Return the CSV files under `root` (any depth) that carry Vicon poses, sorted."""
    root = Path(root)
    if root.is_file():
        candidates = [root]
    elif root.is_dir():
        candidates = sorted(root.rglob('*.csv'))
    else:
        raise FileNotFoundError(f'no CSV file or folder at {root}')
    with_vicon = []
    for path in candidates:
        with open(path) as handle:
            if 'vicon time' in handle.readline():
                with_vicon.append(path)
    if not with_vicon:
        raise FileNotFoundError(f"{root}: no CSV file with a 'vicon time' column (DART "
                                f'layout: <set>/<file>.csv or <set>/csv/<file>.csv)')
    return with_vicon


def load_car_csvs(paths: Sequence[Path]) -> List[Trajectory]:
    """Load every DART-style CSV file under the given files or folders."""
    return [load_rc_car(f) for root in paths for f in car_csv_files(root)]


def load_car_bags(paths: Sequence[Path], options: BagOptions = BagOptions(),
                  progress: bool = False) -> List[Trajectory]:
    """Read one drive per bag folder (poses + commands, see `bag_io.read_car_trajectory`)."""
    return [bag_io.read_car_trajectory(path, options.pose_topic, options.command_topic,
                                       options.mapping, options.safety_button,
                                       options.typestore, progress)
            for path in paths]


def load_car_drives(source: str, paths: Sequence[Path], options: BagOptions = BagOptions(),
                    progress: bool = False) -> List[Trajectory]:
    """Load drives of a user source: 'bag' (bag folders) or 'csv' (files or folder trees)."""
    if not paths:
        raise ValueError(f"source '{source}' needs data paths (--data)")
    if source == 'bag':
        return load_car_bags(paths, options, progress)
    if source == 'csv':
        return load_car_csvs(paths)
    raise ValueError(f"unknown user data source '{source}'; use 'bag' or 'csv'")
