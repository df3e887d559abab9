"""
Joint positions against a URDF's limits: degrees, or another robot's data, caught early.

A URDF model computes RNEA torques from q in rad (revolute) or m (prismatic); q in degrees,
common in vendor logs, or a recording of another robot, gives garbage torques without a
word. Only joints with both position limits are checked (continuous joints and joints
without limits can take any value). Bounded revolute joints whose data span more than
`DEGREE_SPAN_FACTOR` times their limits' width and more than a full turn, and fit the limits
once divided by 180/pi, look like degrees: on the Kinova fixture recordings in radians the
widest data span is 0.67 of its joint's limits, in degrees it is 18.7 times or more.
"""
from dataclasses import dataclass
import logging
import math
from typing import Any, Dict, List, Optional

import numpy as np
from robot_dynamics_learning.dynamics.model import JOINT_REVOLUTE, RobotModel

LOG = logging.getLogger(__name__)
DEGREES_PER_RADIAN = 180.0 / math.pi
PERCENTILES = (1.0, 99.0)     # the data's span: robust to a few spikes
DEGREE_SPAN_FACTOR = 3.0      # data span / limits' width above which q looks like degrees
MIN_DEGREE_SPAN = 2.0 * math.pi   # and wider than a turn: radians on a bounded joint are not
MARGIN_SHARE = 0.05           # encoders exceed soft limits slightly: 5 % of the width ...
MIN_MARGIN_RAD = 0.05         # ... or 0.05 rad for a revolute joint, whichever is larger


@dataclass(frozen=True)
class JointRange:
    """
    One bounded joint's data against its URDF position limits (rad or m).

    low, high: the data's 1st and 99th percentiles; minimum, maximum: its extremes;
    outside_share: share of samples beyond the limits by more than `margin`.
    """

    joint: str
    revolute: bool
    lower: float
    upper: float
    minimum: float
    maximum: float
    low: float
    high: float
    margin: float
    outside_share: float

    @property
    def unit(self) -> str:
        """Return the joint's position unit."""
        return 'rad' if self.revolute else 'm'

    @property
    def span_share(self) -> float:
        """Return the data's span (percentiles) as a share of the limits' width."""
        width = self.upper - self.lower
        return (self.high - self.low) / width if width > 0 else math.inf

    @property
    def looks_like_degrees(self) -> bool:
        """Return True where q is far too wide for radians but fits them in degrees."""
        return (self.revolute and self.span_share > DEGREE_SPAN_FACTOR
                and self.high - self.low > MIN_DEGREE_SPAN
                and self.low / DEGREES_PER_RADIAN >= self.lower - self.margin
                and self.high / DEGREES_PER_RADIAN <= self.upper + self.margin)

    def describe(self) -> str:
        """Return 'joint data a..b against URDF limits [l, u] unit' for a message."""
        return (f'{self.joint} data {self.minimum:.4g}..{self.maximum:.4g} (1st-99th '
                f'percentile {self.low:.4g}..{self.high:.4g}) against URDF limits '
                f'[{self.lower:.4g}, {self.upper:.4g}] {self.unit}')


@dataclass(frozen=True)
class RangeReport:
    """The bounded joints' data against the limits of the URDF of `robot` (`joint_ranges`)."""

    robot: str
    joints: List[JointRange]

    def degrees(self) -> List[JointRange]:
        """Return the joints whose data look like degrees."""
        return [j for j in self.joints if j.looks_like_degrees]

    def outside(self) -> List[JointRange]:
        """Return the joints with samples beyond the limits by more than the margin."""
        return [j for j in self.joints if j.outside_share > 0 and not j.looks_like_degrees]

    def degrees_error(self, source: str) -> Optional[str]:
        """Return the one-line error where q looks like degrees, else None."""
        joints = self.degrees()
        if not joints:
            return None
        return (f'{source}: joint positions look like degrees, the URDF of {self.robot} '
                f'takes radians: {"; ".join(j.describe() for j in joints)}; convert q, qd and qdd '
                "to radians (or check that the data are this robot's)")

    def warning(self, source: str) -> Optional[str]:
        """Return the one-line warning naming the joints beyond their limits, else None."""
        joints = self.outside()
        if not joints:
            return None
        return (f'{source}: joint positions beyond the URDF limits of {self.robot}: '
                + '; '.join(f'{j.describe()}, {100 * j.outside_share:.2g} % of samples '
                            f'beyond them by more than {j.margin:.3g}' for j in joints)
                + ' (another robot, an offset or a unit?)')

    def summary(self) -> Dict[str, Any]:
        """Return the check for a JSON summary: every bounded joint and the warned ones."""
        return {'robot': self.robot, 'outside': [j.joint for j in self.outside()],
                'joints': {j.joint: {'lower': j.lower, 'upper': j.upper, 'min': j.minimum,
                                     'max': j.maximum, 'p1': j.low, 'p99': j.high,
                                     'span_share': j.span_share,
                                     'outside_share': j.outside_share}
                           for j in self.joints}}


def joint_ranges(robot: RobotModel, q: np.ndarray) -> RangeReport:
    """Compare q (N, n) in the robot's joint order with its bounded joints' limits."""
    q = np.asarray(q, dtype=np.float64)
    if q.ndim != 2 or q.shape[1] != robot.n_dof:
        raise ValueError(f'q has shape {q.shape}, {robot.name} has {robot.n_dof} joints')
    joints: List[JointRange] = []
    if not len(q):
        return RangeReport(robot.name, joints)
    lower = robot.joint_limits.lower.tolist()
    upper = robot.joint_limits.upper.tolist()
    for j, name in enumerate(robot.joint_names):
        if not (math.isfinite(lower[j]) and math.isfinite(upper[j])):
            continue
        revolute = robot.joint_types[j] == JOINT_REVOLUTE
        margin = max(MARGIN_SHARE * (upper[j] - lower[j]), MIN_MARGIN_RAD if revolute else 0.0)
        column = q[:, j]
        low, high = np.percentile(column, PERCENTILES)
        beyond = (column < lower[j] - margin) | (column > upper[j] + margin)
        joints.append(JointRange(name, revolute, lower[j], upper[j], float(column.min()),
                                 float(column.max()), float(low), float(high), margin,
                                 float(beyond.mean())))
    return RangeReport(robot.name, joints)


def check_urdf_range(robot: RobotModel, q: np.ndarray, source: str) -> RangeReport:
    """
    Refuse q (N, n) that looks like degrees; log a warning for joints beyond their limits.

    Raises ValueError (`rdl: error: ...`) naming the joints, their data and the limits.
    """
    report = joint_ranges(robot, q)
    error = report.degrees_error(source)
    if error:
        raise ValueError(error)
    warning = report.warning(source)
    if warning:
        LOG.warning(warning)
    return report
