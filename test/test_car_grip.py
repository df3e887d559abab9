"""The grip-aware MPC: the lateral-acceleration bound in the cost and the online grip estimate."""
import math

from mpc_checks import assert_reverse_pass_matches_autograd
import numpy as np
import pytest
from robot_dynamics_learning.control.car_mpc_params import CarMPCConfig
from robot_dynamics_learning.control.car_training import build_car_model, load_car_model
from robot_dynamics_learning.control.costs import lateral_accel_cost, lateral_accel_cost_grad
from robot_dynamics_learning.control.mpc import MPCConfig, TrackMPC
from robot_dynamics_learning.control.optimizer import make_optimizer
from robot_dynamics_learning.control.track import load_track_spec, Track
from robot_dynamics_learning.learning.car_adaptation import CarAdaptation, CarAdaptationConfig
from robot_dynamics_learning.learning.car_grip import GripConfig, GripEstimator
from robot_dynamics_learning.resources import resource
import torch

OVAL = 'config/tracks/oval.yaml'
WHEELBASE, MAX_STEER = GripConfig().wheelbase, GripConfig().max_steer


pytestmark = pytest.mark.usefixtures('one_torch_thread')   # as car_mpc runs (conftest.py)


def test_lateral_accel_cost_penalises_only_the_excess_and_its_gradient_is_exact():
    velocities = torch.tensor([[[2.0, 0.1, 1.5], [1.0, 0.0, -1.0], [2.0, 0.0, -2.0]]],
                              dtype=torch.float64)
    # |vx r| = 3, 1, 4 against the limit 2: excesses 1, 0, 2
    assert float(lateral_accel_cost(velocities, 2.0, 10.0)) == pytest.approx(10.0 * (1 + 4))
    assert float(lateral_accel_cost(velocities, 5.0, 10.0)) == 0.0
    generator = torch.Generator().manual_seed(0)
    random = torch.randn(4, 20, 3, dtype=torch.float64, generator=generator) * 2.0
    leaf = random.clone().requires_grad_(True)
    (expected,) = torch.autograd.grad(lateral_accel_cost(leaf, 1.0, 7.0).sum(), leaf)
    assert float(expected.abs().max()) > 1.0
    assert torch.allclose(lateral_accel_cost_grad(random, 1.0, 7.0), expected, atol=1e-12)


def test_the_yaw_lever_adds_the_turn_in_and_its_gradient_is_exact():
    velocities = torch.tensor([[[2.0, 0.0, 1.0], [2.0, 0.0, 1.5]]], dtype=torch.float64)
    r0 = torch.tensor([0.0], dtype=torch.float64)
    # demands |vx r| + 0.1 |dr/dt|: 2 + 0.1 x 20 = 4 and 3 + 0.1 x 10 = 4; limit 3
    assert float(lateral_accel_cost(velocities, 3.0, 1.0, r0, 0.1, 0.05)) == \
        pytest.approx(2.0)
    assert float(lateral_accel_cost(velocities, 3.0, 1.0, r0, 0.0, 0.05)) == 0.0
    generator = torch.Generator().manual_seed(1)
    random = torch.randn(4, 20, 3, dtype=torch.float64, generator=generator) * 2.0
    r0 = torch.randn(4, dtype=torch.float64, generator=generator)
    leaf = random.clone().requires_grad_(True)
    (expected,) = torch.autograd.grad(
        lateral_accel_cost(leaf, 1.0, 7.0, r0, 0.09, 0.05).sum(), leaf)
    mine = lateral_accel_cost_grad(random, 1.0, 7.0, r0, 0.09, 0.05)
    assert torch.allclose(mine, expected, atol=1e-10 * float(expected.abs().max()))


@pytest.fixture(scope='module')
def shipped():
    return load_car_model(resource('config/models/car_mlp_sim.pt'))


def _mpc(model, **settings) -> TrackMPC:
    config = MPCConfig(budget_s=10.0, target_speed=1.75, **settings)
    return TrackMPC(model, Track(load_track_spec(OVAL)), config,
                    make_optimizer('line_search', config.horizon, 3, 32, refine_candidates=16))


