"""Uncertainty of the inverse models: calibrated inside the training range, rising outside it."""
import numpy as np
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.data.windows import inverse_dynamics_windows
from robot_dynamics_learning.learning.metrics import calibration
from robot_dynamics_learning.learning.training import train_model, TrainConfig
from robot_dynamics_learning.models.base import SequenceBatch
from robot_dynamics_learning.models.common import InputSupport
from robot_dynamics_learning.models.registry import build_model
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
