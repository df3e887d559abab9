"""
The seed 003 car model: an MLP from local velocities and commands to the next velocities.

f_theta(v_i, u_i) (seed Eq. 2) with 8 hidden layers of 64 GELU units (Sec. IV-B: GELU's
continuous gradient gives smooth optimised controls), trained with the relative L1 loss
(Eq. 11). Deviation: the network predicts the normalised change v_{i+1} - v_i (a residual),
which trains faster than the absolute velocity and leaves the loss unchanged.
Normalisation statistics are buffers, so they travel with the weights in checkpoints.
"""
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
import dataclasses
import math
from typing import Callable, Iterator, List, Optional, Tuple, TypeVar

from robot_dynamics_learning.models.base import check_finite, SequenceBatch
from robot_dynamics_learning.models.car_base import CarModel, N_ACT
from robot_dynamics_learning.models.common import ModelConfig
import torch
from torch import nn
import torch.nn.functional as F

T = TypeVar('T')


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

    def fused_rollout(self, workers: int = 1) -> 'FusedRollout':
        """Return a `FusedRollout` of the current weights (rebuild after they change)."""
        return FusedRollout(self, workers)

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


@contextmanager
def small_batch_kernels() -> Iterator[None]:
    """
    Run without oneDNN inside: for small batches (the gradient passes, 1-20 rows).

    oneDNN's exact GELU costs about 7 us per call whatever the size (primitive setup), the
    native kernel 1 us at 64 values; at the line search's 512 x 64 values both take about
    22 us, so the batched pass keeps the default. Both compute the exact erf GELU.
    The switch is process-wide (torch.backends.mkldnn.enabled): other threads running
    torch meanwhile get the native kernels too, which changes their speed, not their results.
    """
    enabled = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = enabled


