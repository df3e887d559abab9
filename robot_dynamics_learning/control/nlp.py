"""
An off-the-shelf NLP solver for the MPC: IPOPT through CasADi, on our own cost and gradient.

Why: with the same learned model and costs, IPOPT's quasi-Newton steps reach lower costs in
fewer evaluations than seed 003's gradient step with a batched line search (issue measured
it with the MLP written symbolically; `bench.mpc` measures this class). Instead of rewriting
the network and the track projection as CasADi expressions, the objective is a CasADi
`Callback` around the MPC's own closures: `cost_fn` (the torch forward pass) and `grad_fn`
(the hand-written reverse pass of the fast path, or autograd), so both solvers optimise
exactly the same function and are judged by it. The Hessian is IPOPT's L-BFGS approximation
(no second derivatives exist for the fast path); the control limits are box constraints.

`IpoptOptimizer.optimize` has `LineSearchOptimizer.optimize`'s signature plus `bounds`:
warm-started from the given plan, at most `iterations` IPOPT iterations and the wall time
left before `deadline`. It never returns a plan worse than its start: when IPOPT fails
without improving, the start (the shifted previous plan) comes back with `converged` False;
a non-finite cost or gradient is a ValueError (the MPC then brakes).
"""
from dataclasses import dataclass
import math
import time
from typing import Callable, List, Optional, Tuple

import casadi
import numpy as np
from robot_dynamics_learning.control.optimizer import CostFn, GradFn, OptimizeInfo
import torch


@dataclass(frozen=True)
class IpoptConfig:
    """IPOPT settings: iterations per call, convergence tolerance, L-BFGS memory."""

    iterations: int = 5
    tolerance: float = 1e-6
    lbfgs_memory: int = 6

    def __post_init__(self) -> None:
        """Validate the settings, naming the bad one."""
        if self.iterations < 1 or self.lbfgs_memory < 1:
            raise ValueError(f'iterations and lbfgs_memory must be >= 1, got '
                             f'{self.iterations}, {self.lbfgs_memory}')
        if not self.tolerance > 0:
            raise ValueError(f'tolerance must be > 0, got {self.tolerance}')


