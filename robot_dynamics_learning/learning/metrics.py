"""
Accuracy metrics: per-joint RMSE and nMSE, k-step-ahead errors, calibration and coverage.

nMSE is the MSE divided by the variance of the target on the evaluated data (1.0 = predicting
the mean; the papers' normalised MSE). Multi-step errors follow seed 004 Fig. 4: observations
are given for a warm-up and then withheld, so the model predicts from actions alone.
A model that sees the previous torque is judged on the change tau(t) - tau(t-1)
(`change_nmse_per_output`): repeating tau(t-1) scores about 1 there, whatever the rate.
"""
import math
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np
from robot_dynamics_learning.core_types import SequenceBatch
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.data.windows import forward_dynamics_arrays, window_arrays
from robot_dynamics_learning.models.base import DynamicsModel
import torch

# A test target varying less than this share of its training variance is 'quiet'.
QUIET_VARIANCE_RATIO = 0.01


def rmse_per_output(prediction: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Root mean squared error per output column; arrays (..., n) -> (n,)."""
    prediction, target = _flat(prediction), _flat(target)
    return np.sqrt(np.mean((prediction - target) ** 2, axis=0))


def nmse_per_output(prediction: np.ndarray, target: np.ndarray) -> np.ndarray:
    """MSE per output divided by the target's variance; constant targets give NaN."""
    prediction, target = _flat(prediction), _flat(target)
    var = np.var(target, axis=0)
    mse = np.mean((prediction - target) ** 2, axis=0)
    return np.where(var > 0, mse / np.where(var > 0, var, 1.0), np.nan)


def quiet_targets(train_target: np.ndarray, test_target: np.ndarray) -> np.ndarray:
    """
    Flag, per output, a test variance within `QUIET_VARIANCE_RATIO` of the training variance.

    Such an nMSE divides by nearly nothing (a joint holding still in the test data): a small
    error reads as thousands, so reports name these outputs and average the others apart. A
    constant test target (nMSE NaN) is quiet too.
    """
    train_var, test_var = np.var(train_target, axis=0), np.var(test_target, axis=0)
    return test_var <= QUIET_VARIANCE_RATIO * train_var


def change_nmse_per_output(prediction: np.ndarray, target: np.ndarray,
                           previous: np.ndarray) -> np.ndarray:
    """
    Return the nMSE of the change: prediction - previous against target - previous, per output.

    previous is the measured tau(t-1) (the previous-value baseline's prediction), so that
    baseline scores mean(change^2) / var(change), about 1; skill on the change is below it.
    """
    previous = _flat(previous)
    return nmse_per_output(_flat(prediction) - previous, _flat(target) - previous)


def calibration(prediction: np.ndarray, variance: np.ndarray,
                target: np.ndarray) -> Dict[str, float]:
    """
    Pooled calibration of Gaussian predictions: share within 1 and 2 std, mean NLL.

    A calibrated model has about 0.683 within 1 std and 0.954 within 2. The NLL is per output
    and sample, in the target's units (nats); variances are floored at 1e-12. 'mean_std' is
    the average predicted std (it should rise where the test leaves the training data).
    """
    error, var = _flat(target) - _flat(prediction), np.maximum(_flat(variance), 1e-12)
    z = np.abs(error) / np.sqrt(var)
    nll = 0.5 * (np.log(2 * math.pi * var) + error ** 2 / var)
    return {'within_1_std': float(np.mean(z <= 1.0)), 'within_2_std': float(np.mean(z <= 2.0)),
            'nll': float(np.mean(nll)), 'mean_std': float(np.mean(np.sqrt(var)))}


def range_coverage(train_inputs: np.ndarray, test_inputs: np.ndarray,
                   margin: float = 0.05) -> Dict[str, np.ndarray]:
    """
    Per input column: the training range and the share of test samples outside it.

    The range is widened by `margin` of its width on each side, so that samples at the edge
    of what was seen do not count. Returns arrays (n,) under 'train_min', 'train_max',
    'test_min', 'test_max' and 'outside' (share in [0, 1]).
    """
    train, test = _flat(train_inputs), _flat(test_inputs)
    low, high = train.min(axis=0), train.max(axis=0)
    pad = margin * (high - low)
    outside = (test < low - pad) | (test > high + pad)
    return {'train_min': low, 'train_max': high, 'test_min': test.min(axis=0),
            'test_max': test.max(axis=0), 'outside': outside.mean(axis=0)}


def coverage_warnings(coverage: Dict[str, np.ndarray], names: Sequence[str],
                      threshold: float = 0.01) -> List[str]:
    """One line per input where more than `threshold` of the test samples leave training."""
    lines = []
    for i, name in enumerate(names):
        share = float(coverage['outside'][i])
        if share > threshold:
            lines.append(f'{name}: {100 * share:.1f} % of test samples outside the training '
                         f'range [{coverage["train_min"][i]:.3g}, {coverage["train_max"][i]:.3g}]'
                         f' (test [{coverage["test_min"][i]:.3g}, '
                         f'{coverage["test_max"][i]:.3g}])')
    return lines


def inverse_input_names(joint_names: Sequence[str]) -> List[str]:
    """Names of the inverse-dynamics inputs [q, qd, qdd] per joint, in their order."""
    return [f'{kind} {joint}' for kind in ('q', 'qd', 'qdd') for joint in joint_names]


def _flat(array) -> np.ndarray:
    array = array.detach().cpu().numpy() if isinstance(array, torch.Tensor) else \
        np.asarray(array)
    return array.reshape(-1, array.shape[-1]).astype(np.float64)


def predict_batches(model: DynamicsModel, batch: SequenceBatch,
                    batch_size: int = 256) -> torch.Tensor:
    """Model mean prediction for many windows, in chunks, without gradients."""
    return predict_with_variance(model, batch, batch_size)[0]


def predict_with_variance(model: DynamicsModel, batch: SequenceBatch, batch_size: int = 256
                          ) -> tuple:
    """Return (mean, variance or None) for many windows, in chunks, without gradients."""
    model.eval()
    means, variances = [], []
    with torch.no_grad():
        for start in range(0, batch.observations.shape[0], batch_size):
            stop = start + batch_size
            mask = None if batch.observation_valid is None else \
                batch.observation_valid[start:stop]
            out = model(SequenceBatch(batch.observations[start:stop], batch.actions[start:stop],
                                      batch.targets[start:stop], mask))
            means.append(out.mean)
            variances.append(out.variance)
    has_variance = all(v is not None for v in variances)
    return torch.cat(means), torch.cat(variances) if has_variance else None


def multi_step_batch(trajectories: Iterable[Trajectory], warmup: int, horizon: int,
                     stride: int) -> SequenceBatch:
    """
    Windows of warmup + horizon - 1 forward-dynamics steps; observations after warmup missing.

    Prediction index warmup - 2 + k of a window is then the k-step-ahead prediction from the
    last observed o_{warmup - 1}, k = 1..horizon.
    """
    if warmup < 1 or horizon < 1:
        raise ValueError(f'warmup and horizon must be >= 1, got {warmup}, {horizon}')
    length = warmup + horizon - 1
    batches = [window_arrays(*forward_dynamics_arrays(t), length, stride)
               for t in trajectories]
    batch = SequenceBatch(torch.cat([b.observations for b in batches]),
                          torch.cat([b.actions for b in batches]),
                          torch.cat([b.targets for b in batches]))
    valid = torch.zeros(batch.observations.shape[:2], dtype=torch.bool)
    valid[:, :warmup] = True
    return batch._replace(observation_valid=valid)


def multi_step_rmse(model: DynamicsModel, batch: SequenceBatch, warmup: int, horizon: int,
                    dims: Optional[Sequence[int]] = None) -> np.ndarray:
    """
    RMSE of k-step-ahead predictions, k = 1..horizon, over `dims` of the observation.

    Returns (horizon,) in the observation's units, pooled over windows and the chosen dims.
    """
    prediction = predict_batches(model, batch)
    index = slice(warmup - 1, warmup - 1 + horizon)
    error = (prediction[:, index] - batch.targets[:, index]).double()
    if dims is not None:
        error = error[..., list(dims)]
    return error.pow(2).mean(dim=(0, 2)).sqrt().numpy()
