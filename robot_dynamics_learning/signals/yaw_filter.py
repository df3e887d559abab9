"""
Yaw rate from mocap yaw and the steering command: a small Kalman filter with a car model.

A polynomial fit of the yaw alone must trade noise against lag (docs/results_car.md section
8). Here the steering command predicts the yaw rate: a bicycle with a first-order lag,
r' = (vx * (gain * s + cubic * s^3) + lateral_gain * vy + b - r) / (tau_s + tau_per_speed *
vx), where s is the steering command `delay_s` before the instant, vx and vy the fitted
velocities and b a slowly drifting bias that absorbs slip, saturation and a steering offset
(the vy term and the speed-dependent lag are a bicycle with linear tyres). States [yaw, r,
b]; the mocap yaw is the measurement. The process noise of r grows after steering steps (the
model's transients are least certain there) and that of b in hard turns.
`CommandedEstimator` runs it beside `MocapEstimator` (positions, vx, vy) and falls back to
that fit's yaw rate whenever no fresh command is held. `fit_yaw_model` identifies the
model's constants from recordings with commands, `tune_yaw_filter` refines them and the
noises against the filter's own error.
"""
import dataclasses
from dataclasses import dataclass, field, replace
import itertools
import math
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
from robot_dynamics_learning.params import check_ranges, setting
from robot_dynamics_learning.signals.mocap import (CarStateEstimate, MocapEstimator,
                                                   MocapEstimatorConfig, offline_body_states)
from scipy.optimize import minimize
from scipy.signal import lfilter


@dataclass(frozen=True)
class YawModelConfig:
    """
    The yaw model and the filter's noise (units: s, rad, rad/s).

    For a bicycle of wheelbase L with steering angle k * s: gain = k / L. Only the ratio of
    yaw_noise to the process noises matters. Defaults: the DART car's, identified on all 17
    of its Vicon recordings (`fit_yaw_model`, then `tune_yaw_filter`; bench/car_data.py,
    docs/results_car.md section 8).
    """

    gain: float = setting(2.21, 'steady yaw rate per speed and unit steering (rad/m): r = vx * '
                          '(gain * s + cubic * s^3)', -1e3, 1e3)
    cubic: float = setting(-0.79, 'cubic term of that map (rad/m)', -1e3, 1e3)
    tau_s: float = setting(0.054, 'lag of the yaw rate behind the steady rate at standstill '
                           '(s); tau_s + tau_per_speed * vx while driving', 0.001, 10.0)
    lateral_gain: float = setting(1.84, 'steady yaw rate per lateral velocity (1/m): r = ... + '
                                  'lateral_gain * vy, the measured vy (a linear-tyre bicycle: '
                                  'positive when the rear tyres turn a side-slipping car back '
                                  'towards its velocity)', -100.0, 100.0)
    tau_per_speed: float = setting(0.0103, 'growth of tau_s with the forward speed (s per m/s): '
                                   'the yaw time constant of tyres with cornering stiffness '
                                   'grows with speed', 0.0, 10.0)
    delay_s: float = setting(0.0, 'command transport delay: the command held at t - delay_s '
                             'drives the model at t (s)', 0.0, 1.0)
    yaw_noise: float = setting(0.01, 'mocap yaw noise as the filter sees it (rad)', 1e-6, 1.0)
    accel_noise: float = setting(7.0, 'density of the unmodelled yaw acceleration '
                                 '((rad/s^2)^2 s)', 1e-6, 1e6)
    bias_noise: float = setting(0.45, 'density of the yaw-rate bias drift (slip, steering '
                                'offset; (rad/s)^2/s)', 0.0, 1e6)
    slip_accel: float = setting(2.0, 'lateral acceleration vx * r at which the bias noise '
                                'doubles; it grows with its square (m/s^2; 0: constant)', 0.0,
                                100.0)
    step_rate: float = setting(0.28, 'steering step vx * |change of the command| (m/s), summed '
                               'and decaying over step_memory_s, at which the yaw acceleration '
                               'noise doubles; it grows with its square (0: constant)', 0.0,
                               100.0)
    step_memory_s: float = setting(0.096, 'decay time of that step memory (s)', 0.001, 10.0)
    command_timeout_s: float = setting(0.5, 'a command older than this at the pose stamp '
                                       'counts as absent: the fit answers (s)', 0.01, 10.0)

    def __post_init__(self) -> None:
        """Refuse values the filter cannot use, naming them."""
        check_ranges(self)

    def steady_rate(self, vx: float, steering: float, vy: float = 0.0) -> float:
        """Return the steady yaw rate (rad/s) the model predicts at vx, vy (m/s), steering."""
        return vx * (self.gain * steering + self.cubic * steering ** 3) + self.lateral_gain * vy

    def time_constant(self, vx: float) -> float:
        """Return the lag (s) of the yaw rate behind the steady rate at forward speed vx."""
        return self.tau_s + self.tau_per_speed * max(vx, 0.0)


