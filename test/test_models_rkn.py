"""ac-RKN cell checked against a dense Kalman filter, and missing-observation behaviour."""
import numpy as np
import pytest
from robot_dynamics_learning.core_types import SequenceBatch
from robot_dynamics_learning.data.windows import window_arrays
from robot_dynamics_learning.learning.training import train_model, TrainConfig
from robot_dynamics_learning.models.registry import build_model
from robot_dynamics_learning.models.rkn_cell import (bands_to_dense, Belief,
                                                     factorized_predict, kalman_update,
                                                     RKNCell)
import torch


@pytest.fixture(autouse=True)
def float64():
    """Compare against the dense filter in double precision (restored afterwards)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def _dense_cov(cov: torch.Tensor) -> torch.Tensor:
    """(B, 3 m) [su, sl, ss] -> dense (B, 2 m, 2 m)."""
    m = cov.shape[-1] // 3
    su, sl, ss = cov[:, :m], cov[:, m:2 * m], cov[:, 2 * m:]
    top = torch.cat([torch.diag_embed(su), torch.diag_embed(ss)], -1)
    bottom = torch.cat([torch.diag_embed(ss), torch.diag_embed(sl)], -1)
    return torch.cat([top, bottom], 1)


def _random_belief(batch: int, m: int, generator: torch.Generator):
    mean = torch.randn(batch, 2 * m, generator=generator)
    su = torch.rand(batch, m, generator=generator) + 0.5
    sl = torch.rand(batch, m, generator=generator) + 0.5
    ss = 0.3 * torch.rand(batch, m, generator=generator)  # keeps Sigma positive definite
    return mean, torch.cat([su, sl, ss], -1)


def test_update_equals_dense_kalman_filter():
    generator = torch.Generator().manual_seed(1)
    b, m = 4, 3
    mean, cov = _random_belief(b, m, generator)
    w = torch.randn(b, m, generator=generator)
    var_w = torch.rand(b, m, generator=generator) + 0.1
    new_mean, new_cov = kalman_update(mean, cov, w, var_w)
    sigma = _dense_cov(cov)
    h = torch.cat([torch.eye(m), torch.zeros(m, m)], 1)
    s = h @ sigma @ h.T + torch.diag_embed(var_w)
    gain = sigma @ h.T @ torch.linalg.inv(s)
    dense_mean = mean + (gain @ (w - mean[:, :m]).unsqueeze(-1)).squeeze(-1)
    dense_sigma = (torch.eye(2 * m) - gain @ h) @ sigma
    torch.testing.assert_close(new_mean, dense_mean)
    torch.testing.assert_close(_dense_cov(new_cov), dense_sigma)


def test_missing_observation_keeps_the_prior():
    generator = torch.Generator().manual_seed(2)
    mean, cov = _random_belief(3, 2, generator)
    w, var_w = torch.randn(3, 2, generator=generator), torch.ones(3, 2)
    valid = torch.tensor([True, False, True])
    new_mean, new_cov = kalman_update(mean, cov, w, var_w, valid)
    torch.testing.assert_close(new_mean[1], mean[1])
    torch.testing.assert_close(new_cov[1], cov[1])
    assert not torch.allclose(new_mean[0], mean[0])


def test_band_predict_equals_dense_covariance_diagonals():
    generator = torch.Generator().manual_seed(3)
    b, m, bandwidth = 2, 5, 1
    mean, cov = _random_belief(b, m, generator)
    bands = torch.randn(b, 4, m, 2 * bandwidth + 1, generator=generator)
    noise = torch.rand(2 * m, generator=generator)
    new_mean, new_cov = factorized_predict(mean, cov, bands, noise)
    a = bands_to_dense(bands)
    # The band form only keeps entries with |i - j| <= bandwidth in each block.
    index = torch.arange(m)
    outside = (index[:, None] - index[None, :]).abs() > bandwidth
    for block in (a[:, :m, :m], a[:, :m, m:], a[:, m:, :m], a[:, m:, m:]):
        assert bool((block[:, outside] == 0).all())
    dense = a @ _dense_cov(cov) @ a.transpose(1, 2) + torch.diag(torch.cat([noise]))
    torch.testing.assert_close(new_mean, (a @ mean.unsqueeze(-1)).squeeze(-1))
    diagonal = torch.diagonal(dense, dim1=1, dim2=2)
    torch.testing.assert_close(new_cov[:, :2 * m], diagonal)
    torch.testing.assert_close(new_cov[:, 2 * m:], torch.diagonal(dense[:, m:, :m], dim1=1,
                                                                  dim2=2))


def test_cell_filter_equals_step_by_step_update_and_predict():
    torch.manual_seed(4)
    cell = RKNCell(latent_obs_dim=3, num_basis=4, bandwidth=1).double()
    b, t, m = 2, 6, 3
    w, var_w = torch.randn(b, t, m), torch.rand(b, t, m) + 0.1
    controls = torch.randn(b, t, 2 * m)
    valid = torch.rand(b, t) > 0.3
    posts, priors = cell.run_filter(cell.init_belief(b), w, var_w, valid, controls)
    belief = cell.init_belief(b)
    for k in range(t):
        post = cell.update(belief, w[:, k], var_w[:, k], valid[:, k])
        belief = cell.predict(post, controls[:, k])
        torch.testing.assert_close(posts.mean[:, k], post.mean)
        torch.testing.assert_close(priors.cov[:, k], belief.cov)


@pytest.mark.parametrize('masked', [True, False])
def test_cell_filter_gradients_equal_autograd_through_the_step_functions(masked):
    """The hand-written backward of `run_filter` equals autograd of update + predict."""
    torch.manual_seed(6)
    cell = RKNCell(latent_obs_dim=4, num_basis=3, bandwidth=2).double()
    with torch.no_grad():
        cell.basis.add_(0.3 * torch.randn_like(cell.basis))
    b, t, m = 3, 7, 4
    w = torch.randn(b, t, m, requires_grad=True)
    var_w = (torch.rand(b, t, m) + 0.1).requires_grad_()
    controls = torch.randn(b, t, 2 * m, requires_grad=True) if masked else None
    valid = torch.rand(b, t) > 0.3 if masked else None
    start_mean, start_cov = _random_belief(b, m, torch.Generator().manual_seed(7))
    start_mean.requires_grad_()
    start_cov.requires_grad_()
    weights = [torch.randn(b, t, k) for k in (2 * m, 3 * m, 2 * m, 3 * m)]
    inputs = [w, var_w, start_mean, start_cov] + ([controls] if masked else []) + \
        list(cell.parameters())

    posts, priors = cell.run_filter(Belief(start_mean, start_cov), w, var_w, valid, controls)
    outputs = (posts.mean, posts.cov, priors.mean, priors.cov)
    fast = torch.autograd.grad(sum((o * g).sum() for o, g in zip(outputs, weights)), inputs)

    belief, total = Belief(start_mean, start_cov), 0.0
    for k in range(t):
        post = cell.update(belief, w[:, k], var_w[:, k], None if valid is None else valid[:, k])
        belief = cell.predict(post, None if controls is None else controls[:, k])
        for value, g in zip((post.mean, post.cov, belief.mean, belief.cov), weights):
            total = total + (value * g[:, k]).sum()
    reference = torch.autograd.grad(total, inputs)
    for name, got, expected in zip(range(len(inputs)), fast, reference):
        torch.testing.assert_close(got, expected, msg=f'gradient of input {name} differs')


def _forward_model_and_batch():
    torch.manual_seed(5)
    model = build_model('ac_rkn_forward', {'latent_obs_dim': 4, 'num_basis': 3,
                                           'bandwidth': 1, 'encoder_hidden': [8],
                                           'decoder_hidden': [8], 'control_hidden': [8]},
                        3, 2, 3).double()
    batch = SequenceBatch(torch.randn(2, 12, 3), torch.randn(2, 12, 2), torch.randn(2, 12, 3))
    model.fit_normalization(batch)
    return model.eval(), batch


def test_rollout_with_all_observations_missing_equals_repeated_prediction():
    model, batch = _forward_model_and_batch()
    warmup = 4
    valid = torch.zeros(2, 12, dtype=torch.bool)
    valid[:, :warmup] = True
    masked = model(batch._replace(observation_valid=valid))
    state = model.init_state(2)
    for t in range(warmup):
        out = model.step(state, batch.observations[:, t], batch.actions[:, t])
        state = out.state
    rolled = model.rollout(state, batch.actions[:, warmup:])
    torch.testing.assert_close(rolled.mean, masked.mean[:, warmup:])
    torch.testing.assert_close(rolled.variance, masked.variance[:, warmup:])
    # Predictions after the warm-up ignore the (withheld) observations entirely.
    noisy = batch.observations.clone()
    noisy[:, warmup:] += 10.0
    again = model(batch._replace(observations=noisy, observation_valid=valid))
    torch.testing.assert_close(again.mean, masked.mean)
    # Variance grows while the model predicts blind.
    assert bool((rolled.variance[:, 1:] > rolled.variance[:, :-1]).all())


def test_inverse_model_feeds_back_its_own_action_when_none_is_given():
    torch.manual_seed(6)
    model = build_model('ac_rkn_inverse', {'latent_obs_dim': 4, 'num_basis': 3,
                                           'bandwidth': 1}, 6, 2, 2).eval()
    x = torch.randn(1, 6)
    first = model.step(None, x)
    second_own = model.step(first.state, x)
    second_given = model.step(first.state, x, first.prediction)
    torch.testing.assert_close(second_own.prediction, second_given.prediction)
    assert bool((second_own.variance > 0).all())


def _own_output_error(anchor_rate: float) -> tuple:
    """Return (RMSE of a small trained model fed its own outputs over 200 steps, torque std)."""
    rng = np.random.default_rng(0)
    t = np.arange(2500) * 0.01
    q = np.stack([np.sin(0.7 * t), np.sin(1.1 * t + 1.0)], 1)
    q += 0.02 * rng.standard_normal(q.shape)
    qd = np.gradient(q, 0.01, axis=0)
    qdd = np.gradient(qd, 0.01, axis=0)
    tau = 3.0 * np.sin(q) + 0.5 * qd
    x = np.concatenate([q, qd, qdd], 1)
    windows = window_arrays(x[1:1500], tau[:1499], tau[1:1500], 40, 20)   # training: 0-1499
    torch.manual_seed(0)
    model = build_model('ac_rkn_inverse', {'latent_obs_dim': 6, 'num_basis': 3, 'bandwidth': 1,
                                           'anchor_rate': anchor_rate}, 6, 2, 2)
    train_model(model, windows, None, TrainConfig(max_epochs=15, learning_rate=1e-2,
                                                  progress=False))
    model.eval()
    state, errors = None, []
    for k in range(1800, 2000):   # the measured torque only at the first step
        given = torch.tensor(tau[k - 1:k], dtype=torch.float32) if state is None else None
        out = model.step(state, torch.tensor(x[k:k + 1], dtype=torch.float32), given)
        state = out.state
        errors.append(out.prediction[0].numpy() - tau[k])
    return float(np.sqrt(np.mean(np.square(errors)))), float(np.std(tau[1800:2000]))


def test_an_anchored_inverse_model_does_not_drift_on_its_own_outputs():
    """The paper's model integrates its errors fed back; the anchor keeps them bounded."""
    (anchored, scale), (paper, _) = _own_output_error(0.5), _own_output_error(0.0)
    assert anchored < 0.5 * paper, (anchored, paper)
    assert anchored < 0.3 * scale, (anchored, scale)   # well below the torque's own spread


