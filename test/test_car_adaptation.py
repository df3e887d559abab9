"""Online car-model adaptation: stamped transitions, guarded fine-tuning, weight hand-over."""
import math

import numpy as np
import pytest
from robot_dynamics_learning.control.car_training import build_car_model, load_car_model
from robot_dynamics_learning.learning.car_adaptation import (CarAdaptation, CarAdaptationConfig,
                                                             CarTransitions,
                                                             weights_swapper,
                                                             window_rollout_loss)
from robot_dynamics_learning.learning.car_adaptation_params import CarModelLearnerConfig
from robot_dynamics_learning.learning.checkpoint import CheckpointDirectory
from robot_dynamics_learning.sim.car import CarParams, FrictionChange, simulate
import torch

H = 0.05


def state_at(t: float) -> np.ndarray:
    """Return a car on a circle of radius 1 at 1 m/s at t (s); yaw grows past pi."""
    return np.array([math.sin(t), 1.0 - math.cos(t), t, 1.0, 0.0, 1.0])


def wrapped(t: float) -> np.ndarray:
    """Return `state_at` with the yaw wrapped to [-pi, pi), as a PoseStamped gives it."""
    state = state_at(t)
    state[2] = (state[2] + math.pi) % (2 * math.pi) - math.pi
    return state


