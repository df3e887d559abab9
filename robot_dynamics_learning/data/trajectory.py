"""One trajectory structure for every data source: shared datasets, bags and simulators."""
from dataclasses import dataclass, field
import logging
from typing import Dict, List, Optional, Sequence

import numpy as np

JOINT_FIELDS = ('q', 'qd', 'qdd', 'tau')
LOG = logging.getLogger(__name__)


def default_joint_names(width: int) -> List[str]:
    """Return the names of joints the data does not name: 'joint_1', 'joint_2', ..."""
    return [f'joint_{i + 1}' for i in range(width)]


def joint_columns(names: Sequence[str], wanted: Sequence[str], source: str) -> List[int]:
    """
    Return the data columns holding the joints `wanted`, in that order, matched by name.

    Why: a bag's JointState or an export lists joints in the driver's order, not the URDF's;
    a model built from the URDF would be fed the wrong joints without a word. Where either
    side names no joints (`default_joint_names`: CSV columns q_1, q_2, ..., or a checkpoint
    of such data) and both have as many, the columns are taken in order, which is logged:
    only the user knows their order.
    """
    names, wanted = [str(n) for n in names], [str(n) for n in wanted]
    if set(wanted) <= set(names):
        return [names.index(joint) for joint in wanted]
    unnamed = default_joint_names(len(names))
    if len(names) == len(wanted) and unnamed in (names, wanted):
        LOG.info('%s: the %d unnamed joint columns are taken in the order %s', source,
                 len(names), wanted)
        return list(range(len(names)))
    missing = [joint for joint in wanted if joint not in names]
    raise ValueError(f'{source}: joints {missing} are not in the data, whose joints are '
                     f'{names}; the model needs {wanted}')


def check_time(time: np.ndarray, source: str = '', rows: Optional[np.ndarray] = None) -> None:
    """
    Raise ValueError unless time is 1-D and strictly increasing, naming the first bad step.

    rows: (T,) the data row of each sample, named instead of its index (where skipped rows
    make the two differ, the user must find the row in the file).
    """
    if time.ndim != 1:
        raise ValueError(f'time must be 1-D, got shape {time.shape} ({source})')
    steps = np.diff(time)
    if time.size > 1 and not np.all(steps > 0):
        i = int(np.argmin(steps > 0))
        where = f'sample {i + 1}' if rows is None else f'data row {int(rows[i + 1])}'
        raise ValueError(f'time must be strictly increasing: {where} at '
                         f'{float(time[i + 1])} s follows {float(time[i])} s ({source})')


@dataclass
class Trajectory:
    """
    A time-aligned recording.

    time: (T,) seconds, strictly increasing.
    joint_names: names of the n joints (empty for the car).
    q, qd, qdd, tau: (T, n) joint positions [rad or m], velocities, accelerations, torques
        [N m or N]; None where the source does not have them.
    observations, actions: (T, n_obs), (T, n_act) for forward-dynamics sets (pneumatic arm,
        Schunk arm, RC car); None otherwise.
    units: unit per field name, e.g. {'tau': 'N m'}.
    source: where it came from (file path and any choices, e.g. which torque column).
    """

    time: np.ndarray
    joint_names: List[str] = field(default_factory=list)
    q: Optional[np.ndarray] = None
    qd: Optional[np.ndarray] = None
    qdd: Optional[np.ndarray] = None
    tau: Optional[np.ndarray] = None
    observations: Optional[np.ndarray] = None
    actions: Optional[np.ndarray] = None
    units: Dict[str, str] = field(default_factory=dict)
    source: str = ''

    ARRAY_FIELDS = ('q', 'qd', 'qdd', 'tau', 'observations', 'actions')

    def __post_init__(self) -> None:
        """Validate shapes and time so that downstream code can trust them."""
        self.time = np.asarray(self.time, dtype=np.float64)
        check_time(self.time, self.source)
        for name in self.ARRAY_FIELDS:
            value = getattr(self, name)
            if value is None:
                continue
            value = np.asarray(value, dtype=np.float64)
            if value.ndim != 2 or value.shape[0] != self.time.size:
                raise ValueError(
                    f'{name} must have shape ({self.time.size}, n), got {value.shape} '
                    f'({self.source})')
            setattr(self, name, value)
        # q, qd, qdd and tau describe the same joints: a mismatch would train silently on
        # misaligned columns (e.g. a column pattern that lost or doubled a joint).
        widths = {name: getattr(self, name).shape[1] for name in JOINT_FIELDS
                  if getattr(self, name) is not None}
        if len(set(widths.values())) > 1 or (
                self.joint_names and widths and len(self.joint_names) not in widths.values()):
            raise ValueError(f'joint columns disagree: {widths}, {len(self.joint_names)} joint '
                             f'names ({self.source})')

    def __len__(self) -> int:
        """Return the number of samples."""
        return int(self.time.size)

    @property
    def dt(self) -> float:
        """Median sample period in seconds."""
        return float(np.median(np.diff(self.time)))

    def segment(self, start: int, stop: int) -> 'Trajectory':
        """Return samples [start, stop) as a new trajectory (arrays are views)."""
        arrays = {name: None if getattr(self, name) is None else getattr(self, name)[start:stop]
                  for name in self.ARRAY_FIELDS}
        return Trajectory(time=self.time[start:stop], joint_names=list(self.joint_names),
                          units=dict(self.units), source=f'{self.source}[{start}:{stop}]',
                          **arrays)

    def in_joint_order(self, wanted: Sequence[str]) -> 'Trajectory':
        """
        Return the trajectory with the joints `wanted` only, in that order (`joint_columns`).

        Actions as wide as the joints are per-joint commands (as bags and exports hold them)
        and follow their joints; other actions are kept as they are.
        """
        columns = joint_columns(self.joint_names, wanted, self.source)
        if columns == list(range(len(self.joint_names))):
            return Trajectory(**{**self.__dict__, 'joint_names': [str(n) for n in wanted]})
        moved = [*JOINT_FIELDS] + (['actions'] if self.actions is not None and
                                   self.actions.shape[1] == len(self.joint_names) else [])
        arrays = {name: getattr(self, name)[:, columns] for name in moved
                  if getattr(self, name) is not None}
        return Trajectory(**{**self.__dict__, **arrays, 'joint_names': list(wanted)})
