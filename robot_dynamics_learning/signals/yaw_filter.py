"""
Yaw rate from mocap yaw and the steering command: a small Kalman filter with a car model.

A polynomial fit of the yaw alone must trade noise against lag (docs/results_car.md section
8). Here the steering command predicts the yaw rate: a kinematic bicycle with a first-order
lag, r' = (vx * (gain * s + cubic * s^3) + b - r) / tau, where s is the steering command
`delay_s` before the instant, vx the fitted forward speed and b a slowly drifting bias that
absorbs slip, understeer and a steering offset. States [yaw, r, b]; the mocap yaw is the
measurement. `CommandedEstimator` runs it beside `MocapEstimator` (positions, vx, vy) and
falls back to that fit's yaw rate whenever no fresh command is held. `fit_yaw_model` identifies the
model's constants from recordings with commands.
"""
from dataclasses import dataclass, field, replace
import itertools
import math
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
from robot_dynamics_learning.params import check_ranges, setting
from robot_dynamics_learning.signals.mocap import (CarStateEstimate, MocapEstimator,
                                                   MocapEstimatorConfig, offline_body_states)
from scipy.signal import lfilter


@dataclass(frozen=True)
class YawModelConfig:
    """
    The yaw model and the filter's noise (units: s, rad, rad/s).

    For a bicycle of wheelbase L with steering angle k * s: gain = k / L. Only the ratio of
    yaw_noise to the process noises matters. Defaults: gain, cubic, tau_s and delay_s fitted
    on all 17 DART Vicon recordings, the noises chosen on 6 of them (docs/results_car.md
    section 8).
    """

    gain: float = setting(2.30, 'steady yaw rate per speed and unit steering (rad/m): r = vx * '
                          '(gain * s + cubic * s^3)', -1e3, 1e3)
    cubic: float = setting(-0.81, 'cubic term of that map (rad/m)', -1e3, 1e3)
    tau_s: float = setting(0.08, 'lag of the yaw rate behind the steering (s)', 0.001, 10.0)
    delay_s: float = setting(0.0, 'command transport delay: the command held at t - delay_s '
                             'drives the model at t (s)', 0.0, 1.0)
    yaw_noise: float = setting(0.01, 'mocap yaw noise as the filter sees it (rad)', 1e-6, 1.0)
    accel_noise: float = setting(8.0, 'density of the unmodelled yaw acceleration '
                                 '((rad/s^2)^2 s)', 1e-6, 1e6)
    bias_noise: float = setting(2.0, 'density of the yaw-rate bias drift (slip, steering '
                                'offset; (rad/s)^2/s)', 0.0, 1e6)
    slip_accel: float = setting(3.0, 'lateral acceleration vx * r at which the bias noise '
                                'doubles; it grows with its square (m/s^2; 0: constant)', 0.0,
                                100.0)
    command_timeout_s: float = setting(0.5, 'a command older than this at the pose stamp '
                                       'counts as absent: the fit answers (s)', 0.01, 10.0)

    def __post_init__(self) -> None:
        """Refuse values the filter cannot use, naming them."""
        check_ranges(self)

    def steady_rate(self, vx: float, steering: float) -> float:
        """Return the steady yaw rate (rad/s) the model predicts at speed vx and steering."""
        return vx * (self.gain * steering + self.cubic * steering ** 3)


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
    """Linear Kalman filter on [yaw, r, b] with the model's input; exact discretisation."""

    def __init__(self, model: YawModelConfig, yaw: float, rate: float) -> None:
        self.model = model
        self.x = np.array([yaw, rate, 0.0])
        # Start: the fit's yaw and rate, uncertain by about their fit noise; bias unknown.
        self.P = np.diag([model.yaw_noise ** 2, 0.25, 0.25])

    def predict(self, dt: float, steady_rate: float, vx: float) -> None:
        """Advance by dt (s) with the model's steady yaw rate held over the step, at speed vx."""
        m = self.model
        bias_noise = m.bias_noise
        if m.slip_accel > 0:
            bias_noise *= 1.0 + (vx * self.x[1] / m.slip_accel) ** 2
        a = math.exp(-dt / m.tau_s)
        h = m.tau_s * (1.0 - a)
        F = np.array([[1.0, h, dt - h], [0.0, a, 1.0 - a], [0.0, 0.0, 1.0]])
        self.x = F @ self.x + np.array([dt - h, 1.0 - a, 0.0]) * steady_rate
        q = m.accel_noise
        Q = np.array([[q * dt ** 3 / 3.0, q * dt ** 2 / 2.0, 0.0],
                      [q * dt ** 2 / 2.0, q * dt, 0.0],
                      [0.0, 0.0, bias_noise * dt]])
        self.P = F @ self.P @ F.T + Q

    def correct(self, yaw: float) -> None:
        """Fuse one measured yaw (rad, unwrapped to the filter's yaw)."""
        innovation = yaw - self.x[0]
        gain = self.P[:, 0] / (self.P[0, 0] + self.model.yaw_noise ** 2)
        self.x = self.x + gain * innovation
        self.P = self.P - np.outer(gain, self.P[0, :])


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
        self._filter: Optional[YawKalmanFilter] = None
        self._filter_stamp = 0.0
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
            self._filter = None
        steering = self.commands.at(stamp - self.model.delay_s, self.model.command_timeout_s)
        if fitted is None or steering is None:
            self._filter = None
            if fitted is not None:
                self.command_counters['fit_fallback'] += 1
            self._latest = fitted
            return None
        measured = self.fit.last_yaw
        if self._filter is None:
            self._filter = YawKalmanFilter(self.model, float(fitted.state[2]),
                                           float(fitted.state[5]))
        else:
            held = self.commands.at(self._filter_stamp - self.model.delay_s,
                                    self.model.command_timeout_s)
            vx = float(previous.state[3]) if previous is not None else 0.0
            rate = 0.0 if held is None else self.model.steady_rate(vx, held)
            self._filter.predict(stamp - self._filter_stamp, rate, vx)
        self._filter.correct(measured)
        self._filter_stamp = stamp
        state = fitted.state.copy()
        state[2], state[5] = self._filter.x[0], self._filter.x[1]
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
    residual wins. The noise settings are taken from `base`.
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
                   delay_s=float(delay))
