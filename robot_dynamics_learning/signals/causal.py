"""
Causal (online) smoothing and differentiation of streamed joint signals.

`CausalPolyFilter` is a one-sided Savitzky-Golay filter: at every new sample it fits a
polynomial of degree `order` by least squares to the last `window` samples (their own,
possibly non-uniform, times) and evaluates the polynomial and its derivatives `lag` mean
sample periods before the newest sample. Polynomials of degree <= order are reproduced
exactly, so the estimate describes the signal at `time = t_newest - lag * mean_dt`: that is
the delay, fixed and known, never more than (window - 1) mean periods. lag = 0 gives the
lowest latency and the most noise; lag = (window - 1) / 2 is the centred (classic, delayed)
Savitzky-Golay estimate with the least noise. Work per sample is O(window * channels),
independent of how long the stream runs; joints are vectorised. `CausalDifferentiator` is
its first-derivative-only face (e.g. joint accelerations from measured velocities).
"""
from dataclasses import dataclass
import math
from typing import Optional

import numpy as np


# A step longer than this many window spans restarts a fit (unless span_gaps): a hole that
# long is a new recording or a stopped stream, while messages dropped under load (tens of
# ms at 1 kHz) leave a fit across them close to one without.
GAP_SPANS = 3.0

# Sampling counts as uniform when the steps in the window differ by at most this share of
# their mean: nanosecond stamps of a 1 kHz stream differ by 1-2 ns, and a pseudo-inverse per
# sample (0.1 ms) for such jitter changes the estimate by less than the jitter itself.
UNIFORM_TOLERANCE = 1e-3


@dataclass(frozen=True)
class CausalEstimate:
    """
    The estimate after one sample.

    time: the instant described, t_newest - delay (s). derivatives: (max_deriv + 1, n):
    row 0 the smoothed value, row 1 the first derivative (units/s), row 2 the second.
    delay: seconds between the newest sample and `time`.
    """

    time: float
    derivatives: np.ndarray
    delay: float

    @property
    def value(self) -> np.ndarray:
        """Smoothed signal (n,)."""
        return self.derivatives[0]

    @property
    def rate(self) -> np.ndarray:
        """First derivative (n,), e.g. velocity from positions."""
        return self.derivatives[1]


