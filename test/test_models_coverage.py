"""Variances chosen by coverage: Gaussian errors keep the MSE, heavy tails get 68 / 95 %."""
import numpy as np
import pytest
from robot_dynamics_learning.learning.prequential import VarianceCalibration
from robot_dynamics_learning.models.coverage import (coverage_scale, coverage_variance,
                                                     WITHIN_1_STD, WITHIN_2_STD)
import torch

HEAVY_TAILS = {
    'laplace': torch.distributions.Laplace(0.0, 1.0),
    'student_t3': torch.distributions.StudentT(3.0),
}


def _shares(error: torch.Tensor, variance: torch.Tensor) -> tuple:
    z = error.abs() / variance.sqrt()
    return float((z <= 1.0).double().mean()), float((z <= 2.0).double().mean())


def test_gaussian_errors_get_their_mean_squared_error():
    error = torch.randn(200_000, 3, generator=torch.Generator().manual_seed(0)) * \
        torch.tensor([0.1, 1.0, 30.0])
    torch.testing.assert_close(coverage_variance(error.pow(2)), error.pow(2).mean(dim=0),
                               rtol=0.03, atol=0.0)


@pytest.mark.parametrize('name', sorted(HEAVY_TAILS))
def test_heavy_tailed_errors_are_covered_like_a_gaussian(name):
    """The MSE's std holds 76-80 % within 1 std here; the chosen one within 5 points of 68."""
    torch.manual_seed(1)
    error = HEAVY_TAILS[name].sample((100_000, 2)).double()
    mse = error.pow(2).mean(dim=0)
    variance = coverage_variance(error.pow(2))
    assert (variance < 0.9 * mse).all()
    for column in range(2):
        within_1, within_2 = _shares(error[:, column], mse[column])
        assert within_1 > WITHIN_1_STD + 0.07   # what matching the MSE published
        within_1, within_2 = _shares(error[:, column], variance[column])
        assert abs(within_1 - WITHIN_1_STD) < 0.05 and abs(within_2 - WITHIN_2_STD) < 0.05


def test_a_models_variance_keeps_its_shape_and_gets_the_covering_size():
    """Errors of std s_i, a model claiming 2 s_i: the factor is 1/4, whatever s_i does."""
    generator = torch.Generator().manual_seed(2)
    std = torch.exp(torch.randn(50_000, 1, generator=generator))
    error = std * torch.randn(50_000, 1, generator=generator)
    factor = coverage_scale(error.pow(2), (2.0 * std).pow(2))
    torch.testing.assert_close(factor, torch.tensor([0.25]), rtol=0.05, atol=0.0)


def test_no_errors_give_zero_and_empty_input_is_refused():
    assert coverage_variance(torch.zeros(10, 2)).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match='at least one'):
        coverage_variance(torch.zeros(0, 2))


def test_streaming_calibration_covers_heavy_tailed_errors():
    """The learner's scale: 68 / 95 % of the newest errors, from a model that claims 1."""
    torch.manual_seed(3)
    errors = HEAVY_TAILS['laplace'].sample((3000, 2)).double().numpy() * [1.0, 0.1]
    calibration = VarianceCalibration(2, window=2000, min_samples=200)
    for error in errors:
        calibration.update(error, np.ones(2))
    std = np.sqrt(calibration.apply(np.ones(2)))
    newest = np.abs(errors[-2000:]) / std
    assert abs(np.mean(newest <= 1.0) - WITHIN_1_STD) < 0.05
    assert abs(np.mean(newest <= 2.0) - WITHIN_2_STD) < 0.05
