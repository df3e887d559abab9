"""
Receding-horizon MPC around a race track through a learned car model (seed 003, Sec. V-B).

Each tick: warm start from the previous plan shifted by one step, optimise the H-step
controls with `LineSearchOptimizer` on progress, speed, track-excursion, regulariser and
limit-barrier costs evaluated through the model's rollout, and return the first command
clipped to the hard limits. Any `Optimizer` may replace the line search: IPOPT through
CasADi (`control/nlp.py`, `solver: ipopt` in car_mpc) optimises the same closures. With a
model that has a fused rollout (`CarModel.fused_rollout()`: the seed's MLP,
`car_mlp.FusedRollout`) the solver runs the fast path: it evaluates the line-search
candidates without autograd in reused buffers and gives the gradient by its hand-written
reverse pass, the track costs by theirs (`_track_cost_grad`; autograd only through the
projection, at batch 1); other models, `fast=False` and `compiled` use autograd through the
whole rollout (the reference path).
The wrapper owns horizon, bounds, warm start and failure handling: a non-finite state, a
failed optimisation or a plan that fails the safety checks (`plan_is_safe`: finite controls,
cost and predicted states, speeds within max_speed, command inside the limits; and a plan
that goes the wrong way round the track, `WRONG_WAY_M`) gives the brake command with the
reason. Over budget (`degrade`, the default) it degrades instead of
braking: the plan found so far is used (reason 'late'), and when the last tick showed that
not even one iteration fits before the deadline, the shifted warm start itself (reason
'warm_start'; never twice in a row, and never without a previous plan). With degrade off a
solve over its budget is flagged (`ok` False) so that the caller brakes.
Grip: with `grip_weight` > 0 and a finite lateral-acceleration limit (`lateral_accel_max`, or
an online estimate handed over with `set_lateral_accel_max`), the cost also penalises the
predicted |vx r| above (1 - grip_margin) x the limit (`costs.lateral_accel_cost`): the MPC
slows down in the turns on a slippery surface instead of sliding. With `grip_speed_profile`
the speed target of each predicted step also follows the track's grip-limited speed profile
at that step's projected position (`TrackMPC.speed_profile`: the corner speed of that limit
on the inside line, braked down to over the distance before the turn), so that the MPC
slows before a turn rather than in it. Without a limit neither term is evaluated: the same
plans as before.
"""
from dataclasses import dataclass
import math
import os
import time
from typing import Any, Callable, NamedTuple, Optional, Tuple

import numpy as np
from robot_dynamics_learning.control.costs import (excursion_cost, lateral_accel_cost,
                                                   lateral_accel_cost_grad, limit_barrier,
                                                   limit_barrier_grad, progress_cost,
                                                   regularizer, regularizer_grad)
from robot_dynamics_learning.control.optimizer import (LineSearchOptimizer, OptimizeInfo,
                                                       Optimizer, OptimizerConfig)
from robot_dynamics_learning.control.track import Track
from robot_dynamics_learning.models.car_base import CarModel, integrate_poses
import torch
# A plan whose end lies this far (m) behind its start along the track drives the wrong way
# round: the MPC brakes instead (`TrackMPC.goes_the_wrong_way`).
WRONG_WAY_M = 0.25


