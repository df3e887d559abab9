"""Zero-phase (non-causal) smoothing and differentiation for offline data."""
import numpy as np
from scipy.interpolate import CubicSpline
from scipy.signal import savgol_filter

# A step within this share of a period of a whole number of periods is an even clock's tick
# count (stamps jittered by the transport); beyond, the stamps are the sample times.
TICK_TOLERANCE = 0.25


def savgol_derivative(signal: np.ndarray, dt: float, window_s: float, order: int = 3,
                      deriv: int = 0) -> np.ndarray:
    """
    Savitzky-Golay smoothing (deriv=0) or derivative of order `deriv` along axis 0.

    window_s is the window length in seconds; it is rounded to an odd number of samples of at
    least order + 2. Zero phase: no delay, so only for offline use.
    """
    if dt <= 0:
        raise ValueError(f'dt must be positive, got {dt}')
    window = max(int(round(window_s / dt)) | 1, order + 2 | 1)
    if window > signal.shape[0]:
        raise ValueError(f'signal of {signal.shape[0]} samples is shorter than the '
                         f'{window}-sample Savitzky-Golay window')
    return savgol_filter(signal, window, order, deriv=deriv, delta=dt, axis=0, mode='interp')


def savgol_at_stamps(time: np.ndarray, signal: np.ndarray, window_s: float, order: int = 3,
                     deriv: int = 0) -> np.ndarray:
    """
    `savgol_derivative` of samples at their strictly increasing times (T,), some maybe lost.

    Why: a stream that lost single messages (a learner behind under load, a logger that
    skipped rows) has steps of one, two and three periods; a filter that assumes one period
    per step misjudges each derivative by the local step (the MuJoCo Panda with 35 % of
    messages lost: qdd off by 45 % RMS; 1-2 % here). Steps of about one period each (the
    DART mocap's stamps jitter by up to 20 %) are filtered as they are. Steps of about whole
    periods are an even clock that lost ticks: each sample goes on its tick, a cubic spline
    fills the lost ticks, and the filter runs on the ticks. Other steps are the sample times:
    the spline resamples them onto even steps no longer than the median or the mean step,
    and the filtered signal is interpolated back. A piece shorter than `window_s` is
    filtered over its whole length.
    """
    time = np.asarray(time, dtype=np.float64)
    steps = np.diff(time)
    period = float(np.median(steps)) if steps.size else 0.0
    ticks = np.rint(steps / period) if period > 0 else steps
    if np.all(ticks == 1):
        return savgol_derivative(signal, period, window_s, order, deriv)
    values = np.asarray(signal, dtype=np.float64)
    columns = values.reshape(len(time), -1)
    span = float(time[-1] - time[0])
    if np.all(ticks >= 1):   # the clock's period, free of the jitter: span over its ticks
        clock = span / ticks.sum()
        ticks = np.rint(steps / clock)
        if np.all(ticks >= 1) and np.all(np.abs(steps / clock - ticks) <= TICK_TOLERANCE):
            at = np.concatenate([[0], np.cumsum(ticks)]).astype(int)
            filled = CubicSpline(at, columns, axis=0)(np.arange(at[-1] + 1))
            return savgol_derivative(filled, span / at[-1], min(window_s, span), order,
                                     deriv)[at].reshape(values.shape)
    grid = np.linspace(time[0], time[-1], int(span / min(period, span / (len(time) - 1))
                                              + 1e-9) + 1)
    step = float(grid[1] - grid[0])
    uniform = CubicSpline(time, columns, axis=0)(grid)
    filtered = savgol_derivative(uniform, step, min(window_s, span), order, deriv)
    back = np.stack([np.interp(time, grid, filtered[:, i])
                     for i in range(columns.shape[1])], 1)
    return back.reshape(values.shape)
