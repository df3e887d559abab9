"""
The "repeat the previous value" baseline (seed 004 Fig. 4c dashed line).

- kind 'inverse': tau^_t = tau_{t-1}, the previously executed torque (the `actions` channel).
- kind 'forward': o^_{t+k} = the last measured observation for every horizon k.
"""
import dataclasses
from typing import Optional, Tuple

from robot_dynamics_learning.models.base import (DynamicsModel, Prediction, SequenceBatch,
                                                 StepOutput)
from robot_dynamics_learning.models.common import check_batch, check_step_input, ModelConfig
from robot_dynamics_learning.models.feedback import FeedbackForwardModel
import torch


@dataclasses.dataclass(frozen=True)
class PreviousValueConfig(ModelConfig):
    """kind: 'inverse' (repeat tau_{t-1}) or 'forward' (repeat o_t)."""

    kind: str = 'inverse'

    def __post_init__(self) -> None:
        """Validate kind."""
        self._choice('kind', ('inverse', 'forward'))


class PreviousValueInverse(DynamicsModel):
    """tau^_t = tau_{t-1}; needs n_act == n_target (the previous torque)."""

    kind = 'inverse'
    config_class = PreviousValueConfig
    sees_previous_torque = True
    target_convention = 'absolute joint torque tau_t (N m)'
    convention = 'joint_torque/1'

    def __init__(self, config: PreviousValueConfig, n_obs: int, n_act: int,
                 n_target: int) -> None:
        super().__init__()
        if n_act != n_target:
            raise ValueError(f'previous_value (inverse) repeats the previous torque: n_act '
                             f'({n_act}) must equal n_target ({n_target})')
        self.config = config
        self.n_obs, self.n_act, self.n_target = n_obs, n_act, n_target

    def init_state(self, batch_size: int) -> None:
        """Return None: the model has no state."""
        return None

    def step(self, state: None, observation: torch.Tensor,
             action: Optional[torch.Tensor] = None) -> StepOutput:
        """Return tau_{t-1}; the previous torque (action) is required."""
        check_step_input('observation', observation, self.n_obs)
        if action is None:
            raise ValueError('previous_value needs the previous torque as `action`')
        check_step_input('action', action, self.n_act)
        return StepOutput(action.clone(), None, None)

    def forward(self, batch: SequenceBatch) -> Prediction:
        """Return the previous torques."""
        check_batch(batch, self.n_obs, self.n_act, self.n_target)
        return Prediction(batch.actions.clone(), None)

    def loss(self, batch: SequenceBatch) -> Tuple[torch.Tensor, dict]:
        """MSE in N m^2 (no parameters to train)."""
        loss = (self(batch).mean - batch.targets).pow(2).mean()
        return loss, {'mse': float(loss)}


class PreviousValueForward(FeedbackForwardModel):
    """o^_{t+1} = m_t: the difference is zero; normalisation is left at identity."""

    config_class = PreviousValueConfig

    def __init__(self, config: PreviousValueConfig, n_obs: int, n_act: int,
                 n_target: int) -> None:
        super().__init__(n_obs, n_act, n_target)
        self.config = config

    def fit_normalization(self, batch: SequenceBatch) -> None:
        """Keep identity statistics: a zero normalised difference must mean no change."""

    def _init_cell(self, batch_size: int) -> None:
        return None

    def _cell(self, state: None, memory: torch.Tensor, action: torch.Tensor,
              valid: torch.Tensor) -> Tuple[torch.Tensor, None, None]:
        return torch.zeros_like(memory), None, None


def build_previous_value(config: PreviousValueConfig, n_obs: int, n_act: int,
                         n_target: int) -> DynamicsModel:
    """Build the inverse or forward previous-value baseline named by `config.kind`."""
    cls = PreviousValueInverse if config.kind == 'inverse' else PreviousValueForward
    return cls(config, n_obs, n_act, n_target)


build_previous_value.config_class = PreviousValueConfig
