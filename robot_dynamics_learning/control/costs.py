"""
Trajectory costs of seed 003 (Sec. III-B) plus the race-track costs of its online experiment.

Shapes: states (K, H, 6) [x, y, yaw, vx, vy, r] predicted for K candidate control sequences
(K, H, 2); every cost returns (K,). All are differentiable (the optimiser backpropagates);
the control costs also have their gradients written out (`*_grad`, for the MPC's
hand-written reverse pass, checked against autograd in the tests).
"""
from typing import Dict, Optional, Sequence, Tuple, Union

import torch


def target_cost(states: torch.Tensor, targets: Dict[int, Sequence[float]],
                weights: Sequence[float] = (1.0, 1.0, 1.0)) -> torch.Tensor:
    """
    Eq. 4: sum over chosen steps i of ||x_i - xbar_i||^2 on the pose [x, y, yaw].

    targets maps a step index (0-based into the H predicted states, negative from the end)
    to a target pose; weights scale the x, y and yaw errors (m and rad differ in scale).
    """
    weight = states.new_tensor(weights)
    total = states.new_zeros(states.shape[0])
    for step, pose in targets.items():
        error = states[:, step, :3] - states.new_tensor(pose)
        total = total + (weight * error ** 2).sum(-1)
    return total


def regularizer(controls: torch.Tensor, previous: Optional[torch.Tensor] = None,
                magnitude: float = 1.0, rate: float = 1.0) -> torch.Tensor:
    """
    Eq. 5: magnitude * sum |u_i|^2 + rate * sum |u_i - u_{i-1}|^2.

    previous (2,), when given, is the command already applied, so the first step's rate is
    penalised too (the MPC must not jump away from what the car is doing).
    """
    total = magnitude * (controls ** 2).sum((1, 2))
    diffs = controls[:, 1:] - controls[:, :-1]
    total = total + rate * (diffs ** 2).sum((1, 2))
    if previous is not None:
        total = total + rate * ((controls[:, 0] - previous) ** 2).sum(-1)
    return total


def regularizer_grad(controls: torch.Tensor, previous: Optional[torch.Tensor] = None,
                     magnitude: float = 1.0, rate: float = 1.0) -> torch.Tensor:
    """Gradient (K, H, 2) of `regularizer` with respect to the (K, H, 2) controls."""
    grad = (2.0 * magnitude) * controls
    diffs = (2.0 * rate) * (controls[:, 1:] - controls[:, :-1])
    grad[:, 1:] += diffs
    grad[:, :-1] -= diffs
    if previous is not None:
        grad[:, 0] += (2.0 * rate) * (controls[:, 0] - previous)
    return grad


def limit_barrier(controls: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor,
                  weight: float = 100.0) -> torch.Tensor:
    """Eq. 6: one-sided quadratic barriers B(z) = max(z, 0)^2 on u_l - u and u - u_b."""
    below = torch.clamp(lower - controls, min=0.0)
    above = torch.clamp(controls - upper, min=0.0)
    return weight * (below ** 2 + above ** 2).sum((1, 2))


def limit_barrier_grad(controls: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor,
                       weight: float = 100.0) -> torch.Tensor:
    """Gradient (K, H, 2) of `limit_barrier` with respect to the (K, H, 2) controls."""
    return (2.0 * weight) * (torch.clamp(controls - upper, min=0.0)
                             - torch.clamp(lower - controls, min=0.0))


def progress_cost(progress: torch.Tensor, speeds: torch.Tensor,
                  target_speed: Union[float, torch.Tensor], progress_weight: float,
                  speed_weight: float) -> torch.Tensor:
    """
    Advance along the track at a target speed (the seed's online objective).

    progress (K,): metres gained along the centre line over the horizon (rewarded);
    speeds (K, H): forward body speed (m/s), penalised quadratically around target_speed
    (one number, or (K, H) per step: a speed profile along the track).
    """
    return (-progress_weight * progress
            + speed_weight * ((speeds - target_speed) ** 2).sum(-1))


def excursion_cost(lateral: torch.Tensor, half_width: float, margin: float,
                   weight: float, centre_weight: float = 0.0) -> torch.Tensor:
    """
    Track-excursion penalty: weight * sum max(|d| - (half_width - margin), 0)^2.

    lateral (K, H) signed offsets from the centre line (m); centre_weight adds a small
    quadratic pull to the centre line.
    """
    excess = torch.clamp(lateral.abs() - (half_width - margin), min=0.0)
    return weight * (excess ** 2).sum(-1) + centre_weight * (lateral ** 2).sum(-1)


def _axle_demand(velocities: torch.Tensor, r0: torch.Tensor, lever: float,
                 h: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """Return (|vx r| + lever |dr/dt|, dr/dt) per step: (K, H) each; r0 (K,) the start rate."""
    r = velocities[..., 2]
    rate = (r - torch.cat([r0.expand(r.shape[0]).unsqueeze(1), r[:, :-1]], dim=1)) / h
    return (velocities[..., 0] * r).abs() + lever * rate.abs(), rate


def lateral_accel_cost(velocities: torch.Tensor, limit: float, weight: float,
                       r0: Optional[torch.Tensor] = None, lever: float = 0.0,
                       h: float = 0.05) -> torch.Tensor:
    """
    Grip bound: weight * sum over steps of max(|vx r| + lever |dr/dt| - limit, 0)^2.

    velocities (K, H, 3) predicted body velocities [vx, vy, r]; |vx r| (m/s^2) is the
    lateral acceleration of a car turning at yaw rate r without sliding, which the surface
    bounds (limit: what it holds, e.g. `learning/car_grip.GripEstimator`'s estimate).
    lever (m) x the yaw acceleration adds what an axle that far from the centre of mass
    needs to turn the car in (dr/dt by differences over the steps of h s from r0 (K,) or
    (1,), the start state's yaw rate); 0: the lateral acceleration alone.
    """
    if lever > 0:
        demand, _ = _axle_demand(velocities, r0, lever, h)
    else:
        demand = (velocities[..., 0] * velocities[..., 2]).abs()
    excess = torch.clamp(demand - limit, min=0.0)
    return weight * (excess ** 2).sum(-1)


def lateral_accel_cost_grad(velocities: torch.Tensor, limit: float, weight: float,
                            r0: Optional[torch.Tensor] = None, lever: float = 0.0,
                            h: float = 0.05) -> torch.Tensor:
    """Gradient (K, H, 3) of `lateral_accel_cost` with respect to the (K, H, 3) velocities."""
    vx, r = velocities[..., 0], velocities[..., 2]
    lateral = vx * r
    if lever > 0:
        demand, rate = _axle_demand(velocities, r0, lever, h)
    else:
        demand, rate = lateral.abs(), None
    factor = (2.0 * weight) * torch.clamp(demand - limit, min=0.0)
    grad = torch.zeros_like(velocities)
    grad[..., 0] = factor * torch.sign(lateral) * r
    grad[..., 2] = factor * torch.sign(lateral) * vx
    if rate is not None:   # rate_i = (r_i - r_{i-1}) / h
        through_rate = factor * (lever / h) * torch.sign(rate)
        grad[..., 2] += through_rate
        grad[:, :-1, 2] -= through_rate[:, 1:]
    return grad
