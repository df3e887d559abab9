"""
How well the causal `MocapEstimator` follows recorded poses: errors against a zero-phase fit.

The reference is the offline Savitzky-Golay estimate (`offline_body_states`, cubic) of the
same poses, which sees the future and has no delay; it is computed per gap-free piece and
read at the pose stamps. Errors are taken at zero lag (what a controller gets), and the lag
that would minimise them is reported too (the estimator's effective delay).
"""
from dataclasses import replace
from typing import Dict, Optional, Tuple, Type

import numpy as np
from robot_dynamics_learning.signals.mocap import (MocapEstimator, MocapEstimatorConfig,
                                                   offline_body_states)
from robot_dynamics_learning.signals.yaw_filter import CommandedEstimator, YawModelConfig

CHANNELS = ('vx', 'vy', 'r')
# Reference: cubic Savitzky-Golay over 0.2 s. Its own noise on DART Vicon data is about
# 0.009 rad/s in r (0.1 s: 0.025, as large as the errors being measured).
REFERENCE_WINDOW_S = 0.2
REFERENCE_ORDER = 3


def window_for_rate(config: MocapEstimatorConfig, period_s: float) -> MocapEstimatorConfig:
    """
    Return config with its fit windows widened to hold min_samples poses `period_s` apart.

    The defaults (0.12 s, 4 poses) suit 100 Hz and faster mocap: at 20 Hz a 0.12 s window
    holds 3 poses and the estimator never answers. Half a period of margin keeps the oldest
    pose inside the window when stamps jitter.
    """
    need = (config.min_samples - 0.5) * period_s
    yaw = config.yaw_window_s
    return replace(config, window_s=max(config.window_s, need),
                   yaw_window_s=None if yaw is None else max(yaw, need))


def stream_estimates(time: np.ndarray, poses: np.ndarray,
                     config: MocapEstimatorConfig = MocapEstimatorConfig(),
                     kind: Type[MocapEstimator] = MocapEstimator
                     ) -> Tuple[np.ndarray, Dict[str, int]]:
    """
    Feed (T,) stamps and (T, 3) poses [x, y, yaw] one by one, as the node does.

    Returns (states (T, 6), NaN where the estimator rejected the pose or had no estimate
    yet; the estimator's counters). kind: the estimator class (a variant to compare).
    """
    estimator = kind(config)
    out = np.full((len(time), 6), np.nan)
    for i in range(len(time)):
        if estimator.update(float(time[i]), *poses[i]) is None:
            estimate = estimator.estimate()
            if estimate is not None:
                out[i] = estimate.state
    return out, dict(estimator.counters)


def stream_commanded(time: np.ndarray, poses: np.ndarray, actions: Optional[np.ndarray],
                     config: MocapEstimatorConfig = MocapEstimatorConfig(),
                     model: YawModelConfig = YawModelConfig()
                     ) -> Tuple[np.ndarray, Dict[str, int]]:
    """
    As `stream_estimates` for `CommandedEstimator`, each pose after its command.

    actions: (T, 2) [throttle, steering] stamped with the poses (a bag's commands held on
    receive time), or None: no commands (the estimator falls back to the fit).
    """
    estimator = CommandedEstimator(config, model)
    out = np.full((len(time), 6), np.nan)
    for i in range(len(time)):
        if actions is not None:
            estimator.update_command(float(time[i]), *actions[i])
        if estimator.update(float(time[i]), *poses[i]) is None:
            estimate = estimator.estimate()
            if estimate is not None:
                out[i] = estimate.state
    return out, estimator.counters


def reference_states(time: np.ndarray, poses: np.ndarray, max_gap_s: float,
                     window_s: float = REFERENCE_WINDOW_S, order: int = REFERENCE_ORDER,
                     dt: float = 0.005, config: MocapEstimatorConfig = MocapEstimatorConfig()
                     ) -> np.ndarray:
    """
    Zero-phase reference (T, 6) at the pose stamps; NaN near gaps, jumps and ends.

    Pieces between gaps longer than max_gap_s and between mocap jumps (a step longer than
    config.max_speed * dt + config.jump_margin, the estimator's rule) are smoothed
    separately; a smoothing window across a jump would make up speeds of 80 m/s.
    """
    out = np.full((len(time), 6), np.nan)
    step = np.hypot(np.diff(poses[:, 0]), np.diff(poses[:, 1]))
    jumps = step > config.max_speed * np.diff(time) + config.jump_margin
    cuts = np.flatnonzero((np.diff(time) > max_gap_s) | jumps) + 1
    edge = window_s
    for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(time)]):
        if time[b - 1] - time[a] < 3 * window_s:
            continue
        grid, states = offline_body_states(time[a:b], poses[a:b], dt, window_s, order)
        inner = (time[a:b] >= time[a] + edge) & (time[a:b] <= time[b - 1] - edge)
        rows = np.arange(a, b)[inner]
        out[rows] = np.stack([np.interp(time[rows], grid, states[:, k]) for k in range(6)], 1)
    return out


def estimator_errors(time: np.ndarray, estimates: np.ndarray, reference: np.ndarray,
                     max_lag_s: float = 0.1) -> Dict[str, Dict[str, float]]:
    """
    RMSE per channel (vx, vy, r) at zero lag, and the delay (s) that minimises it.

    Delay d compares the estimate at t with the reference at t - d (interpolated).
    """
    result = {}
    for k, name in zip((3, 4, 5), CHANNELS):
        ok = np.isfinite(estimates[:, k]) & np.isfinite(reference[:, k])
        if ok.sum() < 10:
            result[name] = {'rmse': float('nan'), 'best_delay_s': float('nan'), 'samples': 0}
            continue
        t, est = time[ok], estimates[ok, k]
        ref_t, ref = time[ok], reference[ok, k]
        delays = np.arange(0.0, max_lag_s + 1e-9, 0.005)
        rmse = [float(np.sqrt(np.mean((est - np.interp(t - d, ref_t, ref)) ** 2)))
                for d in delays]
        result[name] = {'rmse': rmse[0], 'best_delay_s': float(delays[int(np.argmin(rmse))]),
                        'rmse_at_best_delay': float(min(rmse)), 'samples': int(ok.sum())}
    return result
