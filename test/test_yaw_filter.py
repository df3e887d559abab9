"""The command-driven yaw filter (signals/yaw_filter.py) on synthetic drives."""
import dataclasses

import numpy as np
import pytest
from robot_dynamics_learning.control.car_estimator_params import CarStateEstimatorConfig
from robot_dynamics_learning.signals.mocap import MocapEstimator, MocapEstimatorConfig
from robot_dynamics_learning.signals.yaw_filter import (CommandedEstimator, fit_yaw_model,
                                                        replay_yaw_rates, tune_yaw_filter,
                                                        YawKalmanFilter, YawModelConfig)

MODEL = YawModelConfig(gain=2.5, cubic=0.0, tau_s=0.05, tau_per_speed=0.0, lateral_gain=0.0,
                       step_rate=0.0)


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


def test_the_scalar_filter_is_the_matrix_kalman_filter():
    """The hand-expanded covariance algebra equals F P F^T + Q and the gain update."""
    model = dataclasses.replace(MODEL, tau_per_speed=0.02, step_rate=0.4, step_memory_s=0.1,
                                slip_accel=3.0)
    kf = YawKalmanFilter(model, yaw=0.3, rate=0.5)
    kf._p = [4e-4, 1e-3, -2e-3, 0.3, 0.05, 0.2]
    x, P = kf.x, kf.P
    dt, steady, vx, step = 0.012, 1.1, 2.0, 0.25
    kf.predict(dt, steady, vx, step)
    tau = model.tau_s + 0.02 * vx
    a = np.exp(-dt / tau)
    h = tau * (1 - a)
    F = np.array([[1, h, dt - h], [0, a, 1 - a], [0, 0, 1]])
    q = model.accel_noise * (1 + (vx * step / 0.4) ** 2)
    qb = model.bias_noise * (1 + (vx * x[1] / 3.0) ** 2)
    Q = np.array([[q * dt ** 3 / 3, q * dt ** 2 / 2, 0], [q * dt ** 2 / 2, q * dt, 0],
                  [0, 0, qb * dt]])
    x = F @ x + np.array([dt - h, 1 - a, 0]) * steady
    P = F @ P @ F.T + Q
    np.testing.assert_allclose(kf.x, x, rtol=1e-12)
    np.testing.assert_allclose(kf.P, P, rtol=1e-12)
    kf.correct(0.31)
    gain = P[:, 0] / (P[0, 0] + model.yaw_noise ** 2)
    np.testing.assert_allclose(kf.x, x + gain * (0.31 - x[0]), rtol=1e-12)
    np.testing.assert_allclose(kf.P, P - np.outer(gain, P[0]), rtol=1e-12, atol=1e-15)


def test_steering_steps_raise_the_yaw_acceleration_noise_for_a_while():
    model = dataclasses.replace(MODEL, step_rate=0.5, step_memory_s=0.1)

    def rate_variance(steps, which=model):
        kf = YawKalmanFilter(which, yaw=0.0, rate=0.0)
        for step in steps:
            kf.predict(0.01, 0.0, 2.0, step)
        return kf.P[1, 1], kf.step_memory
    calm, memory = rate_variance([0.0])
    stepped, memory = rate_variance([0.5])
    assert memory == pytest.approx(1.0)   # vx * |step|
    # the extra variance is the accel noise times (memory / step_rate)^2 = 4 over one step
    assert stepped - calm == pytest.approx(4.0 * model.accel_noise * 0.01, rel=1e-9)
    _, memory = rate_variance([0.5] + [0.0] * 10)
    assert memory == pytest.approx(np.exp(-1.0))   # decays over step_memory_s
    assert rate_variance([0.5], dataclasses.replace(model, step_rate=0.0))[0] == calm


def test_the_model_uses_the_lateral_velocity_and_a_speed_dependent_lag():
    model = dataclasses.replace(MODEL, lateral_gain=1.5, tau_per_speed=0.01)
    assert model.steady_rate(2.0, 0.2, vy=0.1) == pytest.approx(2.0 * 2.5 * 0.2 + 0.15)
    assert model.time_constant(3.0) == pytest.approx(0.05 + 0.03)
    assert model.time_constant(-1.0) == pytest.approx(0.05)
    assert fit_yaw_model([drive(lambda t: 0.3 * np.sin(3 * t), seconds=3.0)[:3]],
                         base=model).lateral_gain == 0.0


def fitted_states(time: np.ndarray, poses: np.ndarray) -> np.ndarray:
    """Return (T, 6) the position fit's states per pose, NaN while it warms up."""
    fit = MocapEstimator()
    fitted = np.full((len(time), 6), np.nan)
    for k in range(len(time)):
        fit.update(float(time[k]), *poses[k])
        if fit.estimate() is not None:
            fitted[k] = fit.estimate().state
    return fitted


def test_replay_gives_what_the_estimator_streams():
    time, poses, steering, _ = drive(lambda t: 0.3 * np.sin(4 * t) + (0.2 if t > 1 else 0))
    model = dataclasses.replace(MODEL, lateral_gain=0.5, tau_per_speed=0.01, step_rate=0.3)
    streamed = stream(CommandedEstimator(model=model), time, poses, steering)
    fitted = fitted_states(time, poses)
    replayed = replay_yaw_rates(model, time, poses[:, 2], fitted, steering)
    np.testing.assert_allclose(replayed, streamed, rtol=0, atol=1e-12)
    assert np.isfinite(replayed[10:]).all()


def test_tune_yaw_filter_repairs_a_wrong_model():
    drives = []
    for seed in range(2):
        time, poses, steering, r = drive(lambda t, s=seed: 0.4 * np.sin((2 + s) * t),
                                         seconds=4.0, seed=seed)
        drives.append((time, poses[:, 2], fitted_states(time, poses), steering, r))
    wrong = dataclasses.replace(MODEL, gain=1.5, tau_s=0.2, accel_noise=1.0, bias_noise=0.1)
    _, start = tune_yaw_filter(drives, wrong, names=(), max_evals=1)
    tuned, score = tune_yaw_filter(drives, wrong, names=('gain', 'tau_s'), max_evals=60)
    assert score < 0.7 * start, (score, start)
    assert tuned.gain == pytest.approx(MODEL.gain, rel=0.15)
    assert tuned.accel_noise == wrong.accel_noise    # not among the names: kept
    with pytest.raises(ValueError, match='no pose'):
        tune_yaw_filter([(*drives[-1][:4], np.full(len(time), np.nan))],
                        wrong, names=('gain',), max_evals=2)
