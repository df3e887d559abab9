"""
The one interface every dynamics model implements (DESIGN.md, "One model interface").

Trainer, predictor node, bag evaluator and MPC talk to models only through `DynamicsModel`,
so a model is swapped by a config value. The value types live in `core_types.py` (the lowest
layer) and are re-exported here. Shapes: B batch, T time, all tensors float.
"""
import abc
import math
from typing import Any, NamedTuple, Optional, Protocol, Sequence, Tuple

import numpy as np
from robot_dynamics_learning.core_types import Prediction, SequenceBatch, StepOutput
import torch
from torch import nn

# Re-exported: models and older callers import the value types from here.
__all__ = ['DynamicsModel', 'NumpyStepper', 'OnlinePhysics', 'PhysicsSplit', 'Prediction',
           'SequenceBatch', 'StepOutput', 'check_finite']


class NumpyStepper(Protocol):
    """A numpy twin of a model's `step` for batch 1 (no torch dispatch on the hot path)."""

    def state_from(self, state: Any) -> Any:
        """Return the stepper's state for the model's (torch) recurrent `state`."""

    def step(self, state: Any, observation: np.ndarray) -> Tuple[np.ndarray, Any]:
        """Return (prediction (n_target,), next state) for one observation."""

    def variance(self, observation: np.ndarray) -> Optional[np.ndarray]:
        """Return the expected squared error (n_target,) for one observation, or None."""


class OnlinePhysics(Protocol):
    """The physics part of a split model, predicted and re-identified per sample."""

    resets: int

    def predict(self, observation: np.ndarray) -> np.ndarray:
        """Return the physics' prediction (n_target,) for one observation."""

    def update(self, target: np.ndarray) -> None:
        """Re-identify from what the physics should have predicted for the last observation."""

    def state(self) -> np.ndarray:
        """Return the estimate a checkpoint stores."""


class PhysicsSplit(NamedTuple):
    """A model split for continual learning: a NEW residual-only model plus online physics."""

    residual: 'DynamicsModel'
    physics: OnlinePhysics


class DynamicsModel(nn.Module, abc.ABC):
    """
    Abstract learned or analytic dynamics model.

    Subclasses hold their normalisation statistics as buffers so that they travel with the
    weights in checkpoints. `kind` is 'inverse' (predict torques/actions) or 'forward'
    (predict next observations).
    """

    kind: str = 'inverse'
    # Declared abilities, with the defaults of a plain learned model; generic code reads
    # these instead of probing with getattr or branching on classes.
    model_type: Optional[str] = None   # the registry name, set by `registry.build_model`
    joint_names: Optional[Tuple[str, ...]] = None   # the URDF's joints (URDF-built models)
    # Versioned tag of what the targets mean ('<name>/<version>'); a checkpoint loads only
    # into a model with the same tag. Bump the version when the meaning changes.
    convention: str = ''
    # Trained by one closed-form fit on all data (an exact GP), not by gradient steps.
    fits_in_closed_form: bool = False
    # Fed the measured tau(t-1): judged on the change tau(t) - tau(t-1) (learning.evaluation).
    sees_previous_torque: bool = False

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

    def numpy_stepper(self) -> Optional[NumpyStepper]:
        """Return a numpy twin of `step` for streaming prediction, or None (use `step`)."""
        return None

    def on_sliding_windows(self, window: int) -> Optional['DynamicsModel']:
        """Return a copy predicting each step over its last `window` inputs, or None."""
        return None

    def calibrate_variance(self, val: SequenceBatch) -> None:
        """Set the predicted variance from held-out windows after training (none by default)."""

    def calibrate_variance_whole(self, recordings: Sequence[SequenceBatch]) -> None:
        """
        Set the variance from held-out recordings, each a batch predicted whole from a zero state.

        What a test recording and a stream see (a window's first steps, or a whole run's
        last, are not). Models without it keep their window calibration.
        """

    def split_physics(self) -> Optional[PhysicsSplit]:
        """
        Return a new residual-only model and the online physics, or None (nothing to split).

        This model is left as it was; the continual learner trains the returned residual.
        """
        return None


def check_finite(name: str, tensor: torch.Tensor) -> None:
    """Raise a ValueError naming `name` if `tensor` holds NaN or inf (model boundary guard)."""
    # The sum is finite unless an element is NaN/inf (or the sum overflows): one reduction on
    # the hot streaming path, the exact count only when something looks wrong.
    if not math.isfinite(float(tensor.sum())):
        bad = int((~torch.isfinite(tensor)).sum())
        if bad:
            raise ValueError(f'{name} contains {bad} non-finite value(s) (NaN or inf)')
