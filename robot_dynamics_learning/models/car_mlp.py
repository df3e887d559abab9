"""
The seed 003 car model: an MLP from local velocities and commands to the next velocities.

f_theta(v_i, u_i) (seed Eq. 2) with 8 hidden layers of 64 GELU units (Sec. IV-B: GELU's
continuous gradient gives smooth optimised controls), trained with the relative L1 loss
(Eq. 11). Deviation: the network predicts the normalised change v_{i+1} - v_i (a residual),
which trains faster than the absolute velocity and leaves the loss unchanged.
Normalisation statistics are buffers, so they travel with the weights in checkpoints.
"""
import dataclasses

from robot_dynamics_learning.models.base import check_finite, SequenceBatch
from robot_dynamics_learning.models.car_common import CarModel, N_ACT
from robot_dynamics_learning.models.common import ModelConfig
import torch
from torch import nn
import torch.nn.functional as F


@dataclasses.dataclass(frozen=True)
class CarMLPConfig(ModelConfig):
    """Hidden width, hidden layers, model step h (s) and the epsilon of the relative L1 loss."""

    hidden: int = 64
    layers: int = 8
    h: float = 0.05
    loss_eps: float = 0.05

    def __post_init__(self) -> None:
        """Reject sizes that cannot build a network."""
        self._positive('hidden', 'layers', 'h', 'loss_eps')


class CarMLP(CarModel):
    """Seed 003 MLP car model (forward kind); see the module docstring."""

    config_class = CarMLPConfig

    def __init__(self, config: CarMLPConfig = CarMLPConfig(), n_obs: int = 6, n_act: int = 2,
                 n_target: int = 6) -> None:
        super().__init__(config, n_obs, n_act, n_target)
        layers = []
        width = 3 + N_ACT
        for _ in range(config.layers):
            layers += [nn.Linear(width, config.hidden), nn.GELU()]
            width = config.hidden
        layers.append(nn.Linear(width, 3))
        self.net = nn.Sequential(*layers)
        self.register_buffer('in_mean', torch.zeros(3 + N_ACT))
        self.register_buffer('in_std', torch.ones(3 + N_ACT))
        self.register_buffer('out_mean', torch.zeros(3))
        self.register_buffer('out_std', torch.ones(3))

    def fit_normalization(self, batch: SequenceBatch) -> None:
        """Set input and velocity-change statistics from transitions (before training)."""
        obs = batch.observations.reshape(-1, batch.observations.shape[-1])
        act = batch.actions.reshape(-1, batch.actions.shape[-1])
        nxt = batch.targets.reshape(-1, batch.targets.shape[-1])
        inputs = torch.cat([obs[:, 3:], act], dim=1)
        deltas = nxt[:, 3:] - obs[:, 3:]
        check_finite('car MLP normalisation data', inputs)
        check_finite('car MLP normalisation targets', deltas)
        self.in_mean.copy_(inputs.mean(0))
        self.in_std.copy_(inputs.std(0).clamp_min(1e-3))
        self.out_mean.copy_(deltas.mean(0))
        self.out_std.copy_(deltas.std(0).clamp_min(1e-4))

    def velocity_step(self, v: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Next body velocities (B, 3) = v + de-normalised MLP output."""
        x = (torch.cat([v, u], dim=-1) - self.in_mean) / self.in_std
        return v + self.net(x) * self.out_std + self.out_mean

    def velocity_sequence(self, v0: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """
        Body velocities (B, H, 3) after each of (B, H, 2) actions: `velocity_step` chained.

        Same function, fewer operations per step (what MPC solves at batch 1 pay for): the
        input and output normalisation are folded into the first and last layer, and the
        actions' share of the first layer is computed for all steps in one matrix product.
        """
        linears = [module for module in self.net if isinstance(module, nn.Linear)]
        w_in = linears[0].weight / self.in_std
        b_in = linears[0].bias - w_in @ self.in_mean
        w_v, w_u = w_in[:, :3].t(), w_in[:, 3:]
        batch, steps = actions.shape[:2]
        from_actions = (actions.reshape(-1, N_ACT) @ w_u.t() + b_in).view(batch, steps, -1)
        hidden = [(layer.weight.t(), layer.bias) for layer in linears[1:-1]]
        w_out = (linears[-1].weight * self.out_std[:, None]).t()
        b_out = linears[-1].bias * self.out_std + self.out_mean
        v = v0
        outputs = []
        for i in range(steps):
            z = F.gelu(torch.addmm(from_actions[:, i], v, w_v))
            for weight, bias in hidden:
                z = F.gelu(torch.addmm(bias, z, weight))
            v = v + torch.addmm(b_out, z, w_out)
            outputs.append(v)
        return torch.stack(outputs, dim=1)
