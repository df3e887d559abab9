"""Costs, line-search optimiser, tracks and the track MPC (including a property test)."""
import copy
import math
import time

from bench.mpc import reference_project
from hypothesis import given, settings, strategies as st
from mpc_checks import assert_reverse_pass_matches_autograd
import numpy as np
import pytest
from robot_dynamics_learning.control import mpc as mpc_module
from robot_dynamics_learning.control.car_training import build_car_model
from robot_dynamics_learning.control.costs import (excursion_cost, limit_barrier,
                                                   progress_cost, regularizer, target_cost)
from robot_dynamics_learning.control.mpc import MPCConfig, TrackMPC
from robot_dynamics_learning.control.nlp import IpoptConfig, IpoptOptimizer
from robot_dynamics_learning.control.optimizer import (LineSearchOptimizer, make_optimizer,
                                                       OptimizerConfig)
from robot_dynamics_learning.control.refine import refine_on_scenarios, REST_S, scenario_drives
from robot_dynamics_learning.control.scenarios import SCENARIOS
from robot_dynamics_learning.control.track import (LapCounter, load_track_spec,
                                                   stadium_waypoints, Track, TrackSpec)
from robot_dynamics_learning.models.car_mlp import FusedRollout
import torch

OVAL = 'config/tracks/oval.yaml'


pytestmark = pytest.mark.usefixtures('one_torch_thread')   # as car_mpc runs (conftest.py)


def test_this_module_runs_with_one_torch_thread():
    assert torch.get_num_threads() == 1


def test_costs_match_the_seed_equations():
    u = torch.tensor([[[1.0, 0.0], [2.0, 0.0]]])
    assert float(regularizer(u)) == pytest.approx(1 + 4 + 1)
    assert float(regularizer(u, torch.tensor([1.0, 0.0]))) == pytest.approx(6.0)
    lower, upper = torch.tensor([-1.0, -1.0]), torch.tensor([1.5, 1.0])
    assert float(limit_barrier(u, lower, upper, 1.0)) == pytest.approx(0.25)
    states = torch.zeros(1, 3, 6)
    states[0, 2, :3] = torch.tensor([1.0, 1.0, 0.0])
    assert float(target_cost(states, {-1: (1.0, 2.0, 0.5)})) == pytest.approx(1.25)
    lateral = torch.tensor([[0.0, 0.45, -0.6]])
    assert float(excursion_cost(lateral, 0.5, 0.1, 1.0)) == pytest.approx(0.05 ** 2 + 0.2 ** 2)
    speeds = torch.tensor([[1.0, 2.0]])
    assert float(progress_cost(torch.tensor([3.0]), speeds, 1.5, 1.0, 1.0)) == \
        pytest.approx(-3.0 + 0.5)


def test_line_search_descends_a_quadratic():
    target = torch.linspace(-1, 1, 20).view(10, 2)

    def cost(u):
        return ((u - target) ** 2).sum((1, 2))

    u, info = LineSearchOptimizer(OptimizerConfig(iterations=50)).optimize(
        cost, torch.zeros(10, 2))
    assert info.cost < 1e-3 * info.initial_cost
    assert torch.allclose(u, target, atol=0.05)


def test_optimiser_reports_non_finite_costs():
    with pytest.raises(ValueError, match='not finite'):
        LineSearchOptimizer().optimize(lambda u: u.sum((1, 2)) * math.nan, torch.zeros(3, 2))


def test_track_coordinates():
    track = Track(load_track_spec(OVAL))
    assert track.length == pytest.approx(2 * 3.0 + 2 * math.pi * 1.2, rel=0.01)
    x, y, heading = track.pose_at(1.0)
    left = np.array([x - 0.3 * math.sin(heading), y + 0.3 * math.cos(heading)])
    s, lateral = track.coordinates(left)
    assert s == pytest.approx(1.0, abs=0.02) and lateral == pytest.approx(0.3, abs=0.01)
    window = track.window_tensors(track.nearest_segment(left) - 5, 40)
    s_t, lateral_t = Track.project(torch.tensor(left, dtype=torch.float32)[None], window)
    assert float(lateral_t) == pytest.approx(0.3, abs=0.01)
    assert float(s_t) == pytest.approx(5 * track.spec.spacing, abs=0.03)


