"""
Motion-capture poses -> smoothed planar pose and body-frame velocities (vx, vy, yaw rate).

Offline (seed 003, Sec. III-A): resample to a uniform grid, Savitzky-Golay smoothing and
derivative of x, y and the unwrapped yaw (zero phase), then rotate the world velocity into the
car frame. Online: `MocapEstimator`, causal local polynomial fits of the positions and the
yaw over the last `window_s` / `yaw_window_s` seconds, by default quadratic and evaluated at
the newest stamp (no delay for signals up to quadratic; tolerant of dropouts and uneven
stamps), with rejection of NaN poses, out-of-order stamps and jumps, and stale detection.
Frames: world x, y (m), yaw about z (rad); body x forward, y left.
"""
from dataclasses import dataclass, field
from typing import Dict, NamedTuple, Optional, Tuple

import numpy as np
from robot_dynamics_learning.params import check_ranges, setting
from robot_dynamics_learning.signals.offline import savgol_derivative


def wrap_angle(angle: np.ndarray) -> np.ndarray:
    """Wrap angles (rad) to [-pi, pi)."""
    return (np.asarray(angle) + np.pi) % (2.0 * np.pi) - np.pi


def world_to_body(yaw: np.ndarray, vx_world: np.ndarray, vy_world: np.ndarray
                  ) -> Tuple[np.ndarray, np.ndarray]:
    """Rotate world-frame planar velocities into the car frame at heading `yaw`."""
    c, s = np.cos(yaw), np.sin(yaw)
    return c * vx_world + s * vy_world, -s * vx_world + c * vy_world


def resample_uniform(time: np.ndarray, values: np.ndarray, dt: float
                     ) -> Tuple[np.ndarray, np.ndarray]:
    """Linearly interpolate (T, n) values at strictly increasing `time` onto a grid of `dt`."""
    if dt <= 0:
        raise ValueError(f'dt must be positive, got {dt}')
    grid = np.arange(time[0], time[-1] + 0.5 * dt, dt)
    grid = grid[grid <= time[-1]]
    out = np.stack([np.interp(grid, time, values[:, i]) for i in range(values.shape[1])], 1)
    return grid, out


def offline_body_states(time: np.ndarray, poses: np.ndarray, dt: float,
                        window_s: float = 0.1, order: int = 3
                        ) -> Tuple[np.ndarray, np.ndarray]:
    """
    Smooth (T, 3) poses [x, y, yaw] at `time` and derive body velocities (zero phase).

    Returns (grid (N,), states (N, 6) [x, y, yaw unwrapped, vx, vy, r]) on a uniform grid of
    `dt`. Yaw may be wrapped or unwrapped on input.
    """
    poses = np.asarray(poses, dtype=np.float64).copy()
    if not np.all(np.isfinite(poses)):
        raise ValueError('offline_body_states: poses contain NaN or inf; drop those rows first')
    poses[:, 2] = np.unwrap(poses[:, 2])
    grid, uniform = resample_uniform(np.asarray(time, dtype=np.float64), poses, dt)
    smooth = savgol_derivative(uniform, dt, window_s, order, deriv=0)
    rate = savgol_derivative(uniform, dt, window_s, order, deriv=1)
    vx, vy = world_to_body(smooth[:, 2], rate[:, 0], rate[:, 1])
    return grid, np.column_stack([smooth, vx, vy, rate[:, 2]])


class CarStateEstimate(NamedTuple):
    """Estimated car state at `stamp` (s): (6,) [x, y, yaw, vx, vy, r], yaw unwrapped."""

    stamp: float
    state: np.ndarray


@dataclass
class MocapEstimatorConfig:
    """
    Settings of the online estimator (units: s, m, m/s).

    Defaults: measured on replayed DART Vicon recordings (100 Hz, about 0.2 mm and 1 mrad
    noise; docs/results_car.md section 8).
    """

    window_s: float = setting(0.12, 'causal fit window of the positions (s)', 0.005, 1.0)
    yaw_window_s: Optional[float] = setting(None, 'causal fit window of the yaw (s); None: '
                                            'window_s')
    order: int = setting(2, 'polynomial order of the fits: 2 = evaluated at the newest stamp '
                         '(no delay), 1 = a straight line (delay about half the window, least '
                         'noise)', 1, 2)
    min_samples: int = setting(4, 'poses needed in the window before publishing', 2, 1000)
    max_speed: float = setting(8.0, 'fastest plausible car speed for jump rejection (m/s)',
                               0.1, 100.0)
    jump_margin: float = setting(0.1, 'extra distance allowed between poses (m)', 0.0, 10.0)
    relock_after: int = setting(10, 'consecutive jumps after which the new position is '
                                'accepted (the body was moved)', 1, 10000)
    stale_after_s: float = setting(0.1, 'age that makes the estimate stale (s)', 1e-3, 60.0)
    capacity: int = setting(256, 'poses kept for the fits', 2, 100000)

    def __post_init__(self) -> None:
        """Validate ranges so that a bad config fails at start-up, naming the value."""
        check_ranges(self)
        if self.yaw_window_s is not None and not 0 < self.yaw_window_s <= 1.0:
            raise ValueError(f'yaw_window_s must be in (0, 1] s or None, got '
                             f'{self.yaw_window_s}')
        if self.min_samples < self.order + 1:
            raise ValueError(f'min_samples must be at least order + 1, got {self.min_samples}')
        if self.capacity < self.min_samples:
            raise ValueError('capacity must be >= min_samples')


