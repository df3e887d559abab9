"""
How a learned model's error variance changes with its inputs.

Torque errors are larger at some speeds and accelerations than at others (friction turning
with the sign of qd, fast motions). One variance per joint then covers them badly: on the
Schunk LWA 4P inverse-dynamics test runs (LSTM, seeds 0-2, `docs/results.md`) errors with a
kurtosis of 1.4-13.7 per joint held 70 % within 1 std but only 89 % within 2. Here the log of
the variance is linear in the normalised inputs x and |x| (a V per input, its two slopes
free: the error may grow with speed in one direction only), fitted to held-out squared errors
by the Gaussian likelihood. Measured (seeds 0-2): LSTM 70.2 / 89.3 % -> 68.7 / 90.5 %, NLL
0.20 -> -0.12; FFNN 70.7 / 92.5 % -> 69.4 / 93.3 %, NLL 0.30 -> 0.17. Only a shape that
also holds on the other half of the held-out errors is kept: fitted without that check, the
Kinova blocks' FFNN (validation blocks unlike the test blocks) fell from 73 / 96 % to
53-61 / 78-84 %, NLL 1.8 -> 8-26. Once training inputs are kept (`TrainingNeighbours`), the log
of the distance to the nearest of them is one more input: errors grow away from the data
inside the range too, and which blocks are held out moves that distance. Kinova blocks (seeds
0-2): LSTM 89.5 / 96.8 % -> 82.0 / 94.6 %, FFNN 88.7 / 96.1 % -> 81.4 / 93.9 %; Schunk
unchanged within 0.3 points (docs/models.md).
"""
import math
from typing import NamedTuple, Optional, Sequence, Tuple

from robot_dynamics_learning.models.coverage import coverage_scale, coverage_variance
from robot_dynamics_learning.models.defaulted_buffers import DefaultedBuffers
from robot_dynamics_learning.models.neighbours import TrainingNeighbours
import torch

# Fewer held-out errors than this per shape weight: too few to shape, the variance stays flat.
MIN_ERRORS_PER_WEIGHT = 20
MAX_FIT_SAMPLES = 50_000   # evenly spaced subsample: the fit's cost stays below a second
RIDGE = 1e-2               # on the weights: an input that explains nothing keeps a flat shape
LBFGS_ITERATIONS = 200


