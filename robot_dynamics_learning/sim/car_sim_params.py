"""The settings of car_sim: one class for the node and its block in config/car.yaml."""
from dataclasses import dataclass
from typing import Tuple

from robot_dynamics_learning.data.messages import CarCommandSettings
from robot_dynamics_learning.params import build_from, check_ranges, setting, setting_of
from robot_dynamics_learning.sim.car import MocapNoise


@dataclass(frozen=True)
class CarSimConfig(CarCommandSettings):
    """Parameters of car_sim (config/car.yaml documents each one); `command` as the base says."""

    mocap_rate_hz: float = setting_of(MocapNoise, 'rate_hz')
    position_std: float = setting_of(MocapNoise, 'position_std')
    yaw_std: float = setting_of(MocapNoise, 'yaw_std', 0.005)
    dropout: float = setting_of(MocapNoise, 'dropout')
    jump_probability: float = setting_of(MocapNoise, 'jump_probability')
    jump_size: float = setting_of(MocapNoise, 'jump_size')
    command_timeout_s: float = setting(0.5, 'zero command after this long without one (s)',
                                       0.01, 10.0)
    track_file: str = setting('', 'start on this track centre line at progress start_s '
                              '(empty: start at start_pose)')
    start_s: float = setting(0.0, 'progress along the track of the start pose (m)')
    start_pose: Tuple[float, ...] = setting((0.0, 0.0, 0.0), 'start [x, y, yaw] when no track '
                                            'is given')
    frame_id: str = setting('world', 'frame of the published poses')
    seed: int = setting(0, 'random seed of the mocap noise')

    def __post_init__(self) -> None:
        """Refuse values that cannot work, naming them."""
        super().__post_init__()
        check_ranges(self)
        if len(self.start_pose) != 3:
            raise ValueError(f'start_pose must be [x, y, yaw], got {list(self.start_pose)}')

    def mocap_noise(self) -> MocapNoise:
        """Return the emulated mocap's settings."""
        return build_from(MocapNoise, self, rate_hz=self.mocap_rate_hz)
