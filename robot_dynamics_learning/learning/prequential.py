"""
Prequential ("predict, then learn") error over a sliding window.

Online learners are judged on samples they have not trained on yet: each new sample is
predicted before it enters the training buffer, and the error is averaged over the newest
`window` samples. The normalised MSE per joint j is

    nMSE_j = mean_{t in window} (y_tj - yhat_tj)^2 / var_{all t so far}(y_tj),

(the seed 001 metric, Eq. 3, normalised by the target variance so joints with large torques
do not dominate), and `nmse()` returns the mean over joints. The variance is that of every
target seen so far (Welford's running estimate), not only the window's: on real robots a joint
often rests for seconds, and a near-zero window variance would blow its ratio up. Bounded
memory: one ring array and running moments.
"""
import math
from typing import Any, Mapping, Optional, Tuple

import numpy as np
from robot_dynamics_learning.models.coverage import coverage_scale
import torch


class PrequentialError:
    """Sliding-window nMSE of predictions (n_target,) against targets (n_target,)."""

    def __init__(self, n_target: int, window: int = 2000) -> None:
        if window < 2:
            raise ValueError(f'window must be >= 2, got {window}')
        self.window = window
        self._error = np.zeros((window, n_target))
        self._count = 0
        self._mean = np.zeros(n_target)
        self._m2 = np.zeros(n_target)

    @property
    def count(self) -> int:
        """Return the number of samples ever scored."""
        return self._count

    def update(self, prediction: np.ndarray, target: np.ndarray) -> None:
        """Score one prediction against its target (both (n_target,), same units)."""
        self._error[self._count % self.window] = prediction - target
        self._count += 1
        delta = target - self._mean
        self._mean += delta / self._count
        self._m2 += delta * (target - self._mean)

    def nmse_per_target(self) -> np.ndarray:
        """Return (n_target,) nMSE over the newest min(count, window) samples; NaN if < 2."""
        n = min(self._count, self.window)
        if self._count < 2:
            return np.full(self._error.shape[1], np.nan)
        mse = np.mean(self._error[:n] ** 2, axis=0)
        variance = self._m2 / self._count
        return mse / np.maximum(variance, 1e-12)

    def nmse(self) -> float:
        """Return the mean nMSE over targets for the sliding window (NaN before 2 samples)."""
        return float(np.mean(self.nmse_per_target()))

    def mse(self) -> float:
        """Return the plain MSE over the window and all targets (NaN before 1 sample)."""
        n = min(self._count, self.window)
        return float(np.mean(self._error[:n] ** 2)) if n else float('nan')


