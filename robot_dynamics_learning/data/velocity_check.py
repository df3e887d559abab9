"""
Do the recorded joint velocities belong to the recorded positions? Judged against dq/dt.

A velocity column in deg/s beside positions in rad, with the other sign convention, or taken
from another joint, trains every model on a wrong input and gives a URDF model wrong
Coriolis and friction torques, without a word. The recorded qd of a joint is compared with
the zero-phase derivative of its q: on the Kinova and Schunk recordings the least-squares
factor qd / (dq/dt) is 0.99-1.00 with a correlation of 0.9987 or more on every joint. A qd
that another joint's dq/dt fits with a quarter of its own misfit is that joint's (swapped
columns: found on every joint of both sets with the columns rotated by one).
"""
from dataclasses import dataclass
import logging
from typing import List, Optional, Sequence

import numpy as np
from robot_dynamics_learning.data.loading import continuous_angles
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.signals.offline import savgol_at_stamps

LOG = logging.getLogger(__name__)
MIN_SAMPLES = 100
MIN_MOTION = 0.01   # rad/s (m/s): std of dq/dt below which a joint is too still to judge
FOLLOWS = 0.9      # |correlation| above which qd follows dq/dt ...
FACTOR_RANGE = (0.5, 2.0)   # ... and must do so at about the same scale
UNRELATED = 0.5    # |correlation| below which qd is not this joint's velocity
# Another joint's dq/dt fits this qd with this share of its own misfit (1 - |correlation|).
SWAP_RATIO = 0.25
OWN_SURE = 0.995   # a qd this close to its own dq/dt is its own (Kinova, Schunk: 0.9987+)


@dataclass(frozen=True)
class JointVelocity:
    """
    One joint's recorded qd against dq/dt: least-squares factor and correlation.

    other: the joint whose dq/dt this qd follows far better than its own (a swapped
    column), else None; constant: the value of a qd that never changes while q moves (a
    driver that fills velocity without measuring it), else None.
    """

    joint: str
    factor: float
    correlation: float
    samples: int
    other: Optional[str] = None
    constant: Optional[float] = None

    @property
    def certain(self) -> bool:
        """Return True where qd is certainly wrong: constant, another scale, sign or joint."""
        return self.other is not None or self.constant is not None or (
            abs(self.correlation) > FOLLOWS
            and not FACTOR_RANGE[0] < self.factor < FACTOR_RANGE[1])

    def problem(self) -> Optional[str]:
        """Return what is wrong with this joint's qd, or None."""
        if self.constant is not None:
            return (f'{self.joint}: qd is {self.constant:g} in every sample while q moves: '
                    'the driver does not measure velocity; leave qd out to derive it from q')
        if self.other is not None:
            return (f'{self.joint}: qd follows the dq/dt of {self.other}, not its own '
                    f'(correlation {self.correlation:.3f}): swapped columns?')
        if self.certain:
            return (f'{self.joint}: qd = {self.factor:.3g} x dq/dt (correlation '
                    f'{self.correlation:.3f}): ' + _guess(self.factor))
        if abs(self.correlation) < UNRELATED:
            return (f'{self.joint}: qd does not follow dq/dt (correlation '
                    f"{self.correlation:.2f}): another joint's column, or not a velocity?")
        return None


def _guess(factor: float) -> str:
    """Name the likely cause of a velocity scale."""
    if abs(abs(factor) - 180 / np.pi) < 0.1 * 180 / np.pi:
        unit = 'in deg/s beside q in rad'
    elif abs(abs(factor) - np.pi / 180) < 0.1 * np.pi / 180:
        unit = 'in rad/s beside q in degrees'
    elif FACTOR_RANGE[0] < abs(factor) < FACTOR_RANGE[1]:
        return 'the other sign convention than q'
    else:
        unit = 'in another unit or scale (gear ratio, encoder counts)'
    return unit + (', with the other sign' if factor < 0 else '')


