"""Shared check of the track MPC's hand-written reverse pass against autograd."""
from typing import Sequence, Tuple

import numpy as np
from robot_dynamics_learning.control.mpc import TrackMPC
import torch


def assert_reverse_pass_matches_autograd(mpc: TrackMPC, state: np.ndarray,
                                         mean_velocity: Sequence[float],
                                         u_range: Tuple[float, float], seed: int,
                                         use_profile: bool = False) -> tuple:
    """
    Compare `_track_cost_grad` with autograd through `_track_cost` (float64, 1e-5).

    Three random candidates of 20 steps: velocities (vx, vy, r) around `mean_velocity`, controls
    uniform in `u_range`; `use_profile` passes the tick's per-step speed targets. Returns
    (velocities, controls, cost inputs, cost) for the caller's own checks of the same case.
    """
    x0, s0, previous, window, profile = mpc._tick_inputs(state)
    inputs = (x0.double(), s0.double(), previous.double(),
              tuple(part.double() for part in window))
    extra = (profile.double(),) if use_profile else ()
    generator = torch.Generator().manual_seed(seed)
    velocities = torch.tensor(mean_velocity, dtype=torch.float64) + 0.3 * torch.randn(
        3, 20, 3, dtype=torch.float64, generator=generator)
    low, high = u_range
    u = low + (high - low) * torch.rand(3, 20, 2, dtype=torch.float64, generator=generator)
    v_leaf, u_leaf = velocities.clone().requires_grad_(True), u.clone().requires_grad_(True)
    expected = mpc._track_cost(v_leaf, u_leaf, *inputs, *extra)
    grad_v, grad_u = torch.autograd.grad(expected.sum(), (v_leaf, u_leaf))
    cost, mine_v, mine_u = mpc._track_cost_grad(velocities, u, *inputs, *extra)
    assert torch.allclose(cost, expected.detach(), rtol=1e-12, atol=0)
    for mine, reference in ((mine_v, grad_v), (mine_u, grad_u)):
        scale = float(reference.abs().max())
        assert scale > 1e-3
        assert torch.allclose(mine, reference, rtol=0, atol=1e-5 * scale)
    return velocities, u, inputs, expected.detach()