class CommandHistory:
    """Stamped steering commands, held (zero-order) until the next one; bounded."""

    def __init__(self, capacity: int = 256) -> None:
        self.capacity = capacity
        self._stamps: list = []
        self._steering: list = []

    @property
    def last_stamp(self) -> Optional[float]:
        """Stamp (s) of the newest command, None before the first."""
        return self._stamps[-1] if self._stamps else None

    def add(self, stamp: float, steering: float) -> None:
        """Append a command (stamp newer than the last one: the caller checks)."""
        self._stamps.append(stamp)
        self._steering.append(steering)
        if len(self._stamps) > self.capacity:
            del self._stamps[0], self._steering[0]

    def at(self, t: float, timeout_s: float) -> Optional[float]:
        """Return the steering held at t, None when none was given within timeout_s before."""
        index = int(np.searchsorted(self._stamps, t, side='right')) - 1
        if index < 0 or t - self._stamps[index] > timeout_s:
            return None
        return self._steering[index]


class YawKalmanFilter:
    """
    Linear Kalman filter on [yaw, r, b] with the model's input; exact discretisation.

    Scalar arithmetic on the six distinct covariance entries (about 6x faster than 3 x 3
    numpy products: `tune_yaw_filter` runs it millions of times); `x` and `P` return arrays.
    """

    def __init__(self, model: YawModelConfig, yaw: float, rate: float) -> None:
        self.model = model
        self.yaw, self.rate, self.bias = yaw, rate, 0.0
        # Start: the fit's yaw and rate, uncertain by about their fit noise; bias unknown.
        self._p = [model.yaw_noise ** 2, 0.0, 0.0, 0.25, 0.0, 0.25]   # 00 01 02 11 12 22
        self.step_memory = 0.0

    @property
    def x(self) -> np.ndarray:
        """State [yaw, r, b] (rad, rad/s, rad/s)."""
        return np.array([self.yaw, self.rate, self.bias])

    @property
    def P(self) -> np.ndarray:
        """State covariance (3, 3)."""
        p00, p01, p02, p11, p12, p22 = self._p
        return np.array([[p00, p01, p02], [p01, p11, p12], [p02, p12, p22]])

    def predict(self, dt: float, steady_rate: float, vx: float, step: float = 0.0) -> None:
        """
        Advance by dt (s) with the model's steady yaw rate held over the step, at speed vx.

        step: the change of the held steering command since the last prediction; vx * |step|
        feeds the step memory that raises the yaw acceleration noise (`step_rate`).
        """
        m = self.model
        bias_noise = m.bias_noise
        if m.slip_accel > 0:
            bias_noise *= 1.0 + (vx * self.rate / m.slip_accel) ** 2
        self.step_memory = (self.step_memory * math.exp(-dt / m.step_memory_s)
                            + abs(vx * step))
        q = m.accel_noise
        if m.step_rate > 0:
            q *= 1.0 + (self.step_memory / m.step_rate) ** 2
        tau = m.time_constant(vx)
        a = math.exp(-dt / tau)
        h = tau * (1.0 - a)
        g0, g1 = dt - h, 1.0 - a   # F = [[1, h, g0], [0, a, g1], [0, 0, 1]]
        target = self.bias + steady_rate
        self.yaw += h * self.rate + g0 * target
        self.rate = a * self.rate + g1 * target
        p00, p01, p02, p11, p12, p22 = self._p
        f0 = (p00 + h * p01 + g0 * p02, p01 + h * p11 + g0 * p12, p02 + h * p12 + g0 * p22)
        f1 = (a * p11 + g1 * p12, a * p12 + g1 * p22)   # (F P)[1, 1:], its [1, 0] is unused
        self._p = [f0[0] + h * f0[1] + g0 * f0[2] + q * dt ** 3 / 3.0,
                   a * f0[1] + g1 * f0[2] + q * dt ** 2 / 2.0,
                   f0[2],
                   a * f1[0] + g1 * f1[1] + q * dt,
                   f1[1],
                   p22 + bias_noise * dt]

    def correct(self, yaw: float) -> None:
        """Fuse one measured yaw (rad, unwrapped to the filter's yaw)."""
        p00, p01, p02, p11, p12, p22 = self._p
        s = p00 + self.model.yaw_noise ** 2
        k0, k1, k2 = p00 / s, p01 / s, p02 / s
        innovation = yaw - self.yaw
        self.yaw += k0 * innovation
        self.rate += k1 * innovation
        self.bias += k2 * innovation
        self._p = [p00 - k0 * p00, p01 - k0 * p01, p02 - k0 * p02, p11 - k1 * p01,
                   p12 - k1 * p02, p22 - k2 * p02]


