"""LSTM options: sin/cos angle features, the linear path, sliding windows; streaming = windows."""
import math

import numpy as np
import pytest

from robot_dynamics_learning.learning.continual import Published, StreamingPredictor
from robot_dynamics_learning.models.base import SequenceBatch
from robot_dynamics_learning.models.registry import build_model
import torch


def _streamed(model, observations: torch.Tensor):
    """Step `model` through (B, T, n) observations: (predictions (B, T, d), the last step)."""
    state, streamed = model.init_state(observations.shape[0]), []
    for t in range(observations.shape[1]):
        step = model.step(state, observations[:, t])
        state = step.state
        streamed.append(step.prediction)
    return torch.stack(streamed, 1), step


def test_angle_features_stream_like_windows_and_wrap_angles():
    torch.manual_seed(0)
    model = build_model('lstm', {'hidden_size': 8, 'angle_features': True}, 6, 2, 2)
    batch = SequenceBatch(torch.randn(2, 5, 6), torch.zeros(2, 5, 2), torch.randn(2, 5, 2))
    model.fit_normalization(batch)
    model.eval()
    with torch.no_grad():
        windows = model(batch).mean
    streamed, step = _streamed(model, batch.observations)
    torch.testing.assert_close(streamed, windows, atol=1e-5, rtol=1e-5)
    assert step.variance is not None and model.numpy_stepper() is None
    turned = batch.observations.clone()
    turned[..., :2] += 2 * math.pi
    with torch.no_grad():
        torch.testing.assert_close(model(batch._replace(observations=turned)).mean, windows,
                                   atol=1e-4, rtol=1e-4)


def test_numpy_stepper_gives_the_variance_of_the_torch_step():
    torch.manual_seed(1)
    model = build_model('lstm', {'hidden_size': 8}, 6, 2, 2)
    observations = torch.randn(12, 60, 6)
    model.fit_normalization(SequenceBatch(observations, torch.zeros(12, 60, 2),
                                          torch.randn(12, 60, 2)))
    # Held-out inputs off the training ones, targets noisier where the first input is large
    # and farther off: the variance gets a shape in both.
    off = 0.5 * torch.rand(12, 60, 1)
    held = observations + off * torch.randn(12, 60, 6)
    targets = torch.randn(12, 60, 2) * (0.2 + held[..., :1].abs()) * (0.2 + 4.0 * off)
    model.calibrate_variance(SequenceBatch(held, torch.zeros(12, 60, 2), targets))
    assert float(model.support.shape.weight.abs().max()) > 0.1
    assert model.support.shape.uses_distance
    stepper = model.numpy_stepper()
    for scale in (0.5, -1.5, 4.0):   # inside, inside on the other side, outside the range
        for observation in (scale * torch.ones(1, 6), observations[:1, 7] + 0.1 * scale):
            expected = model.step(None, observation).variance[0].numpy()
            assert np.allclose(stepper.variance(observation[0].numpy()), expected, rtol=1e-5)


def test_the_linear_path_starts_at_zero_streams_like_windows_and_learns_a_sign():
    torch.manual_seed(2)
    plain = build_model('lstm', {'hidden_size': 8, 'angle_features': True}, 6, 2, 2)
    torch.manual_seed(2)
    model = build_model('lstm', {'hidden_size': 8, 'angle_features': True,
                                 'linear_skip': True}, 6, 2, 2)
    qd = torch.randn(4, 30, 2)
    observations = torch.cat([torch.randn(4, 30, 2), qd, torch.randn(4, 30, 2)], dim=-1)
    # Coulomb friction only: a step in the sign of qd, which the linear path has as a feature.
    batch = SequenceBatch(observations, torch.zeros(4, 30, 2), 2.0 * torch.sign(qd))
    for m in (plain, model):
        m.fit_normalization(batch)
    with torch.no_grad():
        torch.testing.assert_close(model(batch).mean, plain(batch).mean)   # zero at the start
    optimizer = torch.optim.Adam(model.skip.parameters(), lr=0.05)
    for _ in range(300):   # the linear path alone (the LSTM frozen) fits the friction
        optimizer.zero_grad()
        loss, _ = model.loss(batch)
        loss.backward()
        optimizer.step()
    assert float(loss.detach()) < 0.05
    with torch.no_grad():
        torch.testing.assert_close(_streamed(model, observations)[0], model(batch).mean,
                                   atol=1e-5, rtol=1e-5)
    assert model.numpy_stepper() is None


@pytest.mark.parametrize('window', [3, 1])
def test_sliding_windows_predict_each_step_from_zero_over_the_last_inputs(window):
    """Whole recordings and the stream give what the model gives on each step's window."""
    torch.manual_seed(3)
    model = build_model('lstm', {'hidden_size': 8, 'angle_features': True, 'sliding': window},
                        6, 2, 2)
    batch = SequenceBatch(torch.randn(2, 9, 6), torch.zeros(2, 9, 2), torch.randn(2, 9, 2))
    model.fit_normalization(batch)
    model.eval()
    with torch.no_grad():
        whole = model(batch).mean
        steps = [slice(max(0, t + 1 - window), t + 1) for t in range(9)]
        by_window = [model(SequenceBatch(batch.observations[:, s], batch.actions[:, s],
                                         batch.targets[:, s])).mean[:, -1] for s in steps]
    torch.testing.assert_close(whole, torch.stack(by_window, 1), atol=1e-5, rtol=1e-5)
    streamed, step = _streamed(model, batch.observations)
    torch.testing.assert_close(streamed, whole, atol=1e-5, rtol=1e-5)
    assert step.state.inputs.shape == (2, window - 1, 8) and model.numpy_stepper() is None
    carried = build_model('lstm', {'hidden_size': 8, 'angle_features': True}, 6, 2, 2)
    carried.load_state_dict(model.state_dict())
    with torch.no_grad():   # the first w steps are the same; later the carried state differs
        other = carried(batch).mean
    torch.testing.assert_close(other[:, :window], whole[:, :window])
    assert not torch.allclose(other[:, window:], whole[:, window:], atol=1e-3)


@pytest.mark.parametrize('sliding', [-1, 17, 2.5, True])
def test_a_sliding_window_outside_0_to_16_steps_is_refused_by_name(sliding):
    with pytest.raises(ValueError, match='LSTMConfig.sliding must be an int'):
        build_model('lstm', {'sliding': sliding}, 6, 2, 2)


def test_a_node_streams_a_sliding_model_and_takes_new_weights_without_a_jump():
    """The streaming predictor's hand-over to new weights needs no carried state here."""
    torch.manual_seed(4)
    models = [build_model('lstm', {'hidden_size': 8, 'sliding': 2}, 6, 2, 2) for _ in range(2)]
    batch = SequenceBatch(torch.randn(1, 12, 6), torch.zeros(1, 12, 2), torch.randn(1, 12, 2))
    for model in models:
        model.fit_normalization(batch)
        model.eval()
    published = [Published(1, models[0])]
    predictor = StreamingPredictor(lambda: published[0], 6, 2)
    with torch.no_grad():
        expected = [m(batch).mean[0].numpy() for m in models]
    for t in range(12):
        if t == 6:   # new weights, no state from the trainer: rebuilt from the history
            published[0] = Published(2, models[1])
        mean, _ = predictor.predict(batch.observations[0, t].numpy())
        assert np.allclose(mean, expected[t >= 6][t], atol=1e-5), t