def _turn_state(track: Track) -> np.ndarray:
    """Return the car at 2 m/s just before the first turn (a plan there turns hard)."""
    x, y, yaw = track.pose_at(2.5)
    return np.array([x, y, yaw, 2.0, 0.0, 0.0])


def test_track_cost_reverse_pass_with_the_grip_bound_matches_autograd(shipped):
    mpc = _mpc(shipped, grip_weight=20.0, lateral_accel_max=1.0, grip_lever=0.09)
    velocities, u, inputs, cost = assert_reverse_pass_matches_autograd(
        mpc, _turn_state(mpc.track), [1.8, 0.0, 1.5], (-1.0, 1.0), seed=2)
    without = _mpc(shipped)._track_cost(velocities, u, *inputs)
    assert torch.all(cost - without > 1.0)   # the bound is active here


def _plans(mpc: TrackMPC, state: np.ndarray, ticks: int = 3) -> list:
    torch.manual_seed(0)
    return [mpc.solve(state) for _ in range(ticks)]


def test_an_inactive_bound_gives_the_same_plans(shipped):
    """Off (weight 0) or without a limit (inf), the MPC plans exactly as before."""
    track = Track(load_track_spec(OVAL))
    state = _turn_state(track)
    before = _plans(_mpc(shipped), state)
    for settings in ({'grip_weight': 20.0}, {'lateral_accel_max': 1.0}):
        for old, new in zip(before, _plans(_mpc(shipped, **settings), state)):
            assert np.array_equal(old.plan, new.plan) and old.cost == new.cost


def test_the_bound_slows_the_plan_in_a_turn_and_keeps_the_safety_checks(shipped):
    track = Track(load_track_spec(OVAL))
    state = _turn_state(track)
    free = _plans(_mpc(shipped), state)[-1]
    bounded_mpc = _mpc(shipped, grip_weight=20.0)
    bounded_mpc.set_lateral_accel_max(2.0)
    bounded = _plans(bounded_mpc, state)[-1]
    assert free.ok and bounded.ok
    lateral = [np.abs(r.predicted[:, 3] * r.predicted[:, 5]).max() for r in (free, bounded)]
    assert lateral[0] > 2.5 and lateral[1] < lateral[0] - 0.5
    assert bounded.predicted[:, 3].mean() < free.predicted[:, 3].mean()
    for bad in (math.nan, 0.0, -1.0):
        with pytest.raises(ValueError, match='lateral_accel_max'):
            bounded_mpc.set_lateral_accel_max(bad)
    assert bounded_mpc.lateral_accel_max == 2.0
    assert not bounded_mpc.solve(np.array([0.0, math.nan, 0, 0, 0, 0])).ok   # still brakes


@pytest.mark.parametrize('settings, match', [({'grip_weight': -1.0}, 'grip_weight'),
                                             ({'lateral_accel_max': 0.0}, 'lateral_accel_max'),
                                             ({'grip_margin': 1.0}, 'grip_margin'),
                                             ({'grip_lever': -0.1}, 'grip_lever')])
def test_grip_settings_are_validated(settings, match):
    with pytest.raises(ValueError, match=match):
        MPCConfig(**settings)


def _transition(vx: float, steering: float, yaw_share: float) -> tuple:
    """(command, end state) of a car at vx turning at yaw_share x the kinematic yaw rate."""
    kinematic = vx * math.tan(steering * MAX_STEER) / WHEELBASE
    return np.array([0.3, steering]), np.array([0.0, 0.0, 0.0, vx, 0.0, yaw_share * kinematic])


def _lateral(vx: float, steering: float, yaw_share: float = 1.0) -> float:
    return abs(vx * vx * math.tan(steering * MAX_STEER) / WHEELBASE * yaw_share)


