"""The grip-limited speed profile: the track's corner speeds and the MPC's per-step targets."""
import math

from mpc_checks import assert_reverse_pass_matches_autograd
import numpy as np
import pytest
from robot_dynamics_learning.control.car_training import load_car_model
from robot_dynamics_learning.control.mpc import MPCConfig, TrackMPC
from robot_dynamics_learning.control.optimizer import make_optimizer
from robot_dynamics_learning.control.track import load_track_spec, Track
from robot_dynamics_learning.resources import resource
import torch

OVAL = 'config/tracks/oval.yaml'
RADIUS, STRAIGHT, INSIDE = 1.2, 3.0, 0.35   # the oval's turns; half width 0.5 - margin 0.15


pytestmark = pytest.mark.usefixtures('one_torch_thread')   # as car_mpc runs (conftest.py)


@pytest.fixture(scope='module')
def track():
    return Track(load_track_spec(OVAL))


@pytest.fixture(scope='module')
def shipped():
    return load_car_model(resource('config/models/car_mlp_sim.pt'))


def _in_turn(track: Track) -> np.ndarray:
    """Return a mask of the segments in the middle of the turns (|x| beyond the straights)."""
    return np.abs(track.points[:, 0]) > STRAIGHT / 2 + 0.6


def test_curvature_of_the_oval(track):
    assert np.sum(track.curvature * track.seg_length) == pytest.approx(2 * math.pi, abs=1e-6)
    np.testing.assert_allclose(track.curvature[_in_turn(track)], 1 / RADIUS, rtol=0.05)
    assert np.abs(track.curvature[np.abs(track.points[:, 0]) < 1.0]).max() < 0.3


def test_speed_profile_takes_the_turns_and_brakes_before_them(track):
    lateral, brake, top = 2.4, 1.2, 1.75
    profile = track.speed_profile(lateral, brake, top, INSIDE)
    corner = math.sqrt(lateral * (RADIUS - INSIDE))
    np.testing.assert_allclose(profile[_in_turn(track)], corner, rtol=0.03)
    assert profile.max() == pytest.approx(top) and np.all(profile <= top + 1e-12)
    # no segment asks for more braking than brake allows to reach the next one's speed
    following = np.roll(profile, -1)
    assert np.all(profile ** 2 <= following ** 2 + 2 * brake * track.seg_length + 1e-9)
    # braking starts (top^2 - corner^2) / (2 brake) before a turn: already slower 0.3 m before
    turn_start = track.s[np.argmax(np.abs(track.curvature) > 0.7)]
    before = track.s[(track.s < turn_start) & (track.s > turn_start - 0.3)]
    assert before.size and np.all(profile[np.isin(track.s, before)] < top - 0.05)
    # the centre line's radius without the inside allowance, and a slower profile on less grip
    centre = track.speed_profile(lateral, brake, top)
    np.testing.assert_allclose(centre[_in_turn(track)], min(top, math.sqrt(lateral * RADIUS)),
                               rtol=0.03)
    assert np.all(track.speed_profile(1.2, brake, top, INSIDE) <= profile)
    for bad in ((0.0, 1.0, 1.0), (1.0, -1.0, 1.0), (1.0, 1.0, math.nan), (1.0, 1.0, 1.0, -0.1)):
        with pytest.raises(ValueError, match='speed_profile'):
            track.speed_profile(*bad)


def _mpc(model, **settings) -> TrackMPC:
    config = MPCConfig(budget_s=10.0, target_speed=1.75, **settings)
    return TrackMPC(model, Track(load_track_spec(OVAL)), config,
                    make_optimizer('line_search', config.horizon, 3, 32, refine_candidates=16))


def _before_turn(track: Track, speed: float = 2.0) -> np.ndarray:
    """Return the car on the centre line 1 m before the first turn (the lap's start)."""
    x, y, yaw = track.pose_at(track.length - 1.0)
    return np.array([x, y, yaw, speed, 0.0, 0.0])


def _plans(mpc: TrackMPC, state: np.ndarray, ticks: int = 3) -> list:
    torch.manual_seed(0)
    return [mpc.solve(state) for _ in range(ticks)]


def test_the_profile_without_a_limit_gives_the_same_plans(shipped, track):
    """On but without a limit, or with the bound off: the MPC plans exactly as before."""
    state = _before_turn(track)
    before = _plans(_mpc(shipped), state)
    for settings in ({'grip_weight': 20.0, 'grip_speed_profile': True},
                     {'lateral_accel_max': 2.0, 'grip_speed_profile': True}):
        mpc = _mpc(shipped, **settings)
        assert mpc.speed_profile() is None
        for old, new in zip(before, _plans(mpc, state)):
            assert np.array_equal(old.plan, new.plan) and old.cost == new.cost


def test_the_profile_slows_the_plan_before_the_turn(shipped, track):
    state = _before_turn(track)
    plans = {}
    for profile in (False, True):
        mpc = _mpc(shipped, grip_weight=20.0, grip_speed_profile=profile)
        mpc.set_lateral_accel_max(2.5)
        plans[profile] = _plans(mpc, state)[-1]
        assert plans[profile].ok
    # the first 0.5 s are on the straight, before the turn: slower with the profile
    first = {profile: plans[profile].predicted[:10, 3].mean() for profile in plans}
    assert first[True] < first[False] - 0.1


def test_the_profile_follows_the_limit_and_its_gradient_is_exact(shipped, track):
    mpc = _mpc(shipped, grip_weight=20.0, grip_speed_profile=True, grip_lever=0.09)
    mpc.set_lateral_accel_max(2.0)
    slow = mpc.speed_profile().clone()
    # the cost's optimum lies speed_offset above its target: the target is the corner's
    # speed (bound 0.8 x 2.0 m/s^2 on the line 0.35 m inside) less that
    assert mpc.speed_offset() == pytest.approx(0.25)
    corner = math.sqrt(0.8 * 2.0 * (RADIUS - INSIDE)) - 0.25
    np.testing.assert_allclose(slow[torch.as_tensor(_in_turn(track))], corner, rtol=0.05)
    assert float(slow.max()) == pytest.approx(1.75)
    mpc.set_lateral_accel_max(4.0)
    fast = mpc.speed_profile()
    assert torch.all(fast >= slow) and float((fast - slow).max()) > 0.3
    profile = mpc._tick_inputs(_before_turn(track))[-1]
    assert profile is not None and profile.shape == (mpc.window_size,)
    velocities, u, inputs, cost = assert_reverse_pass_matches_autograd(
        mpc, _before_turn(track), [1.8, 0.0, 1.0], (-1.0, 1.0), seed=3, use_profile=True)
    flat = mpc._track_cost(velocities, u, *inputs)
    assert not torch.allclose(flat, cost)   # the per-step targets matter here