class CausalPolyFilter:
    """
    Streaming local-polynomial smoother and differentiator over n channels.

    window: samples in the fit (>= order + 1); order: polynomial degree; max_deriv: highest
    derivative returned (<= order); lag: evaluation point in mean sample periods before the
    newest sample, in [0, window - 1]; max_gap: a larger time step than this (s) resets the
    filter (a gap in the stream) before the new sample is used; span_gaps False (default)
    also resets at a step longer than `GAP_SPANS` times what the window spans at its mean
    step (whatever the rate: a fit across it would join two recordings). Output starts once
    `window` samples have arrived since the last reset.
    """

    def __init__(self, n_channels: int, window: int = 15, order: int = 2, max_deriv: int = 1,
                 lag: float = 0.0, max_gap: float = math.inf, span_gaps: bool = False) -> None:
        if n_channels < 1:
            raise ValueError(f'n_channels must be >= 1, got {n_channels}')
        if order < 0 or window < order + 1:
            raise ValueError(f'need order >= 0 and window >= order + 1, got window {window}, '
                             f'order {order}')
        if not 0 <= max_deriv <= order:
            raise ValueError(f'max_deriv must be in [0, order={order}], got {max_deriv}')
        if not 0.0 <= lag <= window - 1:
            raise ValueError(f'lag must be in [0, window - 1 = {window - 1}], got {lag}')
        if not max_gap > 0:
            raise ValueError(f'max_gap must be positive, got {max_gap}')
        self.n_channels = n_channels
        self.window = window
        self.order = order
        self.max_deriv = max_deriv
        self.lag = float(lag)
        self.max_gap = float(max_gap)
        self.span_gaps = span_gaps
        # Double-length ring buffers: sample k is stored at k % window and k % window + window,
        # so the last `window` samples are always one contiguous, chronological slice.
        self._times = np.zeros(2 * window)
        self._values = np.zeros((2 * window, n_channels))
        self._uniform_tau = np.linspace(-1.0, 0.0, window)
        self._uniform_weights = self._weights(self._uniform_tau)
        self.resets = 0
        self.reset()

    def reset(self) -> None:
        """Forget all samples (after a gap or a jump); output resumes after `window` more."""
        self._count = 0
        self._last_time: Optional[float] = None

    def _weights(self, tau: np.ndarray) -> np.ndarray:
        """
        Weights (max_deriv + 1, window) mapping samples to derivatives in scaled time.

        tau: sample times scaled to [-1, 0] (newest at 0). The fit is c = pinv(V) x with
        V[i, j] = tau_i^j; derivative d at tau_e is sum_j c_j j!/(j-d)! tau_e^(j-d).
        """
        powers = np.arange(self.order + 1)
        vandermonde = tau[:, None] ** powers[None, :]
        fit = np.linalg.pinv(vandermonde)  # (order + 1, window)
        tau_e = -self.lag / (self.window - 1) if self.window > 1 else 0.0
        evaluate = np.zeros((self.max_deriv + 1, self.order + 1))
        for d in range(self.max_deriv + 1):
            for j in range(d, self.order + 1):
                evaluate[d, j] = math.factorial(j) / math.factorial(j - d) * tau_e ** (j - d)
        return evaluate @ fit

    def _gap_limit(self) -> float:
        """Return the longest step (s) that keeps the samples held: max_gap, or the span."""
        held = min(self._count, self.window)
        if self.span_gaps or held < 2:
            return self.max_gap
        first = self._times[(self._count - held) % self.window]
        mean_step = (self._last_time - first) / (held - 1)
        return min(self.max_gap, GAP_SPANS * (self.window - 1) * mean_step)

    def update(self, t: float, x: np.ndarray) -> Optional[CausalEstimate]:
        """
        Add sample x (n,) taken at time t (s, strictly increasing); return the estimate.

        Returns None until `window` samples have arrived since the last reset.
        """
        x = np.asarray(x, dtype=np.float64)
        if x.shape != (self.n_channels,):
            raise ValueError(f'sample must have shape ({self.n_channels},), got {x.shape}')
        if self._last_time is not None:
            if not t > self._last_time:
                raise ValueError(f'time must increase: {t} after {self._last_time}')
            if t - self._last_time > self._gap_limit():
                self.resets += 1
                self.reset()
        i = self._count % self.window
        self._times[i] = self._times[i + self.window] = t
        self._values[i] = self._values[i + self.window] = x
        self._count += 1
        self._last_time = t
        if self._count < self.window:
            return None
        times = self._times[i + 1:i + 1 + self.window]
        values = self._values[i + 1:i + 1 + self.window]
        span = times[-1] - times[0]
        if self.window == 1:
            return CausalEstimate(float(t), values.copy(), 0.0)
        steps = np.diff(times)
        mean_step = span / (self.window - 1)
        if np.ptp(steps) <= UNIFORM_TOLERANCE * mean_step:
            weights = self._uniform_weights
        else:
            weights = self._weights((times - t) / span)
        derivatives = weights @ values
        # Back from scaled time tau = (t' - t) / span to seconds: d-th derivative / span^d.
        derivatives /= span ** np.arange(self.max_deriv + 1)[:, None]
        delay = self.lag * mean_step
        return CausalEstimate(float(t - delay), derivatives, float(delay))

    def noise_gain(self, dt: float, deriv: int = 1) -> float:
        """
        Std of derivative `deriv` per unit white-noise std, for uniform sampling at dt.

        For comparison: a first difference has gain sqrt(2) / dt.
        """
        if not 0 <= deriv <= self.max_deriv:
            raise ValueError(f'deriv must be in [0, {self.max_deriv}], got {deriv}')
        span = dt * (self.window - 1)
        return float(np.linalg.norm(self._uniform_weights[deriv]) / span ** deriv)


class CausalDifferentiator:
    """
    First derivative of a stream at bounded delay: `update(t, x) -> (n,) or None`.

    A `CausalPolyFilter` (window, order, lag, max_gap, span_gaps as there) returning only
    row 1. The
    derivative describes time t - lag * mean_dt; `delay(dt)` gives that in seconds. Defaults
    (15 samples, quadratic, lag 0) have zero delay for signals up to quadratic and 0.16 times
    the noise of a first difference (white noise, uniform dt).
    """

    def __init__(self, n_channels: int, window: int = 15, order: int = 2, lag: float = 0.0,
                 max_gap: float = math.inf, span_gaps: bool = False) -> None:
        self.filter = CausalPolyFilter(n_channels, window, order, max_deriv=1, lag=lag,
                                       max_gap=max_gap, span_gaps=span_gaps)

    def update(self, t: float, x: np.ndarray) -> Optional[np.ndarray]:
        """Add sample x (n,) at time t (s); return dx/dt (n,) or None while warming up."""
        estimate = self.filter.update(t, x)
        return None if estimate is None else estimate.rate

    def reset(self) -> None:
        """Forget all samples (call after a gap or a time jump)."""
        self.filter.reset()

    def delay(self, dt: float) -> float:
        """Return the delay in seconds for sample period dt."""
        return self.filter.lag * dt
