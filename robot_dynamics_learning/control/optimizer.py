"""
Gradient descent with a batched line search (seed 003, Sec. III-C).

The optimiser only sees a cost closure: cost_fn(u) maps (K, H, m) control sequences to (K,)
costs. Each iteration takes dl/du by reverse-mode autodiff through the closure (for a rollout
this equals the seed's implicit-function form, Eq. 7-9: backpropagation solves the same block
triangular system) or from a given grad_fn(u (H, m), hint) -> (cost, dl/du (H, m)) (the
MPC's hand-written reverse pass; hint is the index of u in the last batch given to cost_fn,
None when u did not come from it, so that a closure that kept that forward pass can reuse
it), then evaluates u - alpha * d for `candidates` step sizes alpha
spaced logarithmically in [min_step, max_step] in one batch (inference mode, one reused
candidate buffer) and keeps the cheapest.
Coarse to fine (`refine_candidates` > 0): the same search with few `candidates`, then a
second batch of `refine_candidates` step sizes spaced logarithmically between the best coarse
step's two neighbours (the best coarse candidate is that batch's first entry, so the chosen
controls always come from the last batch: the MPC's fast gradient reuses its rollout). Why:
the cost along the direction is smooth at the spacing of 512 steps over six decades
(factor 1.027); 32 + 16 steps reach nearly the same minimum for a tenth of the rollouts.
Deviations from the seed: the direction d is the gradient scaled to a largest entry of
`step_scale` (control units), so the step-size range means the same for every cost scale;
the coarse-to-fine option.
"""
from dataclasses import dataclass
import math
import time
from typing import Callable, NamedTuple, Optional, Protocol, Tuple

import torch

CostFn = Callable[[torch.Tensor], torch.Tensor]
GradFn = Callable[[torch.Tensor, Optional[int]], Tuple[float, torch.Tensor]]


@dataclass(frozen=True)
class OptimizerConfig:
    """
    Iterations per call, line-search size and range, and the direction's largest entry.

    stop_early: stop when an iteration improves the cost by less than `tolerance` (turn off
    to run exactly `iterations`, e.g. for timing).
    refine_candidates: 0 searches `candidates` step sizes in one batch (the seed); > 0 adds
    a finer batch of this many around the best of the `candidates` (see the module
    docstring).
    """

    iterations: int = 3
    candidates: int = 512
    refine_candidates: int = 0
    min_step: float = 1e-6
    max_step: float = 1.0
    step_scale: float = 1.0
    tolerance: float = 1e-9
    stop_early: bool = True

    def __post_init__(self) -> None:
        """Validate the settings, naming the bad one."""
        if self.iterations < 1 or self.candidates < 1:
            raise ValueError(f'iterations and candidates must be >= 1, got {self.iterations}, '
                             f'{self.candidates}')
        if self.refine_candidates < 0:
            raise ValueError(f'refine_candidates must be >= 0, got {self.refine_candidates}')
        if not 0 < self.min_step <= self.max_step:
            raise ValueError(f'need 0 < min_step <= max_step, got {self.min_step}, '
                             f'{self.max_step}')
        if self.step_scale <= 0 or self.tolerance < 0:
            raise ValueError(f'step_scale must be > 0 and tolerance >= 0, got '
                             f'{self.step_scale}, {self.tolerance}')


class OptimizeInfo(NamedTuple):
    """What happened: start and final cost, iterations run, whether it stalled, seconds."""

    initial_cost: float
    cost: float
    iterations: int
    converged: bool
    seconds: float


class Optimizer(Protocol):
    """What the MPC needs of a solver: `LineSearchOptimizer` and `nlp.IpoptOptimizer`."""

    def optimize(self, cost_fn: CostFn, u_init: torch.Tensor,
                 iterations: Optional[int] = None, deadline: Optional[float] = None,
                 grad_fn: Optional[GradFn] = None,
                 bounds: Optional[Tuple[torch.Tensor, torch.Tensor]] = None
                 ) -> Tuple[torch.Tensor, OptimizeInfo]:
        """Minimise cost_fn from (H, m) u_init; return the controls and what happened."""