class FusedRollout:
    """
    `CarMLP.velocity_sequence` for MPC solves: folded weights, reused buffers, manual gradient.

    Why: a tick evaluates 512 candidate rollouts (no gradient) and one gradient per
    iteration; at these sizes autograd's tape and per-op allocations cost as much as the
    arithmetic. `velocities` writes every layer into preallocated buffers (no tape, GELU in
    place, the 3-wide output layer computed transposed, which MKL runs 3-5x faster at this
    shape). The reverse pass needs the pre-activations a_l of one rollout; they are not
    stored during the batched forward pass (20 x 8 x 512 x 64 floats would leave the cache)
    but recomputed afterwards for the one rollout that needs them, all steps in one batch:
    once its velocities are known, every step's input (v_i, u_i) is known (`recorded`,
    `record`). `backward` turns them into the step Jacobians of all steps at once and solves
    the block-bidiagonal adjoint system (seed Eq. 7-9) on 3-vectors: no autograd. The
    weights are a snapshot of the model: build a new one after changing its parameters.

    workers > 1 splits the batched forward pass into that many slices of candidates run
    side by side (the calling thread and a pool; torch releases the GIL inside its kernels):
    on 2 cores the 512-candidate pass takes 7 instead of 11 ms, where 2 intra-op threads
    gain little at these shapes.
    """

    def __init__(self, model: CarMLP, workers: int = 1) -> None:
        if workers < 1:
            raise ValueError(f'workers must be >= 1, got {workers}')
        linears = [module for module in model.net if isinstance(module, nn.Linear)]
        with torch.no_grad():
            w_in = linears[0].weight / model.in_std  # (hidden, 5), normalisation folded in
            self.b_in = (linears[0].bias - w_in @ model.in_mean).clone()
            self.w_v = w_in[:, :3].t().contiguous()  # (3, hidden)
            self.w_u = w_in[:, 3:].t().contiguous()  # (2, hidden)
            self.hidden = [(layer.weight.t().contiguous(), layer.bias.clone())
                           for layer in linears[1:-1]]
            w_out = (linears[-1].weight * model.out_std[:, None]).t()  # (hidden, 3)
            b_out = linears[-1].bias * model.out_std + model.out_mean
            self.b_out_column = b_out[:, None].clone()  # (3, 1)
            # transposes: the forward output layer and the reverse pass
            self.w_out_t = w_out.t().contiguous()  # (3, hidden)
            self.w_v_t = self.w_v.t().contiguous()
            self.w_u_t = self.w_u.t().contiguous()
            self.hidden_t = [weight.t().contiguous() for weight, _ in self.hidden]
        self.width = self.b_in.shape[0]
        self.layers = len(self.hidden) + 1
        self.dtype = self.b_in.dtype
        self._buffers = {}
        self._kept: Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None
        self.workers = workers
        # One intra-op thread per slice: a new thread's OpenMP team defaults to every core,
        # and its spinning workers then slowed the rest of the tick.
        self._pool = (ThreadPoolExecutor(workers - 1, thread_name_prefix='fused_rollout',
                                         initializer=torch.set_num_threads, initargs=(1,))
                      if workers > 1 else None)

    def _buffer(self, name: str, shape: tuple) -> torch.Tensor:
        """Return a reusable buffer (a normal tensor even when called in inference mode)."""
        key = (name, shape)
        if key not in self._buffers:
            with torch.inference_mode(False):
                self._buffers[key] = torch.empty(shape, dtype=self.dtype)
        return self._buffers[key]

    def slices(self, batch: int) -> List[int]:
        """Return the slice bounds [0, ..., batch] of a batch: up to `workers`, 64+ rows each."""
        count = min(self.workers, max(1, batch // 64))
        return [batch * k // count for k in range(count + 1)]

    def map_slices(self, job: Callable[[int, int, int], T], bounds: List[int]) -> List[T]:
        """Run job(k, low, high) for each slice of `bounds`, side by side; return results."""
        spans = list(zip(bounds, bounds[1:]))
        pending = [self._pool.submit(job, k, low, high)
                   for k, (low, high) in enumerate(spans) if k]
        first = job(0, *spans[0])
        return [first] + [future.result() for future in pending]

    def _work(self, part: int, rows: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """Return the two (rows, hidden) scratch buffers of slice `part` of a forward pass."""
        return (self._buffer(f'z0_{part}', (rows, self.width)),
                self._buffer(f'z1_{part}', (rows, self.width)))

    def _action_inputs(self, actions: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """Write the first-layer share of (B, H, 2) actions plus its bias, (H, B, hidden)."""
        batch, steps = actions.shape[:2]
        torch.addmm(self.b_in, actions.transpose(0, 1).reshape(steps * batch, N_ACT),
                    self.w_u, out=out.view(steps * batch, self.width))
        return out

    def _forward(self, v0: torch.Tensor, from_actions: torch.Tensor, out: torch.Tensor,
                 work: Tuple[torch.Tensor, torch.Tensor]) -> None:
        """
        Run the velocity recurrence into out (H, 3, B), component-major.

        v0 (B, 3); from_actions (H, B, hidden) from `_action_inputs`; work: two (B, hidden)
        scratch buffers.
        """
        z, spare = work
        v, v_t = v0, v0.t()
        with torch.no_grad():
            for first, result in zip(from_actions.unbind(0), out.unbind(0)):
                torch._C._nn.gelu_(torch.addmm(first, v, self.w_v, out=z))
                for weight, bias in self.hidden:
                    torch._C._nn.gelu_(torch.addmm(bias, z, weight, out=spare))
                    z, spare = spare, z
                # v_{i+1}^T = v_i^T + W_out^T z^T + b_out: (3, B), the fast shape for BLAS
                v_t = torch.addmm(v_t, self.w_out_t, z.t(), out=result).add_(self.b_out_column)
                v = v_t.t()

    def velocities(self, v0: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """
        Return the step-major body velocities, (H, B, 3), after (B, H, 2) actions from v0.

        No gradient. The result is a view of a reused buffer, valid until the next call with
        the same sizes; `recorded(b)` hands out what `backward` needs for batch entry b of the
        last call.
        """
        batch, steps = actions.shape[:2]
        from_actions = self._action_inputs(
            actions, self._buffer('actions', (steps, batch, self.width)))
        out = self._buffer('velocities', (steps, 3, batch))
        bounds = self.slices(batch)
        if len(bounds) == 2:
            self._forward(v0, from_actions, out, self._work(0, batch))
        else:
            parts = [self._buffer(f'part{k}', (steps, 3, high - low))
                     for k, (low, high) in enumerate(zip(bounds, bounds[1:]))]
            self.map_slices(lambda k, low, high: self._forward(
                v0[low:high], from_actions[:, low:high], parts[k], self._work(k, high - low)),
                bounds)
            torch.cat(parts, dim=2, out=out)
        self._kept = (v0, out, from_actions)
        return out.transpose(1, 2)

    def _tape(self, v0: torch.Tensor, velocities: torch.Tensor, from_actions: torch.Tensor
              ) -> torch.Tensor:
        """
        Pre-activations (layers, H, B, hidden) of a rollout with known velocities.

        v0 (B, 3), velocities (H, B, 3), from_actions (H, B, hidden): step i's input is
        (v_i, u_i), so all H steps go through the network in one batch of H * B rows.
        """
        steps, batch = velocities.shape[:2]
        rows = steps * batch
        with torch.no_grad(), small_batch_kernels():
            inputs = torch.cat([v0.unsqueeze(0), velocities[:-1]], dim=0).reshape(rows, 3)
            tape = torch.empty(self.layers, rows, self.width, dtype=self.dtype)
            z = F.gelu(torch.addmm(from_actions.reshape(rows, self.width), inputs, self.w_v,
                                   out=tape[0]))
            for (weight, bias), pre in zip(self.hidden, tape[1:].unbind(0)):
                z = F.gelu(torch.addmm(bias, z, weight, out=pre))
        return tape.view(self.layers, steps, batch, self.width)

    def recorded(self, index: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """
        Return what `record` would for batch entry `index` of the last `velocities` call.

        (velocities (H, 1, 3), tape (layers, H, 1, hidden)), both new tensors: the velocities
        are copied from that call, the tape is recomputed from them (no sequential pass).
        """
        if self._kept is None:
            raise ValueError('recorded() needs a preceding velocities() call')
        v0, out, from_actions = self._kept
        velocities = out[:, :, index:index + 1].transpose(1, 2).clone()
        return velocities, self._tape(v0[index:index + 1], velocities,
                                      from_actions[:, index:index + 1])

    def record(self, v0: torch.Tensor, actions: torch.Tensor
               ) -> Tuple[torch.Tensor, torch.Tensor]:
        """
        Forward pass that keeps what `backward` needs: velocities (H, B, 3) and tape.

        tape (layers, H, B, hidden) holds every pre-activation; both are new tensors (the
        buffers of `velocities` are left alone).
        """
        batch, steps = actions.shape[:2]
        with torch.no_grad(), small_batch_kernels():
            from_actions = self._action_inputs(
                actions, torch.empty(steps, batch, self.width, dtype=self.dtype))
            out = torch.empty(steps, 3, batch, dtype=self.dtype)
            work = (torch.empty(batch, self.width, dtype=self.dtype),
                    torch.empty(batch, self.width, dtype=self.dtype))
            self._forward(v0, from_actions, out, work)
            velocities = out.transpose(1, 2).contiguous()
        return velocities, self._tape(v0, velocities, from_actions)

    def backward(self, tape: torch.Tensor, grad_velocities: torch.Tensor
                 ) -> Tuple[torch.Tensor, torch.Tensor]:
        """
        Gradients of a scalar loss for the `record` pass with dloss/dvelocities (H, B, 3).

        Returns (dloss/dv0 (B, 3), dloss/dactions (B, H, 2)). The seed's Eq. 7-9 solved by
        back substitution: first the step Jacobians dv_{i+1}/dv_i = I + J_i (3 x 3) and
        dv_{i+1}/du_i (3 x 2) of all H steps at once (three output rows back-propagated
        through the network together, dGELU/da = Phi(a) + a phi(a) from the tape), then the
        block-bidiagonal system for the adjoints lambda_i = dloss/dv_i on 3-vectors,
        lambda_i = g_i + lambda_{i+1} (I + J_i): one small product per step.
        """
        steps, batch = tape.shape[1:3]
        with torch.no_grad():
            slope = 0.5 * (1.0 + torch.erf(tape * 0.5 ** 0.5)) \
                + tape * torch.exp(-0.5 * tape * tape) * (2.0 * math.pi) ** -0.5
            # rows[i, b, k] = d v_{i+1, k} / d a_l for the layers from the last to the first
            slopes = slope.unsqueeze(3).unbind(0)  # per layer, (H, B, 1, hidden)
            rows = self.w_out_t * slopes[-1]  # (H, B, 3, hidden)
            for weight, layer_slope in zip(self.hidden_t[::-1], slopes[-2::-1]):
                rows = torch.matmul(rows, weight).mul_(layer_slope)
            step_v = torch.matmul(rows, self.w_v_t)  # (H, B, 3, 3): J_i
            step_v.diagonal(dim1=-2, dim2=-1).add_(1.0)  # I + J_i
            step_u = torch.matmul(rows, self.w_u_t)  # (H, B, 3, 2)
            adjoint = torch.empty(steps, batch, 1, 3, dtype=self.dtype)  # dloss / dv_{i+1}
            given = grad_velocities.unsqueeze(2)
            adjoint[-1] = given[-1]
            for i in range(steps - 2, -1, -1):
                torch.baddbmm(given[i], adjoint[i + 1], step_v[i + 1], out=adjoint[i])
            grad_actions = torch.matmul(adjoint, step_u).squeeze(2).transpose(0, 1)
            grad_v0 = torch.bmm(adjoint[0], step_v[0]).squeeze(1)
        return grad_v0, grad_actions
