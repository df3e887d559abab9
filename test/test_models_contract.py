"""Contract tests run over every learned model of the registry (shapes, gradients, streaming)."""
import dataclasses
import math

import numpy as np
import pytest
from robot_dynamics_learning.core_types import SequenceBatch
from robot_dynamics_learning.learning.checkpoint import load_checkpoint, save_checkpoint
from robot_dynamics_learning.learning.continual import Published, StreamingPredictor
from robot_dynamics_learning.learning.training import TrainConfig
from robot_dynamics_learning.models.registry import build_model, model_builder, MODEL_TYPES
import torch

D = 2  # joints of the synthetic inverse problem
SMALL = {
    'lstm': {'hidden_size': 8},
    'ac_rkn_inverse': {'latent_obs_dim': 4, 'num_basis': 3, 'bandwidth': 1,
                       'encoder_hidden': [8], 'decoder_hidden': [8],
                       'action_decoder_hidden': [8], 'control_hidden': [8]},
    'ac_rkn_inverse_urdf': {'latent_obs_dim': 4, 'num_basis': 3, 'bandwidth': 1,
                            'encoder_hidden': [8], 'decoder_hidden': [8],
                            'action_decoder_hidden': [8], 'control_hidden': [8],
                            'urdf': 'urdf/planar_2link.urdf', 'trust_change': True,
                            'anchor_rate': 0.5, 'history': 3},
    'ac_rkn_forward': {'latent_obs_dim': 4, 'num_basis': 3, 'bandwidth': 1,
                       'encoder_hidden': [8], 'decoder_hidden': [8], 'control_hidden': [8]},
    'rkn': {'latent_obs_dim': 4, 'num_basis': 3, 'bandwidth': 1, 'encoder_hidden': [8],
            'decoder_hidden': [8]},
    'gru': {'latent_obs_dim': 4, 'hidden_size': 8, 'encoder_hidden': [8],
            'decoder_hidden': [8]},
    'lstm_forward': {'latent_obs_dim': 4, 'hidden_size': 8, 'encoder_hidden': [8],
                     'decoder_hidden': [8]},
    'ffnn': {'hidden': [8]},
    'ffnn_forward': {'kind': 'forward', 'hidden': [8]},
    'gp': {'hyper_iterations': 3, 'hyper_subset': 50},
    'previous_value': {},
    'previous_value_forward': {'kind': 'forward'},
    'previous_value_urdf': {'urdf': 'urdf/planar_2link.urdf'},
    'previous_value_extrapolated': {'extrapolate': True},
    'rigid_body': {'urdf': 'urdf/planar_2link.urdf', 'learn_inertia': True},
    'hybrid': {'urdf': 'urdf/planar_2link.urdf', 'hidden_size': 8, 'learn_friction': True},
}
# Car models (models/car_*.py) have their own tests and fixed state sizes.
CASES = sorted(SMALL)
# Cases that are a model type in another configuration.
MODEL_TYPE_OF = {'ffnn_forward': 'ffnn', 'previous_value_forward': 'previous_value',
                 'previous_value_urdf': 'previous_value', 'ac_rkn_inverse_urdf': 'ac_rkn_inverse',
                 'previous_value_extrapolated': 'previous_value'}


def test_every_registered_arm_model_is_covered():
    arm_types = {t for t in MODEL_TYPES if not t.startswith('car_')}
    assert arm_types == {MODEL_TYPE_OF.get(c, c) for c in CASES}


