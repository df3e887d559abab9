"""The in-range error variance follows where the held-out errors were (`ErrorShape`)."""
import math

import numpy as np
import pytest
from robot_dynamics_learning.core_types import SequenceBatch
from robot_dynamics_learning.models.common import InputSupport
from robot_dynamics_learning.models.error_shape import ErrorShape, MIN_ERRORS_PER_WEIGHT
from robot_dynamics_learning.models.neighbours import TrainingNeighbours
from robot_dynamics_learning.models.registry import build_model
import torch


def _errors(n: int, seed: int = 0):
    """Two inputs; output 0's error std grows with x0 > 0 only, output 1's is constant."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=generator)
    std = torch.stack([0.1 * torch.exp(1.2 * x[:, 0].clamp_min(0.0)),
                       torch.full((n,), 0.3)], dim=1)
    return x, std * torch.randn(n, 2, generator=generator)


def _within(error: torch.Tensor, variance: torch.Tensor, k: float) -> np.ndarray:
    return (error.abs() <= k * variance.sqrt()).double().mean(dim=0).numpy()


def test_shaped_variance_covers_heteroscedastic_errors_where_a_flat_one_cannot():
    x, error = _errors(6000)
    support = InputSupport(2, 2, [0, 1], length=1.0)
    support.fit_range(x)
    support.calibrate(x, error.pow(2))
    fresh_x, fresh_error = _errors(6000, seed=1)
    variance = support.variance(fresh_x)
    assert _within(fresh_error, variance, 1)[0] == pytest.approx(0.683, abs=0.03)
    assert _within(fresh_error, variance, 2)[0] == pytest.approx(0.954, abs=0.02)
    flat = InputSupport(2, 2, [0, 1], length=1.0)
    flat.fit_range(x)
    flat.fit_errors(error.pow(2).mean(dim=0))
    # The flat variance (the MSE) is too wide where errors are small, too narrow where large.
    assert _within(fresh_error, flat.variance(fresh_x), 1)[0] > 0.8
    # Output 1's errors do not depend on the inputs: its shape stays nearly flat.
    factor = support.shape.factor(fresh_x)[:, 1]
    assert float(factor.log().std()) < 0.1


def test_the_shape_may_grow_in_one_direction_of_an_input_only():
    x, error = _errors(6000)
    shape = ErrorShape(2, 2)
    assert shape.fit(x, error.pow(2))
    factor = shape.factor(torch.tensor([[2.0, 0.0], [-2.0, 0.0], [0.0, 0.0]]))[:, 0]
    assert float(factor[0] / factor[2]) > 5.0   # exp(2 * 1.2)^2 = 121 in truth
    assert float(factor[1] / factor[2]) == pytest.approx(1.0, abs=0.3)


def test_a_shape_the_second_half_of_the_errors_contradicts_is_not_kept():
    x, error = _errors(6000)
    # Output 1 now grows with x0 > 0 in the first half and with x0 < 0 in the second.
    flipped = torch.cat([x[:3000, 0], -x[3000:, 0]]).clamp_min(0.0)
    error[:, 1] = 0.1 * torch.exp(1.2 * flipped) * torch.randn(6000)
    shape = ErrorShape(2, 2)
    assert shape.fit(x, error.pow(2))
    assert float(shape.weight[:, 0].abs().max()) > 0.1   # output 0: the same in both halves
    assert torch.equal(shape.factor(x)[:, 1], torch.ones(6000))


def test_far_inputs_do_not_extrapolate_the_shape():
    x, error = _errors(6000)
    shape = ErrorShape(2, 2)
    shape.fit(x, error.pow(2))
    seen = shape.factor(x).max(dim=0).values
    far = shape.factor(torch.tensor([[100.0, 100.0]]))[0]
    assert torch.all(far <= seen * (1 + 1e-5))


def test_too_few_or_non_finite_errors_leave_the_shape_flat():
    shape = ErrorShape(2, 2)
    few = 2 * MIN_ERRORS_PER_WEIGHT * 4 - 1   # 4 weights per output, two halves to check
    x, error = _errors(few)
    assert not shape.fit(x, error.pow(2))
    assert torch.equal(shape.factor(x), torch.ones(few, 2))
    x, error = _errors(2000)
    error[5, 0] = float('nan')
    assert not shape.fit(x, error.pow(2))
    assert torch.equal(shape.factor(x), torch.ones(2000, 2))


def test_a_support_saved_before_the_shape_loads_flat():
    support = InputSupport(2, 2, [0, 1], length=1.0)
    x, error = _errors(3000)
    support.calibrate(x, error.pow(2))
    old = {k: v for k, v in support.state_dict().items() if not k.startswith('shape.')}
    loaded = InputSupport(2, 2, [0, 1], length=1.0)
    loaded.load_state_dict(old)
    assert torch.equal(loaded.shape.factor(x), torch.ones(3000, 2))
    torch.testing.assert_close(loaded.near_var, support.near_var)


def test_flatness_follows_fit_reset_and_loading():
    x, error = _errors(3000)
    shape = ErrorShape(2, 2)
    assert shape.flat
    assert shape.fit(x, error.pow(2)) and not shape.flat
    loaded = ErrorShape(2, 2)
    loaded.load_state_dict(shape.state_dict())
    assert not loaded.flat
    torch.testing.assert_close(loaded.factor(x), shape.factor(x))
    shape.reset()
    assert shape.flat
    loaded.load_state_dict(shape.state_dict())
    assert loaded.flat


def _away_from_the_data(n: int, seed: int):
    """Training inputs on a ring; held-out inputs off it, errors growing with the distance."""
    generator = torch.Generator().manual_seed(seed)
    angle = 2 * math.pi * torch.rand(n, generator=generator)
    ring = torch.stack([torch.cos(angle), torch.sin(angle)], dim=1)
    offset = 0.8 * torch.rand(n, 1, generator=generator)
    held = ring * (1.0 + offset)   # inside the ring's range, up to 0.8 off it
    error = 0.05 * (1.0 + 10.0 * offset) * torch.randn(n, 2, generator=generator)
    return ring, held, error


def test_the_variance_grows_with_the_distance_to_the_training_inputs_inside_the_range():
    ring, held, error = _away_from_the_data(6000, seed=0)
    support = InputSupport(2, 2, [0, 1], length=1.0)
    support.fit_range(ring)
    support.calibrate(held, error.pow(2))
    assert support.shape.uses_distance
    assert float(support.shape.distance_weight.min()) > 0.5
    # Scored on fresh held-out inputs: calibrated at every distance, where a shape from the
    # inputs alone (no training inputs kept) covers the near errors far too widely.
    _, fresh, fresh_error = _away_from_the_data(6000, seed=1)
    near = (fresh.norm(dim=1) - 1.0) < 0.2
    within = _within(fresh_error[near], support.variance(fresh[near]), 1)
    assert np.all(np.abs(within - 0.683) < 0.08)
    blind = InputSupport(2, 2, [0, 1], length=1.0)
    blind.fit_range(ring)
    blind.shape.neighbours.count.zero_()
    blind.calibrate(held, error.pow(2))
    assert not blind.shape.uses_distance
    assert np.all(_within(fresh_error[near], blind.variance(fresh[near]), 1) > 0.85)


def test_the_kept_inputs_are_a_uniform_sample_of_every_training_batch():
    neighbours = TrainingNeighbours(1, capacity=500)
    neighbours.reset(torch.zeros(100, 1))
    for first in range(0, 20_000, 1000):   # then inputs 1..20 000, a batch at a time
        neighbours.add(torch.arange(first + 1, first + 1001, dtype=torch.float32)[:, None])
    kept = neighbours.points[:int(neighbours.count), 0]
    assert int(neighbours.count) == 500 and int(neighbours.seen) == 20_100
    # Uniform over the 20 100 offered: about 0.5 % zeros, each quarter of 1..20 000 ~ 25 %.
    assert int((kept == 0).sum()) < 10
    quarters = torch.histc(kept[kept > 0], bins=4, min=1, max=20_000) / float((kept > 0).sum())
    assert torch.all((quarters - 0.25).abs() < 0.07)
    assert torch.equal(neighbours.distance(torch.tensor([[0.5], [-3.0]])) <= 3.0,
                       torch.tensor([True, True]))


def test_a_support_saved_before_the_neighbours_loads_and_ignores_the_distance():
    support = InputSupport(2, 2, [0, 1], length=1.0)
    ring, held, error = _away_from_the_data(6000, seed=0)
    support.fit_range(ring)
    support.calibrate(held, error.pow(2))
    old = {k: v for k, v in support.state_dict().items()
           if 'neighbours' not in k and 'distance_weight' not in k}
    loaded = InputSupport(2, 2, [0, 1], length=1.0)
    loaded.load_state_dict(old)
    assert loaded.shape.neighbours.empty and not loaded.shape.uses_distance
    assert torch.isfinite(loaded.variance(held)).all()


@pytest.mark.parametrize('model_type,config', [
    ('lstm', {'hidden_size': 4}),
    ('ac_rkn_inverse', {'latent_obs_dim': 4, 'num_basis': 3, 'bandwidth': 1}),
    ('hybrid', {'urdf': 'urdf/planar_2link.urdf', 'hidden_size': 4})])
def test_only_models_whose_variance_reads_the_distance_keep_training_inputs(model_type, config):
    """The LSTM and FFNN shape their variance by the distance; the others skip the sample."""
    torch.manual_seed(0)
    model = build_model(model_type, config, 6, 2, 2)
    batch = SequenceBatch(torch.randn(2, 5, 6), torch.randn(2, 5, 2), torch.randn(2, 5, 2))
    model.fit_normalization(batch)
    model.loss(batch)
    assert model.support.shape.neighbours.empty == (model_type != 'lstm')
