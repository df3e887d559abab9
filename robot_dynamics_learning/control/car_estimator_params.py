"""
The settings of car_state_estimator: one class for the node and its block in config/car.yaml.

The node declares its parameters from `CarStateEstimatorConfig` (default, description, range
of every field); `params.load_node_config` reads the YAML block into the same class. The
defaults suit car_sim's emulated mocap (a straight line over 0.08 s); a real Vicon: order 2,
window_s 0.12 (docs/results_car.md section 8).
"""
from dataclasses import dataclass
from typing import ClassVar, Tuple

from robot_dynamics_learning.data.messages import (CAR_COMMAND_TYPES, CarCommandSettings,
                                                   check_stamp_source, POSE_TYPE_NAMES)
from robot_dynamics_learning.params import build_from, check_ranges, setting, setting_of
from robot_dynamics_learning.signals.mocap import emulated_mocap_config, MocapEstimatorConfig
from robot_dynamics_learning.signals.yaw_filter import YawModelConfig

COMMAND_TYPES = ('',) + CAR_COMMAND_TYPES
_FIT = emulated_mocap_config()


@dataclass(frozen=True)
class CarStateEstimatorConfig(CarCommandSettings):
    """Parameters of car_state_estimator (config/car.yaml documents each one)."""

    command_types: ClassVar[Tuple[str, ...]] = COMMAND_TYPES
    command_type: str = setting('', f'car command message on `command`: {list(COMMAND_TYPES)}'
                                ' (empty: no subscription, the yaw rate comes from the fit)')
    pose_type: str = setting('pose_stamped', 'mocap message on `mocap_pose`: '
                             f'{list(POSE_TYPE_NAMES)} (vrpn_mocap: pose_stamped; vicon_bridge: '
                             'transform_stamped)')
    yaw_offset_deg: float = setting(0.0, 'degrees added to the mocap yaw, for a rigid body '
                                    "whose x axis is not the car's forward (the log says so "
                                    'when the car travels off its heading)', -360.0, 360.0)
    window_s: float = setting_of(MocapEstimatorConfig, 'window_s', _FIT.window_s)
    yaw_window_s: float = setting(0.0, 'causal fit window of the yaw (s); 0 = window_s', 0.0,
                                  1.0)
    order: int = setting_of(MocapEstimatorConfig, 'order', _FIT.order)
    min_samples: int = setting_of(MocapEstimatorConfig, 'min_samples')
    max_speed: float = setting_of(MocapEstimatorConfig, 'max_speed')
    jump_margin: float = setting_of(MocapEstimatorConfig, 'jump_margin')
    relock_after: int = setting_of(MocapEstimatorConfig, 'relock_after')
    time_reset_s: float = setting(0.5, 'a pose stamp this far backwards is a time reset '
                                  '(looping bag, restarted simulation): the estimate starts '
                                  'again instead of rejecting every later pose', 0.0, 1e9)
    stamp_source: str = setting('auto', "pose times: 'auto' (header stamps; arrival times on "
                                'the node clock when the first pose is stamped 0: a mocap '
                                "bridge that never stamps), 'header' (a stamp of 0 is "
                                "refused) or 'receipt' (arrival times always)")
    frame_id: str = setting('world', 'frame of the published pose')
    publish_rate_hz: float = setting(100.0, 'most estimates published per second (every pose '
                                     'is still filtered); 0 = one per accepted pose', 0.0,
                                     10000.0)
    command_timeout_s: float = setting_of(YawModelConfig, 'command_timeout_s')
    steer_gain: float = setting_of(YawModelConfig, 'gain')
    steer_cubic: float = setting_of(YawModelConfig, 'cubic')
    yaw_tau_s: float = setting_of(YawModelConfig, 'tau_s')
    yaw_tau_per_speed: float = setting_of(YawModelConfig, 'tau_per_speed')
    yaw_lateral_gain: float = setting_of(YawModelConfig, 'lateral_gain')
    command_delay_s: float = setting_of(YawModelConfig, 'delay_s')
    yaw_noise: float = setting_of(YawModelConfig, 'yaw_noise')
    yaw_accel_noise: float = setting_of(YawModelConfig, 'accel_noise')
    yaw_bias_noise: float = setting_of(YawModelConfig, 'bias_noise')
    yaw_slip_accel: float = setting_of(YawModelConfig, 'slip_accel')
    yaw_step_rate: float = setting_of(YawModelConfig, 'step_rate')
    yaw_step_memory_s: float = setting_of(YawModelConfig, 'step_memory_s')

    def __post_init__(self) -> None:
        """Refuse values that cannot work, naming them."""
        super().__post_init__()
        check_ranges(self)
        check_stamp_source(self.stamp_source)
        if self.pose_type not in POSE_TYPE_NAMES:
            raise ValueError(f'pose_type must be one of {list(POSE_TYPE_NAMES)}, got '
                             f'{self.pose_type!r}')
        self.mocap_config()
        self.yaw_model()

    def mocap_config(self) -> MocapEstimatorConfig:
        """Return the settings of the position and yaw fit."""
        return build_from(MocapEstimatorConfig, self, yaw_window_s=self.yaw_window_s or None)

    def yaw_model(self) -> YawModelConfig:
        """Return the command-driven yaw filter's settings."""
        return YawModelConfig(
            gain=self.steer_gain, cubic=self.steer_cubic, tau_s=self.yaw_tau_s,
            tau_per_speed=self.yaw_tau_per_speed, lateral_gain=self.yaw_lateral_gain,
            delay_s=self.command_delay_s, yaw_noise=self.yaw_noise,
            accel_noise=self.yaw_accel_noise, bias_noise=self.yaw_bias_noise,
            slip_accel=self.yaw_slip_accel, step_rate=self.yaw_step_rate,
            step_memory_s=self.yaw_step_memory_s, command_timeout_s=self.command_timeout_s)