def velocity_report(trajectories: Sequence[Trajectory], window_s: float) -> List[JointVelocity]:
    """Return per joint the recorded qd against dq/dt over `window_s` (joints that moved)."""
    pieces = [t for t in trajectories if t.q is not None and t.qd is not None and len(t) > 2
              and t.time[-1] - t.time[0] > 2 * window_s]
    if not pieces:
        return []
    derived = np.concatenate([savgol_at_stamps(t.time, continuous_angles(t.q), window_s,
                                               deriv=1) for t in pieces])
    recorded = np.concatenate([t.qd for t in pieces])
    varies = recorded.std(axis=0) > 0
    moved = derived.std(axis=0) >= MIN_MOTION
    if derived.shape[0] < MIN_SAMPLES or not moved.any():
        return []
    names = [str(name) for name in pieces[0].joint_names]
    report = [JointVelocity(names[j], 0.0, 0.0, derived.shape[0],
                            constant=float(recorded[0, j]))
              for j in np.flatnonzero(moved & ~varies)]
    moved &= varies
    n = derived.shape[1]
    with np.errstate(invalid='ignore', divide='ignore'):   # constant columns: NaN, unused
        correlation = np.corrcoef(recorded.T, derived.T)[:n, n:]   # [recorded j, derived k]
    for j in np.flatnonzero(moved):
        d, v = derived[:, j], recorded[:, j]
        own = abs(correlation[j, j])
        fits = np.where(moved, np.abs(correlation[j]), 0.0)
        best = int(np.argmax(fits))
        other = (names[best] if best != j and 1 - fits[best] < SWAP_RATIO * (1 - own)
                 and fits[best] > FOLLOWS and own < OWN_SURE else None)
        report.append(JointVelocity(names[j], float(d @ v / (d @ d)),
                                    float(correlation[j, j]), int(d.size), other))
    return report


# What to do about velocities that do not belong to the positions, in a file or live.
FILE_REMEDY = 'fix the qd columns or leave qd out (it is then derived from q)'
LIVE_REMEDY = ('set velocity_source: positions to differentiate the positions instead of '
               "using the driver's velocity")


def check_velocities(trajectories: Sequence[Trajectory], window_s: float, source: str,
                     refuse_certain: bool, remedy: str = FILE_REMEDY) -> List[str]:
    """
    Return one line per joint whose recorded qd does not belong to its q (logged).

    refuse_certain: raise ValueError where a qd is certainly of another scale, sign or joint
    (a URDF model would compute wrong torques from it); learned models absorb a scale, so
    for them it is a warning as the rest. remedy: the advice that ends the refusal.
    """
    return judge_velocities(velocity_report(trajectories, window_s), source, refuse_certain,
                            remedy)


def judge_velocities(joints: Sequence[JointVelocity], source: str, refuse_certain: bool,
                     remedy: str = FILE_REMEDY) -> List[str]:
    """`check_velocities` on joints already measured by `velocity_report` (or some of them)."""
    problems = [j.problem() for j in joints if j.problem()]
    if refuse_certain and any(j.certain for j in joints):
        raise ValueError(f'{source}: recorded joint velocities do not match the positions: '
                         + '; '.join(problems) + f'; {remedy}')
    for problem in problems:
        LOG.warning('%s: %s', source, problem)
    return problems


def unmeasured_torques(trajectories: Sequence[Trajectory]) -> Optional[str]:
    """
    Return why the torques cannot be learned from where every recorded tau is 0, else None.

    Why: drivers that do not measure torque may still fill JointState.effort with zeros;
    a model would learn that every torque is 0. One joint at 0 (Kinova's joint 7) is kept.
    """
    taus = [t.tau for t in trajectories if t.tau is not None and len(t)]
    if not taus or any(np.any(tau != 0) for tau in taus):
        return None
    rows = sum(len(tau) for tau in taus)
    return (f'the torque (effort) is 0 for every joint in all {rows} samples: the driver '
            'does not measure it; learn from the commanded torques instead (rdl: a torque '
            'command topic or columns; dynamics_learner: torque_source command)')