@dataclass(frozen=True)
class MPCConfig:
    """
    Horizon, limits, cost weights and budget of the track MPC (units: s, m, m/s).

    throttle_limits, steering_limits: hard command bounds (the barrier keeps the plan inside,
    the output is clipped); brake_command: sent on any failure; budget_s: compute budget of
    one tick; max_speed: bounds the track window searched for projections; compiled: run the
    cost through torch.compile (the first solve compiles for a minute or more and needs a C++
    toolchain; autograd path); fast: use the model's `fused_rollout()` (hand-written
    gradient) when it has one; degrade: over budget, use the best plan so far instead of
    flagging the tick for a brake (module docstring); line_search_threads: threads sharing
    the fast path's batched line-search rollouts (2 where a second core is free: about 1.6x
    faster line searches; 0 picks by the cores this process may use,
    `auto_line_search_threads`); grip_weight: weight of the lateral-acceleration bound (0:
    off); lateral_accel_max: the surface's limit (m/s^2; inf: none until one is set with
    `TrackMPC.set_lateral_accel_max`); grip_margin: share of the limit kept in reserve;
    grip_lever (m): adds grip_lever x |dr/dt| to the bounded |vx r| (an axle that far from
    the centre of mass also carries the yaw acceleration of a turn-in; 0: off);
    grip_speed_profile: with the bound active, each step's speed target follows the track's
    speed profile for the bounded acceleration (`TrackMPC.speed_profile`).
    """

    horizon: int = 20
    target_speed: float = 1.5
    throttle_limits: Tuple[float, float] = (-1.0, 1.0)
    steering_limits: Tuple[float, float] = (-1.0, 1.0)
    brake_command: Tuple[float, float] = (0.0, 0.0)
    progress_weight: float = 20.0
    speed_weight: float = 2.0
    excursion_weight: float = 2000.0
    centre_weight: float = 2.0
    track_margin: float = 0.15
    magnitude_weight: float = 0.05
    rate_weight: float = 1.0
    barrier_weight: float = 100.0
    budget_s: float = 0.05
    max_speed: float = 4.0
    initial_throttle: float = 0.3
    compiled: bool = False
    fast: bool = True
    degrade: bool = True
    line_search_threads: int = 0
    grip_weight: float = 0.0
    lateral_accel_max: float = math.inf
    grip_margin: float = 0.2
    grip_lever: float = 0.0
    grip_speed_profile: bool = False

    def __post_init__(self) -> None:
        """Validate every value, naming the bad one."""
        if self.horizon < 2:
            raise ValueError(f'horizon must be >= 2, got {self.horizon}')
        if not 0 <= self.line_search_threads <= 64:
            raise ValueError(f'line_search_threads must be in [0, 64] (0: auto), got '
                             f'{self.line_search_threads}')
        for name in ('throttle_limits', 'steering_limits'):
            low, high = getattr(self, name)
            if not (math.isfinite(low) and math.isfinite(high) and low < high):
                raise ValueError(f'{name} must be finite with low < high, got '
                                 f'{getattr(self, name)}')
        for name in ('target_speed', 'budget_s', 'max_speed'):
            if not getattr(self, name) > 0:
                raise ValueError(f'{name} must be positive, got {getattr(self, name)}')
        for name in ('progress_weight', 'speed_weight', 'excursion_weight', 'centre_weight',
                     'track_margin', 'magnitude_weight', 'rate_weight', 'barrier_weight',
                     'grip_weight', 'grip_lever'):
            if not getattr(self, name) >= 0:
                raise ValueError(f'{name} must be >= 0, got {getattr(self, name)}')
        if not self.lateral_accel_max > 0:
            raise ValueError(f'lateral_accel_max must be positive (inf: none), got '
                             f'{self.lateral_accel_max}')
        if not 0.0 <= self.grip_margin < 1.0:
            raise ValueError(f'grip_margin must be in [0, 1), got {self.grip_margin}')
        brake = np.asarray(self.brake_command)
        if brake.shape != (2,) or not self.within_limits(brake):
            raise ValueError(f'brake_command {self.brake_command} must lie within the limits')

    def within_limits(self, command: np.ndarray) -> bool:
        """Return True when a (2,) command is finite and inside the hard limits."""
        low = np.array([self.throttle_limits[0], self.steering_limits[0]])
        high = np.array([self.throttle_limits[1], self.steering_limits[1]])
        return bool(np.all(np.isfinite(command)) and np.all(command >= low)
                    and np.all(command <= high))


