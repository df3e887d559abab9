"""
Forward-model machinery shared by ac-RKN and its baselines (seed 004, Sec. 4.2).

Every forward model predicts the next observation as a normalised difference,
o^_{t+1} = m_t + dec(.), with the memory m_t = o_t where the observation is valid and m_t = o^_t
(the model's own prediction) where it is missing. Multi-step prediction is the same loop with
every observation missing, and training drops a share of observations to teach it.

Models whose cell gives no variance (LSTM, GRU, FFNN) get one from held-out errors by horizon
(`HorizonVariance`): after training, the validation windows are predicted open loop from their
middle, and the mean squared error k steps after the last observation becomes the variance of
every k-step prediction. Every forward model's variance also rises where its input (memory
and action) leaves the training range (`InputSupport`): towards the error of holding the last
observation, measured on the same windows, where the model's own claim is smaller.
"""
import abc
from typing import Any, NamedTuple, Optional, Tuple

from robot_dynamics_learning.models.base import (DynamicsModel, Prediction, SequenceBatch,
                                                 StepOutput)
from robot_dynamics_learning.models.common import (check_batch, check_step_input,
                                                   DefaultedBuffers, InputSupport, Normalizer,
                                                   OutputScale, rmse, SUPPORT_LENGTH)
from robot_dynamics_learning.models.coverage import coverage_variance
import torch

FORWARD_CONVENTION = 'next observation o_{t+1} (physical units) = o_t + learned difference'
MAX_CALIBRATED_HORIZON = 64   # horizons with a measured variance; beyond, extrapolated


class FeedbackState(NamedTuple):
    """
    Streaming state: the model's own state, memory o^_{t+1} (B, n_obs) and its variance.

    horizon (B,): steps the memory is ahead of the last observation (0: just observed).
    """

    cell: Any
    memory: torch.Tensor
    memory_var: torch.Tensor
    horizon: Optional[torch.Tensor] = None


class HorizonVariance(DefaultedBuffers):
    """
    Held-out error variance of k-step open-loop predictions, k = 1..K, per observation.

    Physical units squared. `count` is K (0: not calibrated, the model publishes no
    variance; a checkpoint from before it loads uncalibrated). Monotone in k (a cumulative
    maximum: more steps without an observation never make a prediction surer); beyond K the
    last step's growth continues linearly.
    """

    def __init__(self, n_obs: int) -> None:
        super().__init__()
        self.register_buffer('by_horizon', torch.zeros(MAX_CALIBRATED_HORIZON, n_obs))
        self.register_buffer('count', torch.zeros((), dtype=torch.long))

    @property
    def calibrated(self) -> bool:
        """Return whether a variance was measured."""
        return int(self.count) > 0

    def fit(self, squared_error: torch.Tensor) -> None:
        """Set the table from squared errors (N, K, n_obs) of predictions 1..K steps ahead."""
        k = min(squared_error.shape[1], MAX_CALIBRATED_HORIZON)
        head = squared_error[:, :k]
        variance = coverage_variance(head.reshape(head.shape[0], -1)).reshape(head.shape[1:])
        self.by_horizon.zero_()
        self.by_horizon[:k] = torch.cummax(variance.clamp_min(1e-12), dim=0).values
        self.count.fill_(k)

    def at(self, horizon: torch.Tensor) -> torch.Tensor:
        """Return the variance (B, n_obs) of predictions `horizon` (B,) >= 1 steps ahead."""
        k = int(self.count)
        index = horizon.clamp(1, k) - 1
        variance = self.by_horizon[index]
        if k < 2:
            return variance
        growth = (self.by_horizon[k - 1] - self.by_horizon[k - 2]).clamp_min(0.0)
        beyond = (horizon - k).clamp_min(0).to(variance.dtype).unsqueeze(-1)
        return variance + beyond * growth


def valid_mask(batch: SequenceBatch) -> torch.Tensor:
    """Return the (B, T) observation mask (all True if absent); the first step must be valid."""
    if batch.observation_valid is None:
        return torch.ones(batch.observations.shape[:2], dtype=torch.bool,
                          device=batch.observations.device)
    valid = batch.observation_valid.to(torch.bool)
    if valid.shape[1] and not bool(valid[:, 0].all()):
        raise ValueError('observation_valid[:, 0] must be True: a window starts from a measured '
                         'observation')
    return valid


def last_observed(valid: torch.Tensor) -> torch.Tensor:
    """Return (B, T) the index of the last valid step <= t (-1 before the first)."""
    index = torch.arange(valid.shape[1], device=valid.device).expand_as(valid)
    return torch.where(valid, index, torch.full_like(index, -1)).cummax(dim=1).values


def steps_since_observed(valid: torch.Tensor) -> torch.Tensor:
    """Return (B, T) the horizon of each prediction: 1 + steps since the last valid one."""
    index = torch.arange(valid.shape[1], device=valid.device).expand_as(valid)
    return index - last_observed(valid) + 1