def test_lap_counter_counts_whole_laps_only_and_loses_progress_driven_backwards():
    track = Track(load_track_spec(OVAL))
    counter = LapCounter(track, np.array(track.pose_at(0.0)[:2]))
    steps = np.linspace(0.0, 2.5 * track.length, 1001)[1:]
    for i, s in enumerate(steps):   # 2.5 laps at 1 m/s, 0.1 m off the centre line
        x, y, yaw = track.pose_at(s)
        counter.update(s, np.array([x - 0.1 * math.sin(yaw), y + 0.1 * math.cos(yaw)]))
    assert counter.laps == pytest.approx(2.5, abs=0.01)
    np.testing.assert_allclose(counter.lap_times(), [track.length] * 2, rtol=0.01)
    np.testing.assert_allclose(counter.lap_max_lateral(), [0.1, 0.1], atol=0.01)
    for s in steps[::-1][:400]:   # back along the last metres: progress is lost again
        counter.update(3 * track.length, np.array(track.pose_at(s)[:2]))
    assert counter.laps < 2.5 - 0.9 * 400 / 1000 * 2.5 and len(counter.lap_times()) == 2


def test_bad_tracks_are_rejected(tmp_path):
    with pytest.raises(ValueError, match='waypoints'):
        TrackSpec(((0, 0), (1, 0)), 0.5)
    path = tmp_path / 't.yaml'
    path.write_text('half_width: 0.5\n')
    with pytest.raises(ValueError, match='waypoints or stadium'):
        load_track_spec(path)
    assert len(stadium_waypoints(2.0, 1.0)) == 40


@pytest.fixture(scope='module')
def mpc():
    torch.manual_seed(0)
    model = build_car_model('car_bicycle')
    config = MPCConfig(throttle_limits=(0.0, 0.8), steering_limits=(-0.7, 0.7),
                       budget_s=10.0)
    return TrackMPC(model, Track(load_track_spec(OVAL)), config,
                    LineSearchOptimizer(OptimizerConfig(iterations=2, candidates=64)))


def test_mpc_plans_forward_along_the_track_and_warm_starts(mpc):
    mpc.reset()
    x, y, yaw = mpc.track.pose_at(0.0)
    result = mpc.solve(np.array([x, y, yaw, 1.0, 0.0, 0.0]))
    assert result.ok and result.plan.shape == (20, 2) and result.predicted.shape == (20, 6)
    assert result.command[0] > 0.0
    shifted = mpc.warm_start()
    assert torch.allclose(shifted[:-1], torch.as_tensor(result.plan[1:], dtype=torch.float32))


def test_mpc_brakes_instead_of_driving_the_wrong_way_round(mpc):
    """After a spin the car faces backwards at speed: the plan would lap backwards."""
    mpc.reset()
    x, y, yaw = mpc.track.pose_at(2.0)
    result = mpc.solve(np.array([x, y, yaw + math.pi, 1.7, 0.0, 0.0]))
    assert not result.ok and result.reason == 'wrong_way'
    assert np.array_equal(result.command, [0.0, 0.0])
    assert mpc.solve(np.array([x, y, yaw, 1.7, 0.0, 0.0])).ok   # the right way: it drives


def test_mpc_brakes_on_a_bad_state(mpc):
    result = mpc.solve(np.array([0.0, np.nan, 0.0, 0.0, 0.0, 0.0]))
    assert not result.ok and result.reason == 'bad_state'
    assert np.array_equal(result.command, [0.0, 0.0])


def test_mpc_flags_a_missed_budget_without_degrade():
    model = build_car_model('car_bicycle')
    mpc = TrackMPC(model, Track(load_track_spec(OVAL)), MPCConfig(budget_s=1e-6, degrade=False),
                   LineSearchOptimizer(OptimizerConfig(iterations=1, candidates=8)))
    x, y, yaw = mpc.track.pose_at(0.0)
    result = mpc.solve(np.array([x, y, yaw, 1.0, 0.0, 0.0]))
    assert not result.ok and result.reason == 'budget'


