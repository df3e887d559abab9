"""
Exact Gaussian-process regression baseline of seed 001, written in plain torch.

Matern 5/2 kernel, hyper-parameters by maximising the marginal likelihood.

One independent GP per output (joint torque), each with ARD length scales, signal and noise
variance, in float64. Cost O(N^3) time and O(N^2) memory per output: meant for up to a few
thousand samples (seed 001: GPs become intractable around 10k). Inputs and outputs are
normalised; the model is stateless (`step` ignores history and `actions`).
"""
import dataclasses
import math
from typing import Tuple

from robot_dynamics_learning.models.base import Prediction, SequenceBatch
from robot_dynamics_learning.models.common import (check_batch, InverseModel, ModelConfig,
                                                   OutputScale, StatelessStep)
import torch


@dataclasses.dataclass(frozen=True)
class GPConfig(ModelConfig):
    """
    Exact-GP settings.

    max_train: most training points kept (evenly subsampled beyond); hyper_subset: points used
    for the marginal-likelihood optimisation (Adam, hyper_iterations steps, hyper_lr);
    jitter added to the kernel diagonal; seed for the subsets; variance_points: the evenly
    spaced training points the predictive variance conditions on (the full set would hold a
    max_train^2 Cholesky factor per output; fewer points only make the variance larger).
    """

    max_train: int = 4000
    variance_points: int = 1000
    hyper_subset: int = 1000
    hyper_iterations: int = 100
    hyper_lr: float = 0.05
    jitter: float = 1e-6
    seed: int = 0

    def __post_init__(self) -> None:
        """Validate sizes and rates."""
        self._positive('max_train', 'hyper_subset', 'hyper_iterations', 'hyper_lr', 'jitter',
                       'variance_points')


def matern52(x1: torch.Tensor, x2: torch.Tensor, lengthscale: torch.Tensor,
             signal_var: torch.Tensor) -> torch.Tensor:
    """
    Return the Matern 5/2 kernel s^2 (1 + sqrt5 r + 5 r^2 / 3) exp(-sqrt5 r), per output.

    x1 (N, n), x2 (M, n), lengthscale (D, n), signal_var (D,) -> (D, N, M).
    """
    a = x1.unsqueeze(0) / lengthscale.unsqueeze(1)
    b = x2.unsqueeze(0) / lengthscale.unsqueeze(1)
    sq = (a.pow(2).sum(-1, keepdim=True) + b.pow(2).sum(-1).unsqueeze(1)
          - 2.0 * a @ b.transpose(1, 2)).clamp_min(0.0)
    r = torch.sqrt(sq + 1e-12) * math.sqrt(5.0)
    return signal_var[:, None, None] * (1.0 + r + r.pow(2) / 3.0) * torch.exp(-r)