def forward_loss(prediction: Prediction, batch: SequenceBatch, diff_norm: Normalizer,
                 variance_weight: float) -> Tuple[torch.Tensor, dict]:
    """
    RMSE of o^_{t+1} - o_{t+1} in normalised-difference units (seed 004, L_fwd).

    Where a variance is predicted, add variance_weight times its Gaussian NLL with the mean
    detached, so the variance head calibrates without changing the paper's mean objective.
    """
    error = (prediction.mean - batch.targets) / diff_norm.std
    loss = rmse(error)
    metrics = {'rmse_normalized': float(loss.detach())}
    if prediction.variance is not None and variance_weight > 0:
        var = prediction.variance / diff_norm.std ** 2
        nll = 0.5 * (torch.log(var) + error.detach().pow(2) / var).mean()
        loss = loss + variance_weight * nll
        metrics['nll'] = float(nll.detach())
    return loss, metrics


class FeedbackForwardModel(DynamicsModel):
    """
    Base of forward models whose input at t is the memory m_t and the action a_t.

    Subclasses implement `_init_cell` and `_cell`; this class owns normalisation, the memory
    loop, the loss, streaming `step` and `rollout` (which are the same loop).
    """

    kind = 'forward'
    target_convention = FORWARD_CONVENTION
    convention = 'next_observation_difference/1'
    variance_weight = 0.0
    cell_variance = False   # True where `_cell` predicts the difference's variance (RKNs)

    def __init__(self, n_obs: int, n_act: int, n_target: int) -> None:
        super().__init__()
        if n_target != n_obs:
            raise ValueError(f'a forward model predicts observations: n_target ({n_target}) '
                             f'must equal n_obs ({n_obs})')
        self.n_obs, self.n_act, self.n_target = n_obs, n_act, n_target
        self.obs_norm = Normalizer(n_obs)
        self.act_norm = Normalizer(n_act)
        self.diff_norm = Normalizer(n_obs)
        self.horizon_variance = HorizonVariance(n_obs)
        # Out of the training range the variance rises to the hold-last-observation error.
        self.support = InputSupport(n_obs + n_act, n_obs, range(n_obs + n_act), SUPPORT_LENGTH,
                                    keep_inputs=False)
        self.hold_variance = HorizonVariance(n_obs)
        self.variance_scale = OutputScale(n_obs)   # fitted for cells with their own variance

    def fit_normalization(self, batch: SequenceBatch) -> None:
        """Fit observation, action and difference (o_{t+1} - o_t) statistics."""
        self.obs_norm.fit(batch.observations)
        if self.n_act:
            self.act_norm.fit(batch.actions)
        self.diff_norm.fit(batch.targets - batch.observations)
        self.support.fit_range(self._support_inputs(batch.observations, batch.actions))

    def _support_inputs(self, memory: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Return the normalised [memory, action] (..., n_obs + n_act) the range is kept of."""
        return torch.cat([self.obs_norm.normalize(memory), self.act_norm.normalize(actions)], -1)

    def _published_variance(self, variance: torch.Tensor, inputs: torch.Tensor,
                            horizon: torch.Tensor) -> torch.Tensor:
        """
        Raise `variance` (..., n_obs) where the normalised inputs leave the training range.

        Trust w (1 inside the range) blends the model's variance with the larger of it and the
        hold-last-observation error at the same horizon (..., as `inputs` without the last
        axis).
        """
        if not self.hold_variance.calibrated:
            return variance
        return self.support.rise(self.variance_scale.apply(variance),
                                 self.hold_variance.at(horizon).to(variance.dtype), inputs)

    @abc.abstractmethod
    def _init_cell(self, batch_size: int) -> Any:
        """Return the model's own initial state."""

    @abc.abstractmethod
    def _cell(self, state: Any, memory: torch.Tensor, action: torch.Tensor,
              valid: torch.Tensor) -> Tuple[torch.Tensor, Optional[torch.Tensor], Any]:
        """
        Advance one step on normalised memory (B, n_obs) and action (B, n_act).

        valid (B,) says where the memory is a measurement. Returns (normalised difference
        (B, n_obs), its variance or None, next state).
        """

    def init_state(self, batch_size: int) -> FeedbackState:
        """Return the initial streaming state (memory zero until the first observation)."""
        zeros = self.diff_norm.std.new_zeros(batch_size, self.n_obs)
        return FeedbackState(self._init_cell(batch_size), zeros, zeros,
                             torch.zeros(batch_size, dtype=torch.long))

    def _run(self, state: FeedbackState, observations: Optional[torch.Tensor],
             actions: torch.Tensor, valid: Optional[torch.Tensor]
             ) -> Tuple[Prediction, FeedbackState]:
        """Loop over T steps; observations None means all missing (rollout)."""
        cell, memory, memory_var, horizon = state
        if horizon is None:   # a state from before horizons were kept: as if just observed
            horizon = torch.zeros(memory.shape[0], dtype=torch.long, device=memory.device)
        means, variances = [], []
        has_variance = False
        for t in range(actions.shape[1]):
            if observations is not None:
                valid_t = valid[:, t]
                gate = valid_t.unsqueeze(-1)
                memory = torch.where(gate, observations[:, t], memory)
                memory_var = torch.where(gate, torch.zeros_like(memory_var), memory_var)
                horizon = torch.where(valid_t, torch.zeros_like(horizon), horizon)
            else:
                valid_t = torch.zeros(actions.shape[0], dtype=torch.bool, device=actions.device)
            horizon = horizon + 1
            inputs = self._support_inputs(memory, actions[:, t])
            delta, delta_var, cell = self._cell(cell, inputs[:, :self.n_obs],
                                                inputs[:, self.n_obs:], valid_t)
            memory = memory + self.diff_norm.denormalize(delta)
            if delta_var is not None:
                has_variance = True
                memory_var = memory_var + self.diff_norm.denormalize_variance(delta_var)
            elif self.horizon_variance.calibrated:
                has_variance = True
                memory_var = self.horizon_variance.at(horizon).to(memory.dtype)
            means.append(memory)
            variances.append(self._published_variance(memory_var, inputs, horizon))
        prediction = Prediction(torch.stack(means, 1),
                                torch.stack(variances, 1) if has_variance else None)
        return prediction, FeedbackState(cell, memory, memory_var, horizon)

    def calibrate_variance(self, val: SequenceBatch) -> None:
        """
        Measure the errors by horizon (`HorizonVariance`) on validation windows.

        Each window is observed for its first half (the recurrent state warms up, as in a
        k-step test), then predicted open loop: the model's error (for cells without their own
        variance), the scale on a cell's own variance that covers its open-loop errors
        (`OutputScale`), and the error of holding the last observation (every forward model).
        """
        steps = val.observations.shape[1]
        observed = max(1, steps // 2)
        valid = torch.zeros(val.observations.shape[:2], dtype=torch.bool)
        valid[:, :observed] = True
        self.hold_variance.count.zero_()   # the cell's own variance, not yet blended or scaled
        self.variance_scale.factor.fill_(1.0)
        with torch.no_grad():
            prediction = self(SequenceBatch(val.observations, val.actions, val.targets, valid))
        # Prediction index observed - 1 + j is the (j + 1)-step prediction from o_{observed-1}.
        targets = val.targets[:, observed - 1:]
        squared_error = (prediction.mean[:, observed - 1:] - targets).pow(2)
        self.hold_variance.fit((val.observations[:, observed - 1:observed] - targets).pow(2))
        if self.cell_variance:
            self.variance_scale.fit(squared_error, prediction.variance[:, observed - 1:])
        else:
            self.horizon_variance.fit(squared_error)

    def forward(self, batch: SequenceBatch) -> Prediction:
        """Predict o_{t+1} for every step; missing observations are replaced by predictions."""
        check_batch(batch, self.n_obs, self.n_act, self.n_target)
        valid = valid_mask(batch)
        batch_size = batch.observations.shape[0]
        zeros = batch.observations.new_zeros(batch_size, self.n_obs)
        start = FeedbackState(self._init_cell(batch_size), zeros, zeros,
                              torch.zeros(batch_size, dtype=torch.long))
        prediction, _ = self._run(start, batch.observations, batch.actions, valid)
        return prediction

    def loss(self, batch: SequenceBatch) -> Tuple[torch.Tensor, dict]:
        """RMSE on normalised next-observation differences (seed 004 L_fwd)."""
        return forward_loss(self(batch), batch, self.diff_norm, self.variance_weight)

    def step(self, state: Optional[FeedbackState], observation: torch.Tensor,
             action: Optional[torch.Tensor] = None) -> StepOutput:
        """Predict o^_{t+1} (B, n_obs) from o_t and a_t without autograd."""
        check_step_input('observation', observation, self.n_obs)
        if action is None:
            raise ValueError(f'{type(self).__name__}.step needs the action a_t')
        check_step_input('action', action, self.n_act)
        if state is None:
            state = self.init_state(observation.shape[0])
        valid = torch.ones(observation.shape[0], 1, dtype=torch.bool)
        with torch.no_grad():
            prediction, new_state = self._run(state, observation.unsqueeze(1),
                                              action.unsqueeze(1), valid)
        variance = None if prediction.variance is None else prediction.variance[:, 0]
        return StepOutput(prediction.mean[:, 0], variance, new_state)

    def rollout(self, state: FeedbackState, actions: torch.Tensor) -> Prediction:
        """
        Predict H further steps with no observations (differentiable).

        state: from `step` at time t (which returned o^_{t+1}); actions (B, H, n_act) are
        a_{t+1..t+H}; returns o^_{t+2..t+H+1} (B, H, n_obs) and variances where available.
        """
        if actions.ndim != 3 or actions.shape[-1] != self.n_act:
            raise ValueError(f'actions must have shape (B, H, {self.n_act}), got '
                             f'{tuple(actions.shape)}')
        check_step_input('rollout actions', actions.reshape(-1, self.n_act), self.n_act)
        prediction, _ = self._run(state, None, actions, None)
        return prediction
