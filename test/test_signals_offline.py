"""Zero-phase Savitzky-Golay smoothing and derivatives on signals with known derivatives."""
import numpy as np
import pytest

from robot_dynamics_learning.signals.offline import savgol_derivative


def test_cubic_exact_everywhere_including_edges():
    dt = 0.01
    t = np.arange(200) * dt
    x = np.column_stack([1 + 2 * t - t**2 + 0.5 * t**3, -t**3])
    first = savgol_derivative(x, dt, 0.11, order=3, deriv=1)
    second = savgol_derivative(x, dt, 0.11, order=3, deriv=2)
    np.testing.assert_allclose(first, np.column_stack([2 - 2 * t + 1.5 * t**2, -3 * t**2]),
                               atol=1e-9)
    np.testing.assert_allclose(second, np.column_stack([-2 + 3 * t, -6 * t]), atol=1e-7)


def test_sine_derivative_has_no_delay():
    """Zero phase: the derivative of a sine matches the true one with no time shift."""
    dt, f = 1e-3, 1.5
    t = np.arange(3000) * dt
    x = np.sin(2 * np.pi * f * t)[:, None]
    rate = savgol_derivative(x, dt, 0.031, order=3, deriv=1)[:, 0]
    truth = 2 * np.pi * f * np.cos(2 * np.pi * f * t)
    assert np.abs(rate - truth)[50:-50].max() < 1e-4 * 2 * np.pi * f
    shifted = 2 * np.pi * f * np.cos(2 * np.pi * f * (t - 2 * dt))
    assert np.abs(rate - shifted)[50:-50].max() > 100 * np.abs(rate - truth)[50:-50].max()


def test_noise_attenuation():
    rng = np.random.default_rng(0)
    dt, sigma = 1e-3, 1e-3
    x = 0.3 * np.arange(4000)[:, None] * dt + sigma * rng.normal(size=(4000, 2))
    rate = savgol_derivative(x, dt, 0.031, order=3, deriv=1)
    naive = np.diff(x, axis=0) / dt
    assert (rate[100:-100] - 0.3).std() < 0.05 * (naive - 0.3).std()


def test_errors():
    with pytest.raises(ValueError, match='dt must be positive'):
        savgol_derivative(np.zeros((10, 1)), 0.0, 0.01)
    with pytest.raises(ValueError, match='shorter than'):
        savgol_derivative(np.zeros((5, 1)), 1e-3, 0.031)
