"""Causal differentiator: exact on polynomials, known delay, noise attenuation, gaps, errors."""
import numpy as np
import pytest

from robot_dynamics_learning.signals.causal import CausalDifferentiator, CausalPolyFilter


def _run(filt, times, values):
    out = [filt.update(t, v) for t, v in zip(times, values)]
    return out


@pytest.mark.parametrize('lag', [0.0, 3.0, 7.0])
@pytest.mark.parametrize('uniform', [True, False])
def test_exact_for_polynomials_at_stated_time(lag, uniform):
    """Quadratics are reproduced exactly (value, rate, second derivative) at t - delay."""
    rng = np.random.default_rng(0)
    dt = 1e-3
    steps = np.full(60, dt) if uniform else rng.uniform(0.5 * dt, 1.5 * dt, 60)
    times = 2.0 + np.cumsum(steps)
    coefficients = np.array([[0.5, -1.0], [2.0, 0.3], [-3.0, 4.0]])  # c0 + c1 t + c2 t^2

    def poly(t, d):
        c0, c1, c2 = coefficients
        return [c0 + c1 * t + c2 * t * t, c1 + 2 * c2 * t, 2 * c2][d]

    filt = CausalPolyFilter(2, window=15, order=2, max_deriv=2, lag=lag)
    estimates = _run(filt, times, [poly(t, 0) for t in times])
    assert all(e is None for e in estimates[:14]) and estimates[14] is not None
    for k, estimate in enumerate(estimates[14:], start=14):
        mean_dt = (times[k] - times[k - 14]) / 14
        assert estimate.delay == pytest.approx(lag * mean_dt, rel=1e-12)
        assert estimate.time == pytest.approx(times[k] - lag * mean_dt, rel=1e-15)
        for d in range(3):
            np.testing.assert_allclose(estimate.derivatives[d], poly(estimate.time, d),
                                       rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize('lag', [0.0, 5.0])
def test_sine_derivative_accurate_and_delay_bounded(lag):
    """On sin(2 pi f t) the rate matches the true derivative at t - delay; lag adds delay."""
    dt, f = 1e-3, 2.0
    times = np.arange(1000) * dt
    filt = CausalDifferentiator(1, window=15, order=2, lag=lag)
    rates = [filt.update(t, np.array([np.sin(2 * np.pi * f * t)])) for t in times]
    delay = filt.delay(dt)
    assert delay == pytest.approx(lag * dt)
    error = [abs(r[0] - 2 * np.pi * f * np.cos(2 * np.pi * f * (t - delay)))
             for t, r in zip(times, rates) if r is not None]
    assert max(error) < 5e-3 * 2 * np.pi * f  # third-order term of a 14 ms quadratic fit
    # Read as a derivative of the newest sample instead, a 5-sample lag is a visible error.
    if lag:
        late = [abs(r[0] - 2 * np.pi * f * np.cos(2 * np.pi * f * t))
                for t, r in zip(times, rates) if r is not None]
        assert max(late) > 10 * max(error)


def test_noise_attenuation_matches_prediction():
    """White noise on a ramp: the rate's noise std is the predicted gain, far below a diff."""
    rng = np.random.default_rng(1)
    dt, sigma = 1e-3, 1e-3
    times = np.arange(5000) * dt
    signal = 0.7 * times[:, None] + sigma * rng.normal(size=(5000, 3))
    filt = CausalDifferentiator(3, window=15, order=2)
    rates = np.array([r for r in (filt.update(t, x) for t, x in zip(times, signal))
                      if r is not None])
    measured = (rates - 0.7).std()
    predicted = sigma * filt.filter.noise_gain(dt)
    naive = (np.diff(signal, axis=0) / dt - 0.7).std()
    assert measured == pytest.approx(predicted, rel=0.1)
    assert measured < 0.25 * naive
    assert naive == pytest.approx(sigma * np.sqrt(2) / dt, rel=0.1)


def test_centered_lag_attenuates_more():
    dt = 1e-3
    gains = [CausalPolyFilter(1, 21, 2, lag=lag).noise_gain(dt) for lag in (0.0, 5.0, 10.0)]
    assert gains[0] > gains[1] > gains[2]


def test_channels_independent_and_vectorised():
    times = np.arange(20) * 0.01
    values = np.column_stack([times, 3 * times, -times])
    rates = _run(CausalDifferentiator(3, window=5, order=1), times, values)
    np.testing.assert_allclose(rates[-1], [1.0, 3.0, -1.0], rtol=1e-10)


def test_gap_resets_and_restarts():
    filt = CausalDifferentiator(1, window=5, order=1, max_gap=0.05)
    times = list(np.arange(10) * 0.01) + list(1.0 + np.arange(10) * 0.01)
    rates = _run(filt, times, [np.array([t]) for t in times])
    assert rates[9] is not None
    assert all(r is None for r in rates[10:14]) and rates[14] is not None
    assert filt.filter.resets == 1
    filt.reset()
    assert filt.update(5.0, np.array([0.0])) is None


@pytest.mark.parametrize('dt', [0.001, 0.004, 0.05])
def test_a_gap_longer_than_the_window_restarts_the_fit_at_any_rate(dt):
    # Two recordings 100 samples apart, joined: a fit across the gap would mix them.
    times = list(np.arange(30) * dt) + list(130 * dt + np.arange(30) * dt)
    values = [np.array([np.sin(t) + (5.0 if i >= 30 else 0.0)]) for i, t in enumerate(times)]
    filt = CausalDifferentiator(1, window=15)
    rates = _run(filt, times, values)
    assert filt.filter.resets == 1 and rates[30:44] == [None] * 14
    fresh = _run(CausalDifferentiator(1, window=15), times[30:], values[30:])
    assert rates[30:] == fresh   # as if the second recording were alone
    # Dropped messages are no gap: a hole as long as the window keeps the fit going.
    kept = [t for i, t in enumerate(times[:30]) if not 10 <= i < 24]
    filt = CausalDifferentiator(1, window=15)
    assert _run(filt, kept, [np.array([np.sin(t)]) for t in kept])[-1] is not None
    assert filt.filter.resets == 0
    spanning = CausalDifferentiator(1, window=15, span_gaps=True)
    _run(spanning, times, values)
    assert spanning.filter.resets == 0


def test_input_errors():
    filt = CausalDifferentiator(2)
    filt.update(1.0, np.zeros(2))
    with pytest.raises(ValueError, match='time must increase'):
        filt.update(1.0, np.zeros(2))
    with pytest.raises(ValueError, match=r'shape \(2,\)'):
        filt.update(2.0, np.zeros(3))
    with pytest.raises(ValueError, match='window'):
        CausalPolyFilter(1, window=2, order=2)
    with pytest.raises(ValueError, match='lag'):
        CausalPolyFilter(1, window=5, order=2, lag=5)
    with pytest.raises(ValueError, match='max_deriv'):
        CausalPolyFilter(1, window=5, order=1, max_deriv=2)
