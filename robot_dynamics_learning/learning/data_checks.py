"""
One gate for joint data before a model sees them.

`rdl train`, `evaluate`, `identify` and dynamics_learner's audit (`stream_audit`) run the
same checks in the same order. Refused (ValueError, one line with the fix): torques that
are 0 everywhere (not measured); for a model built from a URDF, velocities of another
scale, sign or joint (`data.velocity_check`), positions in degrees (`urdf_range`) and
torques of another sign or unit (`urdf_torques`). Warned of (returned, and logged): the
same velocity problems for learned models, which absorb a scale, and joints beyond the
URDF's limits.
"""
from typing import Any, Dict, Optional, Sequence

import numpy as np
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.data.velocity_check import (FILE_REMEDY, JointVelocity,
                                                         judge_velocities, unmeasured_torques,
                                                         velocity_report)
from robot_dynamics_learning.dynamics.model import RobotModel
from robot_dynamics_learning.learning.urdf_range import check_urdf_range
from robot_dynamics_learning.learning.urdf_torques import check_torques


def check_joint_data(robot: Optional[RobotModel], trajectories: Sequence[Trajectory],
                     window_s: float, source: str, measured: bool = True,
                     velocity_remedy: str = FILE_REMEDY,
                     velocities: Optional[Sequence[JointVelocity]] = None) -> Dict[str, Any]:
    """
    Raise ValueError on joint data a model must not learn from; return the findings.

    robot: the URDF's model (its joint order is the data's), None for learned models.
    window_s: the derivative window the data's qd / qdd were derived with. measured: the
    torques are measured (effort); commanded torques may well be all 0. velocity_remedy:
    the advice on velocities that do not belong to the positions. velocities: their
    `velocity_report`, where the caller has it already. Returns
    {'velocity_problems': [...], 'warnings': [every warning line], 'urdf_range': ...}.
    """
    zeros = unmeasured_torques(trajectories) if measured else None
    if zeros:
        raise ValueError(f'{source}: {zeros}')
    if velocities is None:
        velocities = velocity_report(trajectories, window_s)
    problems = judge_velocities(velocities, source, refuse_certain=robot is not None,
                                remedy=velocity_remedy)
    found: Dict[str, Any] = {'velocity_problems': problems, 'warnings': list(problems)}
    if robot is not None and any(t.q is not None for t in trajectories):
        report = check_urdf_range(robot, np.concatenate([t.q for t in trajectories
                                                         if t.q is not None]), source)
        found['urdf_range'] = report.summary()
        warning = report.warning(source)
        found['warnings'] += [warning] if warning else []
        check_torques(robot, trajectories, source)
    return found
