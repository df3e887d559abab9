"""
Feed-forward network baseline (seed 004 Appendix D) for inverse or forward dynamics.

- kind 'inverse': x_t = [q, qd, qdd] -> tau_t directly (no memory of the past), MSE loss in
  normalised units (the regression approach the papers compare against).
- kind 'forward': [m_t, a_t] -> normalised difference to o_{t+1}; multi-step prediction feeds
  back its own prediction like the recurrent models.
"""
import dataclasses
from typing import Tuple

from robot_dynamics_learning.models.base import DynamicsModel, Prediction, SequenceBatch
from robot_dynamics_learning.models.common import (check_batch, InverseModel, mlp, ModelConfig,
                                                   StatelessStep, support_of, SupportedVariance)
from robot_dynamics_learning.models.feedback import FeedbackForwardModel
import torch


@dataclasses.dataclass(frozen=True)
class FFNNConfig(ModelConfig):
    """kind 'inverse' or 'forward'; hidden layer sizes (ReLU); dropout after each layer."""

    kind: str = 'inverse'
    hidden: Tuple[int, ...] = (256, 256)
    dropout: float = 0.0

    def __post_init__(self) -> None:
        """Validate kind, sizes and dropout; hidden sizes become a tuple."""
        self._choice('kind', ('inverse', 'forward'))
        hidden = tuple(int(v) for v in self.hidden)
        if not hidden or any(v <= 0 for v in hidden):
            raise ValueError(f'FFNNConfig.hidden must hold positive sizes, got {hidden}')
        object.__setattr__(self, 'hidden', hidden)
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f'FFNNConfig.dropout must be in [0, 1), got {self.dropout}')


class FFNNInverse(SupportedVariance, StatelessStep, InverseModel):
    """
    Stateless inverse dynamics tau_t = f(x_t); actions are ignored.

    The variance is the validation error inside the training range, rising outside it.
    """

    config_class = FFNNConfig

    def __init__(self, config: FFNNConfig, n_obs: int, n_act: int, n_target: int) -> None:
        super().__init__(config, n_obs, n_act, n_target)
        self.net = mlp(n_obs, config.hidden, n_target, dropout=config.dropout)
        self.support = support_of(n_obs, n_target)

    def fit_normalization(self, batch: SequenceBatch) -> None:
        """Fit input and torque statistics and the training input range."""
        super().fit_normalization(batch)
        self.fit_support(batch)

    def _predict_step(self, observation: torch.Tensor) -> torch.Tensor:
        return self.target_norm.denormalize(self.net(self.input_norm.normalize(observation)))

    def _step_variance(self, observation: torch.Tensor) -> torch.Tensor:
        return self._variance(observation)

    def _normalized_prediction(self, batch: SequenceBatch) -> torch.Tensor:
        return self.net(self.input_norm.normalize(batch.observations))

    def forward(self, batch: SequenceBatch) -> Prediction:
        """Predict tau and its variance for every step independently."""
        check_batch(batch, self.n_obs, batch.actions.shape[-1], self.n_target)
        return Prediction(self.target_norm.denormalize(self._normalized_prediction(batch)),
                          self._variance(batch.observations))

    def loss(self, batch: SequenceBatch) -> Tuple[torch.Tensor, dict]:
        """MSE in normalised torque units."""
        check_batch(batch, self.n_obs, batch.actions.shape[-1], self.n_target)
        self.widen_support(batch)
        error = self.net(self.input_norm.normalize(batch.observations)) \
            - self.target_norm.normalize(batch.targets)
        loss = error.pow(2).mean()
        return loss, {'mse_normalized': float(loss.detach())}


class FFNNForward(FeedbackForwardModel):
    """Stateless forward model: [m_t, a_t] -> normalised o_{t+1} - o_t."""

    config_class = FFNNConfig

    def __init__(self, config: FFNNConfig, n_obs: int, n_act: int, n_target: int) -> None:
        super().__init__(n_obs, n_act, n_target)
        self.config = config
        self.net = mlp(n_obs + n_act, config.hidden, n_obs, dropout=config.dropout)

    def _init_cell(self, batch_size: int) -> None:
        return None

    def _cell(self, state: None, memory: torch.Tensor, action: torch.Tensor,
              valid: torch.Tensor) -> Tuple[torch.Tensor, None, None]:
        return self.net(torch.cat([memory, action], -1)), None, None


def build_ffnn(config: FFNNConfig, n_obs: int, n_act: int, n_target: int) -> DynamicsModel:
    """Build the inverse or forward FFNN named by `config.kind`."""
    cls = FFNNInverse if config.kind == 'inverse' else FFNNForward
    return cls(config, n_obs, n_act, n_target)


build_ffnn.config_class = FFNNConfig