class ExactGP(StatelessStep, InverseModel):
    """Exact GP inverse dynamics x_t -> tau_t; trained by `fit_data`, not by gradient steps."""

    config_class = GPConfig
    fits_in_closed_form = True

    def __init__(self, config: GPConfig, n_obs: int, n_act: int, n_target: int) -> None:
        super().__init__(config, n_obs, n_act, n_target)
        self.register_buffer('log_lengthscale', torch.zeros(n_target, n_obs, dtype=torch.float64))
        self.register_buffer('log_signal_var', torch.zeros(n_target, dtype=torch.float64))
        self.register_buffer('log_noise_var', torch.full((n_target,), -4.0, dtype=torch.float64))
        self.register_buffer('x_train', torch.zeros(0, n_obs, dtype=torch.float64))
        self.register_buffer('alpha', torch.zeros(n_target, 0, dtype=torch.float64))
        self._variance_factor = None   # (points, Cholesky factors), rebuilt from the buffers
        self.variance_scale = OutputScale(n_target)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        """Resize the data-sized buffers (x_train, alpha) before loading a fitted GP."""
        for name in ('x_train', 'alpha'):
            if prefix + name in state_dict:
                setattr(self, name, torch.empty_like(state_dict[prefix + name]))
        self._variance_factor = None
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _negative_log_ml(self, x: torch.Tensor, y: torch.Tensor, log_lengthscale: torch.Tensor,
                         log_signal_var: torch.Tensor, log_noise_var: torch.Tensor
                         ) -> torch.Tensor:
        """Sum over outputs of -log p(y | x, theta); x (N, n), y (D, N)."""
        n = x.shape[0]
        k = matern52(x, x, log_lengthscale.exp(), log_signal_var.exp())
        k = k + (log_noise_var.exp() + self.config.jitter)[:, None, None] * \
            torch.eye(n, dtype=x.dtype)
        chol = torch.linalg.cholesky(k)
        alpha = torch.cholesky_solve(y.unsqueeze(-1), chol).squeeze(-1)
        return (0.5 * (y * alpha).sum() + torch.diagonal(chol, dim1=-2, dim2=-1).log().sum()
                + 0.5 * n * y.shape[0] * math.log(2 * math.pi))

    def fit_data(self, batch: SequenceBatch) -> dict:
        """Optimise hyper-parameters on a subset, then condition on up to max_train points."""
        check_batch(batch, self.n_obs, batch.actions.shape[-1], self.n_target)
        self.fit_normalization(batch)
        x = self.input_norm.normalize(batch.observations).reshape(-1, self.n_obs).double()
        y = self.target_norm.normalize(batch.targets).reshape(-1, self.n_target).double()
        generator = torch.Generator().manual_seed(self.config.seed)
        subset = torch.randperm(x.shape[0], generator=generator)[:self.config.hyper_subset]
        params = [torch.nn.Parameter(p.clone()) for p in
                  (self.log_lengthscale, self.log_signal_var, self.log_noise_var)]
        optimizer = torch.optim.Adam(params, lr=self.config.hyper_lr)
        for _ in range(self.config.hyper_iterations):
            optimizer.zero_grad()
            loss = self._negative_log_ml(x[subset], y[subset].T, *params)
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            self.log_lengthscale.copy_(params[0])
            self.log_signal_var.copy_(params[1])
            self.log_noise_var.copy_(params[2])
            keep = torch.linspace(0, x.shape[0] - 1, min(x.shape[0], self.config.max_train)
                                  ).round().long()
            xs, ys = x[keep], y[keep].T
            alphas = []
            for j in range(self.n_target):  # one output at a time bounds memory to one N x N
                k = matern52(xs, xs, self.log_lengthscale[j:j + 1].exp(),
                             self.log_signal_var[j:j + 1].exp())[0]
                k.diagonal().add_(self.log_noise_var[j].exp() + self.config.jitter)
                chol = torch.linalg.cholesky(k)
                alphas.append(torch.cholesky_solve(ys[j].unsqueeze(-1), chol).squeeze(-1))
            self.alpha = torch.stack(alphas)
            self.x_train = xs
            self._variance_factor = None
        return {'negative_log_ml_subset': float(loss.detach()), 'n_train': int(xs.shape[0])}

    def _predict(self, x: torch.Tensor, chunk: int = 512) -> torch.Tensor:
        """Posterior mean (M, D) in physical units for raw inputs x (M, n)."""
        if self.x_train.shape[0] == 0:
            raise ValueError('ExactGP has no training data: call fit_data first')
        xn = self.input_norm.normalize(x).double()
        out = []
        for start in range(0, xn.shape[0], chunk):
            k = matern52(xn[start:start + chunk], self.x_train, self.log_lengthscale.exp(),
                         self.log_signal_var.exp())
            out.append((k @ self.alpha.unsqueeze(-1)).squeeze(-1).T)
        mean = torch.cat(out) if out else xn.new_zeros(0, self.n_target)
        return self.target_norm.denormalize(mean.to(x.dtype))

    def _factor(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """Return (points (P, n), Cholesky factors (D, P, P)) of the variance's subset."""
        if self._variance_factor is None:
            count = min(self.x_train.shape[0], self.config.variance_points)
            keep = torch.linspace(0, self.x_train.shape[0] - 1, count).round().long()
            points = self.x_train[keep]
            k = matern52(points, points, self.log_lengthscale.exp(), self.log_signal_var.exp())
            k = k + (self.log_noise_var.exp() + self.config.jitter)[:, None, None] * \
                torch.eye(count, dtype=k.dtype)
            self._variance_factor = (points, torch.linalg.cholesky(k))
        return self._variance_factor

    def _predict_variance(self, x: torch.Tensor, chunk: int = 512) -> torch.Tensor:
        """Posterior predictive variance of tau (M, D) in N m^2 (noise included)."""
        if self.x_train.shape[0] == 0:
            raise ValueError('ExactGP has no training data: call fit_data first')
        points, chol = self._factor()
        xn = self.input_norm.normalize(x).double()
        out = []
        with torch.no_grad():
            for start in range(0, xn.shape[0], chunk):
                k = matern52(xn[start:start + chunk], points, self.log_lengthscale.exp(),
                             self.log_signal_var.exp())                       # (D, m, P)
                v = torch.linalg.solve_triangular(chol, k.transpose(1, 2), upper=False)
                var = self.log_signal_var.exp()[:, None] - v.pow(2).sum(1) \
                    + self.log_noise_var.exp()[:, None]
                out.append(var.clamp_min(1e-12).T)
        var = torch.cat(out) if out else xn.new_zeros(0, self.n_target)
        return self.variance_scale.apply(self.target_norm.denormalize_variance(var.to(x.dtype)))

    def calibrate_variance(self, val: SequenceBatch) -> None:
        """
        Scale the posterior variance to cover held-out errors (`OutputScale`).

        The predictive variance conditions on `variance_points` of the training points only,
        which makes it larger than the exact one: 90 % of Kinova test errors fell within
        1 std before.
        """
        self.variance_scale.fit_to(self, val)

    def _predict_step(self, observation: torch.Tensor) -> torch.Tensor:
        return self._predict(observation)

    def _step_variance(self, observation: torch.Tensor) -> torch.Tensor:
        return self._predict_variance(observation)

    def forward(self, batch: SequenceBatch) -> Prediction:
        """Predict tau for every step independently: posterior mean and variance."""
        check_batch(batch, self.n_obs, batch.actions.shape[-1], self.n_target)
        b, t, n = batch.observations.shape
        flat = batch.observations.reshape(-1, n)
        mean = self._predict(flat).reshape(b, t, self.n_target)
        variance = self._predict_variance(flat).reshape(b, t, self.n_target)
        return Prediction(mean, variance)

    def loss(self, batch: SequenceBatch) -> Tuple[torch.Tensor, dict]:
        """MSE of the posterior mean in normalised torque units (evaluation only)."""
        check_batch(batch, self.n_obs, batch.actions.shape[-1], self.n_target)
        b, t, n = batch.observations.shape
        mean = self._predict(batch.observations.reshape(-1, n)).reshape(b, t, self.n_target)
        error = self.target_norm.normalize(mean) - self.target_norm.normalize(batch.targets)
        loss = error.pow(2).mean()
        return loss, {'mse_normalized': float(loss)}