def test_an_untrusted_learned_change_falls_back_to_the_urdf_change():
    """Far outside the training range the prediction is tau(t-1) plus the URDF's change."""
    torch.manual_seed(3)
    urdf = 'urdf/planar_2link.urdf'
    model = build_model('ac_rkn_inverse', {'latent_obs_dim': 4, 'num_basis': 3, 'bandwidth': 1,
                                           'trust_change': True, 'urdf': urdf}, 6, 2, 2)
    physics = build_model('previous_value', {'urdf': urdf}, 6, 2, 2)
    batch = SequenceBatch(0.3 * torch.randn(2, 9, 6), torch.randn(2, 9, 2), torch.randn(2, 9, 2))
    model.fit_normalization(batch)
    inside = model(batch).mean
    assert not torch.allclose(inside, physics(batch).mean, atol=1e-3)   # the learned change
    far = batch._replace(observations=batch.observations + 40.0)
    torch.testing.assert_close(model(far).mean, physics(far).mean)
    state = None   # the stream carries the previous step's URDF torque
    for t in range(far.observations.shape[1]):
        state = model.step(None if state is None else state.state, far.observations[:, t],
                           far.actions[:, t])
        torch.testing.assert_close(state.prediction, physics(far).mean[:, t])


def test_the_torque_history_starts_at_its_least_squares_fit():
    """Changes that continue the last one (AR 0.8): the history's first weight finds 0.8."""
    rng = np.random.default_rng(1)
    change = np.zeros((3000, 2))
    for t in range(1, 3000):
        change[t] = 0.8 * change[t - 1] + rng.standard_normal(2)
    tau = np.cumsum(change, axis=0)
    x = rng.standard_normal((3000, 6))
    windows = window_arrays(x[1:], tau[:-1], tau[1:], 40, 20)
    model = build_model('ac_rkn_inverse', {'latent_obs_dim': 4, 'num_basis': 3, 'bandwidth': 1,
                                           'history': 2}, 6, 2, 2)
    model.fit_normalization(windows)
    weight = model.history_weight.detach()
    torch.testing.assert_close(weight[0], torch.full((2,), 0.8), atol=0.05, rtol=0.0)
    torch.testing.assert_close(weight[1], torch.zeros(2), atol=0.05, rtol=0.0)
    # what the network is left to learn: the noise (std 1), not the change (std 1.67)
    assert float(model.act_diff_norm.std.max()) < 1.1


def test_a_stream_carries_the_torque_history_and_the_urdf_term():
    """Step by step equals whole windows, with every learned path active."""
    torch.manual_seed(4)
    model = build_model('ac_rkn_inverse', {'latent_obs_dim': 4, 'num_basis': 3, 'bandwidth': 1,
                                           'urdf': 'urdf/planar_2link.urdf', 'history': 3,
                                           'trust_change': True}, 6, 2, 2)
    batch = SequenceBatch(torch.randn(2, 8, 6), torch.randn(2, 8, 2), torch.randn(2, 8, 2))
    batch.actions[:, 1:] = batch.targets[:, :-1]
    model.fit_normalization(batch)
    with torch.no_grad():
        model.history_weight.normal_()
    model.eval()
    whole = model(batch).mean
    out = None
    for t in range(batch.observations.shape[1]):
        out = model.step(None if out is None else out.state, batch.observations[:, t],
                         batch.actions[:, t])
        torch.testing.assert_close(out.prediction, whole[:, t])
