"""
The seed 003 car model: an MLP from local velocities and commands to the next velocities.

f_theta(v_i, u_i) (seed Eq. 2) with 8 hidden layers of 64 GELU units (Sec. IV-B: GELU's
continuous gradient gives smooth optimised controls), trained with the relative L1 loss
(Eq. 11). Deviation: the network predicts the normalised change v_{i+1} - v_i (a residual),
which trains faster than the absolute velocity and leaves the loss unchanged.
Normalisation statistics are buffers, so they travel with the weights in checkpoints.
"""
import dataclasses
import math
from typing import Optional, Tuple

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


class FusedRollout:
    """
    `CarMLP.velocity_sequence` for MPC solves: folded weights, reused buffers, manual gradient.

    Why: a tick evaluates 512 candidate rollouts (no gradient) and one gradient per
    iteration; at these sizes autograd's tape and per-op allocations cost as much as the
    arithmetic. `velocities` writes every layer into preallocated buffers (no tape, GELU in
    place); `record` keeps the pre-activations a_l of one forward pass and `backward`
    back-propagates through them with matrix products (dGELU/da = Phi(a) + a phi(a)): the
    reverse pass of the seed's Eq. 2 chained over the horizon, no autograd. The weights are a
    snapshot of the model: build a new one after changing its parameters.
    """

    def __init__(self, model: CarMLP) -> None:
        linears = [module for module in model.net if isinstance(module, nn.Linear)]
        with torch.no_grad():
            w_in = linears[0].weight / model.in_std  # (hidden, 5), normalisation folded in
            self.b_in = (linears[0].bias - w_in @ model.in_mean).clone()
            self.w_v = w_in[:, :3].t().contiguous()  # (3, hidden)
            self.w_u = w_in[:, 3:].t().contiguous()  # (2, hidden)
            self.hidden = [(layer.weight.t().contiguous(), layer.bias.clone())
                           for layer in linears[1:-1]]
            self.w_out = (linears[-1].weight * model.out_std[:, None]).t().contiguous()
            self.b_out = (linears[-1].bias * model.out_std + model.out_mean).clone()
            # transposes for the reverse pass
            self.w_v_t, self.w_u_t = self.w_v.t().contiguous(), self.w_u.t().contiguous()
            self.hidden_t = [weight.t().contiguous() for weight, _ in self.hidden]
            self.w_out_t = self.w_out.t().contiguous()
        self.width = self.b_in.shape[0]
        self.dtype = self.b_in.dtype
        self._buffers = {}
        self._kept: Optional[Tuple[torch.Tensor, torch.Tensor]] = None

    def _buffer(self, name: str, shape: tuple) -> torch.Tensor:
        """Return a reusable buffer (a normal tensor even when called in inference mode)."""
        key = (name, shape)
        if key not in self._buffers:
            with torch.inference_mode(False):
                self._buffers[key] = torch.empty(shape, dtype=self.dtype)
        return self._buffers[key]

    def _action_inputs(self, actions: torch.Tensor) -> torch.Tensor:
        """First-layer share of the actions plus its bias, step-major (H, B, hidden)."""
        batch, steps = actions.shape[:2]
        out = self._buffer('actions', (steps, batch, self.width))
        torch.addmm(self.b_in, actions.transpose(0, 1).reshape(steps * batch, N_ACT),
                    self.w_u, out=out.view(steps * batch, self.width))
        return out

    def velocities(self, v0: torch.Tensor, actions: torch.Tensor, keep: bool = False
                   ) -> torch.Tensor:
        """
        Return the step-major body velocities, (H, B, 3), after (B, H, 2) actions from v0.

        No gradient. The result is a reused buffer: valid until the next call with the same
        sizes. keep: also store the pre-activations, so that `recorded(b)` can hand out
        what `backward` needs for batch entry b without a second forward pass.
        """
        batch, steps = actions.shape[:2]
        layers = len(self.hidden) + 1
        from_actions = self._action_inputs(actions)
        out = self._buffer('velocities', (steps, batch, 3))
        z = self._buffer('z0', (batch, self.width))
        spare = self._buffer('z1', (batch, self.width))
        if keep:
            tape = self._buffer('tape', (steps, layers, batch, self.width))
            slots = tape.view(steps * layers, batch, self.width).unbind(0)
            self._kept = (out, tape)
        else:
            self._kept = None
        v = v0
        with torch.no_grad():
            for i, (first, result) in enumerate(zip(from_actions.unbind(0), out.unbind(0))):
                if keep:
                    slot = slots[i * layers:(i + 1) * layers]
                    torch._C._nn.gelu(torch.addmm(first, v, self.w_v, out=slot[0]), out=z)
                    for (weight, bias), pre in zip(self.hidden, slot[1:]):
                        torch._C._nn.gelu(torch.addmm(bias, z, weight, out=pre), out=spare)
                        z, spare = spare, z
                else:
                    torch._C._nn.gelu_(torch.addmm(first, v, self.w_v, out=z))
                    for weight, bias in self.hidden:
                        torch._C._nn.gelu_(torch.addmm(bias, z, weight, out=spare))
                        z, spare = spare, z
                torch.addmm(v, z, self.w_out, out=result)
                v = result.add_(self.b_out)
        return out

    def recorded(self, index: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """
        Return what `record` would for batch entry `index` of the last kept forward pass.

        (velocities (H, 1, 3), tape (H, layers, 1, hidden)), copied from the buffers of the
        last `velocities(..., keep=True)` call.
        """
        if self._kept is None:
            raise ValueError('recorded() needs a preceding velocities(..., keep=True)')
        out, tape = self._kept
        return (out[:, index:index + 1].clone(), tape[:, :, index:index + 1].clone())

    def record(self, v0: torch.Tensor, actions: torch.Tensor
               ) -> Tuple[torch.Tensor, torch.Tensor]:
        """
        Forward pass that keeps what `backward` needs: velocities (H, B, 3) and tape.

        tape (H, layers, B, hidden) holds every pre-activation; both are new tensors.
        """
        batch, steps = actions.shape[:2]
        layers = len(self.hidden) + 1
        with torch.no_grad():
            from_actions = self._action_inputs(actions)
            tape = torch.empty(steps, layers, batch, self.width, dtype=self.dtype)
            out = torch.empty(steps, batch, 3, dtype=self.dtype)
            slots = tape.view(steps * layers, batch, self.width).unbind(0)
            v = v0
            for i, (first, result) in enumerate(zip(from_actions.unbind(0), out.unbind(0))):
                slot = iter(slots[i * layers:(i + 1) * layers])
                z = F.gelu(torch.addmm(first, v, self.w_v, out=next(slot)))
                for weight, bias in self.hidden:
                    z = F.gelu(torch.addmm(bias, z, weight, out=next(slot)))
                torch.addmm(v, z, self.w_out, out=result)
                v = result.add_(self.b_out)
        return out, tape

    def backward(self, tape: torch.Tensor, grad_velocities: torch.Tensor
                 ) -> Tuple[torch.Tensor, torch.Tensor]:
        """
        Gradients of a scalar loss for the `record` pass with dloss/dvelocities (H, B, 3).

        Returns (dloss/dv0 (B, 3), dloss/dactions (B, H, 2)).
        """
        steps = tape.shape[0]
        with torch.no_grad():
            # GELU'(a) = Phi(a) + a phi(a) for every stored pre-activation at once
            slope = 0.5 * (1.0 + torch.erf(tape * 0.5 ** 0.5)) \
                + tape * torch.exp(-0.5 * tape * tape) * (2.0 * math.pi) ** -0.5
            first = torch.empty(steps, *tape.shape[2:], dtype=self.dtype)
            layers = tape.shape[1]
            slopes = slope.view(-1, *tape.shape[2:]).unbind(0)
            reverse = self.hidden_t[::-1]
            carry = torch.zeros_like(grad_velocities[0])
            for i in range(steps - 1, -1, -1):
                grad_v = grad_velocities[i] + carry  # dloss / dv_{i+1}
                step = slopes[i * layers:(i + 1) * layers]
                grad_z = torch.mm(grad_v, self.w_out_t).mul_(step[-1])
                for weight, layer_slope in zip(reverse, step[-2::-1]):
                    grad_z = torch.mm(grad_z, weight).mul_(layer_slope)
                first[i] = grad_z
                carry = torch.addmm(grad_v, grad_z, self.w_v_t)  # v_{i+1} = v_i + MLP(v_i)
            grad_actions = torch.matmul(first, self.w_u_t).transpose(0, 1)
        return carry, grad_actions