class ErrorShape(DefaultedBuffers):
    """
    A per-output factor on the error variance, exp(clamp([x, |x|, log d] W - offset, lo, hi)).

    d is the distance from the watched inputs to the nearest kept training input
    (`neighbours`; its column is left out while none are kept). Flat (factor 1) until `fit`,
    and for checkpoints from before it. The offset makes the factor's geometric mean 1 on the
    errors it was fitted to, so the size stays the caller's (`InputSupport.near_var`); low and
    high bound the log-factor to what those errors showed: no input, however far out, makes
    the shape extrapolate.
    """

    def __init__(self, n_in: int, n_out: int, watched: Optional[Sequence[int]] = None) -> None:
        super().__init__()
        self.watched = list(range(n_in) if watched is None else watched)
        self.neighbours = TrainingNeighbours(len(self.watched))
        self.register_buffer('weight', torch.zeros(2 * n_in, n_out))
        self.register_buffer('distance_weight', torch.zeros(n_out))   # on log d
        self.register_buffer('offset', torch.zeros(n_out))
        self.register_buffer('low', torch.zeros(n_out))
        self.register_buffer('high', torch.zeros(n_out))
        # Whether the factor is 1 everywhere (no weights): callers on a streaming step skip
        # it then (about 20 us a call on CPU), and whether it reads the distance. Kept in step
        # by fit, reset and loading.
        self.flat = True
        self.uses_distance = False

    @staticmethod
    def features(normalized_inputs: torch.Tensor) -> torch.Tensor:
        """Return the inputs and their magnitudes side by side (..., 2 n_in)."""
        return torch.cat([normalized_inputs, normalized_inputs.abs()], dim=-1)

    def log_distance(self, normalized_inputs: torch.Tensor) -> torch.Tensor:
        """Return log(distance to the nearest kept training input + floor) (...,)."""
        return self.neighbours.log_distance(normalized_inputs[..., self.watched])

    def log_factor(self, normalized_inputs: torch.Tensor) -> torch.Tensor:
        """Return the log of the factor (..., n_out)."""
        weight = self.weight.to(normalized_inputs.dtype)
        raw = self.features(normalized_inputs) @ weight - self.offset.to(weight.dtype)
        if self.uses_distance:
            raw = raw + self.log_distance(normalized_inputs).unsqueeze(-1) * \
                self.distance_weight.to(raw.dtype)
        return torch.maximum(torch.minimum(raw, self.high.to(raw.dtype)), self.low.to(raw.dtype))

    def factor(self, normalized_inputs: torch.Tensor) -> torch.Tensor:
        """Return the multiplier (..., n_out) on the variance at these inputs."""
        return self.log_factor(normalized_inputs).exp()

    def reset(self) -> None:
        """Make the shape flat (factor 1 everywhere); the kept training inputs stay."""
        for buffer in (self.weight, self.distance_weight, self.offset, self.low, self.high):
            buffer.zero_()
        self._note_weights()

    def _note_weights(self) -> None:
        self.uses_distance = bool(self.distance_weight.any())
        self.flat = not (bool(self.weight.any()) or self.uses_distance)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        """Load the buffers (defaulted where missing), then note whether the shape is flat."""
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._note_weights()

    def fit(self, normalized_inputs: torch.Tensor, squared_error: torch.Tensor) -> bool:
        """
        Fit the shape to held-out squared errors (..., n_out) at inputs (..., n_in).

        An output keeps a shape only where the shape fitted on one half of the errors
        predicts the other half better than a flat variance (Gaussian NLL, both ways round):
        where validation and test errors differ, a shape fitted to the validation errors'
        details makes the variance confidently wrong. Two shapes compete per output, the one
        on every feature and the one on the distance alone (few errors for many inputs: 2000
        held-out Kinova steps cannot fit 57 weights, or their details do not carry over);
        the larger held-out gain wins. Returns whether any output is shaped; too few errors,
        or a fit that is not finite, leave the shape flat.
        """
        self.reset()
        inputs = normalized_inputs.detach().reshape(-1, normalized_inputs.shape[-1])
        errors = squared_error.detach().reshape(-1, squared_error.shape[-1])
        if inputs.shape[0] > MAX_FIT_SAMPLES:
            keep = torch.linspace(0, inputs.shape[0] - 1, MAX_FIT_SAMPLES).long()
            inputs, errors = inputs[keep], errors[keep]
        features = self.features(inputs.double())
        errors = errors.double()
        if not bool(torch.isfinite(features).all() and torch.isfinite(errors).all()):
            return False
        if self.neighbours.empty:
            candidates = [_Candidate.fit(features, errors)]
        else:
            log_distance = self.log_distance(inputs).double().unsqueeze(-1)
            features = torch.cat([features, log_distance], dim=-1)
            candidates = [_Candidate.fit(features, errors),
                          _Candidate.fit(log_distance, errors).padded(features.shape[1])]
        gains = torch.stack([candidate.gain for candidate in candidates])   # (candidates, d)
        best = gains.argmax(dim=0)
        shaped = gains.max(dim=0).values > 0.0
        if not bool(shaped.any()):
            return False
        weight = torch.stack([candidates[int(k)].weight[:, j] for j, k in enumerate(best)], 1)
        weight = weight * shaped
        columns = self.weight.shape[0]
        self.weight.copy_(weight[:columns])
        if weight.shape[0] > columns:
            self.distance_weight.copy_(weight[columns])
        for buffer, value in zip((self.offset, self.low, self.high),
                                 _centred_bounds(features @ weight)):
            buffer.copy_(value)
        self._note_weights()
        return True


