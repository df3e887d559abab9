"""
LSTM inverse dynamics (seed 001, Rueckert et al.): x_t = [q, qd, qdd] -> tau_t.

Up to two LSTM layers with a small hidden size and a linear read-out, trained on windows of
sequential data with small batches and an MSE loss in normalised units (their Eq. 3).
Streaming `step` carries (h, c) and runs without autograd; with `sliding` it instead
predicts each step from a zero state over the last inputs, as the model was trained.
"""
import copy
import dataclasses
from typing import NamedTuple, Optional, Tuple, Union

import numpy as np
from robot_dynamics_learning.models.base import Prediction, SequenceBatch, StepOutput
from robot_dynamics_learning.models.common import (check_batch, check_step_input,
                                                   InputSupport, InverseModel, ModelConfig,
                                                   Normalizer, support_of, SupportedVariance,
                                                   TRUST_FLOOR)
from robot_dynamics_learning.models.neighbours import DISTANCE_FLOOR
import torch
from torch import nn
import torch.nn.functional as F


# Sliding windows cost one LSTM step per input of the window for every sample a node streams.
MAX_SLIDING = 16


@dataclasses.dataclass(frozen=True)
class LSTMConfig(ModelConfig):
    """
    hidden_size: LSTM units per layer (seed 001 searched 2..20); num_layers: 1 or 2.

    angle_features: read [sin q, cos q, qd, qdd] instead of [q, qd, qdd] (gravity and
    Coriolis terms are trigonometric in q); the per-message numpy stepper is then not used.
    linear_skip: add to the read-out a linear map of the normalised inputs and of
    tanh(qd / friction_speed) per joint (a smooth sign of qd: Coulomb friction), zero at the
    start. The part of the torque that is linear in these needs no recurrent fit, so the
    LSTM learns the rest from less data (measured in docs/models.md, "A linear path"); the
    numpy stepper is then not used either. friction_speed in rad/s.
    sliding: 0 carries the state over the whole recording or stream; w > 0 predicts each
    step from a zero state over the last w inputs (w LSTM steps a sample), as a model trained
    on windows of w steps saw them. A 2-step model run for 500 steps reaches states it never
    trained on (3000 Kinova samples: nMSE 0.71 on sliding windows against 0.80 whole); the
    window choice (`learning/window_choice.py`) sets it where the held-out data say so.
    """

    hidden_size: int = 32
    num_layers: int = 1
    angle_features: bool = False
    linear_skip: bool = False
    friction_speed: float = 0.02
    sliding: int = 0

    def __post_init__(self) -> None:
        """Validate: positive sizes, at most two layers (more did not help in seed 001)."""
        self._positive('hidden_size', 'num_layers', 'friction_speed')
        if self.num_layers > 2:
            raise ValueError(f'LSTMConfig.num_layers must be 1 or 2, got {self.num_layers}')
        if type(self.sliding) is not int or not 0 <= self.sliding <= MAX_SLIDING:
            raise ValueError(f'LSTMConfig.sliding must be an int from 0 to {MAX_SLIDING} '
                             f'(LSTM steps per sample), got {self.sliding!r}')


class LSTMState(NamedTuple):
    """Recurrent state: h and c, each (num_layers, B, hidden_size)."""

    h: torch.Tensor
    c: torch.Tensor


class SlidingState(NamedTuple):
    """Streaming state on sliding windows: the last (at most w - 1) normalised inputs (B, k, n)."""

    inputs: torch.Tensor


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


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to(torch.float32).numpy().copy()


