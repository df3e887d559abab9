"""
Reference joint trajectories for the arm simulator: excitation, reaching, or both.

Every reference is an analytic function of time, so a simulator can run forever and any
block of times is evaluated in one vectorised call (no per-step Python):

- excitation: a finite Fourier series per joint (the usual identification excitation,
  q_j(t) = c_j + sum_k a_jk sin(2 pi f_k t + phi_jk)), amplitudes scaled to stay inside
  `limit_fraction` of the joint range;
- reaching: point-to-point minimum-jerk moves (Flash and Hogan: s(u) = 10u^3 - 15u^4 + 6u^5)
  between random configurations, each move followed by a rest; waypoint k depends only on
  (seed, k), so the reference at any time needs no history;
- mixed: reaching plus a small excitation on top (what a working robot plus a little
  persistent excitation looks like).

Units: rad, rad/s, rad/s^2; arrays (T, n).
"""
from dataclasses import dataclass
from typing import Tuple

import numpy as np
from robot_dynamics_learning.params import check_ranges, setting

MODES = ('excitation', 'reaching', 'mixed')


@dataclass(frozen=True)
class ReferenceConfig:
    """Which reference and its shape; the seed makes it reproducible."""

    mode: str = setting('excitation', f'reference trajectory, one of {MODES}')
    limit_fraction: float = setting(0.6, "share of each joint's range the reference may use "
                                    '(about its centre)', 1e-3, 1.0)
    harmonics: int = setting(5, 'Fourier harmonics of the excitation', 1, 100)
    base_frequency: float = setting(0.1, 'excitation frequencies are this x (1..harmonics) '
                                    '(Hz)', 1e-4, 100.0)
    move_time: float = setting(1.5, 'duration of one reaching move (s)', 1e-3, 1e4)
    rest_time: float = setting(0.3, 'rest after each reaching move (s)', 0.0, 1e4)
    mixed_excitation: float = setting(0.3, 'share of the range given to the excitation in '
                                      "'mixed' mode (the reaching moves use the rest)", 0.0,
                                      1.0)
    seed: int = setting(0, 'seed of the reference')

    def __post_init__(self) -> None:
        """Reject unusable values, naming them."""
        check_ranges(self)
        if self.mode not in MODES:
            raise ValueError(f'mode must be one of {MODES}, got {self.mode!r}')


def minimum_jerk(t: np.ndarray, duration: float) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """
    Return the minimum-jerk path s, ds/dt, d2s/dt2 from 0 to 1 over `duration` s at times t.

    s(u) = 10u^3 - 15u^4 + 6u^5 with u = t / duration clipped to [0, 1] (Flash and Hogan):
    zero velocity and acceleration at both ends.
    """
    u = np.clip(t / duration, 0.0, 1.0)
    s = u ** 3 * (10 - 15 * u + 6 * u ** 2)
    sd = 30 * u ** 2 * (1 - u) ** 2 / duration
    sdd = 60 * u * (1 - u) * (1 - 2 * u) / duration ** 2
    return s, sd, sdd


class JointReference:
    """Reference q, qd, qdd (T, n) at any times for joints with limits lower/upper (n,)."""

    def __init__(self, lower: np.ndarray, upper: np.ndarray, config: ReferenceConfig) -> None:
        lower, upper = np.asarray(lower, float), np.asarray(upper, float)
        if lower.shape != upper.shape or np.any(upper <= lower):
            raise ValueError(f'joint limits must satisfy lower < upper: {lower}, {upper}')
        self.config = config
        self.centre = 0.5 * (lower + upper)
        self.half_range = 0.5 * (upper - lower) * config.limit_fraction
        n, k = lower.size, config.harmonics
        rng = np.random.default_rng(config.seed)
        self.frequencies = config.base_frequency * np.arange(1, k + 1)        # (k,) Hz
        self.phases = rng.uniform(0, 2 * np.pi, (n, k))
        # Amplitude ~ 1/f keeps accelerations bounded; the sum of |a| fills half the range.
        weights = rng.uniform(0.5, 1.0, (n, k)) / np.arange(1, k + 1)
        self.amplitudes = weights / weights.sum(axis=1, keepdims=True) * self.half_range[:, None]

    def _excitation(self, t: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        omega = 2 * np.pi * self.frequencies                               # (k,)
        angle = omega[None, None, :] * t[:, None, None] + self.phases[None]  # (T, n, k)
        a = self.amplitudes[None]
        q = np.sum(a * np.sin(angle), axis=-1)
        qd = np.sum(a * omega * np.cos(angle), axis=-1)
        qdd = -np.sum(a * omega ** 2 * np.sin(angle), axis=-1)
        return q, qd, qdd

    def _waypoints(self, index: np.ndarray) -> np.ndarray:
        """Waypoint k (offset from the centre) as a pure function of (seed, k)."""
        n = self.centre.size
        out = np.empty((index.size, n))
        for i, k in enumerate(index):
            out[i] = np.random.default_rng((self.config.seed, int(k))).uniform(-1, 1, n)
        return out * self.half_range

    def _reaching(self, t: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        c = self.config
        period = c.move_time + c.rest_time
        move = np.floor(t / period).astype(np.int64)
        unique, inverse = np.unique(move, return_inverse=True)
        start = self._waypoints(unique)[inverse]
        goal = self._waypoints(unique + 1)[inverse]
        s, sd, sdd = minimum_jerk((t - move * period)[:, None], c.move_time)
        delta = goal - start
        return start + s * delta, sd * delta, sdd * delta

    def __call__(self, t: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return q, qd, qdd, each (T, n), at times t (T,) in seconds."""
        t = np.atleast_1d(np.asarray(t, dtype=np.float64))
        mode = self.config.mode
        if mode == 'excitation':
            q, qd, qdd = self._excitation(t)
        elif mode == 'reaching':
            q, qd, qdd = self._reaching(t)
        else:
            # Reaching shrinks by the excitation share so the sum stays inside the range.
            scale = self.config.mixed_excitation
            q, qd, qdd = (value * (1.0 - scale) for value in self._reaching(t))
            eq, eqd, eqdd = self._excitation(t)
            q, qd, qdd = q + scale * eq, qd + scale * eqd, qdd + scale * eqdd
        return self.centre + q, qd, qdd
