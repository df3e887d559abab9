"""
LSTM and GRU forward-dynamics baselines of seed 004.

Sec. 5: "we replaced the ac-RKN transition layer with generic LSTM and RKN layers"; encoder
and decoder sizes as ac-RKN's.

Input at t is encoder([m_t, a_t]) (actions concatenated to observations, as in the paper's
baselines); the read-out predicts the normalised difference to the next observation.
"""
import dataclasses
from typing import Any, Optional, Tuple

from robot_dynamics_learning.models.common import mlp, ModelConfig
from robot_dynamics_learning.models.feedback import FeedbackForwardModel
import torch
from torch import nn


@dataclasses.dataclass(frozen=True)
class RecurrentForwardConfig(ModelConfig):
    """Encoder output size, recurrent hidden size (= ac-RKN latent state 2 m) and MLP sizes."""

    latent_obs_dim: int = 30
    hidden_size: int = 60
    encoder_hidden: Tuple[int, ...] = (120,)
    decoder_hidden: Tuple[int, ...] = (120,)

    def __post_init__(self) -> None:
        """Validate sizes; hidden sizes become tuples."""
        self._positive('latent_obs_dim', 'hidden_size')
        for name in ('encoder_hidden', 'decoder_hidden'):
            value = tuple(int(v) for v in getattr(self, name))
            if any(v <= 0 for v in value):
                raise ValueError(f'{name} must hold positive sizes, got {value}')
            object.__setattr__(self, name, value)


class _RecurrentForward(FeedbackForwardModel):
    """Shared encoder -> recurrent cell -> decoder forward model."""

    config_class = RecurrentForwardConfig
    cell_type: Any = None

    def __init__(self, config: RecurrentForwardConfig, n_obs: int, n_act: int,
                 n_target: int) -> None:
        super().__init__(n_obs, n_act, n_target)
        self.config = config
        self.encoder = nn.Sequential(
            mlp(n_obs + n_act, config.encoder_hidden, config.latent_obs_dim), nn.ReLU())
        self.cell = self.cell_type(config.latent_obs_dim, config.hidden_size)
        self.decoder = mlp(config.hidden_size, config.decoder_hidden, n_obs)


class LSTMForward(_RecurrentForward):
    """LSTM forward-dynamics baseline; state (h, c), each (B, hidden_size)."""

    cell_type = nn.LSTMCell

    def _init_cell(self, batch_size: int) -> Tuple[torch.Tensor, torch.Tensor]:
        zeros = self.decoder[0].weight.new_zeros(batch_size, self.config.hidden_size)
        return zeros, zeros

    def _cell(self, state: Tuple[torch.Tensor, torch.Tensor], memory: torch.Tensor,
              action: torch.Tensor, valid: torch.Tensor
              ) -> Tuple[torch.Tensor, Optional[torch.Tensor], Tuple[torch.Tensor, torch.Tensor]]:
        h, c = self.cell(self.encoder(torch.cat([memory, action], -1)), state)
        return self.decoder(h), None, (h, c)


class GRUForward(_RecurrentForward):
    """GRU forward-dynamics baseline; state h (B, hidden_size)."""

    cell_type = nn.GRUCell

    def _init_cell(self, batch_size: int) -> torch.Tensor:
        return self.decoder[0].weight.new_zeros(batch_size, self.config.hidden_size)

    def _cell(self, state: torch.Tensor, memory: torch.Tensor, action: torch.Tensor,
              valid: torch.Tensor) -> Tuple[torch.Tensor, Optional[torch.Tensor], torch.Tensor]:
        h = self.cell(self.encoder(torch.cat([memory, action], -1)), state)
        return self.decoder(h), None, h
