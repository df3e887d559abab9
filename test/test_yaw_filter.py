"""The command-driven yaw filter (signals/yaw_filter.py) on synthetic drives."""
import dataclasses

import numpy as np
import pytest
from robot_dynamics_learning.control.car_estimator_params import CarStateEstimatorConfig
from robot_dynamics_learning.signals.mocap import MocapEstimator, MocapEstimatorConfig
from robot_dynamics_learning.signals.yaw_filter import (CommandedEstimator, fit_yaw_model,
                                                        YawKalmanFilter, YawModelConfig)

MODEL = YawModelConfig(gain=2.5, cubic=0.0, tau_s=0.05)


def drive(steering_of_t, seconds=3.0, rate=100.0, vx=1.5, model=MODEL, yaw_std=0.001,
          seed=0):
    """Return (time, poses [x, y, yaw] with yaw noise, steering, true yaw rate)."""
    rng = np.random.default_rng(seed)
    time = np.arange(0.0, seconds, 1.0 / rate)
    steering = np.array([steering_of_t(t) for t in time])
    r = np.zeros_like(time)
    yaw = np.zeros_like(time)
    pos = np.zeros((len(time), 2))
    dt = 1.0 / rate
    for k in range(1, len(time)):   # first-order yaw rate behind the bicycle's, fine steps
        r_k, yaw_k, p_k = r[k - 1], yaw[k - 1], pos[k - 1].copy()
        target = model.steady_rate(vx, steering[k - 1])
        for _ in range(10):
            r_k += (target - r_k) / model.tau_s * dt / 10
            yaw_k += r_k * dt / 10
            p_k += vx * np.array([np.cos(yaw_k), np.sin(yaw_k)]) * dt / 10
        r[k], yaw[k], pos[k] = r_k, yaw_k, p_k
    poses = np.column_stack([pos, yaw + rng.normal(0.0, yaw_std, len(time))])
    return time, poses, steering, r


def stream(estimator, time, poses, steering, commands=True):
    """Feed commands (stamped with the poses) and poses; return the yaw-rate estimates."""
    out = np.full(len(time), np.nan)
    for k in range(len(time)):
        if commands:
            estimator.update_command(float(time[k]), 0.3, float(steering[k]))
        assert estimator.update(float(time[k]), *poses[k]) is None
        if estimator.estimate() is not None:
            out[k] = estimator.estimate().state[5]
    return out


def test_a_steering_step_is_tracked_with_less_lag_and_error_than_the_fit():
    time, poses, steering, r = drive(lambda t: 0.3 if t >= 1.5 else 0.0)
    model = dataclasses.replace(MODEL, accel_noise=10.0, bias_noise=1.0)
    filtered = stream(CommandedEstimator(model=model), time, poses, steering)
    fitted = stream(MocapEstimator(), time, poses, steering, commands=False)
    after = (time >= 1.5) & (time < 2.0)
    err_filter = np.sqrt(np.mean((filtered[after] - r[after]) ** 2))
    err_fit = np.sqrt(np.mean((fitted[after] - r[after]) ** 2))
    assert err_filter < 0.5 * err_fit, (err_filter, err_fit)
    # Time to reach half of the new steady yaw rate: the filter leads the fit.
    half = 0.5 * MODEL.steady_rate(1.5, 0.3)
    t_true, t_filter, t_fit = (time[np.argmax(x >= half)] for x in (r, filtered, fitted))
    assert abs(t_filter - t_true) <= 0.011 and t_filter < t_fit, (t_true, t_filter, t_fit)
    steady = time >= 2.5
    assert np.sqrt(np.mean((filtered[steady] - r[steady]) ** 2)) < 0.05


def test_without_commands_the_estimate_is_the_fit_and_counted_as_fallback():
    time, poses, steering, _ = drive(lambda t: 0.2, seconds=1.0)
    estimator = CommandedEstimator()
    fit = MocapEstimator()
    for k in range(len(time)):
        estimator.update(float(time[k]), *poses[k])
        fit.update(float(time[k]), *poses[k])
        a, b = estimator.estimate(), fit.estimate()
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_array_equal(a.state, b.state)
    assert estimator.counters['fit_fallback'] == estimator.counters['accepted'] - 3
    assert estimator.counters['command_accepted'] == 0