class YawRateTracker:
    """
    One drive of the filter: start from the fit, then predict with the held command and correct.

    `CommandedEstimator` runs it pose by pose; `replay_yaw_rates` on stored fit states (what
    `tune_yaw_filter` scores). `reset` when the filter must restart (no command, relock).
    """

    def __init__(self, model: YawModelConfig) -> None:
        self.model = model
        self.filter: Optional[YawKalmanFilter] = None
        self.stamp = 0.0
        self._held: Optional[float] = None

    @property
    def running(self) -> bool:
        """Whether the filter has started (the next step predicts from `stamp`)."""
        return self.filter is not None

    def reset(self) -> None:
        """Forget the filter; the next step starts a new one from the fit."""
        self.filter = None
        self._held = None

    def step(self, stamp: float, yaw: float, fitted_yaw: float, fitted_rate: float, vx: float,
             vy: float, held: Optional[float]) -> Tuple[float, float]:
        """
        Take one pose: measured yaw (rad), the fit's yaw and rate, the previous vx and vy (m/s).

        held: the steering command held at the previous step's stamp minus delay_s (None: no
        command: the model predicts a zero steady rate). Returns the filter's (yaw, r).
        """
        if self.filter is None:
            self.filter = YawKalmanFilter(self.model, fitted_yaw, fitted_rate)
        else:
            rate = 0.0 if held is None else self.model.steady_rate(vx, held, vy)
            step = 0.0 if held is None or self._held is None else held - self._held
            self.filter.predict(stamp - self.stamp, rate, vx, step)
            self._held = held
        self.filter.correct(yaw)
        self.stamp = stamp
        return self.filter.yaw, self.filter.rate


