"""Mocap poses -> body velocities: offline Savitzky-Golay and the causal online estimator."""
import numpy as np
import pytest

from robot_dynamics_learning.signals.mocap import (emulated_mocap_config, MocapEstimator,
                                                   MocapEstimatorConfig, offline_body_states,
                                                   wrap_angle)


def circle(speed=1.5, radius=1.0, rate=240.0, seconds=4.0):
    """Poses of a car driving a circle CCW at `speed` (body vx = speed, r = speed/radius)."""
    t = np.arange(0, seconds, 1.0 / rate)
    angle = speed / radius * t
    poses = np.stack([radius * np.sin(angle), radius * (1 - np.cos(angle)), angle], axis=1)
    return t, poses


def test_offline_body_velocities_of_a_circle():
    t, poses = circle()
    poses[:, 2] = wrap_angle(poses[:, 2])  # as mocap reports it
    rng = np.random.default_rng(0)
    noisy = poses + rng.normal(0, [0.002, 0.002, 0.005], poses.shape)
    grid, states = offline_body_states(t, noisy, 0.01, window_s=0.1)
    inner = states[20:-20]
    assert np.median(inner[:, 3]) == pytest.approx(1.5, abs=0.02)
    assert np.abs(np.median(inner[:, 4])) < 0.02
    assert np.median(inner[:, 5]) == pytest.approx(1.5, abs=0.03)
    assert np.all(np.diff(states[:, 2]) > 0)  # yaw unwrapped


def test_offline_rejects_nan():
    t, poses = circle()
    poses[5, 0] = np.nan
    with pytest.raises(ValueError, match='NaN'):
        offline_body_states(t, poses, 0.01)


def feed(estimator, t, poses, valid=None):
    for i in range(len(t)):
        if valid is None or valid[i]:
            estimator.update(t[i], *poses[i])


def test_online_estimate_tracks_a_noisy_circle_with_dropouts_and_wrapping():
    t, poses = circle(seconds=6.0)
    rng = np.random.default_rng(1)
    noisy = poses + rng.normal(0, [0.002, 0.002, 0.005], poses.shape)
    noisy[:, 2] = wrap_angle(noisy[:, 2])
    # the simulator's emulated mocap is 10x noisier than a Vicon: config/car.yaml's settings
    estimator = MocapEstimator(emulated_mocap_config())
    errors = []
    valid = rng.random(len(t)) > 0.02
    for i in range(len(t)):
        if valid[i]:
            estimator.update(t[i], *noisy[i])
        estimate = estimator.estimate()
        if i > 100 and estimate is not None:
            errors.append(estimate.state[3:] - [1.5, 0.0, 1.5])
    errors = np.abs(np.array(errors))
    assert errors.mean(0)[0] < 0.05 and errors.mean(0)[2] < 0.1
    assert estimator.estimate().state[2] > 8.0  # unwrapped: about 9 rad after 6 s
    assert estimator.counters['accepted'] == valid.sum()


def test_online_rejects_nan_out_of_order_and_jumps_and_counts_them():
    t, poses = circle(seconds=0.5)
    estimator = MocapEstimator(MocapEstimatorConfig(relock_after=5))
    feed(estimator, t[:50], poses[:50])
    assert estimator.update(t[50], np.nan, 0.0, 0.0) == 'nan'
    assert estimator.update(t[10], *poses[10]) == 'out_of_order'
    assert estimator.update(t[49], *poses[49]) == 'out_of_order'  # repeated stamp
    jumped = poses[50] + [1.0, 0.0, 0.0]
    assert estimator.update(t[50], *jumped) == 'jump'
    assert estimator.update(t[51], *poses[51]) is None
    assert estimator.counters == {'accepted': 51, 'rejected_nan': 1, 'rejected_out_of_order': 2,
                                  'rejected_jump': 1, 'relocked': 0}


def test_online_relocks_after_a_real_move():
    t, poses = circle(seconds=0.5)
    estimator = MocapEstimator(MocapEstimatorConfig(relock_after=5))
    feed(estimator, t[:50], poses[:50])
    moved = poses[50:70] + [3.0, 0.0, 0.0]
    results = [estimator.update(t[50 + i], *moved[i]) for i in range(20)]
    assert results[:4] == ['jump'] * 4 and results[4] is None
    assert estimator.counters['relocked'] == 1
    assert estimator.estimate().state[0] == pytest.approx(moved[-1, 0], abs=0.05)


def test_stale_detection():
    estimator = MocapEstimator(MocapEstimatorConfig(stale_after_s=0.1))
    assert estimator.is_stale(0.0)
    t, poses = circle(seconds=0.1)
    feed(estimator, t, poses)
    assert not estimator.is_stale(t[-1] + 0.05)
    assert estimator.is_stale(t[-1] + 0.11)


def test_bad_config_is_named():
    with pytest.raises(ValueError, match='order'):
        MocapEstimatorConfig(order=3)
    with pytest.raises(ValueError, match='window_s'):
        MocapEstimatorConfig(window_s=0.0)


def test_velocity_is_rotated_with_the_heading_of_its_own_instant():
    # A clean circle at 100 Hz: a straight-line fit's velocity describes the window's mean
    # time; rotating it with the newest heading made vy = -vx * r * delay (-0.09 m/s here).
    t, poses = circle(rate=100.0, seconds=2.0)
    for config in (emulated_mocap_config(), MocapEstimatorConfig()):
        estimator = MocapEstimator(config)
        feed(estimator, t, poses)
        vx, vy, r = estimator.estimate().state[3:]
        assert vy == pytest.approx(0.0, abs=2e-3)
        assert vx == pytest.approx(1.5, abs=5e-3) and r == pytest.approx(1.5, abs=5e-3)


def test_quadratic_fit_has_no_delay_when_the_turn_tightens():
    # yaw rate ramps at 5 rad/s^2: a straight-line yaw fit over 0.12 s lags by about 0.06 s
    # (0.3 rad/s); the default quadratic fit, evaluated at the newest stamp, does not.
    t = np.arange(0.0, 1.0, 0.01)
    yaw = 2.5 * t ** 2
    poses = np.stack([np.cumsum(np.cos(yaw)) * 0.01, np.cumsum(np.sin(yaw)) * 0.01, yaw], 1)
    lagging = MocapEstimator(MocapEstimatorConfig(window_s=0.12, yaw_window_s=None, order=1))
    exact = MocapEstimator()
    feed(lagging, t, poses)
    feed(exact, t, poses)
    true_r = 5.0 * t[-1]
    assert exact.estimate().state[5] == pytest.approx(true_r, abs=0.01)
    assert true_r - lagging.estimate().state[5] > 0.25