class NumpyLSTMStepper:
    """
    One streaming step of normaliser -> LSTM -> linear read-out -> denormaliser, in numpy.

    Why: for one sample per message a torch step is mostly dispatch (about 70 us at hidden 64
    for a few us of arithmetic), and each torch call also hands the GIL over. Numpy
    matrix-vector products do the same float32 math (gate order i, f, g, o, as
    `torch.lstm_cell`; checked against `step` in the tests) in about a fifth of the time.
    The weights are copied at construction: build a new stepper for new weights.
    state: (2, num_layers, hidden) float32, h then c, for one stream. With an `InputSupport`,
    `variance` gives the model's variance for an input (what `step` of the torch model returns;
    for the streaming predictor to publish ~/predicted_torques_std on this fast path).
    """

    def __init__(self, lstm: nn.LSTM, head: nn.Linear, input_norm: Normalizer,
                 output_norm: Normalizer, support: Optional[InputSupport] = None) -> None:
        self._layers = [(_numpy(getattr(lstm, f'weight_ih_l{k}')),
                         _numpy(getattr(lstm, f'weight_hh_l{k}')),
                         _numpy(getattr(lstm, f'bias_ih_l{k}') + getattr(lstm, f'bias_hh_l{k}')))
                        for k in range(lstm.num_layers)]
        self._hidden = lstm.hidden_size
        self._head = (_numpy(head.weight), _numpy(head.bias))
        self._input = (_numpy(input_norm.mean), _numpy(input_norm.std))
        self._output = (_numpy(output_norm.mean), _numpy(output_norm.std))
        self._support = None if support is None else (
            support.watched, _numpy(support.low), _numpy(support.high),
            _numpy(support.near_var), _numpy(support.far_var), support.length)
        self._shape = None if support is None or support.shape.flat else (
            _numpy(support.shape.weight), _numpy(support.shape.offset),
            _numpy(support.shape.low), _numpy(support.shape.high))
        if self._shape is None or not support.shape.uses_distance:
            self._distance = None
        else:   # float64 points and their squared norms: |p - x|^2 in one product, exact enough
            neighbours = support.shape.neighbours
            points = neighbours.points[:int(neighbours.count)].double().numpy()
            self._distance = (points, np.sum(points ** 2, axis=1),
                              _numpy(support.shape.distance_weight))

    def variance(self, observation: np.ndarray) -> Optional[np.ndarray]:
        """Return the expected squared error (n_out,) for one input (n_in,); None: no support."""
        if self._support is None:
            return None
        watched, low, high, near, far, length = self._support
        mean, std = self._input
        inputs = (np.asarray(observation, np.float32) - mean) / std
        x = inputs[watched]
        excess = np.maximum(low[watched] - x, 0.0) + np.maximum(x - high[watched], 0.0)
        weight = np.exp(-0.5 * np.sum(excess ** 2) / length ** 2)
        weight = 0.0 if weight < TRUST_FLOOR else weight
        if self._shape is not None:   # `ErrorShape.factor`
            shape, offset, shape_low, shape_high = self._shape
            log_factor = np.concatenate([inputs, np.abs(inputs)]) @ shape - offset
            if self._distance is not None:   # `ErrorShape.log_distance`
                points, norms, distance_weight = self._distance
                x64 = x.astype(np.float64)
                nearest = np.sqrt(max(float(np.min(norms - 2.0 * (points @ x64)) + x64 @ x64),
                                      0.0))
                log_factor = log_factor + np.log(nearest + DISTANCE_FLOOR) * distance_weight
            near = near * np.exp(np.clip(log_factor, shape_low, shape_high))
        variance = weight * near + (1.0 - weight) * np.maximum(far, near)
        return (variance * self._output[1] ** 2).astype(np.float64)

    def state_from(self, state: 'LSTMState') -> np.ndarray:
        """Convert a batch-1 `LSTMState` of the torch model."""
        return np.stack([_numpy(state.h[:, 0]), _numpy(state.c[:, 0])])

    def step(self, state: np.ndarray, observation: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Return (output (n_out,) float64, next state) for one input (n_in,)."""
        mean, std = self._input
        x = (np.asarray(observation, np.float32) - mean) / std
        new = np.empty_like(state)
        n = self._hidden
        for layer, (w_ih, w_hh, bias) in enumerate(self._layers):
            gates = w_ih @ x + w_hh @ state[0, layer] + bias
            # clipped: the same float32 sigmoid, without overflow warnings on wild inputs
            sigmoid = 1.0 / (1.0 + np.exp(-np.clip(gates, -80.0, 80.0)))
            c = sigmoid[n:2 * n] * state[1, layer] + sigmoid[:n] * np.tanh(gates[2 * n:3 * n])
            x = sigmoid[3 * n:] * np.tanh(c)
            new[0, layer], new[1, layer] = x, c
        weight, bias = self._head
        mean, std = self._output
        return (weight @ x + bias) * std + mean, new


class LSTMInverseDynamics(SupportedVariance, InverseModel):
    """
    Inverse dynamics tau_t = f(x_1..x_t) with an LSTM.

    observations (B, T, n_obs): raw [q, qd, qdd] (n_obs = 3 d); targets (B, T, d): tau in N m.
    actions are ignored (any width): the LSTM does not see the previous torque. The variance
    is the validation error inside the training range, rising outside it (`InputSupport`).
    """

    config_class = LSTMConfig

    def __init__(self, config: LSTMConfig, n_obs: int, n_act: int, n_target: int) -> None:
        super().__init__(config, n_obs, n_act, n_target)
        width = n_obs + n_obs // 3 if config.angle_features else n_obs
        self.width = width
        self.input_norm = Normalizer(width)
        self.lstm = nn.LSTM(width, config.hidden_size, config.num_layers, batch_first=True)
        self.head = nn.Linear(config.hidden_size, n_target)
        self.support = support_of(width, n_target)
        if config.linear_skip:
            self.skip = nn.Linear(width + n_obs // 3, n_target)
            nn.init.zeros_(self.skip.weight)
            nn.init.zeros_(self.skip.bias)

    def _read_out(self, hidden: torch.Tensor, observations: torch.Tensor,
                  normalized_inputs: torch.Tensor) -> torch.Tensor:
        """Return the normalised torque: the head on the LSTM output, plus the linear path."""
        out = F.linear(hidden, self.head.weight, self.head.bias)   # no module-call overhead
        if not self.config.linear_skip:
            return out
        joints = self.n_obs // 3
        friction = torch.tanh(observations[..., joints:2 * joints] / self.config.friction_speed)
        features = torch.cat([normalized_inputs, friction], dim=-1)
        return out + F.linear(features, self.skip.weight, self.skip.bias)

    def _model_inputs(self, observations: torch.Tensor) -> torch.Tensor:
        if not self.config.angle_features:
            return observations
        q, rest = observations[..., :self.n_obs // 3], observations[..., self.n_obs // 3:]
        return torch.cat([torch.sin(q), torch.cos(q), rest], dim=-1)

    def fit_normalization(self, batch: SequenceBatch) -> None:
        """Fit input (features) and torque statistics and the training input range."""
        self.input_norm.fit(self._model_inputs(batch.observations))
        self.target_norm.fit(batch.targets)
        self.fit_support(batch)

    def init_state(self, batch_size: int) -> Union[LSTMState, SlidingState]:
        """Return zero (h, c) for `batch_size` streams, or no inputs yet on sliding windows."""
        weight = self.head.weight
        if self.config.sliding:
            return SlidingState(weight.new_zeros((batch_size, 0, self.width)))
        shape = (self.config.num_layers, batch_size, self.config.hidden_size)
        return LSTMState(weight.new_zeros(shape), weight.new_zeros(shape))

    def step(self, state: Union[LSTMState, SlidingState, None], observation: torch.Tensor,
             action: Optional[torch.Tensor] = None) -> StepOutput:
        """Predict tau_t (B, d) from x_t (B, 3 d); no autograd; `action` is ignored."""
        check_step_input('observation', observation, self.n_obs)
        if state is None:
            state = self.init_state(observation.shape[0])
        with torch.inference_mode():
            inputs = self._support_inputs(observation)
            if self.config.sliding:
                window = torch.cat([state.inputs, inputs[:, None]], dim=1)
                x = self.lstm(window)[0][:, -1]
                state = SlidingState(window[:, window.shape[1] - self.config.sliding + 1:])
            else:
                x, h, c = lstm_step(self.lstm, inputs, state)
                state = LSTMState(h, c)
            tau = self.target_norm.denormalize(self._read_out(x, observation, inputs))
            variance = self._variance(observation)
        return StepOutput(tau, variance, state)

    def on_sliding_windows(self, window: int) -> Optional['LSTMInverseDynamics']:
        """Return a copy predicting on sliding windows of `window` steps (None: it cannot)."""
        if self.config.sliding or window > MAX_SLIDING:   # a sliding model stays as set
            return None
        twin = copy.deepcopy(self)
        twin.config = dataclasses.replace(self.config, sliding=window)
        return twin

    def numpy_stepper(self) -> Optional[NumpyLSTMStepper]:
        """Return the numpy twin of `step` for one stream (None: angle features, skip, sliding)."""
        if self.config.angle_features or self.config.linear_skip or self.config.sliding:
            return None
        return NumpyLSTMStepper(self.lstm, self.head, self.input_norm, self.target_norm,
                                self.support)

    def forward(self, batch: SequenceBatch) -> Prediction:
        """Predict tau for every step of the windows, starting from a zero state."""
        check_batch(batch, self.n_obs, batch.actions.shape[-1], self.n_target)
        return Prediction(self.target_norm.denormalize(self._normalized(batch)),
                          self._variance(batch.observations))

    def _normalized_prediction(self, batch: SequenceBatch) -> torch.Tensor:
        return self._normalized(batch)

    def _normalized(self, batch: SequenceBatch) -> torch.Tensor:
        inputs = self._support_inputs(batch.observations)
        return self._read_out(self._hidden_outputs(inputs), batch.observations, inputs)

    def _hidden_outputs(self, inputs: torch.Tensor) -> torch.Tensor:
        """Return LSTM outputs (B, T, H): over whole windows, or each over its last w inputs."""
        w = self.config.sliding
        steps = inputs.shape[1]
        if not w or steps <= w:   # a training window of w steps: the same either way
            return self.lstm(inputs)[0]
        windows = inputs.unfold(1, w, 1).transpose(2, 3)   # (B, T - w + 1, w, n)
        last = self.lstm(windows.reshape(-1, w, inputs.shape[2]))[0][:, -1]
        last = last.reshape(inputs.shape[0], steps - w + 1, -1)
        if w == 1:
            return last
        first = self.lstm(inputs[:, :w - 1])[0]   # the first steps see what came before them
        return torch.cat([first, last], dim=1)

    def loss(self, batch: SequenceBatch) -> Tuple[torch.Tensor, dict]:
        """MSE in normalised torque units over joints and steps (seed 001, Eq. 3)."""
        check_batch(batch, self.n_obs, batch.actions.shape[-1], self.n_target)
        self.widen_support(batch)
        error = self._normalized(batch) - self.target_norm.normalize(batch.targets)
        loss = error.pow(2).mean()
        return loss, {'mse_normalized': float(loss.detach())}
