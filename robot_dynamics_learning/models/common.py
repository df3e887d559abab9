"""
Pieces shared by the learned models: validated configs, normalisation buffers, MLPs.

Normalisation lives inside each model as buffers so that it is saved and loaded with the
weights (DESIGN.md): a checkpoint never needs a side file of statistics.
"""
import dataclasses
import math
import numbers
import typing
from typing import Any, Dict, Optional, Sequence, Type, TypeVar

import numpy as np
from robot_dynamics_learning.models.base import (check_finite, DynamicsModel, SequenceBatch,
                                                 StepOutput)
from robot_dynamics_learning.models.coverage import coverage_scale
from robot_dynamics_learning.models.defaulted_buffers import DefaultedBuffers
from robot_dynamics_learning.models.error_shape import ErrorShape
import torch
from torch import nn

ConfigT = TypeVar('ConfigT', bound='ModelConfig')


def _all_finite(value: Any) -> bool:
    """Return False when a float in value (or in its nested lists and tuples) is NaN or inf."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_all_finite(item) for item in value)
    return True


def _has_type(value: Any, kind: Any) -> bool:
    """
    Return whether a config value fits its field's type (YAML's 1.5 for an int field did not).

    int takes integers (numpy's too), float any real number, neither a bool; a tuple field
    takes a list or tuple of its items; other types are left to the config's own checks.
    """
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is typing.Union:
        return any(_has_type(value, option) for option in args)
    if origin is tuple:
        item = args[0] if args else Any
        return isinstance(value, (list, tuple)) and all(_has_type(v, item) for v in value)
    if kind is type(None):
        return value is None
    if kind is bool:
        return isinstance(value, (bool, np.bool_))
    if kind is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    if kind is str:
        return isinstance(value, str)
    return True


def _type_name(kind: Any) -> str:
    """Name a field type for an error message ('an int', 'a list of int', ...)."""
    if typing.get_origin(kind) is typing.Union:
        return ' or '.join(_type_name(option) for option in typing.get_args(kind))
    if typing.get_origin(kind) is tuple:
        item = typing.get_args(kind)[0]
        return 'a list of ' + {int: 'ints', float: 'numbers', str: 'strings'}.get(item, str(item))
    return {int: 'an int', float: 'a number', bool: 'true or false', str: 'a string',
            type(None): 'null'}.get(kind, str(kind))


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Base of the typed configs (models, training): from a dict, unknown keys are an error."""

    @classmethod
    def from_dict(cls: Type[ConfigT], values: Optional[Dict[str, Any]]) -> ConfigT:
        """Build and validate a config; raise ValueError naming any unknown key."""
        values = dict(values or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f'{cls.__name__}: unknown key(s) {unknown}; known: {sorted(known)}')
        hints = typing.get_type_hints(cls)
        for key, value in values.items():   # configs come from YAML, JSON and checkpoints
            if not _all_finite(value):
                raise ValueError(f'{cls.__name__}.{key} must be finite, got {value!r}')
            if not _has_type(value, hints[key]):
                raise ValueError(f'{cls.__name__}.{key} must be {_type_name(hints[key])}, got '
                                 f'{value!r}')
        return cls(**values)

    def to_dict(self) -> Dict[str, Any]:
        """Return plain Python values (what a weights_only checkpoint may hold)."""
        return dataclasses.asdict(self)

    def _positive(self, *names: str) -> None:
        for name in names:
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ValueError(f'{type(self).__name__}.{name} must be > 0, got {value!r}')

    def _choice(self, name: str, choices: Sequence[str]) -> None:
        value = getattr(self, name)
        if value not in choices:
            raise ValueError(f'{type(self).__name__}.{name} must be one of {list(choices)}, '
                             f'got {value!r}')


class Normalizer(nn.Module):
    """Zero-mean, unit-variance scaling per feature; statistics are buffers (saved with it)."""

    def __init__(self, size: int, min_std: float = 1e-6) -> None:
        super().__init__()
        self.min_std = min_std
        self.register_buffer('mean', torch.zeros(size))
        self.register_buffer('std', torch.ones(size))

    def fit(self, data: torch.Tensor) -> None:
        """Set mean and std from samples (..., size); constant features keep std 1."""
        flat = data.reshape(-1, data.shape[-1]).to(self.mean.dtype)
        check_finite('normalisation data', flat)
        if flat.shape[0] == 0:
            raise ValueError('cannot fit normalisation statistics on zero samples')
        std = flat.std(dim=0, unbiased=False) if flat.shape[0] > 1 else torch.ones_like(self.std)
        self.mean.copy_(flat.mean(dim=0))
        self.std.copy_(torch.where(std > self.min_std, std, torch.ones_like(std)))

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """Map physical values to normalised ones."""
        return (x - self.mean) / self.std

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        """Map normalised values back to physical units."""
        return x * self.std + self.mean

    def denormalize_variance(self, var: torch.Tensor) -> torch.Tensor:
        """Scale a variance in normalised units to physical units."""
        return var * self.std ** 2


class InverseModel(DynamicsModel):
    """
    Base of the inverse-dynamics models: x_t = [q, qd, qdd] -> tau_t in N m.

    Holds the config, the sizes and the input and torque normalisers (buffers, saved with the
    weights) and fits both on the training windows.
    """

    kind = 'inverse'
    target_convention = 'absolute joint torque tau_t (N m)'
    convention = 'joint_torque/1'

    def __init__(self, config: ModelConfig, n_obs: int, n_act: int, n_target: int) -> None:
        super().__init__()
        self.config = config
        self.n_obs, self.n_act, self.n_target = n_obs, n_act, n_target
        self.input_norm = Normalizer(n_obs)
        self.target_norm = Normalizer(n_target)

    def fit_normalization(self, batch: SequenceBatch) -> None:
        """Fit input and torque statistics on the training windows."""
        self.input_norm.fit(batch.observations)
        self.target_norm.fit(batch.targets)


class StatelessStep:
    """
    Streaming `init_state` and `step` of inverse models whose output depends on x_t alone.

    The model provides `n_obs` and `_predict_step(observation (B, n_obs)) -> tau (B, d)`; the
    state is always None and `action` is ignored.
    """

    n_obs: int

    def init_state(self, batch_size: int) -> None:
        """Return None: the model has no state."""
        return None

    def step(self, state: None, observation: torch.Tensor,
             action: Optional[torch.Tensor] = None) -> StepOutput:
        """Predict tau_t (B, d) and its variance (or None) from x_t (B, 3 d), without autograd."""
        check_step_input('observation', observation, self.n_obs)
        with torch.no_grad():
            return StepOutput(self._predict_step(observation), self._step_variance(observation),
                              None)

    def _predict_step(self, observation: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _step_variance(self, observation: torch.Tensor) -> Optional[torch.Tensor]:
        return None


def mlp(n_in: int, hidden: Sequence[int], n_out: int, activation: Type[nn.Module] = nn.ReLU,
        dropout: float = 0.0) -> nn.Sequential:
    """Build a fully connected network: hidden layers with `activation`, linear output."""
    layers = []
    width = n_in
    for size in hidden:
        layers += [nn.Linear(width, size), activation()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = size
    layers.append(nn.Linear(width, n_out))
    return nn.Sequential(*layers)


def check_batch(batch: SequenceBatch, n_obs: int, n_act: int, n_target: int) -> None:
    """Check a batch's shapes and finiteness at the model boundary, naming what is wrong."""
    for name, tensor, width in (('observations', batch.observations, n_obs),
                                ('actions', batch.actions, n_act),
                                ('targets', batch.targets, n_target)):
        if tensor.ndim != 3 or tensor.shape[-1] != width:
            raise ValueError(f'{name} must have shape (B, T, {width}), got {tuple(tensor.shape)}')
        check_finite(name, tensor)
    if batch.observations.shape[:2] != batch.targets.shape[:2] or \
            batch.actions.shape[:2] != batch.targets.shape[:2]:
        raise ValueError('observations, actions and targets must share (B, T), got '
                         f'{tuple(batch.observations.shape)}, {tuple(batch.actions.shape)}, '
                         f'{tuple(batch.targets.shape)}')
    if batch.observation_valid is not None and \
            batch.observation_valid.shape != batch.observations.shape[:2]:
        raise ValueError(f'observation_valid must have shape {tuple(batch.observations.shape[:2])}'
                         f', got {tuple(batch.observation_valid.shape)}')


def check_step_input(name: str, tensor: torch.Tensor, width: int) -> None:
    """Check one streaming input (B, width): shape and finiteness."""
    if tensor.ndim != 2 or tensor.shape[-1] != width:
        raise ValueError(f'{name} must have shape (B, {width}), got {tuple(tensor.shape)}')
    check_finite(name, tensor)


def rmse(error: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """
    Root of the mean squared error norm, the ac-RKN loss (seed 004, L_fwd).

    error (B, T, n); mask (B, T) bool selects the steps that count.
    """
    squared = error.pow(2).sum(dim=-1)
    if mask is None:
        return squared.mean().clamp_min(1e-12).sqrt()
    weight = mask.to(squared.dtype)
    return ((squared * weight).sum() / weight.sum().clamp_min(1.0)).clamp_min(1e-12).sqrt()


# Trust length of `InputSupport` in training standard deviations beyond the range (Euclidean
# distance over the watched inputs): at 0.3 std outside, the learned part keeps exp(-1/2) =
# 61 % of its weight. Measured on the Kinova validation files (hybrid, seeds 0-2): with the
# distance as an RMS over the inputs (one joint far out counted 1/14) length 1.0 left the
# hybrid at nMSE 0.415 and 0.3 at 0.340, both worse than the URDF prior's 0.3368; the
# Euclidean distance at 0.3 gives 0.3368 (67 % / 98 % of the errors within 1 / 2 std),
# the prior's, while inside the ranges nothing changes.
SUPPORT_LENGTH = 0.3
# The range counts as seen this far beyond the training min and max, as a share of its width
# on each side: a held-out block of the same motions leaves the bare min-max box by a little
# on some joint 30 % of the time (Kinova blocks, FFNN), which halved the trust of 19 % of
# in-range test samples and published the error of the mean there (88 % of errors within
# 1 std). At 10 % of the width no in-range test sample loses trust. Not for the hybrid's
# residual (its trust scales the prediction, not only the variance): it keeps the bare range
# it was validated with ("never worse than its prior").
RANGE_MARGIN = 0.1
# Below this trust the learned part is off exactly (trust 0): the Kinova validation files
# leave the range so far that the hybrid's residual kept weights of 1e-6 or less, which moved
# its nMSE 2e-6 above its URDF prior's, noise from a network extrapolating, not information.
TRUST_FLOOR = 1e-3
UNBOUNDED = 1e9   # normalised units: the range of an unfitted `InputSupport`


class ErrorVariance(DefaultedBuffers):
    """
    One error variance per output, for models that cannot say more (the URDF model).

    Set to the variance of the training targets by `fit_normalization` (the error of knowing
    nothing but their mean), then to the held-out errors' `coverage_variance` by
    `calibrate_variance`; a continual
    learner scales it to its predict-then-train errors (`VarianceCalibration`).
    """

    def __init__(self, n_out: int, initial: float = 1.0) -> None:
        super().__init__()
        self.register_buffer('variance', torch.full((n_out,), float(initial)))

    def store(self, variance: torch.Tensor) -> None:
        """Store a per-output variance (floored at 1e-12)."""
        self.variance.copy_(variance.detach().clamp_min(1e-12))

    def like(self, mean: torch.Tensor) -> torch.Tensor:
        """Return the variance broadcast to a prediction's shape (..., n_out)."""
        return self.variance.to(mean.dtype).expand_as(mean)


class OutputScale(DefaultedBuffers):
    """
    A factor per output on a model's own variance (GP posterior, RKN decoder), 1 until fitted.

    `calibrate_variance` fits it on held-out errors (`coverage_scale`): the model's variance
    keeps its shape (rising away from the data) and gets the size that covers its errors.
    """

    def __init__(self, n_out: int) -> None:
        super().__init__()
        self.register_buffer('factor', torch.ones(n_out))

    def fit(self, squared_error: torch.Tensor, variance: torch.Tensor) -> None:
        """Set the factor from held-out squared errors and the model's variances (..., n_out)."""
        self.factor.copy_(coverage_scale(squared_error, variance).clamp(1e-6, 1e6))

    def apply(self, variance: torch.Tensor) -> torch.Tensor:
        """Return the scaled variance (..., n_out)."""
        return variance * self.factor.to(variance.dtype)

    def fit_to(self, model: DynamicsModel, val: SequenceBatch) -> None:
        """Fit the factor to `model`'s own (unscaled) variance and errors on `val`."""
        self.factor.fill_(1.0)
        with torch.no_grad():
            prediction = model(val)
        self.fit((prediction.mean - val.targets).pow(2), prediction.variance)


class InputSupport(DefaultedBuffers):
    """
    Where the training inputs were, and how much to trust a learned part away from there.

    Holds per input the training range (normalised units, buffers saved with the weights) and
    per output the error variance measured on validation data inside it (`near_var`) and the
    error variance of knowing nothing more than the training targets (`far_var`, 1 in the
    normalised target units). For an input x, d(x) is the Euclidean distance, over the watched
    inputs, by which x leaves the range, in training standard deviations (one joint far out
    is enough: every learned model fails on a new combination); trust w = exp(-d^2 / (2 l^2)),
    l = `length`. The variance moves from near_var (w = 1) to far_var (w = 0): calibrated on
    held-out data inside the range, rising outside it, where every learned model fails.
    Inside the range near_var is shaped by the inputs (`ErrorShape`, fitted by `calibrate`;
    flat otherwise): larger where the held-out errors were. keep_inputs: keep a sample of the
    training inputs for the shape's distance term; models that never `calibrate` (they size
    their variance otherwise) skip that work.
    """

    def __init__(self, n_in: int, n_out: int, watched: Sequence[int], length: float,
                 margin: float = RANGE_MARGIN, keep_inputs: bool = True) -> None:
        super().__init__()
        self.watched = list(watched)
        self.keep_inputs = keep_inputs
        self.length = float(length)
        self.margin = float(margin)   # share of the range's width counted as seen beyond it
        # Unfitted: a range no input leaves (finite: checkpoints refuse inf).
        self.register_buffer('low', torch.full((n_in,), -UNBOUNDED))
        self.register_buffer('high', torch.full((n_in,), UNBOUNDED))
        self.register_buffer('near_var', torch.ones(n_out))
        self.register_buffer('far_var', torch.ones(n_out))
        self.shape = ErrorShape(n_in, n_out, self.watched)

    def fit_range(self, normalized_inputs: torch.Tensor) -> None:
        """Record the range of the (normalised) training inputs, `margin` added, and a sample."""
        flat = normalized_inputs.reshape(-1, normalized_inputs.shape[-1]).to(self.low.dtype)
        low, high = flat.min(dim=0).values, flat.max(dim=0).values
        pad = self.margin * (high - low)
        self.low.copy_(low - pad)
        self.high.copy_(high + pad)
        if self.keep_inputs:
            self.shape.neighbours.reset(flat[:, self.watched])

    def widen(self, normalized_inputs: torch.Tensor) -> None:
        """
        Grow the range to cover these inputs too, and offer them to the kept sample.

        Each training batch calls it. A continual learner fits the range at its warm-up, on
        the first second of motion; the data it trains on later must count as seen, or the
        trust falls to the prior wherever the robot went afterwards.
        """
        if not torch.is_grad_enabled():   # a training step, not a validation pass
            return
        flat = normalized_inputs.detach().reshape(-1, normalized_inputs.shape[-1])
        flat = flat.to(self.low.dtype)
        torch.minimum(self.low, flat.min(dim=0).values, out=self.low)
        torch.maximum(self.high, flat.max(dim=0).values, out=self.high)
        if self.keep_inputs:
            self.shape.neighbours.add(flat[:, self.watched])

    def fit_errors(self, near_var: torch.Tensor, far_var: Optional[torch.Tensor] = None) -> None:
        """Set the held-out error variances (normalised target units), floored at 1e-8."""
        self.near_var.copy_(near_var.detach().clamp_min(1e-8))
        if far_var is not None:
            self.far_var.copy_(far_var.detach().clamp_min(1e-8))
        self.far_var.copy_(torch.maximum(self.far_var, self.near_var))

    def calibrate(self, normalized_inputs: torch.Tensor, squared_error: torch.Tensor) -> None:
        """
        Shape and size the in-range variance from held-out errors (normalised units).

        The shape follows the errors (`ErrorShape.fit`); the size is the factor on it whose
        1 and 2 std cover them best (`coverage_scale`).
        """
        self.shape.fit(normalized_inputs, squared_error)
        factor = self.shape.factor(normalized_inputs.to(squared_error.dtype))
        self.fit_errors(coverage_scale(squared_error, factor))

    def trust(self, normalized_inputs: torch.Tensor) -> torch.Tensor:
        """Return w in [0, 1], shape (...,), for normalised inputs (..., n_in)."""
        x = normalized_inputs[..., self.watched]
        low, high = self.low[self.watched], self.high[self.watched]
        excess = torch.clamp(low - x, min=0.0) + torch.clamp(x - high, min=0.0)
        distance2 = excess.pow(2).sum(dim=-1)
        weight = torch.exp(-0.5 * distance2 / self.length ** 2)
        return torch.where(weight < TRUST_FLOOR, torch.zeros_like(weight), weight)

    def rise(self, variance: torch.Tensor, floor: torch.Tensor,
             normalized_inputs: torch.Tensor) -> torch.Tensor:
        """
        Blend a model's own `variance` towards max(variance, floor) as the trust falls.

        For models whose variance varies by sample (RKNs, the forward models' horizons):
        inside the range it is kept, far out it is at least `floor`.
        """
        weight = self.trust(normalized_inputs).unsqueeze(-1)
        return weight * variance + (1.0 - weight) * torch.maximum(variance, floor)

    def variance(self, normalized_inputs: torch.Tensor) -> torch.Tensor:
        """Return the expected squared error (..., n_out) in normalised target units."""
        weight = self.trust(normalized_inputs).unsqueeze(-1)
        near = self.near_var if self.shape.flat else (
            self.near_var * self.shape.factor(normalized_inputs))
        return weight * near + (1.0 - weight) * torch.maximum(self.far_var, near)


class SupportedVariance:
    """
    Variance of an inverse model from its `InputSupport` (LSTM, FFNN).

    The model provides `support`, `input_norm`, `target_norm` and `_normalized_prediction(batch)`;
    `fit_support` runs in `fit_normalization`, `calibrate_variance` after training (the
    trainer calls it on the validation windows).
    """

    support: InputSupport
    input_norm: Normalizer
    target_norm: Normalizer

    def fit_support(self, batch: SequenceBatch) -> None:
        """Record the training input range (normalised)."""
        self.support.fit_range(self._support_inputs(batch.observations))

    def widen_support(self, batch: SequenceBatch) -> None:
        """Count a training batch's inputs as seen (`InputSupport.widen`)."""
        self.support.widen(self._support_inputs(batch.observations))

    def _model_inputs(self, observations: torch.Tensor) -> torch.Tensor:
        """Return the features the network reads (raw units); the observations by default."""
        return observations

    def _support_inputs(self, observations: torch.Tensor) -> torch.Tensor:
        return self.input_norm.normalize(self._model_inputs(observations))

    def calibrate_variance(self, val: SequenceBatch) -> None:
        """Set the in-range error variance from validation errors (`InputSupport.calibrate`)."""
        self.calibrate_variance_whole([val])

    def calibrate_variance_whole(self, recordings: Sequence[SequenceBatch]) -> None:
        """Set the in-range error variance from the errors on every step of these batches."""
        inputs, errors = [], []
        with torch.no_grad():
            for batch in recordings:
                error = self._normalized_prediction(batch) - self.target_norm.normalize(
                    batch.targets)
                inputs.append(self._support_inputs(batch.observations).flatten(0, -2))
                errors.append(error.pow(2).flatten(0, -2))
        self.support.calibrate(torch.cat(inputs), torch.cat(errors))

    def _variance(self, observations: torch.Tensor) -> torch.Tensor:
        """Return the variance (..., d) in N m^2 for raw inputs (..., n_obs)."""
        normalized = self.support.variance(self._support_inputs(observations))
        return self.target_norm.denormalize_variance(normalized)

    def _normalized_prediction(self, batch: SequenceBatch) -> torch.Tensor:
        raise NotImplementedError


def support_of(n_inputs: int, n_target: int) -> InputSupport:
    """Watch every input but the last d (qdd: its range is mostly noise) of an inverse model."""
    return InputSupport(n_inputs, n_target, range(n_inputs - n_target), SUPPORT_LENGTH)
