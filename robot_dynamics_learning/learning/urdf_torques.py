"""
Recorded torques against the URDF's: the other sign convention or another unit, caught.

A hybrid learns the recorded torque minus the URDF's RNEA torque; with torques of the other
sign, in mN m, or motor-side (a gear ratio), that residual is larger than the torque and the
prior only hurts, without a word. Per joint, the least-squares factor of the recorded torque
on the RNEA torque and their correlation, two ways: as recorded, and after both are rid of
what a URDF leaves out on purpose, the joint's own rotor inertia (armature, x qdd), viscous
and Coulomb friction and an offset (fitted per joint), and of what the derivative window
cannot follow (both low-passed at `CUTOFF_HZ`, zero phase). A joint is refused only where
both ways find a factor under `MIN_FACTOR` or beyond `MAX_FACTOR` on a torque the URDF
explains (|correlation| over `JUDGED`): a sign or unit error fails both, an effect of those
terms at most one. Measured on the MuJoCo Panda (armature 0.03 at the wrist): as recorded
the wrist's factor is 6-7, next to the unit limit, and it once read -1.19 (correlation -0.98:
a flaky CI refusal; a rotor inertia in antiphase with the link's torque turns the factor
negative); beside their own terms the judged joints read 0.92-0.99 and the wrist is not
judged. A turntable whose rotor inertia is 15 times the disc's reads 16 (correlation 0.98)
as recorded; beside its own terms nothing is left to judge (`MIN_SHARE`). On the Kinova
recordings the joints where gravity and inertia dominate (correlation 0.95-0.99) have
factors 1.2-2.9 both ways (the URDF's masses are not the arm's).

A sign needs no factor: rotor inertia and friction only ever add to a joint's torque
(armature, viscous and Coulomb coefficients >= 0), so a joint is refused too where
k RNEA + those terms with k >= 0 leaves over `OTHER_SIGN` times the spread the same
fit of minus the torque leaves, and the latter explains it (R^2 over `JUDGED`^2). That
catches a flipped joint whose own inertia dominates (a turntable, a geared wrist), which
the factors leave unjudged. Measured on the Kinova recordings and the MuJoCo Panda: with
the right sign the other explains R^2 0.52 at most; a flipped joint the URDF explains
leaves 4.2-275 times the spread of its other sign (1e6 on a flipped geared joint).
"""
from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.dynamics import rnea
from robot_dynamics_learning.dynamics.model import RobotModel
from scipy.optimize import lsq_linear
from scipy.signal import butter, sosfiltfilt
import torch

JUDGED = 0.8         # |correlation| above which the URDF explains the joint's torque
# Beside its own terms the URDF torque must keep this share of its spread to be judged: a
# joint the URDF describes by its own inertia alone (a turntable) leaves rounding noise.
MIN_SHARE = 0.05
MAX_FACTOR = 10.0    # recorded / RNEA beyond this (or 1 / it) is another unit or gear side
MIN_FACTOR = -0.2    # below this the sign convention is the other
MAX_ROWS = 20000     # RNEA on evenly spread blocks: enough to judge, fast on long recordings
BLOCK_ROWS = 1000    # contiguous rows per block (the low-pass needs neighbours)
MIN_BLOCK_ROWS = 20
CUTOFF_HZ = 10.0     # the 31 ms derivative window follows qdd to about 15 Hz
OTHER_SIGN = 3.0     # the other sign must leave a third of the spread this one leaves
SIGN_ERROR = 'the other sign convention than the URDF'


def _problem(factor: float, correlation: float) -> Optional[str]:
    """Return the cause a factor on a torque the URDF explains points to, or None."""
    if abs(correlation) <= JUDGED:
        return None
    if factor < MIN_FACTOR:
        return SIGN_ERROR
    if abs(factor) > MAX_FACTOR or abs(factor) < 1 / MAX_FACTOR:
        return 'another unit (mN m: 1000) or the motor side of a gear'
    return None


@dataclass(frozen=True)
class JointTorque:
    """
    One joint's recorded torque against the URDF's RNEA torque.

    factor, correlation: as recorded; own_factor, own_correlation: after the joint's own
    terms are fitted out of both (low-passed), 0 where they leave too little to judge.
    explained, explained_flipped: R^2 of k RNEA + its own terms (k, armature, friction
    >= 0) on the low-passed torque, and on minus it.
    """

    joint: str
    factor: float
    correlation: float
    own_factor: float
    own_correlation: float
    explained: float
    explained_flipped: float

    def _flipped(self) -> bool:
        """Return whether only the other sign is physical (non-negative inertia, friction)."""
        return (self.explained_flipped > JUDGED ** 2
                and 1 - self.explained > OTHER_SIGN * (1 - self.explained_flipped))

    def problem(self) -> Optional[str]:
        """Return the sign or unit error of this joint's torque, or None."""
        cause = (_problem(self.factor, self.correlation)   # both ways fail, or the sign
                 if _problem(self.own_factor, self.own_correlation) else None)
        if cause is None and self._flipped():
            cause = SIGN_ERROR
        if cause is None:
            return None
        return (f'{self.joint}: tau = {self.factor:.3g} x the URDF torque (correlation '
                f'{self.correlation:.2f}; {self.own_factor:.3g} x beside its own friction '
                f'and rotor inertia; with those, R^2 {self.explained:.2f} as recorded, '
                f'{self.explained_flipped:.2f} flipped): {cause}?')


