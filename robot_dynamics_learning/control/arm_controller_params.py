"""
The settings of arm_controller: one class for the node and its block in config/arm_control.yaml.

The gains, approach and watchdog are `ArmControllerConfig`'s fields, the reference
`ReferenceConfig`'s (taken with their descriptions and ranges), so the node and the ROS-free
controller of the demo and the control bench keep one definition.
"""
from dataclasses import dataclass
from typing import Tuple

from robot_dynamics_learning.control.arm_feedforward import (ArmControllerConfig,
                                                             FEEDFORWARD_MODES)
from robot_dynamics_learning.data.joint_velocity import check_velocity_source, VELOCITY_WINDOW
from robot_dynamics_learning.data.messages import check_stamp_source
from robot_dynamics_learning.params import build_from, check_ranges, setting, setting_of
from robot_dynamics_learning.sim.trajectories import ReferenceConfig


@dataclass(frozen=True)
class ArmControllerNodeConfig:
    """Parameters of arm_controller (config/arm_control.yaml documents each one)."""

    feedforward: str = setting('learned', f'one of {FEEDFORWARD_MODES}')
    checkpoint_dir: str = setting('', "dynamics_learner's checkpoint folder (required by "
                                  'feedforward learned)')
    poll_period_s: float = setting(1.0, 'seconds between checks for a newer checkpoint', 0.05,
                                   3600.0)
    urdf: str = setting('', 'arm URDF: a path or a file in the package urdf/ (empty: '
                        'panda.urdf); joints, limits and the rigid-body model')
    trajectory: str = setting_of(ReferenceConfig, 'mode')
    seed: int = setting_of(ReferenceConfig, 'seed')
    kp: Tuple[float, ...] = setting_of(ArmControllerConfig, 'kp')
    kd: Tuple[float, ...] = setting_of(ArmControllerConfig, 'kd')
    approach_s: float = setting_of(ArmControllerConfig, 'approach_s')
    stale_timeout_s: float = setting_of(ArmControllerConfig, 'stale_timeout_s')
    command_topic: str = setting('/effort_controller/commands', 'torque command topic')
    accel_window: int = setting(21, 'samples in the causal acceleration fit of the learned '
                                "feed-forward's input (must match the learner's)", 3, 1000)
    velocity_source: str = setting('auto', "joint velocities: 'auto' (measured, "
                                   'differentiated from the positions where a message has '
                                   "none), 'measured' or 'positions' (data/joint_velocity.py)")
    velocity_window: int = setting(VELOCITY_WINDOW, 'samples in the causal velocity estimate '
                                   'from positions', 3, 1000)
    stamp_source: str = setting('auto', "joint state times: 'auto' (header stamps; arrival "
                                'times when the first message is stamped 0), '
                                "'header' or 'receipt'")
    torch_threads: int = setting(1, 'torch intra-op threads (learned feed-forward)', 1, 64)

    def __post_init__(self) -> None:
        """Refuse values that cannot work at start-up, naming them."""
        check_ranges(self)
        check_velocity_source(self.velocity_source)
        check_stamp_source(self.stamp_source)
        if self.feedforward not in FEEDFORWARD_MODES:
            raise ValueError(f'feedforward must be one of {FEEDFORWARD_MODES}, got '
                             f'{self.feedforward!r}')
        self.controller_config()   # the gains and the reference check themselves

    def controller_config(self) -> ArmControllerConfig:
        """Return the ROS-free controller's settings."""
        return build_from(ArmControllerConfig, self, reference=ReferenceConfig(
            mode=self.trajectory, seed=self.seed))
