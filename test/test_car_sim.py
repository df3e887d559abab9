"""The drifting car simulator: grip at low speed, traction loss in fast tight turns."""
import numpy as np
import pytest

from robot_dynamics_learning.sim.car import (car_step, CarParams, collect_driving, DrivingStyle,
                                             emulate_mocap, FrictionChange, MocapNoise,
                                             rear_slip_angle,
                                             reset_indices, simulate, slip_angle)
from robot_dynamics_learning.sim.driving import simulated_drives


def hold(command, seconds, params=CarParams(), state=None):
    state = np.zeros((1, 6)) if state is None else state
    steps = int(round(seconds / 0.05))
    return simulate(state, np.tile(np.asarray(command, float), (1, steps, 1)), params, 0.05)[0]


def test_straight_line_reaches_top_speed_without_slip():
    params = CarParams()
    states = hold([0.5, 0.0], 4.0, params)
    assert states[-1, 3] == pytest.approx(0.5 * params.max_accel / params.drag, rel=1e-3)
    assert np.allclose(states[:, [1, 2, 4, 5]], 0.0)


def test_slow_turn_follows_the_kinematic_bicycle():
    params = CarParams()
    states = hold([0.2, 0.5], 4.0, params)
    vx, r = states[-1, 3], states[-1, 5]
    assert r == pytest.approx(vx * np.tan(0.5 * params.max_steer) / params.wheelbase, rel=1e-3)
    assert np.degrees(np.abs(slip_angle(states))).max() < 10


def test_full_throttle_full_lock_drifts():
    states = hold([1.0, 1.0], 3.0)
    _, slipping = car_step(states[-2:-1], np.array([[1.0, 1.0]]), CarParams())
    assert np.degrees(np.abs(slip_angle(states))).max() > 20
    assert slipping[0, 1]  # the rear (driven) axle lets go


def test_rear_slip_angle_tells_a_slide_from_the_steering_geometry():
    params = CarParams()
    grip = hold([0.15, 1.0], 3.0, params)  # slow, full lock: the car grips
    geometric = np.arctan(params.rear_to_cg / params.wheelbase * np.tan(params.max_steer))
    assert slip_angle(grip)[-1] == pytest.approx(geometric, abs=1e-3)  # 13.6 deg, no slide
    assert np.degrees(np.abs(rear_slip_angle(grip, params))).max() < 0.1
    drift = hold([1.0, 1.0], 3.0, params)
    rear = rear_slip_angle(drift, params)
    assert np.degrees(rear.min()) < -20  # the rear slides out of the left turn
    assert np.abs(rear).max() > np.abs(slip_angle(drift)).max()


def test_batched_steps_equal_single_steps():
    rng = np.random.default_rng(0)
    states = rng.normal(0, 1, (5, 6))
    commands = rng.uniform(-1, 1, (5, 2))
    batched, _ = car_step(states, commands, CarParams())
    for i in range(5):
        single, _ = car_step(states[i:i + 1], commands[i:i + 1], CarParams())
        assert np.allclose(single[0], batched[i])


def test_non_finite_state_is_an_error():
    with pytest.raises(ValueError, match='NaN'):
        car_step(np.full((1, 6), np.nan), np.zeros((1, 2)), CarParams())


def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match='mu_dynamic'):
        CarParams(mu_dynamic=0.9, mu_static=0.5)
    with pytest.raises(ValueError, match='rear_to_cg'):
        CarParams(rear_to_cg=0.5)


def test_mocap_emulation_drops_and_wraps():
    rng = np.random.default_rng(1)
    states = np.zeros((20000, 6))
    states[:, 2] = 7.0
    valid, poses = emulate_mocap(states, MocapNoise(dropout=0.05, jump_probability=0.01), rng)
    assert 0.04 < 1 - valid.mean() < 0.06
    assert np.all(np.abs(poses[:, 2]) <= np.pi)
    assert 0.005 < np.mean(np.abs(poses[:, 0]) > 0.3) < 0.015


def test_random_driver_covers_reverse_and_drift_and_resets_are_found():
    rng = np.random.default_rng(2)
    params = CarParams()
    _, states, commands = collect_driving(60.0, params, rng, cars=2, arena=3.0)
    assert commands[..., 0].min() < -0.3 and commands[..., 0].max() > 0.8
    assert np.degrees(np.abs(slip_angle(states))).max() > 20
    for car in range(2):
        for i in reset_indices(states[car], params.dt):
            assert np.allclose(states[car, i + 1, [0, 1, 3, 4, 5]], 0.0)


def test_simulated_drives_look_like_mocap_recordings():
    drives = simulated_drives(30.0, CarParams(), MocapNoise(), seed=0, cars=2)
    assert drives
    for drive in drives:
        assert drive.observations.shape[1] == 3 and drive.actions.shape[1] == 2
        assert np.all(np.diff(drive.time) > 0)
        assert np.all(np.abs(drive.observations[:, 2]) <= np.pi)


def test_default_driving_style_keeps_the_human_like_data():
    plain = collect_driving(5.0, CarParams(), np.random.default_rng(4))
    styled = collect_driving(5.0, CarParams(), np.random.default_rng(4), style=DrivingStyle())
    assert all(np.array_equal(a, b) for a, b in zip(plain, styled))


def test_stepped_commands_jump_and_long_drifts_slide_more():
    params = CarParams()
    _, _, human = collect_driving(60.0, params, np.random.default_rng(5), cars=2)
    _, _, stepped = collect_driving(60.0, params, np.random.default_rng(5), cars=2,
                                    style=DrivingStyle(step_probability=0.5))
    # the lagged thumbs move the steering by at most dt / 0.1 s of the way per step
    assert np.abs(np.diff(human[..., 1], axis=1)).max() < 0.25
    assert np.abs(np.diff(stepped[..., 1], axis=1)).max() > 0.5

    def rear_out_share(style):
        _, states, _ = collect_driving(120.0, params, np.random.default_rng(6), cars=2,
                                       style=style)
        slip = np.degrees(slip_angle(states)) * np.sign(states[..., 5])
        return np.mean(slip < -20)

    assert rear_out_share(DrivingStyle(drift_probability=0.3)) > 1.5 * rear_out_share(
        DrivingStyle())
    with pytest.raises(ValueError, match='drift_probability'):
        DrivingStyle(drift_probability=1.5)


def test_friction_change_halves_the_grip_from_its_time_on():
    params = CarParams()
    change = FrictionChange(2.0, 0.5)
    assert change.params_at(params, 1.9) is params
    slippery = change.params_at(params, 2.0)
    assert slippery.mu_static == pytest.approx(0.35) and slippery.mu_dynamic == pytest.approx(
        0.225)
    # a steady turn (4 m/s^2 sideways) that grips on the old surface slides on the new one
    slipping = []
    for surface in (params, slippery):
        state, slips = np.array([[0.0, 0.0, 0.0, 1.75, 0.0, 0.0]]), 0
        for k in range(200):
            state, slip = car_step(state, np.array([[0.5, 0.5]]), surface)
            slips += k >= 100 and bool(slip.any())
        slipping.append(slips)
    assert slipping[0] == 0 and slipping[1] > 50
    with pytest.raises(ValueError, match='factor'):
        FrictionChange(1.0, 0.0)
