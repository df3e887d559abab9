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
chosen each time (2-step windows: 1.15 against 0.12, seed 0). A model that can predict on
sliding windows (`on_sliding_windows`: the LSTM, up to `MAX_SLIDING`) is also scored that
way, each step from a zero state over its last w inputs as it trained: a 2-step LSTM run
whole for 500 steps reaches states it never trained on. The best such candidate is kept
only where it predicts the held pieces `SLIDING_MARGIN` better than the best whole one.
Measured (docs/models.md, "Sliding windows", seeds 0-2): the sliding candidates scored lower
on the held pieces almost everywhere; held-out gains of 22-49 % (1000 and 3000 Kinova
samples) came with test errors 17 % lower at 3000 samples (0.71 against 0.86), gains of
0-19 % (the Kinova blocks, 10 000 samples and more) with test errors within -4 to +6 % of
the whole prediction's, for up to 10 LSTM steps a sample in the nodes instead of one. The
chosen model's variance is then calibrated on the held pieces predicted as chosen
(`calibrate_variance_whole`), the errors a test recording shows.
"""
import math
from typing import Callable, Dict, List, NamedTuple, Sequence, Tuple

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

# Sliding windows are kept where they predict the held pieces this much better (a share of
# the best whole candidate's nMSE); set from the bench run above, between the held-out gains
# of up to 19 % that did not carry over to the test data and those of 22 % and more.
SLIDING_MARGIN = 0.2


class WindowChoice(NamedTuple):
    """
    The chosen window's model and training result (seconds: every candidate's), all scores.

    sliding: the chosen model predicts on sliding windows of `window` steps (else whole).
    held_nmse / held_nmse_sliding: the held-out score per window, predicted whole / on
    sliding windows (where the model can).
    """

    model: DynamicsModel
    result: TrainResult
    window: int
    held_nmse: Dict[int, float]
    sliding: bool = False
    held_nmse_sliding: Dict[int, float] = {}


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
    the chosen model's variance. Ties go to the earlier window; the best sliding candidate
    must beat the best whole one by `SLIDING_MARGIN`. With too little data to hold
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
    candidates: List[Tuple[float, WindowChoice]] = []   # (held-out nMSE, candidate)
    scores: Dict[int, float] = {}
    sliding_scores: Dict[int, float] = {}
    seconds = 0.0
    for window in windows:
        model = build()
        train = inverse_dynamics_windows(fit, window, stride(window))
        val = inverse_dynamics_windows(held, window, stride(window))
        result = train_model(model, train, val, config)
        seconds += result.seconds
        scores[window] = held_out_nmse(model, held)
        candidates.append((scores[window], WindowChoice(model, result, window, {})))
        twin = model.on_sliding_windows(window)
        if twin is not None:
            sliding_scores[window] = held_out_nmse(twin, held)
            candidates.append((sliding_scores[window],
                               WindowChoice(twin, result, window, {}, sliding=True)))
    # the lowest score of each kind; ties go to the earlier window (min keeps the first)
    whole, sliding = (min(((score, c) for score, c in candidates if c.sliding == kind),
                          key=lambda pair: _rank(pair[0]), default=None)
                      for kind in (False, True))
    best = whole[1]
    if sliding is not None and _rank(sliding[0]) < (1.0 - SLIDING_MARGIN) * _rank(whole[0]):
        best = sliding[1]
    best.model.calibrate_variance_whole(
        [whole_sequence(inverse_dynamics_arrays(piece)) for piece in held])
    return best._replace(held_nmse=scores, held_nmse_sliding=sliding_scores,
                         result=best.result._replace(seconds=seconds))
