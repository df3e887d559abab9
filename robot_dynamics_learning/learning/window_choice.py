"""
The training window length of a recurrent inverse model, chosen on held-out recordings.

How long a sequence an LSTM should learn from depends on the robot and the amount of data,
and the validation loss cannot tell: a window of 2 steps and one of 50 start from a zero
state at different rates, so their losses measure different things. Here each candidate
trains on the same fitting pieces (early stopping on its own windows of the held pieces),
then predicts the held pieces whole from a zero state, as a test recording is predicted and
as the nodes stream; the lowest mean nMSE wins (a model whose score is not finite never
does). Measured (LSTM, seeds 0-2, docs/models.md): Kinova blocks nMSE 0.277 with 50-step
windows only, 0.124 with the choice (10 steps each time); on the Schunk arm 50 steps are
chosen each time (2-step windows: 1.15 against 0.12, seed 0). The chosen model's variance
is then calibrated on the held pieces predicted whole (`calibrate_variance_whole`), the
errors a test recording shows.
"""
import math
from typing import Callable, Dict, NamedTuple, Sequence

import numpy as np
from robot_dynamics_learning.data.splits import split_validation
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.data.windows import (inverse_dynamics_arrays,
                                                  inverse_dynamics_windows, whole_sequence)
from robot_dynamics_learning.learning.evaluation import predict_inverse
from robot_dynamics_learning.learning.metrics import nmse_per_output
from robot_dynamics_learning.learning.training import (split_windows, train_model, TrainConfig,
                                                       TrainResult)
from robot_dynamics_learning.models.base import DynamicsModel


class WindowChoice(NamedTuple):
    """The chosen window's model and training result (seconds: every candidate's), all scores."""

    model: DynamicsModel
    result: TrainResult
    window: int
    held_nmse: Dict[int, float]


def default_stride(window: int) -> int:
    """Half a window (at least 1): every sample starts some window, windows overlap by half."""
    return max(1, window // 2)


def held_out_nmse(model: DynamicsModel, held: Sequence[Trajectory]) -> float:
    """Mean nMSE over the outputs that vary, each held recording predicted whole."""
    predicted = predict_inverse(model, held)
    return float(np.nanmean(nmse_per_output(predicted['prediction'], predicted['target'])))


def _rank(score: float) -> float:
    return score if math.isfinite(score) else math.inf


def train_choosing_window(build: Callable[[], DynamicsModel], trajectories: Sequence[Trajectory],
                          windows: Sequence[int], config: TrainConfig,
                          val_fraction: float = 0.2,
                          stride: Callable[[int], int] = default_stride) -> WindowChoice:
    """
    Train one inverse model per window length in `windows`; keep the best on held recordings.

    `build` returns a fresh model; the held-out pieces (`split_validation`, sized by the
    longest window) are the same for every candidate and, each predicted whole, calibrate
    the chosen model's variance. Ties go to the earlier window. With too little data to hold
    out a block, the first window trains alone, validated on the last `val_fraction` of its
    windows (`split_windows`), and no score is returned.
    """
    if not windows or any(type(w) is not int or w < 1 for w in windows):
        raise ValueError(f'windows must be positive integers, got {list(windows)}')
    if config.refit_all:
        raise ValueError('refit_all would train on the recordings that choose the window')
    fit, held = split_validation(trajectories, max(windows), val_fraction)
    if not fit or not held:
        model = build()
        train, val = split_windows(
            inverse_dynamics_windows(trajectories, windows[0], stride(windows[0])), val_fraction)
        return WindowChoice(model, train_model(model, train, val, config), windows[0], {})
    best = None
    scores: Dict[int, float] = {}
    seconds = 0.0
    for window in windows:
        model = build()
        train = inverse_dynamics_windows(fit, window, stride(window))
        val = inverse_dynamics_windows(held, window, stride(window))
        result = train_model(model, train, val, config)
        seconds += result.seconds
        scores[window] = held_out_nmse(model, held)
        if best is None or _rank(scores[window]) < _rank(scores[best.window]):
            best = WindowChoice(model, result, window, {})
    best.model.calibrate_variance_whole(
        [whole_sequence(inverse_dynamics_arrays(piece)) for piece in held])
    return best._replace(held_nmse=scores, result=best.result._replace(seconds=seconds))