def test_degrading_mpc_drives_on_late_ticks_and_falls_back_to_the_warm_start():
    """Over budget: the plan so far, then the shifted warm start, never twice in a row."""
    mpc = TrackMPC(build_car_model('car_bicycle'), Track(load_track_spec(OVAL)),
                   MPCConfig(budget_s=1e-6),
                   LineSearchOptimizer(OptimizerConfig(iterations=3, candidates=8)))
    x, y, yaw = mpc.track.pose_at(0.0)
    state = np.array([x, y, yaw, 1.0, 0.0, 0.0])
    first = mpc.solve(state)   # no previous plan: one iteration runs, late but driven
    assert first.ok and first.reason == 'late' and first.iterations == 1
    shifted = mpc.warm_start()
    second = mpc.solve(state)  # the last tick's iteration does not fit: the warm start
    assert second.ok and second.reason == 'warm_start' and second.iterations == 0
    assert np.allclose(second.plan, shifted.numpy()) and math.isfinite(second.cost)
    assert mpc.solve(state).reason == 'late'   # next tick optimises again


def test_mpc_brakes_on_a_plan_that_fails_the_safety_checks(monkeypatch):
    mpc = TrackMPC(build_car_model('car_bicycle'), Track(load_track_spec(OVAL)),
                   MPCConfig(budget_s=10.0, max_speed=0.01),   # any motion is "too fast"
                   LineSearchOptimizer(OptimizerConfig(iterations=1, candidates=8)))
    x, y, yaw = mpc.track.pose_at(0.0)
    result = mpc.solve(np.array([x, y, yaw, 1.0, 0.0, 0.0]))
    assert not result.ok and result.reason == 'unsafe_plan'
    assert np.array_equal(result.command, [0.0, 0.0]) and mpc.warm_start()[0, 0] > 0.0


def test_fast_path_follows_the_declared_model_ability(mlp):
    """The MPC asks the model for a fused rollout: the MLP has one, the bicycle has none."""
    track = Track(load_track_spec(OVAL))
    assert isinstance(TrackMPC(mlp, track).fused, FusedRollout)
    assert TrackMPC(build_car_model('car_bicycle'), track).fused is None
    assert TrackMPC(mlp, track, MPCConfig(fast=False)).fused is None


def test_hot_swapped_weights_reach_the_fast_path(mlp):
    """load_state_dict (car_mpc's reload, the adaptation bench's swap) rebuilds the rollout."""
    mpc = TrackMPC(copy.deepcopy(mlp), Track(load_track_spec(OVAL)))
    torch.manual_seed(7)
    adapted = build_car_model('car_mlp').eval()
    v0, actions = torch.randn(4, 3), torch.rand(4, 20, 2) * 2 - 1
    before = mpc.fused.velocities(v0, actions).clone()
    mpc.load_state_dict(adapted.state_dict())
    with torch.no_grad():
        expected = adapted.velocity_sequence(v0, actions).transpose(0, 1)
    swapped = mpc.fused.velocities(v0, actions)
    assert torch.allclose(swapped, expected, atol=1e-4)
    assert not torch.allclose(swapped, before, atol=1e-3)


def test_coarse_to_fine_search_finds_the_fine_minimum_with_fewer_rollouts():
    """48 rollouts (32 coarse + 16 fine) land where 512 do on a 1-D step-size minimum."""
    target = torch.full((4, 2), 0.37)
    evaluated = []

    def cost(u):
        evaluated.append(u.shape[0])
        return ((u - target) ** 2).sum((1, 2))

    results = {}
    for candidates, refine in ((512, 0), (32, 16)):
        evaluated.clear()
        optimizer = LineSearchOptimizer(OptimizerConfig(iterations=1, candidates=candidates,
                                                        refine_candidates=refine))
        u, info = optimizer.optimize(cost, torch.zeros(4, 2))
        results[candidates] = (info.cost, sum(evaluated), info.initial_cost)
    assert results[32][1] == 1 + 32 + 17 < results[512][1]   # gradient + coarse + fine
    # both reduce the cost 1.1 -> about 1e-4: within 1 % of the start cost of each other
    assert abs(results[32][0] - results[512][0]) <= 0.01 * results[512][2]
    assert results[32][0] < 1e-3
    with pytest.raises(ValueError, match='refine_candidates'):
        OptimizerConfig(refine_candidates=-1)