def test_transitions_follow_header_stamps_and_interpolate_states():
    builder = CarTransitions(H)
    done = []
    for k in range(400):   # states at 100 Hz, commands at 20 Hz stamped between states
        t = 0.01 * k
        if k % 5 == 2:
            builder.add_command(t - 0.005, (0.3, 0.1 * (k // 5)))
        done += builder.add_state(t, wrapped(t))
    assert len(done) == builder.counts['transitions'] >= 75
    for step in done:
        assert np.allclose(step.state[[0, 1, 3, 4, 5]], state_at(step.stamp)[[0, 1, 3, 4, 5]],
                           atol=1e-3)
        assert step.next_state[2] - step.state[2] == pytest.approx(H, abs=1e-3)  # unwrapped
        assert np.allclose(step.next_state[:2], state_at(step.stamp + H)[:2], atol=1e-3)
    assert done[1].command[1] == pytest.approx(0.1)


def test_a_held_command_gives_one_transition_per_step_not_per_message():
    builder = CarTransitions(H)
    done = []
    for k in range(101):   # states and the same command at 50 Hz for 2 s
        t = 0.02 * k
        done += builder.add_state(t, state_at(t))
        builder.add_command(t, (0.3, 0.5))
    starts = np.array([step.stamp for step in done])
    assert len(done) == pytest.approx(2.0 / H, abs=2)   # one per h, not one per message
    assert np.allclose(np.diff(starts), H)   # held: the steps chain (rollout windows)


def test_a_command_opens_its_step_after_the_estimator_lag():
    """command_delay_s: the step starts when the (lagging) states begin to show the command."""
    builder = CarTransitions(H, command_delay_s=0.03)
    builder.add_command(0.1, (0.3, 0.0))
    done = []
    for k in range(30):
        done += builder.add_state(0.01 * k, state_at(0.01 * k))
    assert len(done) == 1 and done[0].stamp == pytest.approx(0.13)
    assert np.allclose(done[0].state[:2], state_at(0.13)[:2], atol=1e-3)
    with pytest.raises(ValueError, match='command_delay_s'):
        CarTransitions(H, command_delay_s=-0.1)


def test_bad_input_is_dropped_and_counted():
    builder = CarTransitions(H, max_gap_s=0.1)
    builder.add_state(0.0, state_at(0.0))
    builder.add_command(0.0, (0.3, 0.0))
    builder.add_state(0.01, [math.nan] * 6)
    builder.add_command(0.01, (math.inf, 0.0))
    builder.add_state(0.0, state_at(0.0))          # repeated stamp
    builder.add_command(0.02, (0.5, 0.0))          # replaces the first before h / 2
    assert builder.add_state(0.5, state_at(0.5)) == []   # 0.5 s gap: no bracket
    builder.add_command(0.5, (0.2, 0.0))
    builder.add_state(0.52, state_at(0.52))
    builder.add_state(10.0, state_at(10.0))
    builder.add_state(2.0, state_at(2.0))          # 8 s back: a time reset
    counts = builder.counts
    assert counts['dropped_non_finite'] == 2 and counts['dropped_out_of_order'] == 1
    assert counts['dropped_command_changed'] == 1 and counts['dropped_gap'] == 2
    assert counts['time_resets'] == 1 and counts['transitions'] == 0
    with pytest.raises(ValueError, match='h and max_gap_s'):
        CarTransitions(0.0)


def drive(adaptation: CarAdaptation, params: CarParams, seconds: float, start: float = 0.0,
          seed: int = 0) -> None:
    """Feed `seconds` of random driving in the simulator, states and commands by stamp."""
    rng = np.random.default_rng(seed)
    state = np.array([[0.0, 0.0, 0.0, 1.0, 0.0, 0.0]])
    steps = int(seconds / H)
    commands = np.stack([0.3 + 0.2 * rng.random(steps), rng.uniform(-0.8, 0.8, steps)], 1)
    for k in range(steps):
        t = start + k * H
        adaptation.add_state(t, state[0])
        adaptation.add_command(t, commands[k])
        state = simulate(state, commands[None, k:k + 1], params, H)[:, -1]


def test_adaptation_fine_tunes_within_budget_and_refuses_nan(tmp_path):
    torch.manual_seed(0)
    model = build_car_model('car_bicycle')
    config = CarAdaptationConfig(min_transitions=20, batch_size=32, learning_rate=1e-2,
                                 command_delay_s=0.0,   # true states: no estimator lag
                                 updates_per_transition=0.5, recent_capacity=100,
                                 publish_every=5)
    folder = CheckpointDirectory(tmp_path, prefix='car_model')
    adaptation = CarAdaptation(model, config, np.random.default_rng(0),
                               save=lambda m, meta: folder.save(m, metadata=meta))
    swapped = build_car_model('car_bicycle')
    swap = weights_swapper(adaptation, swapped.load_state_dict)
    params = CarParams(dt=0.025)
    drive(adaptation, params, 10.0)
    before = float(adaptation.buffer.total)
    updates = adaptation.train_pending()
    assert 0 < updates <= 0.5 * (before - 20) + 1   # the budget per transition
    assert adaptation.buffer.total == before and len(adaptation.buffer.recent(100)[0][0]) == 100
    assert swap() and not swap()   # one new version, loaded once
    assert all(torch.equal(a, b) for a, b in zip(swapped.state_dict().values(),
                                                 adaptation.published().model.state_dict()
                                                 .values()))
    # a poisoned stretch: non-finite states never reach the buffer or the weights
    adaptation.add_state(100.0, [math.nan] * 6)
    adaptation.trainer.train_step(adaptation.buffer.sample(8)._replace(
        observations=torch.full((8, 1, 6), math.nan)))
    assert adaptation.trainer.rejected_steps == 1
    assert all(torch.isfinite(p).all() for p in model.parameters())
    adaptation.stop(checkpoint=True)
    loaded = load_car_model(folder.paths()[-1])   # weights_only, atomic
    assert loaded.h == pytest.approx(H)
    assert adaptation.diagnostics()['dropped_non_finite'] == 1
    with pytest.raises(ValueError, match='differs'):
        CarAdaptation(build_car_model('car_bicycle', h=0.1), config, np.random.default_rng(0))
    with pytest.raises(ValueError, match='no trainable parameters'):
        CarAdaptation(build_car_model('car_bicycle').requires_grad_(False), config,
                      np.random.default_rng(0))


def test_adaptation_lowers_the_error_on_a_new_surface():
    """After friction halves, fine-tuning on the new transitions lowers their one-step loss."""
    torch.manual_seed(0)
    model = build_car_model('car_bicycle')
    config = CarAdaptationConfig(min_transitions=50, batch_size=64, learning_rate=1e-2,
                                 updates_per_transition=1.0, recent_capacity=200,
                                 recent_fraction=1.0, command_delay_s=0.0)
    adaptation = CarAdaptation(model, config, np.random.default_rng(0), fit_normalization=True)
    params = CarParams(dt=0.025)
    drive(adaptation, params, 10.0)
    adaptation.train_pending()
    slippery = FrictionChange(0.0, 0.5).params_at(params, 1.0)
    drive(adaptation, slippery, 10.0, start=30.0, seed=1)
    new = adaptation.buffer.recent(150)
    with torch.no_grad():
        before = float(model.loss(new)[0])
    adaptation.train_pending()
    with torch.no_grad():
        after = float(model.loss(new)[0])
    assert after < 0.9 * before


def test_the_fixed_lag_smoother_removes_noise_and_waits_for_its_window():
    """smooth_s: states from a centred fit, so the step completes smooth_s later, less noisy."""
    rng = np.random.default_rng(0)
    plain, smooth = CarTransitions(H), CarTransitions(H, smooth_s=0.1)
    done = {'plain': [], 'smooth': []}
    for k in range(500):   # 100 Hz noisy states, yaw wrapped, a command every 0.05 s
        t = 0.01 * k
        noisy = wrapped(t) + rng.normal(0.0, 0.02, 6)
        for name, builder in (('plain', plain), ('smooth', smooth)):
            if k % 5 == 0:
                builder.add_command(t, (0.3, 0.0))
            done[name] += builder.add_state(t, noisy)
    errors = {}
    for name, steps in done.items():
        errors[name] = np.sqrt(np.mean([(step.next_state[[3, 4, 5]] - state_at(
            step.stamp + H)[[3, 4, 5]]) ** 2 for step in steps]))
        assert all(step.next_state[2] - step.state[2] == pytest.approx(H, abs=0.3)
                   for step in steps)   # unwrapped across +-pi
    assert errors['smooth'] < 0.5 * errors['plain']
    assert done['smooth'][-1].stamp <= 4.99 - H - 0.1 + 1e-9 < done['plain'][-1].stamp + 0.1
    with pytest.raises(ValueError, match='smooth_s'):
        CarTransitions(H, smooth_s=2.0)


def test_window_rollout_loss_is_the_one_step_loss_for_one_step():
    torch.manual_seed(0)
    model = build_car_model('car_bicycle')
    config = CarAdaptationConfig(min_transitions=20, command_delay_s=0.0, recent_capacity=200)
    adaptation = CarAdaptation(model, config, np.random.default_rng(0))
    drive(adaptation, CarParams(dt=0.025), 5.0)
    batch = adaptation.buffer.sample(50)   # (50, 1) windows
    with torch.no_grad():
        assert float(window_rollout_loss(model, batch, position_weight=0.0)) == pytest.approx(
            float(model.loss(batch)[0]))
    with pytest.raises(ValueError, match='rollout_steps'):
        CarAdaptationConfig(rollout_steps=0)


def test_rollout_adaptation_trains_on_unbroken_windows_and_lowers_the_rollout_error():
    """rollout_steps: k-step windows (no window across a gap), open-loop loss, same guards."""
    torch.manual_seed(0)
    model = build_car_model('car_bicycle')
    k = 10
    config = CarAdaptationConfig(min_transitions=50, batch_size=32, learning_rate=1e-2,
                                 updates_per_transition=1.0, recent_capacity=300,
                                 recent_fraction=1.0, command_delay_s=0.0, rollout_steps=k)
    adaptation = CarAdaptation(model, config, np.random.default_rng(0), fit_normalization=True)
    params = CarParams(dt=0.025)
    drive(adaptation, params, 5.0)
    drive(adaptation, params, 5.0, start=5.5)   # a 0.5 s gap between the two drives
    buffer = adaptation.buffer   # k - 1 starts fewer per drive; ring and reservoir alike
    assert buffer.breaks == 2 and buffer.valid_windows() == 2 * (buffer.total - 2 * (k - 1))
    late = CarAdaptation(build_car_model('car_bicycle'), config, np.random.default_rng(0))
    for n in range(30):   # a new command every h, but one stamped 0.02 s late (jitter)
        t = n * H + (0.02 if n == 15 else 0.0)
        late.add_command(t, (0.3, 0.01 * n))
        late.add_state(t, state_at(t))
    assert late.buffer.breaks == 3   # the first; at the late one; at the next, on time again
    assert adaptation.buffer.sample(4).actions.shape == (4, k, 2)
    adaptation.train_pending()
    slippery = FrictionChange(0.0, 0.5).params_at(params, 1.0)
    drive(adaptation, slippery, 10.0, start=30.0, seed=1)
    new = adaptation.buffer.sample(64)
    with torch.no_grad():
        before = float(window_rollout_loss(model, new))
    assert adaptation.train_pending() > 0 and adaptation.trainer.rejected_steps == 0
    with torch.no_grad():
        after = float(window_rollout_loss(model, new))
    assert after < 0.9 * before
    adaptation.trainer.train_step(new._replace(observations=torch.full((64, k, 6), math.nan)))
    assert adaptation.trainer.rejected_steps == 1
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_the_node_config_refuses_bad_values_and_maps_the_learning_settings():
    config = CarModelLearnerConfig(rollout_steps=10, smooth_s=0.1, learning_rate=1e-3)
    assert config.adaptation() == CarAdaptationConfig(rollout_steps=10, smooth_s=0.1,
                                                      learning_rate=1e-3)
    assert CarModelLearnerConfig().adaptation() == CarAdaptationConfig()   # one set of defaults
    with pytest.raises(ValueError, match='command_type must be one of'):
        CarModelLearnerConfig(command_type='ackermann')
    with pytest.raises(ValueError, match='smooth_s must be in'):
        CarModelLearnerConfig(smooth_s=1.0)
    with pytest.raises(ValueError, match='rollout_steps must be in'):
        CarModelLearnerConfig(rollout_steps=50, recent_capacity=20)
