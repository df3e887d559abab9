"""The settings of car_sim: one class for the node and its block in config/car.yaml."""
from dataclasses import dataclass
from typing import Tuple

from robot_dynamics_learning.params import check_ranges, setting

COMMAND_TYPES = ('twist', 'twist_stamped', 'joy')


@dataclass(frozen=True)
class CarSimConfig:
    """Parameters of car_sim (config/car.yaml documents each one)."""

    mocap_rate_hz: float = setting(240.0, 'mocap frame rate (also the simulation step)', 10.0,
                                   1000.0)
    position_std: float = setting(0.002, 'mocap position noise (m)', 0.0, 1.0)
    yaw_std: float = setting(0.005, 'mocap yaw noise (rad)', 0.0, 1.0)
    dropout: float = setting(0.02, 'probability that a mocap frame is lost', 0.0, 1.0)
    jump_probability: float = setting(0.0, 'probability of a one-frame position jump', 0.0,
                                      1.0)
    jump_size: float = setting(0.5, 'size of a mocap jump (m)', 0.0, 10.0)
    command_type: str = setting('twist', f'command message type: {list(COMMAND_TYPES)}')
    throttle_axis: int = setting(1, 'Joy axis of the throttle')
    steering_axis: int = setting(3, 'Joy axis of the steering')
    throttle_scale: float = setting(1.0, 'throttle = throttle_scale * linear.x (or the Joy '
                                    'axis)')
    steering_scale: float = setting(1.0, 'steering = steering_scale * angular.z (or the Joy '
                                    'axis)')
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
        check_ranges(self)
        if self.command_type not in COMMAND_TYPES:
            raise ValueError(f'command_type must be one of {list(COMMAND_TYPES)}, got '
                             f'{self.command_type!r}')
        if len(self.start_pose) != 3:
            raise ValueError(f'start_pose must be [x, y, yaw], got {list(self.start_pose)}')