def test_mpc_config_is_validated():
    with pytest.raises(ValueError, match='throttle_limits'):
        MPCConfig(throttle_limits=(1.0, 0.0))
    with pytest.raises(ValueError, match='brake_command'):
        MPCConfig(throttle_limits=(0.2, 1.0))
    with pytest.raises(ValueError, match='line_search_threads'):
        MPCConfig(line_search_threads=-1)


@pytest.mark.parametrize('cores, threads', [(1, 1), (2, 1), (3, 1), (4, 2), (16, 2)])
def test_auto_line_search_threads_leave_a_small_machine_one_core(mlp, monkeypatch, cores,
                                                                 threads):
    """line_search_threads 0: two slices only where 4+ cores are usable (laptop), else one."""
    monkeypatch.setattr(mpc_module.os, 'sched_getaffinity', lambda pid: set(range(cores)))
    track = Track(load_track_spec(OVAL))
    assert TrackMPC(mlp, track, MPCConfig(line_search_threads=0)).fused.workers == threads
    assert TrackMPC(mlp, track, MPCConfig(line_search_threads=3)).fused.workers == 3


finite = st.floats(-1e3, 1e3, allow_nan=False)
anything = st.one_of(finite, st.just(math.nan), st.just(math.inf), st.just(-math.inf),
                     st.floats(-1e9, 1e9))


@pytest.fixture(scope='module')
def fast_mpc():
    torch.manual_seed(0)
    config = MPCConfig(throttle_limits=(0.0, 0.8), steering_limits=(-0.7, 0.7),
                       budget_s=10.0)
    mpc = TrackMPC(build_car_model('car_mlp'), Track(load_track_spec(OVAL)), config,
                   LineSearchOptimizer(OptimizerConfig(iterations=2, candidates=64)))
    assert mpc.fused is not None  # the MLP runs the fast path (hand-written gradient)
    return mpc


@pytest.fixture(scope='module')
def ipopt_mpc():
    torch.manual_seed(0)
    config = MPCConfig(throttle_limits=(0.0, 0.8), steering_limits=(-0.7, 0.7),
                       budget_s=10.0)
    return TrackMPC(build_car_model('car_mlp'), Track(load_track_spec(OVAL)), config,
                    IpoptOptimizer(config.horizon, IpoptConfig(iterations=3)))


@pytest.mark.parametrize('solver', ['mpc', 'fast_mpc', 'ipopt_mpc'])
@settings(max_examples=40, deadline=None)
@given(state=st.lists(anything, min_size=6, max_size=6))
def test_mpc_command_is_always_finite_and_within_limits(request, solver, state):
    # bicycle via autograd, the fused MLP path, and IPOPT on the fused MLP's closures
    mpc = request.getfixturevalue(solver)
    result = mpc.solve(np.array(state))
    assert result.command.shape == (2,)
    assert mpc.config.within_limits(result.command)


def test_ipopt_descends_a_quadratic_within_box_bounds():
    target = torch.tensor([[2.0, -0.5], [0.3, 0.1], [-3.0, 0.0]])

    def cost(u):
        return ((u - target) ** 2).sum((1, 2))
    optimizer = IpoptOptimizer(3, IpoptConfig(iterations=30))
    u, info = optimizer.optimize(cost, torch.zeros(3, 2),
                                 bounds=(torch.tensor([-1.0, -1.0]), torch.tensor([1.0, 1.0])))
    expected = target.clamp(-1.0, 1.0)   # the box-constrained optimum
    assert torch.allclose(u, expected, atol=1e-4) and info.cost < info.initial_cost
    assert info.converged


def test_ipopt_plans_forward_and_never_returns_worse_than_its_start(ipopt_mpc):
    ipopt_mpc.reset()
    x, y, yaw = ipopt_mpc.track.pose_at(0.0)
    state = np.array([x, y, yaw, 1.0, 0.0, 0.0])
    result = ipopt_mpc.solve(state)
    assert result.ok and result.command[0] > 0.0
    assert ipopt_mpc.config.within_limits(result.command)
    cost_fn, grad_fn, _ = ipopt_mpc.fast_closures(state)
    start = ipopt_mpc.warm_start()
    _, info = ipopt_mpc.optimizer.optimize(cost_fn, start, grad_fn=grad_fn,
                                           bounds=(ipopt_mpc.lower, ipopt_mpc.upper))
    assert info.cost <= info.initial_cost