@dataclass
class CommandedEstimator:
    """
    `MocapEstimator` plus the command-driven yaw filter: the node's core.

    `update_command` accepts or rejects a stamped command (reason counted); `update` takes a
    pose as `MocapEstimator.update` does. The estimate's yaw and yaw rate come from the
    filter while a command no older than command_timeout_s is held, else from the fit
    (counted as `fit_fallback`); x, y, vx, vy always from the fit. Not thread-safe.
    """

    config: MocapEstimatorConfig = field(default_factory=MocapEstimatorConfig)
    model: YawModelConfig = field(default_factory=YawModelConfig)

    def __post_init__(self) -> None:
        """Build the fit and the (empty) command history."""
        self.fit = MocapEstimator(self.config)
        self.commands = CommandHistory()
        self.command_counters = {'command_accepted': 0, 'command_rejected_nan': 0,
                                 'command_rejected_late': 0, 'fit_fallback': 0}
        self._tracker = YawRateTracker(self.model)
        self._relocks = 0
        self._latest: Optional[CarStateEstimate] = None

    @property
    def counters(self) -> Dict[str, int]:
        """Pose counters of the fit and the command counters, in one dict."""
        return {**self.fit.counters, **self.command_counters}

    @property
    def last_stamp(self) -> Optional[float]:
        """Stamp (s) of the newest accepted pose."""
        return self.fit.last_stamp

    def is_stale(self, now: float) -> bool:
        """Return True when no pose was accepted within stale_after_s before `now` (s)."""
        return self.fit.is_stale(now)

    def estimate(self) -> Optional[CarStateEstimate]:
        """Return the latest estimate, None before the fit has one."""
        return self._latest

    def reset(self) -> None:
        """Forget every pose and command (counters are kept): time went back."""
        self.fit.reset()
        self.commands = CommandHistory()
        self._tracker.reset()
        self._latest = None

    def update_command(self, stamp: float, throttle: float, steering: float) -> Optional[str]:
        """
        Offer one command (stamp in s; normalised throttle and steering).

        Returns None when accepted, else 'nan' (non-finite values) or 'late' (not newer than
        the last command, or older than command_timeout_s at the newest pose: stale on
        arrival); both are counted.
        """
        if not all(math.isfinite(v) for v in (stamp, throttle, steering)):
            self.command_counters['command_rejected_nan'] += 1
            return 'nan'
        last_command, last_pose = self.commands.last_stamp, self.fit.last_stamp
        if ((last_command is not None and stamp <= last_command)
                or (last_pose is not None and stamp < last_pose - self.model.command_timeout_s)):
            self.command_counters['command_rejected_late'] += 1
            return 'late'
        self.commands.add(stamp, steering)
        self.command_counters['command_accepted'] += 1
        return None

    def update(self, stamp: float, x: float, y: float, yaw: float) -> Optional[str]:
        """Offer one pose; returns None or the fit's rejection reason (see MocapEstimator)."""
        previous = self._latest
        reason = self.fit.update(stamp, x, y, yaw)
        if reason is not None:
            return reason
        fitted = self.fit.estimate()
        if self.fit.counters['relocked'] != self._relocks or fitted is None:
            self._relocks = self.fit.counters['relocked']
            self._tracker.reset()
        steering = self.commands.at(stamp - self.model.delay_s, self.model.command_timeout_s)
        if fitted is None or steering is None:
            self._tracker.reset()
            if fitted is not None:
                self.command_counters['fit_fallback'] += 1
            self._latest = fitted
            return None
        held = None
        if self._tracker.running:
            held = self.commands.at(self._tracker.stamp - self.model.delay_s,
                                    self.model.command_timeout_s)
        vx = vy = 0.0
        if previous is not None:
            vx, vy = float(previous.state[3]), float(previous.state[4])
        state = fitted.state.copy()
        state[2], state[5] = self._tracker.step(stamp, self.fit.last_yaw, float(fitted.state[2]),
                                                float(fitted.state[5]), vx, vy, held)
        self._latest = fitted._replace(state=state)
        return None


def fit_yaw_model(drives: Sequence[Tuple[np.ndarray, np.ndarray, np.ndarray]],
                  dt: float = 0.01, window_s: float = 0.2,
                  taus: Sequence[float] = tuple(np.arange(0.02, 0.31, 0.02)),
                  delays: Sequence[float] = tuple(np.arange(0.0, 0.101, 0.02)),
                  base: YawModelConfig = YawModelConfig()) -> YawModelConfig:
    """
    Identify the model from recordings (time (T,), poses (T, 3), steering (T,)).

    For every (tau, delay) of the grids the model's yaw rate is linear in (gain, cubic): least
    squares against the zero-phase yaw rate over all drives; the grid point with the least
    residual wins. The noise settings are taken from `base`; lateral_gain and tau_per_speed
    are 0 (this fit has no vy and a constant lag: `tune_yaw_filter` sets them).
    """
    pieces = []
    for time, poses, steering in drives:
        grid, states = offline_body_states(time, poses, dt, window_s, order=3)
        pieces.append((grid, states[:, 3], states[:, 5], time, np.asarray(steering, float)))
    best = None
    for delay, tau in itertools.product(delays, taus):
        a = math.exp(-dt / tau)
        rows, targets = [], []
        for grid, vx, rate, time, steering in pieces:
            command = np.interp(grid - delay, time, steering)
            raw = np.stack([vx * command, vx * command ** 3], 1)
            lagged = lfilter([0.0, 1.0 - a], [1.0, -a], raw, axis=0)
            keep = grid >= grid[0] + delay + 3 * tau   # past the filter's start-up
            rows.append(lagged[keep])
            targets.append(rate[keep])
        X, y = np.concatenate(rows), np.concatenate(targets)
        coef = np.linalg.lstsq(X, y, rcond=None)[0]
        residual = float(np.mean((y - X @ coef) ** 2))
        if best is None or residual < best[0]:
            best = (residual, coef, tau, delay)
    _, coef, tau, delay = best
    return replace(base, gain=float(coef[0]), cubic=float(coef[1]), tau_s=float(tau),
                   delay_s=float(delay), lateral_gain=0.0, tau_per_speed=0.0)