def auto_line_search_threads() -> int:
    """
    Return the line-search threads for `line_search_threads: 0`: 2 with 4+ usable cores, else 1.

    Why not 2 on 2 cores: on the robot or in simulation the estimator (and the simulator)
    share the machine, and a slice waiting for a busy core delays the whole tick.
    """
    cores = (len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity')
             else os.cpu_count() or 1)
    return 2 if cores >= 4 else 1


def _reverse_cumsum(values: torch.Tensor) -> torch.Tensor:
    """Sum from each step to the last along dim 1: out_i = sum_{j >= i} values_j."""
    return torch.flip(torch.cumsum(torch.flip(values, [1]), dim=1), [1])


class MPCResult(NamedTuple):
    """
    One tick: command (2,) to send, plan (H, 2), predicted states (H, 6) or None.

    ok is False when the command is the brake (reason says why) or, with degrade off, the
    budget was missed (reason 'budget'; command is then the solver's, the caller decides to
    brake). With degrade a late tick is ok with reason 'late' ('warm_start': no iteration
    ran, the shifted previous plan is used).
    """

    command: np.ndarray
    plan: Optional[np.ndarray]
    predicted: Optional[np.ndarray]
    cost: float
    iterations: int
    seconds: float
    ok: bool
    reason: str


