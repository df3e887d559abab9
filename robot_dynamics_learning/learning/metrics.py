"""
Accuracy metrics: per-joint RMSE and nMSE, and k-step-ahead errors of forward models.

nMSE is the MSE divided by the variance of the target on the evaluated data (1.0 = predicting
the mean; the papers' normalised MSE). Multi-step errors follow seed 004 Fig. 4: observations
are given for a warm-up and then withheld, so the model predicts from actions alone.
"""
from typing import Iterable, Optional, Sequence

import numpy as np
from robot_dynamics_learning.core_types import SequenceBatch
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.data.windows import forward_dynamics_arrays, window_arrays
from robot_dynamics_learning.models.base import DynamicsModel
import torch


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


def _flat(array) -> np.ndarray:
    array = array.detach().cpu().numpy() if isinstance(array, torch.Tensor) else \
        np.asarray(array)
    return array.reshape(-1, array.shape[-1]).astype(np.float64)


def predict_batches(model: DynamicsModel, batch: SequenceBatch,
                    batch_size: int = 256) -> torch.Tensor:
    """Model mean prediction for many windows, in chunks, without gradients."""
    model.eval()
    outputs = []
    with torch.no_grad():
        for start in range(0, batch.observations.shape[0], batch_size):
            stop = start + batch_size
            mask = None if batch.observation_valid is None else \
                batch.observation_valid[start:stop]
            outputs.append(model(SequenceBatch(batch.observations[start:stop],
                                               batch.actions[start:stop],
                                               batch.targets[start:stop], mask)).mean)
    return torch.cat(outputs)


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