def test_commands_that_stop_fall_back_to_the_fit_after_the_timeout():
    time, poses, steering, _ = drive(lambda t: 0.2, seconds=2.0)
    model = dataclasses.replace(MODEL, command_timeout_s=0.2)
    estimator = CommandedEstimator(model=model)
    fit = MocapEstimator()
    for k in range(len(time)):
        if time[k] < 1.0:
            estimator.update_command(float(time[k]), 0.3, float(steering[k]))
        estimator.update(float(time[k]), *poses[k])
        fit.update(float(time[k]), *poses[k])
    np.testing.assert_array_equal(estimator.estimate().state, fit.estimate().state)
    assert estimator.counters['fit_fallback'] == pytest.approx(80, abs=2)   # 1.2 s to 2.0 s


def test_nan_and_late_commands_are_rejected_and_counted():
    estimator = CommandedEstimator(model=dataclasses.replace(MODEL, command_timeout_s=0.5))
    assert estimator.update_command(1.0, 0.3, float('nan')) == 'nan'
    assert estimator.update_command(float('inf'), 0.3, 0.1) == 'nan'
    assert estimator.update_command(1.0, 0.3, 0.1) is None
    assert estimator.update_command(0.9, 0.3, 0.1) == 'late'    # older than the last one
    assert estimator.update_command(1.0, 0.3, 0.1) == 'late'    # repeated stamp
    for k in range(10):
        estimator.update(2.0 + 0.01 * k, 0.01 * k, 0.0, 0.0)
    assert estimator.update_command(1.4, 0.3, 0.1) == 'late'    # stale on arrival
    assert estimator.update_command(1.8, 0.3, 0.1) is None
    counters = estimator.counters
    assert counters['command_rejected_nan'] == 2 and counters['command_rejected_late'] == 3
    assert counters['command_accepted'] == 2
    assert np.all(np.isfinite(estimator.estimate().state))


def test_fit_yaw_model_recovers_the_simulated_car():
    drives = []
    for seed, freq in enumerate((0.3, 0.5, 0.8)):
        time, poses, steering, _ = drive(lambda t, f=freq: 0.4 * np.sin(2 * np.pi * f * t),
                                         seconds=10.0, yaw_std=0.0002, seed=seed,
                                         model=dataclasses.replace(MODEL, tau_s=0.2))
        drives.append((time, poses, steering))
    model = fit_yaw_model(drives)
    assert model.gain == pytest.approx(MODEL.gain, rel=0.1)
    assert model.tau_s == pytest.approx(0.2, rel=0.2)
    assert abs(model.cubic) < 0.5


def test_node_config_maps_to_the_core_and_refuses_bad_values():
    config = CarStateEstimatorConfig()
    assert config.mocap_config() == MocapEstimatorConfig(window_s=0.08, order=1)
    assert config.yaw_model() == YawModelConfig()
    with pytest.raises(ValueError, match='command_type'):
        CarStateEstimatorConfig(command_type='float')
    with pytest.raises(ValueError, match='yaw_tau_s'):
        CarStateEstimatorConfig(yaw_tau_s=0.0)
    with pytest.raises(ValueError, match='min_samples'):
        CarStateEstimatorConfig(order=2, min_samples=2)


def test_the_bias_may_move_faster_in_hard_turns_only():
    def bias_variance(slip_accel, vx, rate):
        model = dataclasses.replace(MODEL, slip_accel=slip_accel)
        kf = YawKalmanFilter(model, yaw=0.0, rate=rate)
        before = kf.P[2, 2]
        kf.predict(0.01, 0.0, vx)
        return kf.P[2, 2] - before
    assert bias_variance(3.0, 0.1, 0.1) == pytest.approx(bias_variance(0.0, 0.1, 0.1), rel=1e-3)
    assert bias_variance(3.0, 3.0, 2.0) == pytest.approx(5.0 * bias_variance(0.0, 3.0, 2.0))