def _model_and_batch(case: str, seed: int = 0):
    torch.manual_seed(seed)
    model_type = MODEL_TYPE_OF.get(case, case)
    model = build_model(model_type, SMALL[case], 3 * D, D, D) if SMALL[case].get(
        'kind') != 'forward' and model_type in (
        'lstm', 'ac_rkn_inverse', 'ffnn', 'gp', 'previous_value', 'rigid_body', 'hybrid') else \
        build_model(model_type, SMALL[case], 3, 2, 3)
    b, t = 3, 7
    n_obs, n_act, n_target = model.n_obs, model.n_act, model.n_target
    batch = SequenceBatch(torch.randn(b, t, n_obs), torch.randn(b, t, n_act),
                          torch.randn(b, t, n_target))
    if model.kind == 'inverse':
        # Inverse-dynamics windows: actions are the torques executed one step earlier.
        batch.actions[:, 1:] = batch.targets[:, :-1]
    if model.kind == 'forward':
        # A narrower training range, so that part of the batch leaves it; then the variances
        # measured after training (`calibrate_variance`): what every path must carry.
        model.fit_normalization(SequenceBatch(0.5 * batch.observations, 0.5 * batch.actions,
                                              0.5 * batch.targets))
        model.calibrate_variance(batch)
    else:
        model.fit_normalization(batch)
    if model_type == 'gp':
        model.fit_data(batch)
    return model, batch


@pytest.mark.parametrize('case', CASES)
def test_shapes_loss_and_gradients(case):
    model, batch = _model_and_batch(case)
    prediction = model(batch)
    assert prediction.mean.shape == batch.targets.shape
    if prediction.variance is not None:
        assert prediction.variance.shape == batch.targets.shape
        assert bool((prediction.variance > 0).all())
    loss, metrics = model.loss(batch)
    assert loss.ndim == 0 and math.isfinite(float(loss.detach()))
    assert all(isinstance(v, float) for v in metrics.values())
    params = [p for p in model.parameters() if p.requires_grad]
    if params:
        loss.backward()
        with_grad = [p for p in params if p.grad is not None and bool(p.grad.abs().sum() > 0)]
        # Every parameter tensor receives gradient (the variance heads through the NLL term).
        assert len(with_grad) == len(params), [n for n, p in model.named_parameters()
                                               if p.grad is None or not p.grad.abs().sum()]


@pytest.mark.parametrize('case', CASES)
def test_streaming_step_matches_window_forward(case):
    model, batch = _model_and_batch(case)
    model.eval()
    expected = model(batch)
    state = model.init_state(batch.observations.shape[0])
    for t in range(batch.observations.shape[1]):
        out = model.step(state, batch.observations[:, t], batch.actions[:, t])
        state = out.state
        assert out.prediction.shape == batch.targets[:, t].shape
        torch.testing.assert_close(out.prediction, expected.mean[:, t], atol=1e-4, rtol=1e-4)
        if expected.variance is not None:
            torch.testing.assert_close(out.variance, expected.variance[:, t], atol=1e-4,
                                       rtol=1e-4)
        assert not out.prediction.requires_grad


@pytest.mark.parametrize('case, config', [('lstm', {'hidden_size': 8, 'num_layers': 2}),
                                          ('hybrid', SMALL['hybrid'] | {'learn_friction': False})])
def test_numpy_stepper_matches_the_torch_step(case, config):
    """The node's per-message numpy path computes what `step` computes (after a hand-over)."""
    torch.manual_seed(1)
    model = build_model(case, config, 3 * D, D, D)
    batch = _model_and_batch(case)[1]
    model.fit_normalization(batch)
    if case == 'hybrid':
        assert model.numpy_stepper() is None      # physics in the step: no numpy twin
        whole = model
        model = model.split_physics().residual
        assert not whole.residual_only and whole.numpy_stepper() is None   # left unchanged
    model.eval()
    stepper = model.numpy_stepper()
    state = model.init_state(1)
    for t in range(3):                            # a state handed over mid-stream
        state = model.step(state, batch.observations[:1, t]).state
    numpy_state = stepper.state_from(state)
    for t in range(3, batch.observations.shape[1]):
        out = model.step(state, batch.observations[:1, t])
        state = out.state
        mean, numpy_state = stepper.step(numpy_state, batch.observations[0, t].numpy())
        torch.testing.assert_close(torch.from_numpy(mean), out.prediction[0], atol=1e-5,
                                   rtol=1e-5)
        torch.testing.assert_close(torch.from_numpy(numpy_state), torch.stack(
            [state.h[:, 0], state.c[:, 0]]), atol=1e-5, rtol=1e-5)
    predictor = StreamingPredictor(lambda: Published(1, model), 3 * D, D)
    assert predictor.predict(batch.observations[0, 0].numpy())[0].shape == (D,)
    with pytest.raises(ValueError, match='finite'):
        predictor.predict(np.full(3 * D, np.nan))


