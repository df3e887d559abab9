"""
The offline data checks on the first samples a learner node receives.

`rdl train` refuses data a model must not learn from (`data_checks.check_joint_data`:
torques never measured; for a URDF model positions in degrees, velocities of another scale,
sign or joint, torques of the other sign or unit). dynamics_learner on the robot hears the
same data and would learn garbage from the first message on, so it holds its first samples
to the same checks once and stops learning, saying why, where they fail.
"""
from typing import List, Optional, Sequence

import numpy as np
from robot_dynamics_learning.data.loading import (DEFAULT_DERIVATIVE_WINDOW_S,
                                                  trajectories_from_table)
from robot_dynamics_learning.data.velocity_check import LIVE_REMEDY
from robot_dynamics_learning.dynamics.model import RobotModel
from robot_dynamics_learning.learning.data_checks import check_joint_data

AUDIT_SAMPLES = 2000   # 2 s at 1 kHz, 20 s at 100 Hz: enough motion to judge
SOURCE = 'joint_states'


class StreamAudit:
    """Collect the first `size` samples (stamp, q, qd, tau) once and judge them."""

    def __init__(self, robot: Optional[RobotModel], joint_names: Sequence[str],
                 size: int = AUDIT_SAMPLES, window_s: float = DEFAULT_DERIVATIVE_WINDOW_S,
                 measured: bool = True) -> None:
        """measured: the torques are the messages' effort (commands may well be all 0)."""
        self.robot, self.joint_names, self.measured = robot, list(joint_names), measured
        self.size, self.window_s = size, window_s
        self._rows: List[tuple] = []
        self.done = False
        self.problem: Optional[str] = None   # why learning must stop
        self.warnings: List[str] = []

    def add(self, stamp: float, q: np.ndarray, qd: np.ndarray,
            tau: Optional[np.ndarray]) -> bool:
        """Add one sample; return True when this sample completed the audit."""
        if self.done:
            return False
        if self._rows and stamp <= self._rows[-1][0]:   # a time reset: gather again
            self._rows.clear()
        self._rows.append((stamp, np.array(q, float), np.array(qd, float),
                           None if tau is None else np.array(tau, float)))
        if len(self._rows) < self.size:
            return False
        self._judge()
        self.done, self._rows = True, []
        return True

    def finish(self) -> None:
        """Judge the samples held now (a stream shorter than `size`, or after a reset)."""
        if not self.done and len(self._rows) > 1:
            self._judge()
            self.done, self._rows = True, []

    @property
    def state(self) -> str:
        """Return 'pending', 'passed' or 'refused' (for diagnostics)."""
        return 'pending' if not self.done else 'refused' if self.problem else 'passed'

    def _judge(self) -> None:
        """Run the offline checks on the samples held; set `problem` and `warnings`."""
        table = {'time': np.array([r[0] for r in self._rows]),
                 'q': np.stack([r[1] for r in self._rows]),
                 'qd': np.stack([r[2] for r in self._rows])}
        if all(r[3] is not None for r in self._rows):
            table['tau'] = np.stack([r[3] for r in self._rows])
        try:
            pieces = trajectories_from_table(table, joint_names=self.joint_names,
                                             derivative_window_s=self.window_s, source=SOURCE)
        except ValueError as error:   # too short between gaps to judge: not the data's fault
            self.warnings.append(f'data audit skipped: {error}')
            return
        try:
            found = check_joint_data(self.robot, pieces, self.window_s, SOURCE, self.measured,
                                     velocity_remedy=LIVE_REMEDY)
        except ValueError as error:
            self.problem = str(error)
            return
        self.warnings += found['warnings']
        if found['velocity_problems']:
            self.warnings.append(f'{SOURCE}: {LIVE_REMEDY}')