def test_grip_estimate_falls_to_where_the_car_let_go_and_rises_where_it_grips():
    estimator = GripEstimator(GripConfig(grip_forgetting=1.0))
    for _ in range(40):   # gripping at 3.1 m/s^2: below the start (the ceiling), no change
        estimate = estimator.update(*_transition(2.0, 0.3, 1.0))
    assert estimate == GripConfig().grip_ceiling
    peak, sliding = _lateral(2.0, 0.3), _lateral(2.0, 0.5, 0.4)
    assert sliding < peak - 1.0
    estimates = []
    for _ in range(60):   # then it turns at 40 % of the kinematic rate: sliding
        estimates.append(estimator.update(*_transition(2.0, 0.5, 0.4)))
    first = estimator.counts['grip_transitions'] - 60 + next(
        k for k, value in enumerate(estimates) if value < GripConfig().grip_ceiling)
    assert estimator.counts['grip_sliding'] > 40 and first > 40   # filtered: not at once
    # first towards the peak it held before it let go, then towards what it holds sliding
    ceiling = GripConfig().grip_ceiling
    assert estimates[first - 40] == pytest.approx(ceiling + 0.1 * (peak - ceiling))
    assert sliding <= estimates[-1] <= peak
    for _ in range(200):   # gripping again at 3.7 m/s^2, above the estimate: it rises
        estimate = estimator.update(*_transition(2.0, 0.35, 1.0))
    assert estimate == pytest.approx(_lateral(2.0, 0.35), rel=0.02)
    assert estimator.counts['grip_gripping'] > 100


def test_grip_estimate_refuses_non_finite_input_keeps_its_bounds_and_forgets():
    config = GripConfig(grip_floor=2.0, grip_ceiling=6.0, grip_gain=1.0, grip_forgetting=0.99)
    estimator = GripEstimator(config)
    for _ in range(30):   # sliding at a low peak: the estimate stops at the floor
        estimate = estimator.update(*_transition(0.8, 0.3, 0.3))
    assert estimate == 2.0
    command, state = _transition(1.5, 0.3, 0.4)
    state[5] = math.nan
    for bad in ((command, state), (np.array([0.3, math.inf]), np.zeros(6)),
                (np.zeros(3), np.zeros(6))):
        assert estimator.update(*bad) == 2.0
    assert estimator.counts['grip_rejected_non_finite'] == 3
    assert math.isfinite(estimator.mismatch)
    for _ in range(100):   # straight driving: no evidence, the estimate relaxes upwards
        estimate = estimator.update(np.array([0.3, 0.0]), np.array([0, 0, 0, 1.5, 0, 0.0]))
    assert estimate == pytest.approx(6.0 - 4.0 * 0.99 ** 100, rel=1e-6)
    with pytest.raises(ValueError, match='grip_floor'):
        GripConfig(grip_floor=5.0, grip_ceiling=4.0)


def test_car_adaptation_estimates_grip_from_stamped_states_and_commands():
    """The learner's transitions feed the estimate (no training needed for it)."""
    config = CarAdaptationConfig(command_delay_s=0.0, grip_forgetting=1.0)
    adaptation = CarAdaptation(build_car_model('car_mlp'), config, np.random.default_rng(0))
    command, state = _transition(1.5, 0.3, 0.4)
    for k in range(200):
        adaptation.add_command(0.05 * k, command)
        adaptation.add_state(0.05 * k, state)
    assert adaptation.grip_estimate() < config.grip_ceiling
    diagnostics = adaptation.diagnostics()
    assert diagnostics['grip_sliding'] > 100 and diagnostics['train_steps'] == 0
    assert diagnostics['grip_estimate'] == adaptation.grip_estimate()


def test_car_mpc_settings_reach_the_mpc_with_zero_as_no_limit():
    assert CarMPCConfig().mpc_config().lateral_accel_max == math.inf
    assert CarMPCConfig().mpc_config().grip_speed_profile
    config = CarMPCConfig(grip_weight=5.0, lateral_accel_max=3.0, grip_margin=0.3,
                          grip_lever=0.09, grip_speed_profile=False).mpc_config()
    assert (config.grip_weight, config.lateral_accel_max, config.grip_margin,
            config.grip_lever, config.grip_speed_profile) == (5.0, 3.0, 0.3, 0.09, False)
    with pytest.raises(ValueError, match='grip_weight'):
        CarMPCConfig(grip_weight=-1.0)
