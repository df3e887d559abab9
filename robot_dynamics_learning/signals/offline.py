"""Zero-phase (non-causal) smoothing and differentiation for offline data."""
import numpy as np
from scipy.signal import savgol_filter


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