class LineSearchOptimizer:
    """Batched line-search gradient descent; the step sizes are built once in __init__."""

    def __init__(self, config: OptimizerConfig = OptimizerConfig()) -> None:
        self.config = config
        self.steps = torch.logspace(math.log10(config.min_step), math.log10(config.max_step),
                                    config.candidates).view(-1, 1, 1)
        # Coarse to fine: the fine batch spans a coarse step's two neighbours (log spacing).
        spacing = (math.log(config.max_step / config.min_step) / (config.candidates - 1)
                   if config.candidates > 1 else 0.0)
        self._fine_offsets = torch.exp(torch.linspace(-spacing, spacing,
                                                      config.refine_candidates))
        self._candidates: dict = {}

    def optimize(self, cost_fn: CostFn, u_init: torch.Tensor,
                 iterations: Optional[int] = None,
                 deadline: Optional[float] = None, grad_fn: Optional[GradFn] = None,
                 bounds: Optional[Tuple[torch.Tensor, torch.Tensor]] = None
                 ) -> Tuple[torch.Tensor, OptimizeInfo]:
        """
        Minimise cost_fn from (H, m) u_init; return the best (H, m) controls and info.

        grad_fn(u, hint) -> (cost of u, dl/du), when given, replaces autodiff through
        cost_fn (see the module docstring for hint).

        deadline (time.perf_counter() seconds), when given, skips an iteration that would end
        after it, judged by the slowest one so far (at least one always runs). A non-finite
        cost or gradient is a ValueError. bounds (control limits) are not used here: seed
        003's limit barrier in the cost keeps the plan inside, and the MPC clips its output
        (`IpoptOptimizer` takes them as box constraints).
        """
        start = time.perf_counter()
        count = self.config.iterations if iterations is None else iterations
        u = u_init.detach().clone()
        initial = cost = math.nan
        done = 0
        converged = False
        slowest = 0.0
        hint = None
        while done < count and not converged:
            began = time.perf_counter()
            if done and deadline is not None and began + slowest > deadline:
                break
            u, new_cost, current, hint = self._iterate(cost_fn, u, not done, grad_fn, hint)
            if not done:  # the first gradient pass also gives the initial cost
                initial = cost = current
            slowest = max(slowest, time.perf_counter() - began)
            converged = self.config.stop_early and not new_cost < cost - self.config.tolerance
            cost = min(cost, new_cost)
            done += 1
        return u, OptimizeInfo(initial, cost, done, converged, time.perf_counter() - start)

    def _iterate(self, cost_fn: CostFn, u: torch.Tensor, first: bool = False,
                 grad_fn: Optional[GradFn] = None, hint: Optional[int] = None
                 ) -> Tuple[torch.Tensor, float, float, Optional[int]]:
        """
        One gradient step with the batched line search.

        Returns (new controls, their cost, the cost of u, the new controls' index in the
        line-search batch or None when u was kept); on the first iteration a non-finite cost
        of u is a ValueError.
        """
        if grad_fn is not None:
            current, grad = grad_fn(u, hint)
        else:
            variable = u.clone().requires_grad_(True)
            value = cost_fn(variable.unsqueeze(0))[0]
            current = float(value.detach())
        if first and not math.isfinite(current):
            raise ValueError(f'cost of the initial controls is not finite ({current})')
        if grad_fn is None:
            (grad,) = torch.autograd.grad(value, variable)
        if not bool(torch.isfinite(grad).all()):
            raise ValueError('cost gradient contains NaN or inf')
        scale = float(grad.abs().max())
        if scale == 0.0:
            return u, current, current, None
        direction = grad * (self.config.step_scale / scale)
        with torch.inference_mode():
            candidates, best, best_cost = self._search(cost_fn, u, direction, self.steps)
            if self.config.refine_candidates and self.config.candidates > 1:
                step = float(self.steps[best])
                fine = torch.cat([self.steps[best].view(1), torch.clamp(
                    step * self._fine_offsets, self.config.min_step, self.config.max_step)])
                candidates, best, best_cost = self._search(cost_fn, u, direction,
                                                           fine.view(-1, 1, 1))
        if best_cost < current:
            return candidates[best].clone(), best_cost, current, best
        return u, current, current, None

    def _search(self, cost_fn: CostFn, u: torch.Tensor, direction: torch.Tensor,
                steps: torch.Tensor) -> Tuple[torch.Tensor, int, float]:
        """Cost u - step * direction for (K, 1, 1) steps in one batch; return the best."""
        candidates = self._buffer(steps.shape[0], u.shape)
        torch.sub(u.unsqueeze(0), steps * direction.unsqueeze(0), out=candidates)
        costs = cost_fn(candidates)
        costs = torch.where(torch.isfinite(costs), costs, torch.full_like(costs, math.inf))
        best = int(torch.argmin(costs))
        return candidates, best, float(costs[best])

    def _buffer(self, count: int, shape: torch.Size) -> torch.Tensor:
        """Return a (count, H, m) line-search buffer, reused while the sizes stay."""
        key = (count, *shape)
        if key not in self._candidates:
            with torch.inference_mode(False):   # a normal tensor, written in inference mode
                self._candidates[key] = torch.empty(key)
        return self._candidates[key]


SOLVERS = ('line_search', 'ipopt')


def make_optimizer(solver: str, horizon: int, iterations: int, candidates: int = 512,
                   stop_early: bool = True, refine_candidates: int = 0) -> Optimizer:
    """
    Return the MPC's optimiser by name (`SOLVERS`); a clear ValueError for an unknown one.

    line_search: seed 003's gradient step with `candidates` step sizes (then
    `refine_candidates` finer ones around the best, when > 0); ipopt: IPOPT through CasADi
    (`control/nlp.py`, imported only then: CasADi is large). `iterations` is per tick for both.
    """
    if solver == 'line_search':
        return LineSearchOptimizer(OptimizerConfig(iterations=iterations, candidates=candidates,
                                                   stop_early=stop_early,
                                                   refine_candidates=refine_candidates))
    if solver == 'ipopt':
        from robot_dynamics_learning.control.nlp import IpoptConfig, IpoptOptimizer
        return IpoptOptimizer(horizon, IpoptConfig(iterations=iterations))
    raise ValueError(f"unknown MPC solver '{solver}', choose from {list(SOLVERS)}")