class _Problem:
    """The current tick's closures and the last evaluated point (IPOPT asks f, then grad f)."""

    def __init__(self, shape: Tuple[int, int]) -> None:
        self.shape = shape
        self.cost_fn: Optional[CostFn] = None
        self.grad_fn: Optional[GradFn] = None
        self.evaluations = 0
        self._cost_at: Optional[np.ndarray] = None
        self._cost = math.nan
        self._grad_at: Optional[np.ndarray] = None
        self._grad: Optional[np.ndarray] = None

    def start(self, cost_fn: CostFn, grad_fn: Optional[GradFn]) -> None:
        """Take the closures of a new tick; forget the cached points."""
        self.cost_fn, self.grad_fn = cost_fn, grad_fn
        self.evaluations = 0
        self._cost_at = self._grad_at = None

    def _controls(self, x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(x.reshape(self.shape), dtype=torch.float32)

    def cost(self, x: np.ndarray) -> float:
        """Cost of the flat controls x; raises ValueError when it is not finite."""
        if self._cost_at is None or not np.array_equal(x, self._cost_at):
            with torch.no_grad():
                value = float(self.cost_fn(self._controls(x).unsqueeze(0))[0])
            self.evaluations += 1
            self._cost_at, self._cost = x.copy(), value
        if not math.isfinite(self._cost):
            raise ValueError(f'cost is not finite ({self._cost})')
        return self._cost

    def gradient(self, x: np.ndarray) -> np.ndarray:
        """Gradient (flat) of the cost at x; raises ValueError when it is not finite."""
        if self._grad_at is None or not np.array_equal(x, self._grad_at):
            controls = self._controls(x)
            if self.grad_fn is not None:
                value, grad = self.grad_fn(controls, None)
            else:
                variable = controls.clone().requires_grad_(True)
                total = self.cost_fn(variable.unsqueeze(0))[0]
                (grad,) = torch.autograd.grad(total, variable)
                value = float(total.detach())
            self.evaluations += 1
            self._grad_at, self._grad = x.copy(), grad.detach().double().numpy().ravel()
            self._cost_at, self._cost = x.copy(), float(value)
        if not np.all(np.isfinite(self._grad)):
            raise ValueError('cost gradient contains NaN or inf')
        return self._grad


class _Objective(casadi.Callback):
    """f(x) for CasADi, with its gradient as the Jacobian (a second callback)."""

    def __init__(self, problem: _Problem) -> None:
        casadi.Callback.__init__(self)
        self.problem = problem
        self.size = problem.shape[0] * problem.shape[1]
        self._jacobian: Optional[_Gradient] = None
        self.construct('mpc_cost', {'enable_fd': False})

    def get_n_in(self) -> int:
        return 1

    def get_n_out(self) -> int:
        return 1

    def get_sparsity_in(self, index: int) -> casadi.Sparsity:
        return casadi.Sparsity.dense(self.size, 1)

    def get_sparsity_out(self, index: int) -> casadi.Sparsity:
        return casadi.Sparsity.dense(1, 1)

    def eval(self, arguments: List[casadi.DM]) -> List[float]:  # noqa: A003 (CasADi's name)
        return [self.problem.cost(np.asarray(arguments[0]).ravel())]

    def has_jacobian(self) -> bool:
        return True

    def get_jacobian(self, name: str, inames: List[str], onames: List[str],
                     opts: dict) -> casadi.Callback:
        self._jacobian = _Gradient(name, self.problem, self.size, opts)  # CasADi keeps no ref
        return self._jacobian


class _Gradient(casadi.Callback):
    """df/dx (1 x n) at x; CasADi also passes the nominal f, unused."""

    def __init__(self, name: str, problem: _Problem, size: int, opts: dict) -> None:
        casadi.Callback.__init__(self)
        self.problem, self.size = problem, size
        self.construct(name, opts)

    def get_n_in(self) -> int:
        return 2

    def get_n_out(self) -> int:
        return 1

    def get_sparsity_in(self, index: int) -> casadi.Sparsity:
        return casadi.Sparsity.dense(self.size, 1) if index == 0 else casadi.Sparsity.dense(1, 1)

    def get_sparsity_out(self, index: int) -> casadi.Sparsity:
        return casadi.Sparsity.dense(1, self.size)

    def eval(self, arguments: List[casadi.DM]) -> List[np.ndarray]:  # noqa: A003 (CasADi's name)
        return [self.problem.gradient(np.asarray(arguments[0]).ravel()).reshape(1, -1)]


class _Deadline(casadi.Callback):
    """
    IPOPT's per-iteration callback: stops it before an iteration that would end too late.

    As the line search does, an iteration is judged by the slowest one so far in this solve
    (`start` resets it); IPOPT then returns its current iterate.
    """

    def __init__(self, size: int) -> None:
        casadi.Callback.__init__(self)
        self.size = size
        self.deadline = math.inf
        self._last = 0.0
        self._slowest = 0.0
        self.construct('mpc_deadline', {})

    def start(self, deadline: float) -> None:
        """Arm for one solve that must end by `deadline` (time.perf_counter() seconds)."""
        self.deadline = deadline
        self._last = time.perf_counter()
        self._slowest = 0.0

    def get_n_in(self) -> int:
        return casadi.nlpsol_n_out()

    def get_n_out(self) -> int:
        return 1

    def get_name_in(self, index: int) -> str:
        return casadi.nlpsol_out(index)

    def get_name_out(self, index: int) -> str:
        return 'ret'

    def get_sparsity_in(self, index: int) -> casadi.Sparsity:
        name = casadi.nlpsol_out(index)
        if name == 'f':
            return casadi.Sparsity.scalar()
        if name in ('x', 'lam_x'):
            return casadi.Sparsity.dense(self.size)
        return casadi.Sparsity(0, 0) if name in ('p', 'lam_p') else casadi.Sparsity.dense(0)

    def eval(self, arguments: List[casadi.DM]) -> List[int]:  # noqa: A003 (CasADi's name)
        now = time.perf_counter()
        self._slowest = max(self._slowest, now - self._last)
        self._last = now
        return [int(now + self._slowest > self.deadline)]


class IpoptOptimizer:
    """IPOPT (L-BFGS, box constraints) on a cost closure; the NLP is built once."""

    def __init__(self, horizon: int, config: IpoptConfig = IpoptConfig(),
                 controls: int = 2) -> None:
        self.config = config
        self.problem = _Problem((horizon, controls))
        self._objective = _Objective(self.problem)
        self._deadline = _Deadline(horizon * controls)
        x = casadi.MX.sym('u', horizon * controls)
        self._options = {
            'print_time': False, 'error_on_fail': False,
            'ipopt.print_level': 0, 'ipopt.sb': 'yes',
            'ipopt.hessian_approximation': 'limited-memory',
            'ipopt.limited_memory_max_history': config.lbfgs_memory,
            'ipopt.tol': config.tolerance,
            'ipopt.warm_start_init_point': 'yes',
            'ipopt.warm_start_bound_push': 1e-6, 'ipopt.warm_start_mult_bound_push': 1e-6,
            'ipopt.mu_init': 1e-3,
            # measured on 10 lap states: ~15 % fewer evaluations, same plans
            'ipopt.max_soc': 0, 'ipopt.nlp_scaling_method': 'none',
            'iteration_callback': self._deadline}
        self._nlp = {'x': x, 'f': self._objective(x)}
        self._solvers = {}

    def _solver(self, iterations: int) -> Callable:
        """Return the IPOPT solver for an iteration cap (few distinct caps occur: cached)."""
        if iterations not in self._solvers:
            options = dict(self._options, **{'ipopt.max_iter': iterations})
            self._solvers[iterations] = casadi.nlpsol('mpc_ipopt', 'ipopt', self._nlp, options)
        return self._solvers[iterations]

    def optimize(self, cost_fn: CostFn, u_init: torch.Tensor,
                 iterations: Optional[int] = None, deadline: Optional[float] = None,
                 grad_fn: Optional[GradFn] = None,
                 bounds: Optional[Tuple[torch.Tensor, torch.Tensor]] = None
                 ) -> Tuple[torch.Tensor, OptimizeInfo]:
        """
        Minimise cost_fn from (H, m) u_init within `bounds` (each (m,) or (H, m)).

        deadline (time.perf_counter() seconds) limits IPOPT's wall time; see the module
        docstring for what comes back when IPOPT fails.
        """
        start = time.perf_counter()
        count = self.config.iterations if iterations is None else iterations
        self.problem.start(cost_fn, grad_fn)
        x0 = u_init.detach().double().numpy().ravel()
        lower, upper = (np.full_like(x0, -np.inf), np.full_like(x0, np.inf)) if bounds is None \
            else (np.broadcast_to(b.double().numpy(), u_init.shape).ravel() for b in bounds)
        x0 = np.clip(x0, lower, upper)   # the start and its fallback lie inside the bounds
        initial = self.problem.cost(x0)
        solver = self._solver(count)
        self._deadline.start(math.inf if deadline is None else deadline)
        result = solver(x0=x0, lbx=lower, ubx=upper)
        stats = solver.stats()
        x = np.asarray(result['x']).ravel()
        cost = self.problem.cost(x) if np.all(np.isfinite(x)) else math.inf
        if not cost <= initial:   # failed without improving: keep the start
            x, cost = x0, initial
        plan = torch.as_tensor(x.reshape(u_init.shape), dtype=u_init.dtype)
        return plan, OptimizeInfo(initial, cost, int(stats.get('iter_count', count)),
                                  bool(stats.get('success', False)),
                                  time.perf_counter() - start)