class TrackMPC:
    """Receding-horizon controller for one car on one track; build once, call `solve`."""

    def __init__(self, model: CarModel, track: Track, config: MPCConfig = MPCConfig(),
                 optimizer: Optional[Optimizer] = None) -> None:
        self.model = model.eval()
        for parameter in self.model.parameters():
            parameter.requires_grad_(False)
        self.track = track
        self.config = config
        self.optimizer = optimizer or LineSearchOptimizer(OptimizerConfig())
        self.lower = torch.tensor([config.throttle_limits[0], config.steering_limits[0]])
        self.upper = torch.tensor([config.throttle_limits[1], config.steering_limits[1]])
        self.brake = np.asarray(config.brake_command, dtype=np.float64)
        reach = config.horizon * model.h * config.max_speed + 1.0
        self.window_back = 5
        self.window_size = min(track.size, int(math.ceil(reach / track.spec.spacing))
                               + self.window_back)
        self._plan: Optional[torch.Tensor] = None
        self._previous = torch.zeros(2)
        self._cost_impl = (torch.compile(self._cost, dynamic=False) if config.compiled
                           else self._cost)
        self.fused: Optional[Any] = None
        self._iteration_s = 0.0   # mean iteration time of the last optimised tick
        self._skipped = False     # the last tick used the warm start without optimising
        self.lateral_accel_max = config.lateral_accel_max
        self._profile: Tuple[float, Optional[torch.Tensor]] = (math.nan, None)
        self._refresh()

    def _refresh(self) -> None:
        """(Re)build the fast path from the model's current weights."""
        threads = self.config.line_search_threads or auto_line_search_threads()
        self.fused = (self.model.fused_rollout(threads)
                      if self.config.fast and not self.config.compiled else None)

    def load_state_dict(self, state: dict) -> None:
        """Load new model weights (e.g. from the online learner) and rebuild the fast path."""
        self.model.load_state_dict(state)
        self._refresh()

    def set_lateral_accel_max(self, value: float) -> None:
        """
        Take the surface's lateral-acceleration limit (m/s^2; inf: none) for the next ticks.

        From the online grip estimate (car_model_learner). A value that is not positive
        (NaN included) is a ValueError and the limit in force is kept.
        """
        value = float(value)
        if not value > 0:
            raise ValueError(f'lateral_accel_max must be positive (inf: none), got {value}')
        self.lateral_accel_max = value

    def _grip_limit(self) -> Optional[float]:
        """Return the bound on the predicted |vx r| (m/s^2), None when the term is off."""
        if self.config.grip_weight > 0 and math.isfinite(self.lateral_accel_max):
            return (1.0 - self.config.grip_margin) * self.lateral_accel_max
        return None

    def speed_offset(self) -> float:
        """
        Return how far (m/s) above its speed target the cost's optimum lies.

        Per step, the progress reward gives progress_weight x h per m/s and the speed cost
        takes 2 speed_weight (v - target): they balance progress_weight h / (2 speed_weight)
        above the target (0.25 m/s with the defaults: the MPC drives 2.0 m/s at 1.75).
        """
        cfg = self.config
        return cfg.progress_weight * self.model.h / (2.0 * cfg.speed_weight) \
            if cfg.speed_weight > 0 else 0.0

    def speed_profile(self) -> Optional[torch.Tensor]:
        """
        Return the per-segment speed targets (M,) of the grip limit in force, or None.

        The speeds the car may drive (`Track.speed_profile` with the bounded lateral
        acceleration, on the tightest line the excursion cost allows: track_margin inside
        the edge; braking before a turn with the same acceleration, which the surface holds
        in any direction), less `speed_offset` where they bind, so that the cost's optimum,
        not its target, is the corner speed; target_speed elsewhere. None when the profile
        is off or the bound has no limit; recomputed only when the limit changed.
        """
        grip = self._grip_limit()
        if grip is None or not self.config.grip_speed_profile:
            return None
        if self._profile[0] != grip:
            cfg = self.config
            inside = max(self.track.half_width - cfg.track_margin, 0.0)
            offset = self.speed_offset()
            profile = self.track.speed_profile(grip, grip, cfg.target_speed + offset,
                                               inside) - offset
            self._profile = (grip, torch.as_tensor(np.maximum(profile, 0.0),
                                                   dtype=torch.float32))
        return self._profile[1]

    def _speed_target(self, progress: torch.Tensor, window: tuple,
                      profile: Optional[torch.Tensor]) -> Any:
        """Return each step's speed target (K, H) at its progress in the window, or the scalar."""
        if profile is None:
            return self.config.target_speed
        offsets = window[3]
        segment = torch.searchsorted(offsets, progress.detach().contiguous(), right=True) - 1
        return profile[segment.clamp(0, offsets.shape[0] - 1)]

    def reset(self) -> None:
        """Forget the warm start (e.g. after the car was stopped or moved)."""
        self._plan = None
        self._previous = torch.zeros(2)

    def warm_start(self) -> torch.Tensor:
        """Return the previous plan shifted by one step (last step repeated) or a gentle start."""
        if self._plan is None:
            plan = torch.zeros(self.config.horizon, 2)
            plan[:, 0] = float(np.clip(self.config.initial_throttle, *self.config.throttle_limits))
            return plan
        return torch.cat([self._plan[1:], self._plan[-1:]], dim=0)

    def _cost(self, u: torch.Tensor, x0: torch.Tensor, s0: torch.Tensor,
              previous: torch.Tensor, points: torch.Tensor, tangents: torch.Tensor,
              lengths: torch.Tensor, offsets: torch.Tensor,
              profile: Optional[torch.Tensor]) -> torch.Tensor:
        """Track cost (K,) of (K, H, 2) controls from (1, 6) x0; every tick input is an arg."""
        velocities = self.model.velocity_sequence(x0[:, 3:].expand(u.shape[0], 3), u)
        return self._track_cost(velocities, u, x0, s0, previous,
                                (points, tangents, lengths, offsets), profile)

    def _track_cost(self, velocities: torch.Tensor, u: torch.Tensor, x0: torch.Tensor,
                    s0: torch.Tensor, previous: torch.Tensor, window: tuple,
                    profile: Optional[torch.Tensor] = None) -> torch.Tensor:
        """
        Cost (K,) of (K, H, 3) predicted body velocities under (K, H, 2) controls.

        profile: the window's speed targets (W,) per segment (`_tick_inputs`), or None.
        """
        cfg = self.config
        batch = u.shape[0]
        poses = integrate_poses(x0[:, :3].expand(batch, 3), x0[:, 3:].expand(batch, 3),
                                velocities, self.model.h)
        s, lateral = Track.project(poses[..., :2], window)
        cost = (progress_cost(s[:, -1] - s0, velocities[..., 0],
                              self._speed_target(s, window, profile),
                              cfg.progress_weight, cfg.speed_weight)
                + excursion_cost(lateral, self.track.half_width, cfg.track_margin,
                                 cfg.excursion_weight, cfg.centre_weight)
                + regularizer(u, previous, cfg.magnitude_weight, cfg.rate_weight)
                + limit_barrier(u, self.lower, self.upper, cfg.barrier_weight))
        grip = self._grip_limit()
        if grip is not None:
            cost = cost + lateral_accel_cost(velocities, grip, cfg.grip_weight, x0[:, 5],
                                             cfg.grip_lever, self.model.h)
        return cost

    def _track_cost_grad(self, velocities: torch.Tensor, u: torch.Tensor, x0: torch.Tensor,
                         s0: torch.Tensor, previous: torch.Tensor, window: tuple,
                         profile: Optional[torch.Tensor] = None
                         ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """
        `_track_cost` (K,) and its gradients for (K, H, 3) velocities and (K, H, 2) controls.

        For the gradient passes (K = 1), where autograd's per-node cost dominates: the pose
        integration (`integrate_poses`, same operations) is reversed by hand with reverse
        cumulative sums, the control costs by their `*_grad`; autograd only runs through the
        projection and the progress and excursion costs (about 20 nodes instead of 60).
        """
        cfg, h = self.config, self.model.h
        batch = u.shape[0]
        with torch.no_grad():
            v0 = x0[:, 3:].view(1, 1, 3).expand(batch, 1, 3)
            mean = 0.5 * (torch.cat([v0, velocities[:, :-1]], dim=1) + velocities)
            dyaw = h * mean[..., 2]
            yaw_mid = x0[:, 2:3] + torch.cumsum(dyaw, dim=1) - 0.5 * dyaw
            c, s = torch.cos(yaw_mid), torch.sin(yaw_mid)
            step_x = h * (c * mean[..., 0] - s * mean[..., 1])
            step_y = h * (s * mean[..., 0] + c * mean[..., 1])
            xy = torch.stack([x0[:, 0:1] + torch.cumsum(step_x, dim=1),
                              x0[:, 1:2] + torch.cumsum(step_y, dim=1)], dim=-1)
        xy.requires_grad_(True)
        speeds = velocities[..., 0].detach().clone().requires_grad_(True)
        with torch.enable_grad():
            progress, lateral = Track.project(xy, window)
            track = (progress_cost(progress[:, -1] - s0, speeds,
                                   self._speed_target(progress, window, profile),
                                   cfg.progress_weight, cfg.speed_weight)
                     + excursion_cost(lateral, self.track.half_width, cfg.track_margin,
                                      cfg.excursion_weight, cfg.centre_weight))
            grad_xy, grad_speeds = torch.autograd.grad(track.sum(), (xy, speeds))
        with torch.no_grad():
            cost = (track.detach() + regularizer(u, previous, cfg.magnitude_weight,
                                                 cfg.rate_weight)
                    + limit_barrier(u, self.lower, self.upper, cfg.barrier_weight))
            # x_i = x0 + sum_{j <= i} step_x_j: dcost/dstep_j is the reverse cumulative sum
            to_x, to_y = _reverse_cumsum(grad_xy[..., 0]), _reverse_cumsum(grad_xy[..., 1])
            to_mid = to_y * step_x - to_x * step_y  # d step_x/d yaw_mid = -step_y, ...
            # yaw_mid_i = yaw0 + sum_{j < i} dyaw_j + dyaw_i / 2
            to_dyaw = _reverse_cumsum(to_mid) - 0.5 * to_mid
            to_mean = torch.stack([h * (c * to_x + s * to_y), h * (c * to_y - s * to_x),
                                   h * to_dyaw], dim=-1)
            grad_v = 0.5 * to_mean  # mean_i = (v_{i-1} + v_i) / 2, v_{-1} = v0 fixed
            grad_v[:, :-1] += 0.5 * to_mean[:, 1:]
            grad_v[..., 0] += grad_speeds
            grip = self._grip_limit()
            if grip is not None:
                terms = (velocities, grip, cfg.grip_weight, x0[:, 5], cfg.grip_lever, h)
                cost = cost + lateral_accel_cost(*terms)
                grad_v += lateral_accel_cost_grad(*terms)
            grad_u = (regularizer_grad(u, previous, cfg.magnitude_weight, cfg.rate_weight)
                      + limit_barrier_grad(u, self.lower, self.upper, cfg.barrier_weight))
        return cost, grad_v, grad_u

    def _tick_inputs(self, state: np.ndarray) -> tuple:
        """
        (x0 (1, 6), s0 (1,), previous command (2,), track window, profile) of one tick.

        profile: the speed profile's targets (W,) on the window's segments, or None.
        """
        x0 = torch.as_tensor(state, dtype=torch.float32).view(1, 6)
        first = self.track.nearest_segment(state[:2]) - self.window_back
        window = self.track.window_tensors(first, self.window_size)
        s0, _ = Track.project(x0[:, :2], window)
        profile = self.speed_profile()
        if profile is not None:
            profile = profile[(torch.arange(self.window_size) + first) % self.track.size]
        return x0, s0, self._previous.clone(), window, profile

    def cost_closure(self, state: np.ndarray) -> Callable[[torch.Tensor], torch.Tensor]:
        """Build cost_fn(u (K, H, 2)) -> (K,) for the current (6,) state (autograd path)."""
        x0, s0, previous, window, profile = self._tick_inputs(state)
        return lambda u: self._cost_impl(u, x0, s0, previous, *window, profile)

    def fast_closures(self, state: np.ndarray) -> Tuple[Callable, Callable, Callable]:
        """
        Build (cost_fn, grad_fn, predict_fn) of the fast path for the current (6,) state.

        cost_fn(u (K, H, 2)) -> (K,) without a gradient (the line search);
        grad_fn(u (H, 2), hint) -> (cost, dcost/du (H, 2)): the track costs differentiated
        with respect to the predicted velocities and u by `_track_cost_grad`, the velocity
        recurrence by `FusedRollout.backward`, from the last line search's entry `hint`
        when given (its velocities are kept: no second sequential forward pass);
        predict_fn(u (H, 2)) -> (H, 6) predicted states, taken from the last gradient pass or
        line search when u is one of their controls (the plan always is), else rolled out.
        """
        x0, s0, previous, window, profile = self._tick_inputs(state)
        fused = self.fused
        last = {}  # this tick's last line-search batch and gradient-pass controls

        def cost_fn(u: torch.Tensor) -> torch.Tensor:
            velocities = fused.velocities(x0[:, 3:].expand(u.shape[0], 3), u)
            last['batch'] = (u, velocities)
            # the costs of the candidates split like their rollouts (line_search_threads)
            return torch.cat(fused.map_slices(lambda k, low, high: self._track_cost(
                velocities[:, low:high].transpose(0, 1), u[low:high], x0, s0, previous,
                window, profile), fused.slices(u.shape[0])))

        def grad_fn(u: torch.Tensor, hint: Optional[int] = None) -> Tuple[float, torch.Tensor]:
            if hint is None:
                velocities, tape = fused.record(x0[:, 3:], u.unsqueeze(0))
            else:
                velocities, tape = fused.recorded(hint)
            last['single'] = (u, velocities)
            cost, grad_velocities, grad_u = self._track_cost_grad(
                velocities.transpose(0, 1), u.unsqueeze(0), x0, s0, previous, window,
                profile)
            if not torch.isfinite(cost[0]):
                return float(cost[0]), torch.full_like(u, math.nan)
            _, grad_actions = fused.backward(tape, grad_velocities.transpose(0, 1))
            return float(cost[0]), (grad_u + grad_actions)[0]

        def predict_fn(u: torch.Tensor) -> torch.Tensor:
            velocities = None
            if 'single' in last and torch.equal(last['single'][0], u):
                velocities = last['single'][1][:, 0]
            elif 'batch' in last and last['batch'][0].shape[1:] == u.shape:
                controls, batch_velocities = last['batch']
                match = torch.nonzero((controls == u).flatten(1).all(1))
                if match.numel():
                    velocities = batch_velocities[:, int(match[0, 0])]
            if velocities is None:
                velocities = fused.record(x0[:, 3:], u.unsqueeze(0))[0][:, 0]
            velocities = velocities.unsqueeze(0)
            poses = integrate_poses(x0[:, :3], x0[:, 3:], velocities, self.model.h)
            return torch.cat([poses, velocities], dim=-1)[0]
        return cost_fn, grad_fn, predict_fn

    def _rollout(self, state: np.ndarray) -> Callable[[torch.Tensor], torch.Tensor]:
        """Build predict_fn(u (H, 2)) -> (H, 6) states from the (6,) state (model rollout)."""
        x0 = torch.as_tensor(state, dtype=torch.float32).view(1, 6)
        return lambda u: self.model.rollout(x0, u.unsqueeze(0)).mean[0]

    def warm_up(self) -> float:
        """Run one solve from the track start (compiles when config.compiled); return s."""
        start = time.perf_counter()
        x, y, yaw = self.track.pose_at(0.0)
        self.solve(np.array([x, y, yaw, 0.5, 0.0, 0.0]))
        self.reset()
        return time.perf_counter() - start

    def goes_the_wrong_way(self, state: np.ndarray, predicted: torch.Tensor) -> bool:
        """
        Return True when the plan ends more than `WRONG_WAY_M` behind where it starts.

        After a spin the car can face backwards; driving on is then cheap for the cost
        (speed near the target, the track's width kept) while a U-turn inside the track is
        out of reach of a local optimiser, so without this check the car laps the wrong way.
        """
        start = self.track.coordinates(state[:2])[0]
        end = self.track.coordinates(predicted[-1, :2].double().numpy())[0]
        return self.track.advance(start, end) < -WRONG_WAY_M

    def plan_is_safe(self, plan: torch.Tensor, predicted: torch.Tensor, cost: float) -> bool:
        """Return True for finite controls, cost and states with speeds within max_speed."""
        return bool(math.isfinite(cost) and torch.isfinite(plan).all()
                    and torch.isfinite(predicted).all()
                    and predicted[:, 3:5].norm(dim=-1).max() <= self.config.max_speed)

    def _skip_optimisation(self, deadline: float) -> bool:
        """Degrade: return True when not one iteration (as long as last tick's) fits."""
        skip = (self.config.degrade and self._plan is not None and not self._skipped
                and time.perf_counter() + self._iteration_s > deadline)
        self._skipped = skip
        return skip

    def _optimise(self, cost_fn: Callable, grad_fn: Optional[Callable], iterations: Optional[int],
                  deadline: float) -> Tuple[torch.Tensor, OptimizeInfo]:
        """Optimise from the warm start, or (degrade, no time) return it with its cost."""
        u_init = self.warm_start()
        if self._skip_optimisation(deadline):
            with torch.no_grad():
                cost = float(cost_fn(u_init.unsqueeze(0))[0])
            return u_init, OptimizeInfo(cost, cost, 0, False, 0.0)
        plan, info = self.optimizer.optimize(cost_fn, u_init, iterations, deadline=deadline,
                                             grad_fn=grad_fn, bounds=(self.lower, self.upper))
        if info.iterations:
            self._iteration_s = info.seconds / info.iterations
        return plan, info

    def _brake(self, reason: str, seconds: float) -> MPCResult:
        self._plan = None
        self._skipped = False
        self._previous = torch.as_tensor(self.brake, dtype=torch.float32)
        return MPCResult(self.brake.copy(), None, None, math.nan, 0, seconds, False, reason)

    def predict_ahead(self, state: np.ndarray, delay_s: float) -> np.ndarray:
        """
        Predict the (6,) state delay_s seconds ahead under the command already committed.

        Compute-delay compensation: the command being solved for only reaches the car after
        the estimator's delay, the solve and the transport; until then the car keeps
        executing the previous command. Whole model steps are rolled out with it, a
        remaining fraction of a step is interpolated linearly.
        """
        if not delay_s > 0:
            return state
        steps = delay_s / self.model.h
        whole = int(math.floor(steps))
        actions = self._previous.view(1, 1, 2).expand(1, whole + 1, 2)
        with torch.inference_mode():
            predicted = self.model.rollout(torch.as_tensor(state, dtype=torch.float32)
                                           .view(1, 6), actions).mean[0].double().numpy()
        before = state if whole == 0 else predicted[whole - 1]
        ahead = before + (steps - whole) * (predicted[whole] - before)
        return ahead if np.all(np.isfinite(ahead)) else state

    def solve(self, state: np.ndarray, iterations: Optional[int] = None,
              delay_s: float = 0.0, budget_s: Optional[float] = None) -> MPCResult:
        """
        Run one tick from a (6,) state [x, y, yaw, vx, vy, r]; never raises on bad input.

        delay_s (s): expected time from the state's measurement until the command applies;
        the plan starts from the state predicted that far ahead (`predict_ahead`).
        budget_s: what is left of this tick's budget (default config.budget_s); an iteration
        that would end after 70 % of it is skipped (the rest is margin for the final rollout
        and scheduling jitter; at least one runs unless degrade chose the warm start).
        """
        start = time.perf_counter()
        budget = self.config.budget_s if budget_s is None else budget_s
        state = np.asarray(state, dtype=np.float64)
        if state.shape != (6,) or not np.all(np.isfinite(state)) \
                or not 0.0 <= delay_s <= 1.0:
            return self._brake('bad_state', time.perf_counter() - start)
        try:
            state = self.predict_ahead(state, delay_s)
            if self.fused is not None:
                cost_fn, grad_fn, predict_fn = self.fast_closures(state)
            else:
                cost_fn, grad_fn, predict_fn = self.cost_closure(state), None, self._rollout(state)
            plan, info = self._optimise(cost_fn, grad_fn, iterations, start + 0.7 * budget)
            with torch.no_grad():
                predicted = predict_fn(plan)
        except ValueError as error:
            return self._brake(f'solver: {error}', time.perf_counter() - start)
        command = np.clip(plan[0].numpy().astype(np.float64),
                          self.lower.numpy(), self.upper.numpy())
        if not self.config.within_limits(command):
            return self._brake('non_finite_command', time.perf_counter() - start)
        if not self.plan_is_safe(plan, predicted, info.cost):
            return self._brake('unsafe_plan', time.perf_counter() - start)
        if self.goes_the_wrong_way(state, predicted):
            return self._brake('wrong_way', time.perf_counter() - start)
        self._plan = torch.clamp(plan, self.lower, self.upper)
        self._previous = torch.as_tensor(command, dtype=torch.float32)
        seconds = time.perf_counter() - start
        late = seconds > budget
        reason = ('warm_start' if not info.iterations else
                  'budget' if late and not self.config.degrade else 'late' if late else 'ok')
        return MPCResult(command, self._plan.numpy().copy(), predicted.numpy().copy(),
                         info.cost, info.iterations, seconds, reason != 'budget', reason)