def _low_pass(values: np.ndarray, period: float) -> np.ndarray:
    """Zero-phase second-order Butterworth at `CUTOFF_HZ` along axis 0 (as is if too slow)."""
    if period <= 0 or 1.0 / period <= 4 * CUTOFF_HZ:
        return values
    sos = butter(2, CUTOFF_HZ, fs=1.0 / period, output='sos')
    return sosfiltfilt(sos, values, axis=0, padlen=min(len(values) - 1, 15))


def _blocks(pieces: Sequence[Trajectory]) -> List[tuple]:
    """Return (trajectory, start, end) blocks of contiguous rows, evenly thinned to MAX_ROWS."""
    blocks = [(t, a, min(a + BLOCK_ROWS, len(t))) for t in pieces
              for a in range(0, len(t), BLOCK_ROWS) if min(a + BLOCK_ROWS, len(t)) - a
              >= MIN_BLOCK_ROWS]
    total = sum(b - a for _, a, b in blocks)
    if total > MAX_ROWS:
        kept = max(1, len(blocks) * MAX_ROWS // total)
        blocks = [blocks[i] for i in np.unique(np.linspace(0, len(blocks) - 1, kept).astype(int))]
    return blocks


def _block(robot: RobotModel, trajectory: Trajectory, a: int, b: int) -> tuple:
    """Return RNEA and recorded torques (T, n), raw and low-passed; the joint terms (T, n, 4)."""
    q, qd, qdd, tau = (getattr(trajectory, f)[a:b] for f in ('q', 'qd', 'qdd', 'tau'))
    with torch.no_grad():
        predicted = rnea(robot, *(torch.as_tensor(v, dtype=torch.float64)
                                  for v in (q, qd, qdd))).numpy()
    tau = np.asarray(tau, np.float64)
    own = np.stack([qdd, qd, np.sign(qd), np.ones_like(qd)], axis=-1)
    period = float(np.median(np.diff(trajectory.time[a:b])))
    own = _low_pass(own.reshape(len(q), -1), period).reshape(own.shape)
    return (predicted, tau, _low_pass(predicted, period), _low_pass(tau, period), own)


def _factor(p: np.ndarray, r: np.ndarray) -> Optional[tuple]:
    """Return (least-squares factor of r on p, correlation), None where one is constant."""
    if p.std() == 0 or r.std() == 0:
        return None
    return float(p @ r / (p @ p)), float(np.corrcoef(p, r)[0, 1])


def _explained(terms: np.ndarray, torque: np.ndarray) -> tuple:
    """
    Return R^2 of the best non-negative mix of `terms` (the offset, last, free) on +-torque.

    terms: (T, k) low-passed [RNEA, qdd, qd, sign(qd), 1], scaled to a maximum of 1.
    """
    spread = np.sum((torque - torque.mean()) ** 2)
    if torque.std() <= 1e-9 * np.abs(torque).max():   # constant but for rounding: no sign
        return 0.0, 0.0
    lower = np.r_[np.zeros(terms.shape[1] - 1), -np.inf]
    return tuple(1.0 - np.sum((terms @ lsq_linear(terms, sign * torque,
                                                  bounds=(lower, np.inf)).x
                               - sign * torque) ** 2) / spread
                 for sign in (1.0, -1.0))


def torque_report(robot: RobotModel, trajectories: Sequence[Trajectory]) -> List[JointTorque]:
    """Return per joint the recorded tau against RNEA(q, qd, qdd) of the URDF."""
    pieces = [t for t in trajectories if all(getattr(t, f) is not None
                                             for f in ('q', 'qd', 'qdd', 'tau'))]
    blocks = [_block(robot, t, a, b) for t, a, b in _blocks(pieces)]
    if not blocks:
        return []
    predicted, recorded, slow_predicted, slow_recorded, own = (
        np.concatenate(parts) for parts in zip(*blocks))
    report = []
    for j, joint in enumerate(robot.joint_names):
        plain = _factor(predicted[:, j], recorded[:, j])
        if plain is None:
            continue
        terms = own[:, j] / np.maximum(np.abs(own[:, j]).max(axis=0), 1e-12)
        both = np.column_stack([slow_predicted[:, j], slow_recorded[:, j]])
        left = both - terms @ np.linalg.lstsq(terms, both, rcond=None)[0]
        beside = (_factor(left[:, 0], left[:, 1])
                  if left[:, 0].std() >= MIN_SHARE * slow_predicted[:, j].std() else None)
        scale = max(np.abs(slow_predicted[:, j]).max(), 1e-12)
        explained = _explained(np.column_stack([slow_predicted[:, j] / scale, terms]),
                               slow_recorded[:, j])
        report.append(JointTorque(str(joint), *plain, *(beside or (0.0, 0.0)), *explained))
    return report


def check_torques(robot: RobotModel, trajectories: Sequence[Trajectory], source: str) -> None:
    """Raise ValueError naming the joints whose torques have another sign or unit."""
    problems = [p for p in (j.problem() for j in torque_report(robot, trajectories)) if p]
    if problems:
        raise ValueError(f'{source}: recorded torques do not match the URDF of {robot.name}: '
                         + '; '.join(problems) + '; fix the tau columns (sign, unit) or check '
                         "that the URDF is this robot's")
