"""
LSTM inverse dynamics (seed 001, Rueckert et al.): x_t = [q, qd, qdd] -> tau_t.

Up to two LSTM layers with a small hidden size and a linear read-out, trained on windows of
sequential data with small batches and an MSE loss in normalised units (their Eq. 3).
Streaming `step` carries (h, c) and runs without autograd.
"""
import dataclasses
from typing import NamedTuple, Optional, Tuple

from robot_dynamics_learning.models.base import Prediction, SequenceBatch, StepOutput
from robot_dynamics_learning.models.common import (check_batch, check_step_input,
                                                   InverseModel, ModelConfig)
import torch
from torch import nn


@dataclasses.dataclass(frozen=True)
class LSTMConfig(ModelConfig):
    """hidden_size: LSTM units per layer (seed 001 searched 2..20); num_layers: 1 or 2."""

    hidden_size: int = 32
    num_layers: int = 1

    def __post_init__(self) -> None:
        """Validate: positive sizes, at most two layers (more did not help in seed 001)."""
        self._positive('hidden_size', 'num_layers')
        if self.num_layers > 2:
            raise ValueError(f'LSTMConfig.num_layers must be 1 or 2, got {self.num_layers}')


class LSTMState(NamedTuple):
    """Recurrent state: h and c, each (num_layers, B, hidden_size)."""

    h: torch.Tensor
    c: torch.Tensor


def lstm_step(lstm: nn.LSTM, x: torch.Tensor, state: LSTMState
              ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """
    Advance a batch-first `nn.LSTM` by one time step: x (B, n_in) -> (output (B, H), h, c).

    `torch.lstm_cell` per layer is the same math as calling the module on a length-1 sequence
    without its per-call checks: 12 us instead of about 80 us per step at hidden 32.
    """
    hs, cs = [], []
    for layer in range(lstm.num_layers):
        x, c = torch.lstm_cell(
            x, (state.h[layer], state.c[layer]),
            getattr(lstm, f'weight_ih_l{layer}'), getattr(lstm, f'weight_hh_l{layer}'),
            getattr(lstm, f'bias_ih_l{layer}'), getattr(lstm, f'bias_hh_l{layer}'))
        hs.append(x)
        cs.append(c)
    return x, torch.stack(hs), torch.stack(cs)


class LSTMInverseDynamics(InverseModel):
    """
    Inverse dynamics tau_t = f(x_1..x_t) with an LSTM.

    observations (B, T, n_obs): raw [q, qd, qdd] (n_obs = 3 d); targets (B, T, d): tau in N m.
    actions are ignored (any width): the LSTM does not see the previous torque.
    """

    config_class = LSTMConfig

    def __init__(self, config: LSTMConfig, n_obs: int, n_act: int, n_target: int) -> None:
        super().__init__(config, n_obs, n_act, n_target)
        self.lstm = nn.LSTM(n_obs, config.hidden_size, config.num_layers, batch_first=True)
        self.head = nn.Linear(config.hidden_size, n_target)

    def init_state(self, batch_size: int) -> LSTMState:
        """Return zero (h, c) for `batch_size` streams."""
        shape = (self.config.num_layers, batch_size, self.config.hidden_size)
        weight = self.head.weight
        return LSTMState(weight.new_zeros(shape), weight.new_zeros(shape))

    def step(self, state: Optional[LSTMState], observation: torch.Tensor,
             action: Optional[torch.Tensor] = None) -> StepOutput:
        """Predict tau_t (B, d) from x_t (B, 3 d); no autograd; `action` is ignored."""
        check_step_input('observation', observation, self.n_obs)
        if state is None:
            state = self.init_state(observation.shape[0])
        with torch.inference_mode():
            x, h, c = lstm_step(self.lstm, self.input_norm.normalize(observation), state)
            tau = self.target_norm.denormalize(
                torch.addmm(self.head.bias, x, self.head.weight.t()))
        return StepOutput(tau, None, LSTMState(h, c))

    def forward(self, batch: SequenceBatch) -> Prediction:
        """Predict tau for every step of the windows, starting from a zero state."""
        check_batch(batch, self.n_obs, batch.actions.shape[-1], self.n_target)
        return Prediction(self.target_norm.denormalize(self._normalized(batch)), None)

    def _normalized(self, batch: SequenceBatch) -> torch.Tensor:
        out, _ = self.lstm(self.input_norm.normalize(batch.observations))
        return self.head(out)

    def loss(self, batch: SequenceBatch) -> Tuple[torch.Tensor, dict]:
        """MSE in normalised torque units over joints and steps (seed 001, Eq. 3)."""
        check_batch(batch, self.n_obs, batch.actions.shape[-1], self.n_target)
        error = self._normalized(batch) - self.target_norm.normalize(batch.targets)
        loss = error.pow(2).mean()
        return loss, {'mse_normalized': float(loss.detach())}
