"""LSTM with sin/cos angle features: streaming equals windows, angles wrap by 2 pi."""
import math

import numpy as np

from robot_dynamics_learning.models.base import SequenceBatch
from robot_dynamics_learning.models.registry import build_model
import torch


def test_angle_features_stream_like_windows_and_wrap_angles():
    torch.manual_seed(0)
    model = build_model('lstm', {'hidden_size': 8, 'angle_features': True}, 6, 2, 2)
    batch = SequenceBatch(torch.randn(2, 5, 6), torch.zeros(2, 5, 2), torch.randn(2, 5, 2))
    model.fit_normalization(batch)
    model.eval()
    with torch.no_grad():
        windows = model(batch).mean
    state, streamed = model.init_state(2), []
    for t in range(5):
        step = model.step(state, batch.observations[:, t])
        state = step.state
        streamed.append(step.prediction)
    torch.testing.assert_close(torch.stack(streamed, 1), windows, atol=1e-5, rtol=1e-5)
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
    state, streamed = model.init_state(4), []
    for t in range(30):
        step = model.step(state, observations[:, t])
        state = step.state
        streamed.append(step.prediction)
    with torch.no_grad():
        torch.testing.assert_close(torch.stack(streamed, 1), model(batch).mean, atol=1e-5,
                                   rtol=1e-5)
    assert model.numpy_stepper() is None
