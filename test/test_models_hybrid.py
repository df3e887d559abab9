"""Rigid-body and hybrid (rigid body + learned residual) inverse models on synthetic data."""
import copy

import numpy as np
import pytest
from robot_dynamics_learning.core_types import SequenceBatch
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.data.windows import inverse_dynamics_windows
from robot_dynamics_learning.dynamics import load_urdf, rnea
from robot_dynamics_learning.learning.training import split_windows, train_model, TrainConfig
from robot_dynamics_learning.models.registry import build_model
from robot_dynamics_learning.resources import resource
import torch

URDF = 'urdf/planar_2link.urdf'


def _recording(spring: float) -> Trajectory:
    """Planar 2-link torques from RNEA plus an unmodelled joint spring -spring * q."""
    robot = load_urdf(resource(URDF))
    t = np.arange(1500) * 0.01
    q = np.stack([0.8 * np.sin(0.9 * t), 0.6 * np.sin(1.7 * t + 0.5)], 1)
    qd = np.gradient(q, t, axis=0)
    qdd = np.gradient(qd, t, axis=0)
    tau = rnea(robot, *(torch.as_tensor(a) for a in (q, qd, qdd)), damping=True,
               friction=True).numpy() - spring * q
    return Trajectory(time=t, joint_names=list(robot.joint_names), q=q, qd=qd, qdd=qdd,
                      tau=tau)


def test_rigid_body_model_reproduces_rnea_exactly():
    windows = inverse_dynamics_windows([_recording(spring=0.0)], 50)
    model = build_model('rigid_body', {'urdf': URDF}, 6, 2, 2)
    torch.testing.assert_close(model(windows).mean, windows.targets, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_hybrid_learns_the_residual_the_rigid_body_misses():
    """About a minute on 2 shared cores (RNEA on every batch), so not in `make test`."""
    train, val = split_windows(inverse_dynamics_windows([_recording(spring=2.0)], 50, 25), 0.2)
    rigid = build_model('rigid_body', {'urdf': URDF}, 6, 2, 2)
    hybrid = build_model('hybrid', {'urdf': URDF, 'hidden_size': 16}, 6, 2, 2)
    torch.manual_seed(0)
    train_model(hybrid, train, val, TrainConfig(max_epochs=40, learning_rate=1e-2,
                                                progress=False))
    with torch.no_grad():
        rigid_error = (rigid(val).mean - val.targets).pow(2).mean()
        hybrid_error = (hybrid(val).mean - val.targets).pow(2).mean()
    assert float(hybrid_error) < 0.1 * float(rigid_error)


def test_urdf_with_other_joints_is_refused():
    with pytest.raises(ValueError, match='2 joints'):
        build_model('rigid_body', {'urdf': URDF}, 21, 7, 7)
    with pytest.raises(ValueError, match='existing URDF'):
        build_model('hybrid', {'urdf': 'urdf/missing.urdf'}, 6, 2, 2)


def test_previous_value_with_a_urdf_adds_the_rigid_body_change_without_inertia():
    torch.manual_seed(0)
    urdf = {'urdf': URDF}
    rigid = build_model('rigid_body', urdf, 6, 2, 2)
    model = build_model('previous_value', urdf, 6, 2, 2)
    observations, actions = torch.randn(2, 20, 6), torch.randn(2, 20, 2)
    batch = SequenceBatch(observations, actions, torch.zeros(2, 20, 2))
    still = observations.clone()
    still[..., 4:] = 0.0   # qdd = 0: gravity, Coriolis and centrifugal terms only
    term = rigid(batch._replace(observations=still)).mean
    expected = actions + torch.diff(term, dim=1, prepend=term[:, :1])
    torch.testing.assert_close(model(batch).mean, expected)
    assert bool((model(batch).mean != actions)[:, 1:].all())   # the change is added
    noisy = observations.clone()
    noisy[..., 4:] += 100.0   # the measured qdd is left out
    torch.testing.assert_close(model(batch._replace(observations=noisy)).mean, expected)
    assert model.joint_names == rigid.joint_names
    twin = copy.deepcopy(model)   # a continual learner's snapshot: the URDF model is shared
    assert twin.body.model is model.body.model and twin.body is not model.body
    torch.testing.assert_close(twin(batch).mean, expected)
    plain = copy.deepcopy(build_model('previous_value', {}, 6, 2, 2))
    assert plain.joint_names is None and plain.body is None
    with pytest.raises(ValueError, match="kind 'inverse'"):
        build_model('previous_value', {**urdf, 'kind': 'forward'}, 3, 2, 3)
    with pytest.raises(ValueError, match='existing URDF'):
        build_model('previous_value', {'urdf': 'urdf/none.urdf'}, 6, 2, 2)