class VarianceCalibration:
    """
    Scales a streaming model's predicted variance to cover the errors the stream shows.

    Offline training calibrates a model's variance on validation windows; a continual learner
    has none, but every sample it predicts before training on it is held out. Over the newest
    `window` scored samples, scale_j is the `coverage_scale` of e_j^2 / var_j per target: the
    published 1 and 2 std then hold about 68 % and 95 % of the stream's own errors (heavy
    tails included: matching their mean square covered 75-76 % within 1 std on the Schunk
    replay), while the model's own shape (rising outside the training range, an ac-RKN's decoded
    variance) is kept. Causal: a prediction is scaled by the errors of the samples before it.
    Refitted at `min_samples` and every `REFIT_EVERY` samples after, or every tenth of a
    shorter window (a sort of the window: about 2 ms for 5000 x 7). Before `min_samples` (at
    most `window`) the scale is the prior: 1, or the one a checkpoint saved (`prior`,
    `set_prior`), so a restarted learner or a prediction-only node publishes the calibrated
    std from its first message. Bounded to [1e-6, 1e6].
    """

    REFIT_EVERY = 250

    def __init__(self, n_target: int, window: int = 5000, min_samples: int = 200,
                 prior: Optional[np.ndarray] = None) -> None:
        if window < 1 or min_samples < 1:
            raise ValueError(f'window and min_samples must be >= 1, got {window}, {min_samples}')
        self._squared_error = np.zeros((window, n_target))
        self._variance = np.ones((window, n_target))
        self._count = 0
        self._min_samples = min(min_samples, window)
        self._refit_every = max(1, min(self.REFIT_EVERY, window // 10))
        self.scale = np.ones(n_target)
        if prior is not None:
            self.set_prior(prior)

    def set_prior(self, prior: np.ndarray) -> None:
        """Use `prior` (n_target,) as the scale until `min_samples` errors were scored."""
        prior = np.asarray(prior, dtype=float)
        if prior.shape != self.scale.shape:
            raise ValueError(f'prior scale must have shape {self.scale.shape}, got '
                             f'{prior.shape}')
        if self._count < self._min_samples:
            self.scale = np.clip(prior, 1e-6, 1e6)

    def update(self, error: np.ndarray, variance: np.ndarray) -> None:
        """Record one scored prediction: its error and the model's own (unscaled) variance."""
        window = self._variance.shape[0]
        slot = self._count % window
        self._squared_error[slot], self._variance[slot] = np.square(error), variance
        self._count += 1
        since = self._count - self._min_samples
        if since >= 0 and since % self._refit_every == 0:
            n = min(self._count, window)
            scale = coverage_scale(torch.from_numpy(self._squared_error[:n]),
                                   torch.from_numpy(self._variance[:n]))
            self.scale = np.clip(scale.numpy(), 1e-6, 1e6)

    def apply(self, variance: np.ndarray) -> np.ndarray:
        """Return the calibrated variance (same units)."""
        return variance * self.scale


VARIANCE_SCALE_KEY = 'variance_scale'   # checkpoint metadata: the calibration scale at saving


def saved_variance_scale(metadata: Mapping[str, Any], n_target: int
                         ) -> Tuple[Optional[np.ndarray], str]:
    """
    Return (the calibration scale a checkpoint saved, '') or (None, why it is not used).

    Absent in checkpoints of models without variance or from before it was saved; a value
    that is not n_target finite positive numbers is refused rather than published.
    """
    value = metadata.get(VARIANCE_SCALE_KEY)
    if value is None:
        return None, 'no variance_scale in the checkpoint'
    try:
        scale = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        return None, f'variance_scale is not numeric: {value!r}'
    if scale.shape != (n_target,) or not all(math.isfinite(v) and v > 0 for v in scale):
        return None, f'variance_scale must be {n_target} finite positive numbers, got {value!r}'
    return scale, ''


class LatencyLog:
    """
    Recent latencies (s) of a streaming node, for p50/p99 in diagnostics.

    compute: time from entering the message callback to having published the prediction;
    age: time from the input's header stamp to that publication (includes transport when
    publisher and node share a clock). Bounded: the newest `size` of each.
    """

    def __init__(self, size: int = 10000) -> None:
        self._compute = np.full(size, np.nan)
        self._age = np.full(size, np.nan)
        self._count = 0

    def add(self, compute_s: float, age_s: float) -> None:
        """Record one message."""
        slot = self._count % self._compute.size
        self._compute[slot] = compute_s
        self._age[slot] = age_s
        self._count += 1

    def summary(self) -> dict:
        """Return p50/p99 of both latencies in milliseconds (NaN before the first message)."""
        out = {}
        for name, values in (('latency', self._compute), ('age', self._age)):
            valid = values[np.isfinite(values)]
            for q in (50, 99):
                out[f'{name}_p{q}_ms'] = (float(np.percentile(valid, q)) * 1e3 if valid.size
                                          else float('nan'))
        return out


class Recorder:
    """
    The newest `size` (time, target, prediction, sliding nMSE) of a stream, for plots.

    Bounded ring arrays; `save` writes them in time order to an .npz file.
    """

    def __init__(self, size: int, n_target: int) -> None:
        self._time = np.zeros(size)
        self._target = np.zeros((size, n_target))
        self._prediction = np.zeros((size, n_target))
        self._nmse = np.zeros(size)
        self.count = 0

    def add(self, time_s: float, target: np.ndarray, prediction: np.ndarray,
            nmse: float) -> None:
        """Record one scored sample."""
        slot = self.count % self._time.size
        self._time[slot] = time_s
        self._target[slot] = target
        self._prediction[slot] = prediction
        self._nmse[slot] = nmse
        self.count += 1

    def save(self, path: str, names) -> str:
        """Write time, target, prediction, nmse (time order) and names to `path` (.npz)."""
        size = self._time.size
        index = np.arange(max(0, self.count - size), self.count) % size
        np.savez(path, time=self._time[index], target=self._target[index],
                 prediction=self._prediction[index], nmse=self._nmse[index],
                 names=np.array(list(names)))
        return path
