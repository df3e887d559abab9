"""
Uncertainty, calibrated on held-out data.

Inverse models: inside the training range, rising outside it. Forward models without a
variance head: by the number of steps since the last observation.
"""
import numpy as np
import pytest
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.data.windows import inverse_dynamics_windows, window_arrays
from robot_dynamics_learning.learning.checkpoint import (checkpoint_payload, load_checkpoint,
                                                         tensor_checksum)
from robot_dynamics_learning.learning.metrics import calibration
from robot_dynamics_learning.learning.training import train_model, TrainConfig
from robot_dynamics_learning.models.base import SequenceBatch
from robot_dynamics_learning.models.common import InputSupport, RANGE_MARGIN
from robot_dynamics_learning.models.feedback import HorizonVariance
from robot_dynamics_learning.models.registry import build_model
from robot_dynamics_learning.resources import resource
import torch

NOISE = 0.3


def _recording(offset: float = 0.0, n: int = 3000, seed: int = 0) -> Trajectory:
    """One joint, tau = 3 sin(q) + qd + Gaussian noise; `offset` moves q out of range."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) * 0.01
    q = 1.2 * np.sin(0.37 * t)[:, None] * np.sin(0.05 * t + seed)[:, None] + offset
    qd = np.gradient(q, t, axis=0)
    qdd = np.gradient(qd, t, axis=0)
    tau = 3 * np.sin(q) + qd + NOISE * rng.standard_normal(q.shape)
    return Trajectory(time=t, joint_names=['j'], q=q, qd=qd, qdd=qdd, tau=tau)


def test_input_support_trusts_inside_the_range_and_less_outside():
    support = InputSupport(3, 1, [0, 1], length=1.0)
    support.fit_range(torch.tensor([[-1.0, -1.0, 0.0], [1.0, 1.0, 0.0]]))
    support.fit_errors(torch.tensor([0.1]), torch.tensor([1.0]))
    inside = torch.tensor([[0.5, -0.5, 50.0]])   # the unwatched third input does not count
    outside = torch.tensor([[3.0, 0.0, 0.0]])
    assert float(support.trust(inside)) == 1.0
    assert float(support.variance(inside)) == np.float32(0.1)
    assert 0.0 < float(support.trust(outside)) < 0.5
    assert 0.1 < float(support.variance(outside)) < 1.0


def test_input_support_counts_a_margin_beyond_the_training_extremes_as_seen():
    """Held-out data of the same motions lands just past the min-max box: keep full trust."""
    support = InputSupport(1, 1, [0], length=0.3)
    support.fit_range(torch.tensor([[-1.0], [1.0]]))   # width 2
    just_past = torch.tensor([[1.0 + 0.9 * RANGE_MARGIN * 2.0]])
    beyond = torch.tensor([[1.0 + RANGE_MARGIN * 2.0 + 0.3]])   # one length past the margin
    assert float(support.trust(just_past)) == 1.0
    assert float(support.trust(beyond)) == pytest.approx(np.exp(-0.5), rel=1e-5)
    far = torch.tensor([[1.0 + RANGE_MARGIN * 2.0 + 1.2]])   # trust exp(-8) < TRUST_FLOOR
    assert float(support.trust(far)) == 0.0   # a learned part is off there, not 3e-4 on


def _fit(model_type: str, config: dict):
    # Validation on another recording over the same ranges: held-out error, not in-sample.
    train = inverse_dynamics_windows([_recording(n=4000)], 50, 50)
    val = inverse_dynamics_windows([_recording(seed=3)], 50, 25)
    torch.manual_seed(0)
    model = build_model(model_type, config, 3, 1, 1)
    train_model(model, train, val, TrainConfig(max_epochs=30, patience=5, learning_rate=1e-2,
                                               progress=False))
    return model


def _predict(model, trajectory: Trajectory):
    batch = inverse_dynamics_windows([trajectory], 100, 100)
    with torch.no_grad():
        out = model(batch)
    return out.mean.numpy(), out.variance.numpy(), batch.targets.numpy()


def test_ffnn_variance_is_calibrated_in_range_and_rises_outside():
    model = _fit('ffnn', {'hidden': [16, 16]})
    mean, var, target = _predict(model, _recording(seed=1))
    result = calibration(mean, var, target)
    assert abs(result['within_1_std'] - 0.683) < 0.08
    assert abs(result['within_2_std'] - 0.954) < 0.05
    _, var_far, _ = _predict(model, _recording(offset=2.5, seed=1))
    assert var_far.mean() > 3 * var.mean()
    step = model.step(None, torch.zeros(1, 3))   # the node publishes this variance's root
    assert step.variance is not None and step.variance.shape == (1, 1)


def test_gp_predictive_variance_is_calibrated_and_rises_far_away():
    train = inverse_dynamics_windows([_recording()], 1)
    model = build_model('gp', {'max_train': 400, 'hyper_subset': 200, 'hyper_iterations': 30,
                               'variance_points': 200}, 3, 1, 1)
    train_model(model, train, None, TrainConfig(progress=False))
    mean, var, target = _predict(model, _recording(seed=1))
    result = calibration(mean, var, target)
    assert abs(result['within_2_std'] - 0.954) < 0.05
    _, var_far, _ = _predict(model, _recording(offset=2.5, seed=1))
    assert var_far.mean() > 3 * var.mean()


def test_gp_variance_scaled_on_validation_covers_held_out_errors():
    """Few variance points inflate the posterior variance; the held-out scale shrinks it."""
    train = inverse_dynamics_windows([_recording(n=2000)], 1)
    val = inverse_dynamics_windows([_recording(seed=3)], 1)
    results = []
    for validation in (None, val):
        model = build_model('gp', {'max_train': 400, 'hyper_subset': 200,
                                   'hyper_iterations': 30, 'variance_points': 20}, 3, 1, 1)
        train_model(model, train, validation, TrainConfig(progress=False))
        results.append(calibration(*_predict(model, _recording(seed=1))))
    unscaled, scaled = results
    assert float(model.variance_scale.factor) < 0.9
    assert unscaled['within_1_std'] > 0.683 + 0.05
    assert abs(scaled['within_1_std'] - 0.683) < 0.05
    assert abs(scaled['within_2_std'] - 0.954) < 0.05


def test_hybrid_returns_to_its_prior_far_from_the_training_data():
    model = build_model('hybrid', {'urdf': 'urdf/planar_2link.urdf', 'hidden_size': 8},
                        6, 2, 2)
    rng = np.random.default_rng(0)
    x = torch.as_tensor(rng.uniform(-1, 1, (4, 20, 6)), dtype=torch.float32)
    batch_targets = torch.as_tensor(rng.normal(size=(4, 20, 2)), dtype=torch.float32)
    batch = SequenceBatch(x, torch.zeros(4, 20, 2), batch_targets)
    model.fit_normalization(batch)
    model.calibrate_variance(batch)
    prior = build_model('rigid_body', {'urdf': 'urdf/planar_2link.urdf'}, 6, 2, 2)
    far = batch._replace(observations=batch.observations + torch.tensor([40.0, 0, 0, 0, 0, 0]))
    with torch.no_grad():
        near_out, far_out = model(batch), model(far)
        torch.testing.assert_close(far_out.mean, prior(far).mean, atol=1e-4, rtol=1e-4)
        assert not torch.allclose(near_out.mean, prior(batch).mean, atol=1e-3)
        assert float(far_out.variance.mean()) > float(near_out.variance.mean())


def _forward_recording(seed: int, n: int = 3000) -> SequenceBatch:
    """Return (o_t, a_t, o_t+1) of a damped spring driven by smooth forces, process noise."""
    rng = np.random.default_rng(seed)
    force = np.convolve(rng.standard_normal(n + 50), np.ones(50) / 50 * 3, 'valid')[:n]
    states = np.zeros((n + 1, 2))
    for t in range(n):
        x, v = states[t]
        acceleration = -4.0 * x - 0.5 * v + force[t]
        states[t + 1] = [x + 0.05 * v, v + 0.05 * acceleration + 0.02 * rng.standard_normal()]
    return states[:-1], force[:, None], states[1:]


def _horizon_batch(seed: int, observed: int = 20, horizon: int = 10) -> SequenceBatch:
    """Test windows: `observed` measured steps, then `horizon` predicted from actions alone."""
    batch = window_arrays(*_forward_recording(seed), observed + horizon, 15)
    valid = torch.zeros(batch.observations.shape[:2], dtype=torch.bool)
    valid[:, :observed] = True
    return SequenceBatch(batch.observations, batch.actions, batch.targets, valid)


def test_forward_models_without_a_variance_head_get_one_from_held_out_errors():
    """FFNN here (fast); the LSTM and GRU share the loop (`FeedbackForwardModel._run`)."""
    model = build_model('ffnn', {'kind': 'forward', 'hidden': [32]}, 2, 1, 2)
    assert not model.horizon_variance.calibrated
    train = window_arrays(*_forward_recording(0, 3000), 30, 15)
    val = window_arrays(*_forward_recording(1), 30, 15)
    torch.manual_seed(0)
    train_model(model, train, val, TrainConfig(max_epochs=8, patience=3, learning_rate=1e-2,
                                               batch_size=64, obs_drop=0.5, progress=False))
    assert model.horizon_variance.calibrated
    test = _horizon_batch(2)
    with torch.no_grad():
        out = model(test)
    variance = out.variance[:, 19:]   # predictions 1..11 steps after the last observation
    per_horizon = variance.mean(dim=(0, 2))
    assert bool((per_horizon[1:] >= per_horizon[:-1]).all())
    assert float(per_horizon[-1]) > 3 * float(per_horizon[0])
    result = calibration(out.mean[:, -1].numpy(), variance[:, -1].numpy(),
                         test.targets[:, -1].numpy())
    assert abs(result['within_1_std'] - 0.683) < 0.12
    assert abs(result['within_2_std'] - 0.954) < 0.06
    # Streaming: one observed step, then a rollout carries the horizon on (the table's
    # variance inside the training range).
    start = test.observations[:, 0]
    inside = model.support.trust(model._support_inputs(start, test.actions[:, 0])) == 1.0
    step = model.step(None, start[inside], test.actions[inside, 0])
    rollout = model.rollout(step.state, test.actions[inside, 1:4])
    expected = model.horizon_variance.at(torch.arange(1, 5).repeat(step.variance.shape[0], 1)
                                         .reshape(-1)).reshape(-1, 4, 2)
    streamed = torch.cat([step.variance[:, None], rollout.variance], 1)
    assert int(inside.sum()) > 50
    assert bool((streamed >= expected - 1e-7).all())
    torch.testing.assert_close(streamed[:, 0], expected[:, 0])
    # Outside the training range (the spring pulled 3 m away) the variance rises towards the
    # error of holding the last observation, and never falls below the model's own.
    shifted = SequenceBatch(test.observations + torch.tensor([3.0, 0.0]), test.actions,
                            test.targets + torch.tensor([3.0, 0.0]), test.observation_valid)
    with torch.no_grad():
        far = model(shifted).variance[:, 19:]
    assert bool((far >= variance - 1e-7).all())
    assert float(far[:, -1].mean()) > 3 * float(variance[:, -1].mean())
    hold = model.hold_variance.at(torch.tensor([11]))
    assert float(far[:, -1].mean()) <= 1.01 * float(torch.maximum(hold, variance[:, -1]).mean())


def test_horizon_variance_extrapolates_and_old_checkpoints_load_uncalibrated(tmp_path):
    table = HorizonVariance(1)
    table.fit(torch.tensor([[[1.0], [4.0], [3.0], [9.0]]]))   # a dip is not believed
    torch.testing.assert_close(table.at(torch.tensor([1, 2, 3, 4, 6])).reshape(-1),
                               torch.tensor([1.0, 4.0, 4.0, 9.0, 19.0]))
    model = build_model('gru', {'latent_obs_dim': 4, 'hidden_size': 4}, 2, 1, 2)
    model.horizon_variance.fit(torch.ones(1, 3, 2))
    payload = checkpoint_payload(model, ['x', 'v'])
    for key in [k for k in payload['state_dict'] if k.startswith('horizon_variance.')]:
        del payload['state_dict'][key]   # a file written before the module existed
    payload['checksum'] = tensor_checksum(payload['state_dict'])
    torch.save(payload, tmp_path / 'old.pt')
    loaded = load_checkpoint(tmp_path / 'old.pt', ['x', 'v']).model
    assert not loaded.horizon_variance.calibrated
    assert loaded.step(None, torch.zeros(1, 2), torch.zeros(1, 1)).variance is None


def test_the_urdf_model_publishes_its_held_out_error_per_joint():
    torch.manual_seed(0)
    model = build_model('rigid_body', {'urdf': str(resource('urdf/panda.urdf'))}, 21, 7, 7)
    observations = torch.randn(8, 50, 21)
    with torch.no_grad():
        exact = model(SequenceBatch(observations, torch.zeros(8, 50, 7),
                                    torch.zeros(8, 50, 7))).mean
    offset = torch.linspace(0.1, 0.7, 7)   # what the URDF misses, per joint
    targets = exact + offset + 0.05 * torch.randn(8, 50, 7)
    batch = SequenceBatch(observations, torch.zeros(8, 50, 7), targets)
    model.fit_normalization(batch)   # before any held-out data: the targets' spread
    torch.testing.assert_close(model(batch).variance[0, 0], targets.reshape(-1, 7).var(dim=0),
                               rtol=0.05, atol=0.0)
    model.calibrate_variance(batch)
    variance = model(batch).variance
    torch.testing.assert_close(variance[0, 0], offset.pow(2) + 0.05 ** 2, rtol=0.15, atol=0.0)
    torch.testing.assert_close(model.step(None, observations[:, 3]).variance, variance[:, 3])


def test_ac_rkn_inverse_variance_rises_out_of_range_to_the_spread_of_the_change():
    """Far outside q's range the std is at least the training spread of tau(t) - tau(t-1)."""
    model = _fit('ac_rkn_inverse', {'latent_obs_dim': 4, 'num_basis': 4})
    _, var, _ = _predict(model, _recording(seed=1))
    _, var_far, _ = _predict(model, _recording(offset=2.5, seed=1))
    hold = float(model.hold_error.variance)
    assert hold == pytest.approx(float(model.act_diff_norm.std) ** 2)
    assert hold > 0.0 and float(model.variance_scale.factor) != 1.0
    assert var_far.max() >= hold * (1 - 1e-5) > var.max()
    assert var_far.mean() > 1.4 * var.mean()
    step = model.step(None, torch.tensor([[2.5 + 1.2, 0.0, 0.0]]), torch.zeros(1, 1))
    assert float(step.variance) >= hold * (1 - 1e-5)


def test_the_hybrid_trusts_its_residual_only_inside_the_bare_training_range():
    """Its trust scales the residual's prediction: the bare range it was validated with."""
    model = build_model('hybrid', {'urdf': 'urdf/planar_2link.urdf', 'hidden_size': 8}, 6, 2, 2)
    model.support.fit_range(torch.tensor([[-1.0] * 6, [1.0] * 6]))
    just_past = torch.tensor([[1.05, 0.0, 0.0, 0.0, 0.0, 0.0]])
    assert model.support.margin == 0.0 and float(model.support.trust(just_past)) < 1.0
    assert build_model('lstm', {'hidden_size': 4}, 6, 2, 2).support.margin == RANGE_MARGIN