class _Candidate(NamedTuple):
    """A shape fitted to all the errors, and its held-out gain over a flat variance (d,)."""

    weight: torch.Tensor   # (features, d)
    gain: torch.Tensor     # -inf per output where it could not be fitted

    @classmethod
    def fit(cls, features: torch.Tensor, errors: torch.Tensor) -> '_Candidate':
        """Fit on every error; score on the halves (`_held_out_gain`)."""
        unfit = cls(torch.zeros(features.shape[1], errors.shape[1], dtype=torch.float64),
                    torch.full((errors.shape[1],), -math.inf, dtype=torch.float64))
        if errors.shape[0] < 2 * MIN_ERRORS_PER_WEIGHT * features.shape[1]:
            return unfit
        weight = _fit_log_variance(features, errors)
        return unfit if weight is None else cls(weight, _held_out_gain(features, errors))

    def padded(self, width: int) -> '_Candidate':
        """Return it on `width` features, its own as the last ones (the others weigh 0)."""
        weight = self.weight.new_zeros(width, self.weight.shape[1])
        weight[width - self.weight.shape[0]:] = self.weight
        return self._replace(weight=weight)


def _centred_bounds(raw: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return the offset (the mean of raw) and the least and greatest raw - offset (d,)."""
    offset = raw.mean(dim=0)
    return offset, (raw - offset).min(dim=0).values, (raw - offset).max(dim=0).values


def _fit_log_variance(features: torch.Tensor, errors: torch.Tensor) -> Optional[torch.Tensor]:
    """Return W (k, d) of log var = features W + b by the Gaussian likelihood, None: not finite."""
    weight = torch.zeros(features.shape[1], errors.shape[1], dtype=torch.float64,
                         requires_grad=True)
    bias = errors.mean(dim=0).clamp_min(1e-12).log().requires_grad_(True)
    optimizer = torch.optim.LBFGS([weight, bias], max_iter=LBFGS_ITERATIONS,
                                  line_search_fn='strong_wolfe')

    def negative_log_likelihood() -> torch.Tensor:
        optimizer.zero_grad()
        log_var = (features @ weight + bias).clamp(-50.0, 50.0)
        loss = (log_var + errors * torch.exp(-log_var)).mean() + RIDGE * weight.pow(2).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(negative_log_likelihood)
    weight = weight.detach()
    return weight if bool(torch.isfinite(features @ weight).all()) else None


def _nll(errors: torch.Tensor, variance: torch.Tensor) -> torch.Tensor:
    """Return the mean Gaussian NLL per output (d,), the constant left out."""
    variance = variance.clamp_min(1e-300)
    return 0.5 * (variance.log() + errors / variance).mean(dim=0)


def _held_out_gain(features: torch.Tensor, errors: torch.Tensor) -> torch.Tensor:
    """
    Return per output how much a shape beats a flat variance on held-out errors (NLL).

    Two folds, the first and second half (contiguous: neighbouring errors are alike), each
    fitted on one and scored on the other, both variances sized by `coverage_scale` as in use.
    """
    half = features.shape[0] // 2
    folds = (slice(None, half), slice(half, None))
    gain = torch.zeros(errors.shape[1], dtype=torch.float64)
    for fit, held in (folds, folds[::-1]):
        weight = _fit_log_variance(features[fit], errors[fit])
        if weight is None:
            return torch.full_like(gain, -math.inf)
        raw = features[fit] @ weight
        offset, low, high = _centred_bounds(raw)
        log_factor = torch.maximum(torch.minimum(features[held] @ weight - offset, high), low)
        shaped = coverage_scale(errors[fit], (raw - offset).exp()) * log_factor.exp()
        flat = coverage_variance(errors[fit]).expand_as(errors[held])
        gain += _nll(errors[held], flat) - _nll(errors[held], shaped)
    return gain