def test_ipopt_stops_at_the_deadline_and_reports_non_finite_costs():
    def slow_cost(u):
        time.sleep(0.02)
        return (u ** 2).sum((1, 2))
    optimizer = IpoptOptimizer(3, IpoptConfig(iterations=200))
    _, info = optimizer.optimize(slow_cost, torch.ones(3, 2),
                                 deadline=time.perf_counter() + 0.1)
    assert info.seconds < 0.5 and not info.converged
    with pytest.raises(ValueError, match='not finite'):
        optimizer.optimize(lambda u: u.sum((1, 2)) * math.nan, torch.zeros(3, 2))


def test_unknown_solver_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown MPC solver 'sqp'"):
        make_optimizer('sqp', 20, 3)


def test_optimiser_skips_an_iteration_that_would_miss_the_deadline():
    def slow_cost(u):
        time.sleep(0.02)
        return (u ** 2).sum((1, 2))

    optimizer = LineSearchOptimizer(OptimizerConfig(iterations=10, candidates=8,
                                                    stop_early=False))
    _, info = optimizer.optimize(slow_cost, torch.ones(3, 2),
                                 deadline=time.perf_counter() + 0.07)
    assert info.iterations == 1  # the second would end after the deadline
    assert info.seconds < 0.1


def test_projection_matches_the_direct_search():
    track = Track(load_track_spec(OVAL))
    generator = np.random.default_rng(0)
    first = 37
    window = track.window_tensors(first, 100)
    for _ in range(50):
        x, y, heading = track.pose_at(track.s[first] + generator.uniform(0.5, 4.0))
        offset = generator.uniform(-0.4, 0.4)
        xy = np.array([x - offset * math.sin(heading), y + offset * math.cos(heading)])
        position = torch.tensor(xy, dtype=torch.float32)[None]
        s, lateral = Track.project(position, window)
        s_direct, lateral_direct = reference_project(position, window)
        assert float(s) == pytest.approx(float(s_direct), abs=1e-5)
        assert float(lateral) == pytest.approx(float(lateral_direct), abs=1e-5)
        s_ref, lateral_ref = track.coordinates(xy)  # polyline corners: s within a segment
        assert float(lateral) == pytest.approx(lateral_ref, abs=1e-3)
        assert (float(s) + track.s[first]) % track.length == pytest.approx(s_ref, abs=0.03)


def test_delay_compensation_rolls_the_committed_command_forward(mpc):
    mpc.reset()
    x, y, yaw = mpc.track.pose_at(0.0)
    state = np.array([x, y, yaw, 1.0, 0.0, 0.2])
    assert np.array_equal(mpc.predict_ahead(state, 0.0), state)
    committed = mpc.solve(state).command
    with torch.no_grad():
        one_step = mpc.model.rollout(torch.tensor(state, dtype=torch.float32).view(1, 6),
                                     torch.tensor(committed, dtype=torch.float32)
                                     .view(1, 1, 2)).mean[0, 0].numpy()
    h = mpc.model.h
    assert np.allclose(mpc.predict_ahead(state, h), one_step, atol=1e-5)
    assert np.allclose(mpc.predict_ahead(state, 0.5 * h), 0.5 * (state + one_step), atol=1e-5)
    assert mpc.solve(state, delay_s=0.08).ok
    bad = mpc.solve(state, delay_s=math.nan)
    assert not bad.ok and np.array_equal(bad.command, [0.0, 0.0])


@pytest.fixture(scope='module')
def mlp():
    torch.manual_seed(3)
    model = build_car_model('car_mlp').eval()
    with torch.no_grad():  # non-trivial normalisation, as after fit_normalization
        model.in_mean.copy_(torch.tensor([1.0, 0.0, 0.2, 0.3, 0.0]))
        model.in_std.copy_(torch.tensor([0.8, 0.2, 1.5, 0.4, 0.6]))
        model.out_std.copy_(torch.tensor([0.1, 0.05, 0.2]))
    return model