@pytest.mark.parametrize('case', CASES)
def test_non_finite_inputs_raise(case):
    model, batch = _model_and_batch(case)
    bad = batch.observations.clone()
    bad[0, 2, 0] = float('nan')
    with pytest.raises(ValueError, match='observations'):
        model(batch._replace(observations=bad))
    step_bad = batch.observations[:, 0].clone()
    step_bad[1, 0] = float('inf')
    with pytest.raises(ValueError, match='observation'):
        model.step(model.init_state(3), step_bad, batch.actions[:, 0])
    with pytest.raises(ValueError, match='shape'):
        model.step(model.init_state(3), batch.observations[:, 0, :-1], batch.actions[:, 0])


@pytest.mark.parametrize('case', CASES)
def test_checkpoint_round_trip_reproduces_predictions(case, tmp_path):
    model, batch = _model_and_batch(case)
    model.eval()
    path = save_checkpoint(tmp_path / 'm.pt', model, ['a', 'b'], {'note': case})
    loaded = load_checkpoint(path, joint_names=['a', 'b'])
    assert loaded.metadata == {'note': case}
    assert torch.equal(loaded.model(batch).mean, model(batch).mean)


def test_rollout_of_forward_models_is_differentiable():
    for case in ('ac_rkn_forward', 'rkn', 'gru', 'lstm_forward', 'ffnn_forward'):
        model, batch = _model_and_batch(case)
        state = model.step(model.init_state(3), batch.observations[:, 0],
                           batch.actions[:, 0]).state
        actions = batch.actions[:, 1:5].clone().requires_grad_(True)
        prediction = model.rollout(state, actions)
        assert prediction.mean.shape == (3, 4, model.n_obs)
        prediction.mean.sum().backward()
        assert actions.grad is not None and bool(actions.grad.abs().sum() > 0), case


def test_inverse_models_have_no_rollout():
    model, batch = _model_and_batch('lstm')
    with pytest.raises(NotImplementedError):
        model.rollout(model.init_state(1), batch.actions[:1])


def test_unknown_type_and_config_key_are_clear_errors():
    with pytest.raises(ValueError, match="unknown model type 'transformer'"):
        build_model('transformer', {}, 6, 2, 2)
    with pytest.raises(ValueError, match='hidden_sise'):
        build_model('lstm', {'hidden_sise': 4}, 6, 2, 2)
    with pytest.raises(ValueError, match='num_layers'):
        build_model('lstm', {'num_layers': 3}, 6, 2, 2)
    with pytest.raises(ValueError, match='n_obs = 3 d'):
        build_model('ac_rkn_inverse', {}, 5, 2, 2)


@pytest.mark.parametrize('config_class, key, value, words', [
    (TrainConfig, 'batch_size', 1.5, 'must be an int'),   # a TypeError deep in a DataLoader
    (TrainConfig, 'max_epochs', True, 'must be an int'),
    (TrainConfig, 'progress', 'no', 'must be true or false'),   # 'no' is truthy
    (TrainConfig, 'learning_rate', '3e-3', 'must be a number'),   # YAML 1.1 reads a string
    (TrainConfig, 'max_seconds', 'soon', 'must be a number or null'),
])
def test_config_values_of_the_wrong_type_are_refused_by_name(config_class, key, value, words):
    with pytest.raises(ValueError, match=rf'{config_class.__name__}\.{key} {words}'):
        config_class.from_dict({key: value})


def test_every_model_config_checks_its_field_types():
    checked = 0
    for model_type in MODEL_TYPES:
        config_class = model_builder(model_type).config_class
        for field in dataclasses.fields(config_class):
            if isinstance(field.default, bool) or not isinstance(field.default, (int, float)):
                continue
            with pytest.raises(ValueError, match=rf'{config_class.__name__}\.{field.name} '):
                config_class.from_dict({field.name: 'text'})
            checked += 1
    assert checked > 30
