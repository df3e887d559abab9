"""
The one interface every dynamics model implements (DESIGN.md, "One model interface").

Trainer, predictor node, bag evaluator and MPC talk to models only through `DynamicsModel`,
so a model is swapped by a config value. Shapes: B batch, T time, all tensors float.
"""
import abc
import math
from typing import Any, NamedTuple, Optional, Tuple

import torch
from torch import nn


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


class DynamicsModel(nn.Module, abc.ABC):
    """
    Abstract learned or analytic dynamics model.

    Subclasses hold their normalisation statistics as buffers so that they travel with the
    weights in checkpoints. `kind` is 'inverse' (predict torques/actions) or 'forward'
    (predict next observations).
    """

    kind: str = 'inverse'
    # True for models conditioned on their data in one solve (`fit_data`), not by gradient steps.
    fits_in_closed_form: bool = False

    @abc.abstractmethod
    def init_state(self, batch_size: int) -> Any:
        """Return the recurrent state for `batch_size` streams (None for stateless models)."""

    @abc.abstractmethod
    def step(self, state: Any, observation: torch.Tensor,
             action: Optional[torch.Tensor] = None) -> StepOutput:
        """Advance one time step for streaming: observation (B, n_obs), action (B, n_act)."""

    @abc.abstractmethod
    def forward(self, batch: SequenceBatch) -> Prediction:
        """Predict targets for every step of a batch of windows (training and evaluation)."""

    @abc.abstractmethod
    def loss(self, batch: SequenceBatch) -> Tuple[torch.Tensor, dict]:
        """Return (scalar loss, metrics dict of floats) for a batch of windows."""

    def fit_normalization(self, batch: SequenceBatch) -> None:
        """
        Set the normalisation statistics held as buffers from training data.

        Called once before training; the default suits models without statistics.
        """

    def rollout(self, state: Any, actions: torch.Tensor) -> Prediction:
        """
        Predict (B, H, n_obs) observations for H future actions (forward models only).

        Differentiable with respect to `actions` and the parameters: the MPC uses it.
        """
        raise NotImplementedError(f'{type(self).__name__} is an inverse model: no rollout')


def check_finite(name: str, tensor: torch.Tensor) -> None:
    """Raise a ValueError naming `name` if `tensor` holds NaN or inf (model boundary guard)."""
    # The sum is finite unless an element is NaN/inf (or the sum overflows): one reduction on
    # the hot streaming path, the exact count only when something looks wrong.
    if not math.isfinite(float(tensor.sum())):
        bad = int((~torch.isfinite(tensor)).sum())
        if bad:
            raise ValueError(f'{name} contains {bad} non-finite value(s) (NaN or inf)')
