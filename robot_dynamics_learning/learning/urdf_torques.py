"""
Recorded torques against the URDF's: the other sign convention or another unit, caught.

A hybrid learns the recorded torque minus the URDF's RNEA torque; with torques of the other
sign, in mN m, or motor-side (a gear ratio), that residual is larger than the torque and the
prior only hurts, without a word. Per joint, the least-squares factor of the recorded torque
on the RNEA torque and their correlation: on the Kinova recordings the joints where gravity
and inertia dominate (correlation 0.87-0.99) have factors 1.2-2.9 (the URDF's masses are
not the arm's); joints whose torque the URDF barely explains (correlation under 0.8, e.g. the
vertical first joint) are not judged. A factor under -0.2 or beyond `MAX_FACTOR` on a joint
with |correlation| over 0.8 is a sign or unit error.
"""
from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.dynamics import rnea
from robot_dynamics_learning.dynamics.model import RobotModel
import torch

JUDGED = 0.8         # |correlation| above which the URDF explains the joint's torque
MAX_FACTOR = 10.0    # recorded / RNEA beyond this (or 1 / it) is another unit or gear side
MIN_FACTOR = -0.2    # below this the sign convention is the other
MAX_ROWS = 20000     # RNEA on an even subsample: enough to judge, fast on long recordings


@dataclass(frozen=True)
class JointTorque:
    """One joint's recorded torque against the URDF's RNEA torque."""

    joint: str
    factor: float
    correlation: float

    def problem(self) -> Optional[str]:
        """Return the sign or unit error of this joint's torque, or None."""
        if abs(self.correlation) <= JUDGED:
            return None
        if self.factor < MIN_FACTOR:
            cause = 'the other sign convention than the URDF'
        elif abs(self.factor) > MAX_FACTOR or abs(self.factor) < 1 / MAX_FACTOR:
            cause = 'another unit (mN m: 1000) or the motor side of a gear'
        else:
            return None
        return (f'{self.joint}: tau = {self.factor:.3g} x the URDF torque (correlation '
                f'{self.correlation:.2f}): {cause}?')


def torque_report(robot: RobotModel, trajectories: Sequence[Trajectory]) -> List[JointTorque]:
    """Return per joint the recorded tau against RNEA(q, qd, qdd) of the URDF."""
    pieces = [t for t in trajectories if all(getattr(t, f) is not None
                                             for f in ('q', 'qd', 'qdd', 'tau'))]
    if not pieces:
        return []
    q, qd, qdd, tau = (np.concatenate([getattr(t, f) for t in pieces])
                       for f in ('q', 'qd', 'qdd', 'tau'))
    rows = np.linspace(0, len(q) - 1, min(len(q), MAX_ROWS)).astype(int)
    with torch.no_grad():
        predicted = rnea(robot, *(torch.as_tensor(a[rows], dtype=torch.float64)
                                  for a in (q, qd, qdd))).numpy()
    recorded = tau[rows]
    report = []
    for j, joint in enumerate(robot.joint_names):
        p, r = predicted[:, j], recorded[:, j]
        if p.std() == 0 or r.std() == 0:
            continue
        report.append(JointTorque(str(joint), float(p @ r / (p @ p)),
                                  float(np.corrcoef(p, r)[0, 1])))
    return report


def check_torques(robot: RobotModel, trajectories: Sequence[Trajectory], source: str) -> None:
    """Raise ValueError naming the joints whose torques have another sign or unit."""
    problems = [p for p in (j.problem() for j in torque_report(robot, trajectories)) if p]
    if problems:
        raise ValueError(f'{source}: recorded torques do not match the URDF of {robot.name}: '
                         + '; '.join(problems) + '; fix the tau columns (sign, unit) or check '
                         "that the URDF is this robot's")