def emulated_mocap_config() -> MocapEstimatorConfig:
    """
    Return the settings for car_sim's emulated mocap (2 mm, 5 mrad noise; config/car.yaml).

    Ten times a Vicon's noise: a straight line over 0.08 s (delay ~0.04 s) keeps the noise of
    the velocities at a third of what the quadratic default would give there.
    """
    return MocapEstimatorConfig(window_s=0.08, yaw_window_s=None, order=1)


@dataclass
class MocapEstimator:
    """
    Causal pose filter and differentiator for streamed mocap poses.

    `update` accepts or rejects a pose (reason counted in `counters`); `estimate` returns the
    latest state or None until enough samples arrived. Not thread-safe: one caller.
    """

    config: MocapEstimatorConfig = field(default_factory=MocapEstimatorConfig)
    counters: Dict[str, int] = field(default_factory=lambda: {
        'accepted': 0, 'rejected_nan': 0, 'rejected_out_of_order': 0, 'rejected_jump': 0,
        'relocked': 0})

    def __post_init__(self) -> None:
        """Allocate the sample ring."""
        cap = self.config.capacity
        self._time = np.zeros(cap)
        self._pose = np.zeros((cap, 3))
        self._count = 0
        self._head = 0
        self._jumps_in_row = 0
        self._latest: Optional[CarStateEstimate] = None

    def reset(self) -> None:
        """Forget every sample (counters are kept)."""
        self._count = 0
        self._head = 0
        self._jumps_in_row = 0
        self._latest = None

    @property
    def last_stamp(self) -> Optional[float]:
        """Stamp (s) of the newest accepted pose, None before the first."""
        if self._count == 0:
            return None
        return float(self._time[(self._head - 1) % self.config.capacity])

    @property
    def last_yaw(self) -> Optional[float]:
        """Yaw (rad) of the newest accepted pose, unwrapped to the ones before it."""
        if self._count == 0:
            return None
        return float(self._pose[(self._head - 1) % self.config.capacity, 2])

    def update(self, stamp: float, x: float, y: float, yaw: float) -> Optional[str]:
        """
        Offer one pose (stamp in s, position in m, yaw in rad, any wrapping).

        Returns None when accepted, else the rejection reason ('nan', 'out_of_order',
        'jump'), which is also counted.
        """
        values = np.array([stamp, x, y, yaw], dtype=np.float64)
        if not np.all(np.isfinite(values)):
            self.counters['rejected_nan'] += 1
            return 'nan'
        last = self.last_stamp
        if last is not None and stamp <= last:
            self.counters['rejected_out_of_order'] += 1
            return 'out_of_order'
        yaw_c = yaw
        if self._count:
            index = (self._head - 1) % self.config.capacity
            last_pose = self._pose[index]
            reach = self.config.max_speed * (stamp - last) + self.config.jump_margin
            if np.hypot(x - last_pose[0], y - last_pose[1]) > reach:
                self._jumps_in_row += 1
                if self._jumps_in_row < self.config.relock_after:
                    self.counters['rejected_jump'] += 1
                    return 'jump'
                self.counters['relocked'] += 1
                self.reset()
            else:
                yaw_c = last_pose[2] + float(wrap_angle(yaw - last_pose[2]))
        self._jumps_in_row = 0
        self._time[self._head] = stamp
        self._pose[self._head] = (x, y, yaw_c)
        self._head = (self._head + 1) % self.config.capacity
        self._count = min(self._count + 1, self.config.capacity)
        self.counters['accepted'] += 1
        self._latest = self._fit()
        return None

    def _fit(self) -> Optional[CarStateEstimate]:
        """
        Least-squares polynomial fits over the windows, consistent in time.

        Positions and yaw are fitted separately (own windows). The world velocity is rotated
        into the car frame with the heading of the same instant: the newest stamp for order
        2, the position window's mean time for order 1 (the instant a straight line's slope
        describes). Rotating a delayed velocity with the newest heading biased vy in turns
        by about -delay * vx * r.
        """
        cfg = self.config
        cap = cfg.capacity
        order_idx = (self._head - 1 - np.arange(self._count)) % cap
        times = self._time[order_idx]
        newest = times[0]
        tau_all = times - newest
        inside = tau_all >= -cfg.window_s
        yaw_window = cfg.window_s if cfg.yaw_window_s is None else cfg.yaw_window_s
        inside_yaw = tau_all >= -yaw_window
        if min(int(inside.sum()), int(inside_yaw.sum())) < cfg.min_samples:
            return None
        poses = self._pose[order_idx]
        pos = _polyfit(tau_all[inside], poses[inside, :2], cfg.order)
        yaw = _polyfit(tau_all[inside_yaw], poses[inside_yaw, 2:], cfg.order)
        at = float(np.mean(tau_all[inside])) if cfg.order == 1 else 0.0
        heading = yaw[0, 0] + yaw[1, 0] * at + (yaw[2, 0] * at * at if cfg.order == 2 else 0.0)
        vx, vy = world_to_body(heading, pos[1, 0], pos[1, 1])
        return CarStateEstimate(float(newest), np.array([pos[0, 0], pos[0, 1], yaw[0, 0], vx,
                                                         vy, yaw[1, 0]]))

    def estimate(self) -> Optional[CarStateEstimate]:
        """Return the latest estimate, None before min_samples poses arrived in one window."""
        return self._latest

    def is_stale(self, now: float) -> bool:
        """Return True when no pose was accepted within stale_after_s before `now` (s)."""
        last = self.last_stamp
        return last is None or now - last > self.config.stale_after_s


def _polyfit(tau: np.ndarray, values: np.ndarray, order: int) -> np.ndarray:
    """Return coefficients (order + 1, n) of a least-squares polynomial in tau (s)."""
    return np.linalg.lstsq(np.vander(tau, order + 1, increasing=True), values, rcond=None)[0]
