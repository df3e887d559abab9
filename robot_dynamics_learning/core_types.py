"""
Value types every layer exchanges: training windows and model outputs.

The lowest layer of the package (it imports only torch), so that data/ can build batches,
learning/ and control/ can consume them and models/ can produce predictions without any of
them importing each other. Shapes: B batch, T time, all tensors float.
"""
from typing import Any, NamedTuple, Optional

import torch


class SequenceBatch(NamedTuple):
    """
    A batch of training windows.

    observations: (B, T, n_obs) what the robot measures at each step (inverse dynamics: the
        normalised-later raw [q, qd, qdd]; forward dynamics: o_t).
    actions: (B, T, n_act) the commands applied at step t (width 0 where there are none).
    targets: (B, T, n_target) what the model must predict at step t (tau_t, o_{t+1} or a_t).
    observation_valid: optional (B, T) bool mask; False marks a missing observation.
    """

    observations: torch.Tensor
    actions: torch.Tensor
    targets: torch.Tensor
    observation_valid: Optional[torch.Tensor] = None


class Prediction(NamedTuple):
    """Model output in physical units: mean (..., n_target) and variance or None."""

    mean: torch.Tensor
    variance: Optional[torch.Tensor]


class StepOutput(NamedTuple):
    """Result of one streaming step: prediction, its variance (or None) and the next state."""

    prediction: torch.Tensor
    variance: Optional[torch.Tensor]
    state: Any
