"""Car models: the DynamicsModel contract, differentiable rollouts, training, checkpoints."""
import numpy as np
import pytest
from robot_dynamics_learning.control.car_evaluation import trajectory_validation_error
from robot_dynamics_learning.control.car_training import (build_car_model, load_car_model,
                                                          save_car_model, train_car)
from robot_dynamics_learning.core_types import SequenceBatch
from robot_dynamics_learning.data.car_datasets import car_dataset
from robot_dynamics_learning.models.car_base import integrate_pose, relative_l1
from robot_dynamics_learning.sim.car import CarParams, MocapNoise
from robot_dynamics_learning.sim.driving import simulated_drives
import torch

MODELS = ['car_mlp', 'car_bicycle']


@pytest.fixture(scope='module')
def sim_data():
    drives = simulated_drives(120.0, CarParams(), MocapNoise(), seed=3, cars=4)
    data = car_dataset(drives, 0.05)
    return data


@pytest.mark.parametrize('model_type', MODELS)
def test_contract_shapes_and_step(model_type):
    model = build_car_model(model_type)
    assert model.kind == 'forward' and model.init_state(3) is None
    obs, act = torch.randn(3, 7, 6), torch.rand(3, 7, 2)
    batch = SequenceBatch(obs, act, torch.randn(3, 7, 6))
    assert model(batch).mean.shape == (3, 7, 6)
    loss, metrics = model.loss(batch)
    assert loss.ndim == 0 and {'loss', 'velocity_l1'} <= set(metrics)
    step = model.step(None, obs[:, 0], act[:, 0])
    assert torch.allclose(step.prediction, model(batch).mean[:, 0], atol=1e-6)
    with pytest.raises(ValueError, match='action'):
        model.step(None, obs[:, 0])


@pytest.mark.parametrize('model_type', MODELS)
def test_rollout_is_differentiable_and_matches_steps(model_type):
    model = build_car_model(model_type)
    state = torch.tensor([[0.3, -0.2, 0.5, 1.0, 0.0, 0.2]])
    actions = (torch.rand(1, 10, 2) * 0.8).requires_grad_(True)
    rollout = model.rollout(state, actions).mean
    assert rollout.shape == (1, 10, 6)
    current = state
    for i in range(10):
        current = model.step(None, current, actions[:, i].detach()).prediction
        assert torch.allclose(current, rollout[:, i].detach(), atol=1e-5)
    rollout[:, -1, :2].sum().backward()
    assert actions.grad is not None and bool(torch.isfinite(actions.grad).all())
    assert actions.grad.abs().sum() > 0


def test_pose_integration_is_exact_for_straight_motion():
    pose = torch.tensor([[1.0, 2.0, np.pi / 2]])
    v = torch.tensor([[2.0, 0.0, 0.0]])
    nxt = integrate_pose(pose, v, v, 0.5)
    assert torch.allclose(nxt, torch.tensor([[1.0, 3.0, np.pi / 2]]), atol=1e-6)


def test_relative_l1_is_scale_free():
    target = torch.tensor([[1.0, 0.0, 1.0], [10.0, 0.0, 10.0]])
    prediction = target * 1.1
    loss = relative_l1(target, prediction, eps=0.0)
    assert float(loss) == pytest.approx(0.1)


def test_dataset_windows_follow_the_recording(sim_data):
    windows = sim_data.windows(20, 10)
    assert windows.observations.shape[1:] == (21, 6) and windows.actions.shape[1:] == (20, 2)
    # Pose changes agree with the smoothed body velocities (frames and units consistent).
    obs = windows.observations
    step = obs[:, 1:, :2] - obs[:, :-1, :2]
    yaw = obs[:, :-1, 2]
    forward = step[..., 0] * torch.cos(yaw) + step[..., 1] * torch.sin(yaw)
    mean_vx = 0.5 * (obs[:, 1:, 3] + obs[:, :-1, 3]) * 0.05
    assert float((forward - mean_vx).abs().mean()) < 0.01


def test_mlp_learns_simulated_driving_better_than_the_bicycle(sim_data):
    torch.manual_seed(0)
    untrained = build_car_model('car_mlp')
    untrained.fit_normalization(sim_data.transitions())
    with torch.no_grad():
        before, _ = untrained.loss(sim_data.transitions())
    results = {}
    for model_type, epochs in (('car_mlp', 15), ('car_bicycle', 10)):
        _, results[model_type] = train_car(model_type, sim_data, sim_data,
                                           epochs=epochs)
    assert results['car_mlp']['rel_l1_one_step'] < 0.9 * float(before)  # beats persistence
    assert (results['car_mlp']['velocity_l1_one_step']
            < 0.95 * results['car_bicycle']['velocity_l1_one_step'])


def test_tve_is_zero_for_a_perfect_model():
    model = build_car_model('car_bicycle')
    actions = torch.full((2, 20, 2), 0.3)
    with torch.no_grad():
        states = model.rollout(torch.zeros(2, 6), actions).mean
    windows = SequenceBatch(torch.cat([torch.zeros(2, 1, 6), states], 1), actions, states)
    assert trajectory_validation_error(model, windows) == pytest.approx(0.0, abs=1e-6)
    shifted = windows._replace(observations=windows.observations + torch.tensor(
        [0.1, 0.0, 0.0, 0.0, 0.0, 0.0]))
    assert trajectory_validation_error(model, shifted) == pytest.approx(0.0, abs=1e-5)
    wrong = windows._replace(actions=windows.actions * 0.5)
    assert trajectory_validation_error(model, wrong) > 0.05


def test_checkpoint_round_trip(tmp_path, sim_data):
    model = build_car_model('car_mlp')
    model.fit_normalization(sim_data.transitions())
    path = save_car_model(tmp_path / 'car.pt', model, {'note': 'test'})
    loaded = load_car_model(path)
    obs, act = torch.randn(4, 6), torch.rand(4, 2)
    assert torch.allclose(model.step(None, obs, act).prediction,
                          loaded.step(None, obs, act).prediction)