def test_fused_rollout_computes_the_mlp_velocity_sequence(mlp):
    fused = FusedRollout(mlp)
    v0, actions = torch.randn(7, 3), torch.rand(7, 20, 2) * 2 - 1
    with torch.no_grad():
        expected = mlp.velocity_sequence(v0, actions)
        chained = [v0]
        for i in range(20):
            chained.append(mlp.velocity_step(chained[-1], actions[:, i]))
    assert torch.allclose(expected, torch.stack(chained[1:], dim=1), atol=1e-5)
    assert torch.allclose(fused.velocities(v0, actions).transpose(0, 1), expected, atol=1e-5)
    recorded, tape = fused.record(v0, actions)
    assert torch.allclose(recorded.transpose(0, 1), expected, atol=1e-5)
    kept, kept_tape = fused.recorded(4)
    single, single_tape = fused.record(v0[4:5], actions[4:5])
    assert torch.allclose(kept, single, atol=1e-6)
    assert torch.allclose(kept_tape, single_tape, atol=1e-6)


def test_split_line_search_pass_equals_the_single_thread_one(mlp):
    """workers=3 runs slices of the batch side by side: same velocities, same recorded()."""
    single, split = FusedRollout(mlp), FusedRollout(mlp, workers=3)
    v0, actions = torch.randn(200, 3), torch.rand(200, 20, 2) * 2 - 1
    with torch.inference_mode():   # as in the line search
        expected = single.velocities(v0, actions).clone()
        got = split.velocities(v0, actions)
    assert torch.allclose(got, expected, atol=1e-6)
    assert torch.allclose(split.recorded(150)[0], single.recorded(150)[0], atol=1e-6)
    with pytest.raises(ValueError, match='workers'):
        FusedRollout(mlp, workers=0)


def test_split_line_search_costs_equal_the_single_thread_ones(mlp):
    """line_search_threads 2: the candidates' rollouts and track costs run in two slices."""
    track = Track(load_track_spec(OVAL))
    x, y, yaw = track.pose_at(1.0)
    state = np.array([x, y, yaw, 1.2, 0.1, 0.3])
    u = torch.rand(300, 20, 2) * 2 - 1
    costs = []
    for threads in (1, 2):
        mpc = TrackMPC(mlp, track, MPCConfig(budget_s=10.0, line_search_threads=threads))
        with torch.inference_mode():
            costs.append(mpc.fast_closures(state)[0](u).clone())
    assert costs[0].shape == (300,)
    assert torch.allclose(costs[1], costs[0], rtol=1e-5)


def test_fused_reverse_pass_matches_autograd(mlp):
    """The hand-written reverse pass equals autograd through the rollout (float64, 1e-5)."""
    model = copy.deepcopy(mlp).double()
    fused = FusedRollout(model)
    generator = torch.Generator().manual_seed(1)
    v0 = torch.randn(3, 3, dtype=torch.float64, generator=generator)
    actions = torch.rand(3, 20, 2, dtype=torch.float64, generator=generator) * 2 - 1
    weights = torch.randn(3, 20, 3, dtype=torch.float64, generator=generator)
    v_leaf, a_leaf = v0.clone().requires_grad_(True), actions.clone().requires_grad_(True)
    loss = (weights * model.velocity_sequence(v_leaf, a_leaf) ** 2).sum()
    grad_v0, grad_actions = torch.autograd.grad(loss, (v_leaf, a_leaf))
    velocities, tape = fused.record(v0, actions)
    mine_v0, mine_actions = fused.backward(tape, 2 * weights.transpose(0, 1) * velocities)
    scale = float(grad_actions.abs().max())
    assert scale > 1e-5
    assert torch.allclose(mine_actions, grad_actions, rtol=0, atol=1e-5 * scale)
    assert torch.allclose(mine_v0, grad_v0, rtol=0, atol=1e-5 * float(grad_v0.abs().max()))


