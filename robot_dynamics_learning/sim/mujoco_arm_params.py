"""
The settings of mujoco_arm: the simulated world (`MujocoArmConfig`) plus how the node runs it.

One class for the node and its block in config/arm_control.yaml; the world's settings are
`MujocoArmConfig`'s own fields (inherited), so the node, the YAML and the ROS-free simulator
(`sim/mujoco_arm.py`, the demo, the control bench) share one definition.
"""
from dataclasses import dataclass
from typing import Optional, Tuple

from robot_dynamics_learning.params import build_from, check_ranges, setting
from robot_dynamics_learning.sim.mujoco_arm import MujocoArmConfig


@dataclass(frozen=True)
class MujocoArmNodeConfig(MujocoArmConfig):
    """Parameters of mujoco_arm (config/arm_control.yaml documents each one)."""

    initial_position: Optional[Tuple[float, ...]] = setting(
        None, 'start configuration (rad); unset: the middle of every joint range',
        unset_type='double_array')
    command_topic: str = setting('/effort_controller/commands', 'torque command topic')
    publish_clock: bool = setting(False, 'be the clock source: publish /clock and stamp with '
                                  'simulated time (other nodes: use_sim_time)')
    real_time_factor: float = setting(1.0, 'simulated seconds per wall second (0: as fast as '
                                      'possible, only with publish_clock)', 0.0, 100.0)
    duration_s: float = setting(0.0, 'stop after this many simulated seconds (0: never)', 0.0,
                                1e9)

    def __post_init__(self) -> None:
        """Refuse values that cannot work, naming them."""
        super().__post_init__()
        check_ranges(self)
        if self.real_time_factor == 0 and not self.publish_clock:
            raise ValueError('real_time_factor 0 (as fast as possible) needs publish_clock: '
                             'stamps on the wall clock would run ahead of it')

    def world(self) -> MujocoArmConfig:
        """Return the simulator's own settings."""
        return build_from(MujocoArmConfig, self)