def replay_yaw_rates(model: YawModelConfig, time: np.ndarray, yaw: np.ndarray,
                     fitted: np.ndarray, steering: np.ndarray) -> np.ndarray:
    """
    Return the yaw rates (T,) `CommandedEstimator` gives on a recording, from stored fits.

    time, yaw (T,): pose stamps and mocap yaw (unwrapped); fitted (T, 6): the fit's states
    at those poses (`MocapEstimator`, NaN where it had none: skipped); steering (T,): one
    command per pose, stamped with it (a recording's commands, as `car_data` reads them).
    """
    tracker = YawRateTracker(model)
    out = np.full(len(time), np.nan)
    vx = vy = 0.0
    for k in range(len(time)):
        if not math.isfinite(fitted[k, 5]):
            continue
        held = None
        if tracker.running:
            index = int(np.searchsorted(time, tracker.stamp - model.delay_s, side='right'))
            held = float(steering[max(index - 1, 0)])
        out[k] = tracker.step(float(time[k]), float(yaw[k]), float(fitted[k, 2]),
                              float(fitted[k, 5]), vx, vy, held)[1]
        vx, vy = float(fitted[k, 3]), float(fitted[k, 4])
    return out


TUNED = ('gain', 'cubic', 'tau_s', 'tau_per_speed', 'lateral_gain', 'accel_noise',
         'bias_noise', 'slip_accel', 'step_rate', 'step_memory_s')


def tune_yaw_filter(drives: Sequence[Tuple[np.ndarray, ...]],
                    base: YawModelConfig = YawModelConfig(), names: Sequence[str] = TUNED,
                    max_evals: int = 200) -> Tuple[YawModelConfig, float]:
    """
    Choose the model and noise settings that minimise the filter's error on recordings.

    drives: (time, yaw, fitted, steering, reference) per recording, the first four as
    `replay_yaw_rates` takes them, reference (T,) the zero-phase yaw rate (NaN where none,
    e.g. `estimator_check.reference_states(...)[:, 5]`). Powell's method from `base` over the
    settings `names` (positive ones in log scale, within their declared ranges; a setting
    that is 0 in `base` stays off), at most max_evals filter runs; the objective is the
    RMSE pooled over every pose with a reference. `fit_yaw_model` gives a good start: the
    filter's own error rewards what the yaw-rate domain least squares cannot weigh, the
    mocap noise it passes. Returns (settings, their pooled RMSE in rad/s); no names: `base`
    and its RMSE.
    """
    fields = {f.name: f for f in dataclasses.fields(YawModelConfig)}
    names = [n for n in names if getattr(base, n) != 0.0 or fields[n].metadata['range'][0] < 0]
    logs = [fields[n].metadata['range'][0] >= 0 for n in names]
    bounds = []
    for name, log in zip(names, logs):
        low, high = fields[name].metadata['range']
        bounds.append((math.log(max(low, 1e-9)), math.log(high)) if log else (low, high))

    def settings(z: np.ndarray) -> YawModelConfig:
        values = {n: float(math.exp(v) if log else v) for n, v, log in zip(names, z, logs)}
        return replace(base, **values)

    def pooled_rmse(z: np.ndarray) -> float:
        model = settings(z)
        total, count = 0.0, 0
        for time, yaw, fitted, steering, reference in drives:
            error = replay_yaw_rates(model, time, yaw, fitted, steering) - reference
            error = error[np.isfinite(error)]
            total, count = total + float(error @ error), count + len(error)
        if count == 0:
            raise ValueError('tune_yaw_filter: no pose has both an estimate and a reference')
        return math.sqrt(total / count)

    start = np.array([math.log(getattr(base, n)) if log else getattr(base, n)
                      for n, log in zip(names, logs)])
    start_rmse = pooled_rmse(start)
    if not names:
        return base, start_rmse
    result = minimize(pooled_rmse, start, method='Powell', bounds=bounds,
                      options={'maxfev': max_evals, 'xtol': 1e-2, 'ftol': 1e-4})
    if result.fun >= start_rmse:
        return base, start_rmse
    return settings(result.x), float(result.fun)
