"""
The offline data checks on the first samples a learner node receives.

`rdl train` refuses data a model must not learn from (`data_checks.check_joint_data`:
torques never measured; for a URDF model positions in degrees, velocities of another scale,
sign or joint, torques of the other sign or unit). dynamics_learner on the robot hears the
same data and would learn garbage from the first message on, so it holds its first samples
to the same checks once and stops learning, saying why, where they fail. A joint's velocity
can only be judged while it moves, and a robot often stands still for the first seconds
after the learner starts: the velocities of joints that have not moved yet are judged on
later windows of the same size, once they move. A refusal is not for good either: the arm's
first seconds may be unlike the rest (its controller not started yet, so the effort is a
brake's or zero while the arm hangs against its joint limits), so after a refusal each further
window is judged in full, and the first that passes clears it.
"""
from typing import List, Optional, Sequence

import numpy as np
from robot_dynamics_learning.data.loading import (DEFAULT_DERIVATIVE_WINDOW_S,
                                                  trajectories_from_table)
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.data.velocity_check import (JointVelocity, judge_velocities,
                                                         LIVE_REMEDY, velocity_report)
from robot_dynamics_learning.dynamics.model import RobotModel
from robot_dynamics_learning.learning.data_checks import check_joint_data

AUDIT_SAMPLES = 2000   # 2 s at 1 kHz, 20 s at 100 Hz: enough motion to judge
SOURCE = 'joint_states'


class StreamAudit:
    """
    Collect the first `size` samples (stamp, q, qd, tau) once and judge them.

    Then, while some joint's velocity is unjudged (`unmoved`: it stood still), judge each
    further window of `size` samples on the velocities of those joints; while refused, judge
    each further window in full (`refusals` counts the refused windows).
    """

    def __init__(self, robot: Optional[RobotModel], joint_names: Sequence[str],
                 size: int = AUDIT_SAMPLES, window_s: float = DEFAULT_DERIVATIVE_WINDOW_S,
                 measured: bool = True) -> None:
        """measured: the torques are the messages' effort (commands may well be all 0)."""
        self.robot, self.joint_names, self.measured = robot, list(joint_names), measured
        self.size, self.window_s = size, window_s
        self._rows: List[tuple] = []
        self.done = False
        self.problem: Optional[str] = None   # why learning must stop, until a window passes
        self.refusals = 0
        self.warnings: List[str] = []
        self.unmoved: List[str] = []   # joints whose velocity is not judged yet
        self.last_judged: List[str] = []   # joints whose velocity the last window judged
        self._reported = 0   # warnings handed out by `new_warnings`

    @property
    def watching(self) -> bool:
        """Return True while samples are wanted: until a full audit passed, every joint moved."""
        return not self.done or self.problem is not None or bool(self.unmoved)

    @property
    def state(self) -> str:
        """Return 'pending', 'passed' or 'refused' (for diagnostics)."""
        return 'pending' if not self.done else 'refused' if self.problem else 'passed'

    def add(self, stamp: float, q: np.ndarray, qd: np.ndarray,
            tau: Optional[np.ndarray]) -> bool:
        """Add one sample; return True when it completed a judgement (see `new_warnings`)."""
        if not self.watching:
            return False
        if self._rows and stamp <= self._rows[-1][0]:   # a time reset: gather again
            self._rows.clear()
        self._rows.append((stamp, np.array(q, float), np.array(qd, float),
                           None if tau is None else np.array(tau, float)))
        if len(self._rows) < self.size:
            return False
        self._judge_window()
        return True

    def finish(self) -> None:
        """Judge the samples held now (a stream shorter than `size`, or after a reset)."""
        if self.watching and len(self._rows) > 1:
            self._judge_window()

    def new_warnings(self) -> List[str]:
        """Return the warnings not returned before (a node logs each once)."""
        fresh = self.warnings[self._reported:]
        self._reported = len(self.warnings)
        return fresh

    def _judge_window(self) -> None:
        full = not self.done or self.problem is not None   # the first window, or after a refusal
        if not self.done:
            self.unmoved = list(self.joint_names)   # until a window shows them moving
        try:
            pieces = self._pieces()
        except ValueError as error:   # too short between gaps to judge: not the data's fault
            if not self.done:
                self.warnings.append(f'data audit skipped: {error}')
        else:
            if full:
                if self.problem is not None:
                    self.problem, self.unmoved = None, list(self.joint_names)
                self._judge(pieces)
            else:
                self._judge_unmoved(pieces)
            self.refusals += self.problem is not None
        self.done, self._rows = True, []

    def _judge(self, pieces: List[Trajectory]) -> None:
        """Run the offline checks on the first samples; set `problem` and `warnings`."""
        try:   # the report too: a piece too short to differentiate is a problem, not a crash
            velocities = velocity_report(pieces, self.window_s)
            found = check_joint_data(self.robot, pieces, self.window_s, SOURCE, self.measured,
                                     velocity_remedy=LIVE_REMEDY, velocities=velocities)
        except ValueError as error:
            self.problem = str(error)
            return
        self.warnings += found['warnings']
        if found['velocity_problems']:
            self.warnings.append(f'{SOURCE}: {LIVE_REMEDY}')
        self._moved(velocities)

    def _judge_unmoved(self, pieces: List[Trajectory]) -> None:
        """Judge the velocities of the `unmoved` joints that moved in `pieces`."""
        joints = self._moved(velocity_report(pieces, self.window_s))
        try:
            problems = judge_velocities(joints, SOURCE, refuse_certain=self.robot is not None,
                                        remedy=LIVE_REMEDY)
        except ValueError as error:
            self.problem = str(error)
            return
        self.warnings += problems + ([f'{SOURCE}: {LIVE_REMEDY}'] if problems else [])

    def _moved(self, velocities: Sequence[JointVelocity]) -> List[JointVelocity]:
        """Take the `unmoved` joints among `velocities` (they moved) off; return them."""
        joints = [j for j in velocities if j.joint in self.unmoved]
        self.last_judged = [j.joint for j in joints]
        self.unmoved = [name for name in self.unmoved if name not in self.last_judged]
        return joints

    def _pieces(self) -> List[Trajectory]:
        """Return the samples held as trajectories (ValueError: too short between gaps)."""
        table = {'time': np.array([r[0] for r in self._rows]),
                 'q': np.stack([r[1] for r in self._rows]),
                 'qd': np.stack([r[2] for r in self._rows])}
        if all(r[3] is not None for r in self._rows):
            table['tau'] = np.stack([r[3] for r in self._rows])
        return trajectories_from_table(table, joint_names=self.joint_names,
                                       derivative_window_s=self.window_s, source=SOURCE)
