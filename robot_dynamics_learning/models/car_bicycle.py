"""
Baseline car model: a kinematic bicycle with identified gains and first-order lags.

Longitudinal: vx' = vx + h (k_a throttle - k_d vx - c_0). Steering angle delta = k_s steering
+ delta_0; the no-slip yaw rate r* = vx' tan(delta) / L and lateral velocity vy* = r* l_r are
approached with time constants tau_r, tau_y (the car's yaw and lateral response lag the
steering). It cannot drift: that is what the MLP adds. All gains are positive through
softplus and fitted with the same loss and trainer as the MLP.
"""
import dataclasses
import math

from robot_dynamics_learning.models.car_base import CarModel
from robot_dynamics_learning.models.common import ModelConfig
import torch
from torch import nn
import torch.nn.functional as F


def _inv_softplus(value: float) -> float:
    return math.log(math.expm1(value))


@dataclasses.dataclass(frozen=True)
class BicycleConfig(ModelConfig):
    """Model step h (s), wheelbase and rear axle to centre of mass (m), loss epsilon."""

    h: float = 0.05
    wheelbase: float = 0.1735
    rear_to_cg: float = 0.0868
    loss_eps: float = 0.05

    def __post_init__(self) -> None:
        """Reject geometry that is not a car."""
        self._positive('h', 'wheelbase', 'rear_to_cg', 'loss_eps')
        if self.rear_to_cg >= self.wheelbase:
            raise ValueError(f'rear_to_cg ({self.rear_to_cg}) must be below the wheelbase '
                             f'({self.wheelbase})')


class KinematicBicycle(CarModel):
    """Kinematic bicycle with learnable gains (forward kind); see the module docstring."""

    config_class = BicycleConfig

    def __init__(self, config: BicycleConfig = BicycleConfig(), n_obs: int = 6, n_act: int = 2,
                 n_target: int = 6) -> None:
        super().__init__(config, n_obs, n_act, n_target)
        self.wheelbase = float(config.wheelbase)
        self.rear_to_cg = float(config.rear_to_cg)
        self.raw_accel = nn.Parameter(torch.tensor(_inv_softplus(3.0)))
        self.raw_drag = nn.Parameter(torch.tensor(_inv_softplus(1.0)))
        self.offset = nn.Parameter(torch.tensor(0.0))
        self.raw_steer = nn.Parameter(torch.tensor(_inv_softplus(0.4)))
        self.steer_offset = nn.Parameter(torch.tensor(0.0))
        self.raw_tau_r = nn.Parameter(torch.tensor(_inv_softplus(0.1)))
        self.raw_tau_y = nn.Parameter(torch.tensor(_inv_softplus(0.1)))

    def velocity_step(self, v: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Next body velocities (B, 3) from (B, 3) v and (B, 2) u."""
        vx, vy, r = v[:, 0], v[:, 1], v[:, 2]
        accel = F.softplus(self.raw_accel) * u[:, 0] - F.softplus(self.raw_drag) * vx
        vx_n = vx + self.h * (accel - self.offset)
        delta = F.softplus(self.raw_steer) * u[:, 1] + self.steer_offset
        r_star = vx_n * torch.tan(delta) / self.wheelbase
        gain_r = 1.0 - torch.exp(-self.h / (F.softplus(self.raw_tau_r) + 1e-3))
        r_n = r + gain_r * (r_star - r)
        gain_y = 1.0 - torch.exp(-self.h / (F.softplus(self.raw_tau_y) + 1e-3))
        vy_n = vy + gain_y * (r_n * self.rear_to_cg - vy)
        return torch.stack([vx_n, vy_n, r_n], dim=1)