def test_track_cost_reverse_pass_matches_autograd(mlp):
    """The hand-written reverse pass of the track costs equals autograd (float64, 1e-5)."""
    track = Track(load_track_spec(OVAL))
    mpc = TrackMPC(mlp, track, MPCConfig(budget_s=10.0, throttle_limits=(0.0, 0.8)))
    x, y, yaw = track.pose_at(2.0)
    # controls beyond the limits in places (barrier active); the paths leave the centre line
    assert_reverse_pass_matches_autograd(mpc, np.array([x, y, yaw, 1.2, 0.1, 0.3]),
                                         [1.5, 0.1, 0.8], (-1.2, 1.2), seed=2)


def test_fast_mpc_cost_and_gradient_match_the_autograd_path(mlp):
    track = Track(load_track_spec(OVAL))
    fast = TrackMPC(mlp, track, MPCConfig(budget_s=10.0))
    reference = TrackMPC(mlp, track, MPCConfig(budget_s=10.0, fast=False))
    assert fast.fused is not None and reference.fused is None
    x, y, yaw = track.pose_at(2.0)
    state = np.array([x, y, yaw, 1.2, 0.1, 0.3])
    cost_fn, grad_fn, predict_fn = fast.fast_closures(state)
    reference_fn = reference.cost_closure(state)
    u = fast.warm_start() + 0.2 * torch.randn(20, 2)
    variable = u.clone().requires_grad_(True)
    value = reference_fn(variable.unsqueeze(0))[0]
    (expected,) = torch.autograd.grad(value, variable)
    cost, grad = grad_fn(u, None)
    assert cost == pytest.approx(float(value.detach()), rel=1e-4, abs=1e-3)
    assert torch.allclose(grad, expected, rtol=0, atol=1e-4 * float(expected.abs().max()))
    batch = u.unsqueeze(0) + 0.1 * torch.randn(16, 20, 2)
    with torch.inference_mode():
        costs = cost_fn(batch).clone()
    with torch.no_grad():
        assert torch.allclose(costs, reference_fn(batch), rtol=1e-4, atol=1e-3)
    hinted_cost, hinted = grad_fn(batch[5], 5)  # reuses the line search's forward pass
    direct_cost, direct = grad_fn(batch[5], None)
    assert hinted_cost == pytest.approx(direct_cost, rel=1e-6, abs=1e-6)
    assert torch.allclose(hinted, direct, atol=1e-6 * float(direct.abs().max()))
    result = fast.solve(state)
    assert result.ok and result.iterations >= 1 and result.cost < float(value.detach()) + 1e3
    with torch.no_grad():  # the predicted states come from the kept passes: the same rollout
        rollout = mlp.rollout(torch.tensor(state, dtype=torch.float32).view(1, 6),
                              torch.tensor(result.plan, dtype=torch.float32)[None]).mean[0]
    assert np.allclose(result.predicted, rollout.numpy(), atol=1e-4)
    assert np.allclose(predict_fn(u).numpy(), reference.model.rollout(
        torch.tensor(state, dtype=torch.float32).view(1, 6), u[None]).mean[0].numpy(),
        atol=1e-4)  # not from a kept pass: rolled out


def test_scenario_refinement_records_plans_and_fine_tunes(mlp):
    model = copy.deepcopy(mlp)
    scenario = SCENARIOS[0]
    drives = scenario_drives(model, scenario, 2, np.random.default_rng(0), iterations=2)
    assert len(drives) == 2
    rest = int(round(REST_S / model.h))
    # each run: rest, the plan (the first run without noise), rest, at the mocap rate
    duration = (scenario.steps + 2 * rest) * model.h
    assert drives[0].time[-1] == pytest.approx(duration, abs=0.05)
    assert not np.allclose(drives[0].actions[:100], drives[1].actions[:100]) or \
        len(drives[0].time) != len(drives[1].time)
    before = [p.detach().clone() for p in model.parameters()]
    history = refine_on_scenarios(model, rounds=1, runs=1, random_minutes=0.5, epochs=1,
                                  iterations=2, scenarios=(scenario,), test_seconds=40.0,
                                  log=lambda _: None)
    assert len(history) == 2 and all(math.isfinite(h['position_error_m']) for h in history)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    with pytest.raises(ValueError, match='rounds'):
        refine_on_scenarios(model, rounds=0)
