"""Model abilities are declared on the interface, with defaults; checkpoints carry a tag."""
import re

import pytest
from robot_dynamics_learning.learning.checkpoint import (checkpoint_payload, CorruptCheckpoint,
                                                         LEGACY_CONVENTIONS, load_checkpoint,
                                                         model_from_payload)
from robot_dynamics_learning.models.registry import build_model, model_builder, MODEL_TYPES
from robot_dynamics_learning.resources import resource
import torch

D = 7
# Model types registered as classes (ffnn and previous_value are builder functions).
CLASSES = [name for name in MODEL_TYPES if isinstance(model_builder(name), type)]


def test_a_plain_model_declares_the_defaults():
    model = build_model('lstm', {'hidden_size': 4}, 3 * D, D, D)
    assert model.split_physics() is None
    assert model.joint_names is None
    assert model.model_type == 'lstm'
    assert not model.fits_in_closed_form
    assert build_model('ffnn', {'hidden': [4]}, 3 * D, D, D).numpy_stepper() is None


def test_only_the_exact_gp_fits_in_closed_form():
    closed = [name for name in CLASSES if model_builder(name).fits_in_closed_form]
    assert closed == ['gp']


@pytest.mark.parametrize('model_type', CLASSES)
def test_every_model_class_has_a_versioned_convention_tag(model_type):
    assert re.fullmatch(r'[a-z_]+/\d+', model_builder(model_type).convention)


def _format_2(payload):
    """Return the payload as format 2 wrote it: the convention as an English sentence."""
    old = dict(payload, format_version=2)
    sentence = {tag: text for text, tag in LEGACY_CONVENTIONS.items()}[old.pop('convention')]
    old['target_convention'] = sentence
    return old


def test_a_format_2_checkpoint_still_loads():
    model = build_model('lstm', {'hidden_size': 3}, 6, 2, 2)
    loaded = model_from_payload(_format_2(checkpoint_payload(model, ['a', 'b'])))[0]
    assert torch.equal(loaded.head.weight, model.head.weight)


def test_the_shipped_car_checkpoint_of_format_2_loads():
    loaded = load_checkpoint(resource('config/models/car_mlp_sim.pt'))
    assert loaded.model.convention == 'car_next_pose_velocity/1'


def test_another_convention_is_refused_with_its_reason():
    payload = checkpoint_payload(build_model('lstm', {'hidden_size': 3}, 6, 2, 2))
    with pytest.raises(CorruptCheckpoint, match='joint_torque/2') as error:
        model_from_payload(dict(payload, convention='joint_torque/2'))
    assert error.value.reason == 'convention'
    old = _format_2(payload)
    with pytest.raises(CorruptCheckpoint) as error:
        model_from_payload(dict(old, target_convention='torque, but another meaning'))
    assert error.value.reason == 'convention'
