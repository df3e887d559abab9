"""
The Recurrent Kalman Network cell (seed 004 Appendix A; Becker et al. 2019).

Latent state z = [z_u; z_l] of size n = 2 m with observation model H = [I_m 0]. The covariance
is factorised into three diagonals (upper su, lower sl, side ss), stored as one tensor
(B, 3 m) = [su, sl, ss], so that the Kalman update is element-wise (Appendix 7.4):

    q_u = su / (su + s_obs),  q_l = ss / (su + s_obs)
    z_u+ = z_u + q_u (w - z_u),  z_l+ = z_l + q_l (w - z_u)
    su+ = (1 - q_u) su,  ss+ = (1 - q_u) ss,  sl+ = sl - q_l ss

A missing observation sets both gains to zero, which makes the posterior equal the prior.
The predict step uses a locally linear transition A_t = sum_k alpha_k(z+) A^(k) (K basis
matrices, each made of four band matrices of the given bandwidth, softmax coefficients from a
linear layer: "no hidden layers" in Appendix D), plus a control vector b(a_t) (ac-RKN, Eq. in
Sec. 4.1) that leaves the covariance untouched:

    z- = A_t z+ + b(a_t),  Sigma- = A_t Sigma+ A_t^T + diag(sigma_trans), kept factorised.
"""
from typing import NamedTuple, Optional, Tuple

import torch
from torch import nn
import torch.nn.functional as F


class Belief(NamedTuple):
    """Latent Gaussian belief: mean (B, 2 m) and factorised covariance (B, 3 m) = [su, sl, ss]."""

    mean: torch.Tensor
    cov: torch.Tensor


def elup1(x: torch.Tensor) -> torch.Tensor:
    """Return elu(x) + 1, the positive activation RKN uses for variances."""
    return F.elu(x) + 1.0


def kalman_update(mean: torch.Tensor, cov: torch.Tensor, w: torch.Tensor, var_w: torch.Tensor,
                  valid: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """
    Apply the factorised Kalman update (Appendix 7.4) element-wise.

    mean (B, 2 m), cov (B, 3 m), latent observation w and its variance var_w (B, m); valid (B,)
    bool or None. Returns the posterior (mean, cov); rows with valid False keep the prior.
    """
    m = w.shape[-1]
    su, sl, ss = cov[:, :m], cov[:, m:2 * m], cov[:, 2 * m:]
    denominator = su + var_w
    q_u = su / denominator
    q_l = ss / denominator
    if valid is not None:
        gate = valid.to(w.dtype).unsqueeze(-1)
        q_u = q_u * gate
        q_l = q_l * gate
    residual = w - mean[:, :m]
    new_mean = mean + torch.cat([q_u, q_l], dim=-1) * torch.cat([residual, residual], dim=-1)
    new_cov = torch.cat([(1.0 - q_u) * su, sl - q_l * ss, (1.0 - q_u) * ss], dim=-1)
    return new_mean, new_cov


def factorized_predict(mean: torch.Tensor, cov: torch.Tensor, bands: torch.Tensor,
                       noise: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """
    Propagate mean and factorised covariance through a band-limited transition.

    bands (B, 4, m, W), W = 2 b + 1, hold the diagonals of the blocks [P_u, Q_u, P_l, Q_l] of
    A = [[P_u, Q_u], [P_l, Q_l]]: bands[:, k, i, o] = block_k[i, i + o - b] (entries outside the
    matrix meet zero padding). Returns (A z, diagonals of A Sigma A^T + diag(noise)), noise
    (2 m,) = [upper; lower]. With Sigma = [[Su, Ss], [Ss, Sl]] (diagonal blocks), per row i
    and offset o (j = i + o - b): su'_i = sum_o P_u (P_u su_j + Q_u ss_j) + Q_u (P_u ss_j +
    Q_u sl_j), likewise sl' with P_l, Q_l, and ss'_i = sum_o P_l (P_u su_j + Q_u ss_j) +
    Q_l (P_u ss_j + Q_u sl_j). Only element-wise products over (B, m, W): O(B m W) work
    instead of the dense O(B m^2).
    """
    batch_size = mean.shape[0]
    m = mean.shape[-1] // 2
    width = bands.shape[-1]
    half = (width - 1) // 2
    windows = F.pad(torch.cat([mean, cov], -1).view(batch_size, 5, m), (half, half)
                    ).unfold(2, width, 1)
    z_u, z_l, su, sl, ss = windows.unbind(1)
    p_u, q_u, p_l, q_l = bands.unbind(1)
    new_mean = torch.cat([(p_u * z_u + q_u * z_l).sum(-1), (p_l * z_u + q_l * z_l).sum(-1)], -1)
    upper_su = p_u * su + q_u * ss
    upper_ss = p_u * ss + q_u * sl
    lower_su = p_l * su + q_l * ss
    lower_ss = p_l * ss + q_l * sl
    new_cov = torch.cat([(p_u * upper_su + q_u * upper_ss).sum(-1),
                         (p_l * lower_su + q_l * lower_ss).sum(-1),
                         (p_l * upper_su + q_l * upper_ss).sum(-1)], -1)
    return new_mean, new_cov + torch.cat([noise, torch.zeros_like(noise[:m])])


def bands_to_dense(bands: torch.Tensor) -> torch.Tensor:
    """Return the dense transition (B, 2 m, 2 m) of band form (B, 4, m, W) (tests, plots)."""
    batch_size, _, m, width = bands.shape
    half = (width - 1) // 2
    dense = bands.new_zeros(batch_size, 4, m, m)
    for o in range(width):
        offset = o - half
        rows = torch.arange(max(0, -offset), min(m, m - offset))
        dense[:, :, rows, rows + offset] = bands[:, :, rows, o]
    top = torch.cat([dense[:, 0], dense[:, 1]], -1)
    bottom = torch.cat([dense[:, 2], dense[:, 3]], -1)
    return torch.cat([top, bottom], 1)


def _windows(x: torch.Tensor, width: int) -> torch.Tensor:
    """
    Return zero-padded shifted copies (C, W, m, B) of x (C, m, B): out[c, o, i] = x[c, i + o - b].

    Batch-last: every element-wise product of the filter then runs over contiguous rows of B
    samples (wide, vectorised loops) instead of rows of m = 15-60 latent units. A copy, not
    the overlapping strided view, so that products with it get plain contiguous layouts.
    """
    half = (width - 1) // 2
    channels, m, batch_size = x.shape
    padded = F.pad(x, (0, 0, half, half))
    return padded.as_strided((channels, width, m, batch_size),
                             (padded.stride(0), batch_size, batch_size, 1)).contiguous()


def _fold(grad: torch.Tensor) -> torch.Tensor:
    """Adjoint of `_windows`: sum the gradients (C, W, m, B) of the copies onto x (C, m, B)."""
    channels, width, m, batch_size = grad.shape
    half = (width - 1) // 2
    full = grad.new_zeros(channels, m + 2 * half, batch_size)
    for offset in range(width):
        full[:, offset:offset + m] += grad[:, offset]
    return full[:, half:half + m]


def _batch_last(x: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """(B, T, k) -> contiguous (T, k, B); None stays None."""
    return None if x is None else x.permute(1, 2, 0).contiguous()


def _batch_first(x: torch.Tensor) -> torch.Tensor:
    """(T, k, B) -> contiguous (B, T, k)."""
    return x.permute(2, 0, 1).contiguous()


class _FilterFunction(torch.autograd.Function):
    """
    The update/predict recursion over a window with a hand-written backward (BPTT).

    Same math as `kalman_update` followed by `factorized_predict` with A_t from the softmax
    coefficients (values and gradients tested against autograd through those functions).
    Forward runs without an autograd graph and keeps per step only alpha_t, the bands and the
    two band-covariance products; backward walks the window in reverse. Internally the batch
    is the last dimension (states (k, B), bands (2, 2, W, m, B)), so that the many small
    element-wise products are wide; inputs and outputs keep the (B, T, k) layout.
    """

    @staticmethod
    def forward(ctx, mean0, cov0, w, var_w, gate, controls, coef_weight, coef_bias, basis,
                noise, width):
        batch_size, steps, m = w.shape
        w, var_w, gate, controls = (_batch_last(x) for x in (w, var_w, gate, controls))
        basis_t = basis.t().contiguous()
        post_mean = w.new_empty(steps, 2 * m, batch_size)
        post_cov = w.new_empty(steps, 3 * m, batch_size)
        prior_mean = w.new_empty(steps, 2 * m, batch_size)
        prior_cov = w.new_empty(steps, 3 * m, batch_size)
        alphas, bands_all, x1_all, x2_all = [], [], [], []
        mean, cov = mean0.t().contiguous(), cov0.t().contiguous()
        noise_column = noise[:, None]
        for t in range(steps):
            su, sl, ss = cov[:m], cov[m:2 * m], cov[2 * m:]
            inv = gate[t] / (su + var_w[t])
            q_u, q_l = su * inv, ss * inv
            residual = w[t] - mean[:m]
            pm, pc = post_mean[t], post_cov[t]
            torch.addcmul(mean[:m], q_u, residual, out=pm[:m])
            torch.addcmul(mean[m:], q_l, residual, out=pm[m:])
            torch.addcmul(su, q_u, su, value=-1.0, out=pc[:m])
            torch.addcmul(sl, q_l, ss, value=-1.0, out=pc[m:2 * m])
            torch.addcmul(ss, q_u, ss, value=-1.0, out=pc[2 * m:])
            alpha = torch.softmax(torch.addmm(coef_bias[:, None], coef_weight, pm), 0)
            bands = (basis_t @ alpha).view(2, 2, width, m, batch_size)
            p, q = bands[:, 0], bands[:, 1]
            z = _windows(pm.view(2, m, batch_size), width)
            s_u, s_l, s_s = _windows(pc.view(3, m, batch_size), width).unbind(0)
            x1 = torch.addcmul(p * s_u, q, s_s)     # [U1, L1] = [P_u, P_l] su + [Q_u, Q_l] ss
            x2 = torch.addcmul(p * s_s, q, s_l)     # [U2, L2]
            new_mean = (bands * z).sum((1, 2)).view(2 * m, batch_size)
            if controls is not None:
                new_mean = new_mean + controls[t]
            prior_mean[t] = new_mean
            prior_cov[t, :2 * m] = torch.addcmul(p * x1, q, x2).sum(1).view(
                2 * m, batch_size) + noise_column
            prior_cov[t, 2 * m:] = torch.addcmul(p[1] * x1[0], q[1], x2[0]).sum(0)
            mean, cov = prior_mean[t], prior_cov[t]
            alphas.append(alpha)
            bands_all.append(bands)
            x1_all.append(x1)
            x2_all.append(x2)
        ctx.save_for_backward(mean0, cov0, w, var_w, gate, coef_weight, basis, post_mean,
                              post_cov, prior_mean, prior_cov)
        ctx.steps = (alphas, bands_all, x1_all, x2_all)  # intermediates, not inputs/outputs
        ctx.has_controls = controls is not None
        return tuple(_batch_first(x) for x in (post_mean, post_cov, prior_mean, prior_cov))

    @staticmethod
    def backward(ctx, g_post_mean, g_post_cov, g_prior_mean, g_prior_cov):
        (mean0, cov0, w, var_w, gate, coef_weight, basis, post_mean, post_cov, prior_mean,
         prior_cov) = ctx.saved_tensors
        alphas, bands_all, x1_all, x2_all = ctx.steps
        steps, m, batch_size = w.shape
        width = bands_all[0].shape[2]
        g_post_mean, g_post_cov, g_prior_mean, g_prior_cov = (
            _batch_last(g) for g in (g_post_mean, g_post_cov, g_prior_mean, g_prior_cov))
        mean0, cov0 = mean0.t(), cov0.t()
        g_w, g_var_w = torch.empty_like(w), torch.empty_like(var_w)
        g_controls = torch.empty_like(prior_mean) if ctx.has_controls else None
        g_coef_weight, g_coef_bias = torch.zeros_like(coef_weight), coef_weight.new_zeros(
            coef_weight.shape[0])
        g_basis = torch.zeros_like(basis)
        g_noise = w.new_zeros(2 * m)
        carry_mean = w.new_zeros(2 * m, batch_size)
        carry_cov = w.new_zeros(3 * m, batch_size)
        g_windows = w.new_empty(5, width, m, batch_size)  # d/d windows of [z_u, z_l, su, sl, ss]
        for t in reversed(range(steps)):
            # Predict step backward: z- = A z+ + b, Sigma- = A Sigma+ A^T + diag(noise).
            g_nm = carry_mean if g_prior_mean is None else carry_mean + g_prior_mean[t]
            g_nc = carry_cov if g_prior_cov is None else carry_cov + g_prior_cov[t]
            if g_controls is not None:
                g_controls[t] = g_nm
            g_noise += g_nc[:2 * m].sum(1)
            bands, x1, x2, alpha = bands_all[t], x1_all[t], x2_all[t], alphas[t]
            p, q = bands[:, 0], bands[:, 1]
            pm = post_mean[t]
            z = _windows(pm.view(2, m, batch_size), width)
            gm = g_nm.view(2, 1, 1, m, batch_size)
            gc = g_nc.view(3, 1, m, batch_size)
            g_diag, g_side = gc[:2], gc[2]
            # d/dP_u = 2 g_u U1 + g_s L1, d/dP_l = 2 g_l L1 + g_s U1; Q likewise with U2, L2.
            g_bands = gm * z
            for j, x in ((0, x1), (1, x2)):
                g_bands[:, j].addcmul_(g_diag, x, value=2.0)
                g_bands[0, j].addcmul_(g_side, x[1])
                g_bands[1, j].addcmul_(g_side, x[0])
            g_dp, g_dq = g_diag * p, g_diag * q
            cross = torch.addcmul(p[1] * q[0], q[1], p[0])
            torch.sum(gm * bands, 0, out=g_windows[:2])
            torch.addcmul((g_dp * p).sum(0), g_side, p[0] * p[1], out=g_windows[2])
            torch.addcmul((g_dq * q).sum(0), g_side, q[0] * q[1], out=g_windows[3])
            torch.addcmul(2.0 * (g_dp * q).sum(0), g_side, cross, out=g_windows[4])
            g_state = _fold(g_windows)
            g_pm = g_state[:2].reshape(2 * m, batch_size)
            g_pc = g_state[2:].reshape(3 * m, batch_size)
            # Transition backward: bands = basis^T softmax(W z+ + c).
            g_flat = g_bands.view(-1, batch_size)
            g_basis.addmm_(alpha, g_flat.t())
            g_alpha = basis @ g_flat
            g_logits = alpha * (g_alpha - (g_alpha * alpha).sum(0, keepdim=True))
            g_coef_weight.addmm_(g_logits, pm.t())
            g_coef_bias += g_logits.sum(1)
            g_pm = g_pm.addmm(coef_weight.t(), g_logits)
            if g_post_mean is not None:
                g_pm = g_pm + g_post_mean[t]
            if g_post_cov is not None:
                g_pc = g_pc + g_post_cov[t]
            # Update backward (element-wise Kalman update).
            mean = mean0 if t == 0 else prior_mean[t - 1]
            cov = cov0 if t == 0 else prior_cov[t - 1]
            su, ss = cov[:m], cov[2 * m:]
            denominator = su + var_w[t]
            inv = gate[t] / denominator
            q_u, q_l = su * inv, ss * inv
            residual = w[t] - mean[:m]
            g_zu, g_zl = g_pm[:m], g_pm[m:]
            g_su, g_sl, g_ss = g_pc[:m], g_pc[m:2 * m], g_pc[2 * m:]
            g_qu = g_zu * residual - g_su * su - g_ss * ss
            g_ql = g_zl * residual - g_sl * ss
            g_residual = g_zu * q_u + g_zl * q_l
            g_den = -(g_qu * su + g_ql * ss) * inv / denominator
            g_w[t] = g_residual
            g_var_w[t] = g_den
            # The carries are only read at the top of the next step: overwrite them in place.
            torch.sub(g_zu, g_residual, out=carry_mean[:m])
            carry_mean[m:] = g_zl
            keep = 1.0 - q_u
            torch.addcmul(torch.addcmul(g_den, g_su, keep), g_qu, inv, out=carry_cov[:m])
            carry_cov[m:2 * m] = g_sl
            torch.addcmul(torch.addcmul(g_ss * keep, g_sl, q_l, value=-1.0), g_ql, inv,
                          out=carry_cov[2 * m:])
        return (carry_mean.t(), carry_cov.t(), _batch_first(g_w), _batch_first(g_var_w), None,
                None if g_controls is None else _batch_first(g_controls), g_coef_weight,
                g_coef_bias, g_basis, g_noise, None)


class RKNCell(nn.Module):
    """
    Transition model and Kalman filter of the (ac-)RKN; m = latent observation size.

    Parameters: K basis matrices (band-limited blocks), the softmax coefficient layer, the
    transition noise (upper, lower) and a fixed initial covariance.
    """

    def __init__(self, latent_obs_dim: int, num_basis: int, bandwidth: int,
                 initial_covariance: float = 1.0) -> None:
        super().__init__()
        m = latent_obs_dim
        self.m = m
        self.initial_covariance = initial_covariance
        self.width = 2 * bandwidth + 1
        init = torch.zeros(4, m, self.width)
        init[:, :, bandwidth] = torch.tensor([1.0, 0.2, -0.2, 1.0])[:, None]
        self.basis = nn.Parameter(init.reshape(1, -1).repeat(num_basis, 1)
                                  + 0.01 * torch.randn(num_basis, 4 * m * self.width))
        self.coefficients = nn.Linear(2 * m, num_basis)
        self.log_noise = nn.Parameter(torch.full((2 * m,), -3.0))

    def init_belief(self, batch_size: int) -> Belief:
        """Return the initial belief: zero mean, su = sl = initial_covariance, ss = 0."""
        m = self.m
        mean = self.basis.new_zeros(batch_size, 2 * m)
        cov = torch.cat([self.basis.new_full((batch_size, 2 * m), self.initial_covariance),
                         self.basis.new_zeros(batch_size, m)], dim=-1)
        return Belief(mean, cov)

    def transition(self, mean: torch.Tensor) -> torch.Tensor:
        """Return A_t = sum_k softmax(W z + c)_k A^(k) in band form (B, 4, m, W)."""
        alpha = torch.softmax(self.coefficients(mean), dim=-1)
        return (alpha @ self.basis).view(mean.shape[0], 4, self.m, self.width)

    def basis_offset_major(self) -> torch.Tensor:
        """Return the basis (K, 4 W m) in the offset-major band layout `_FilterFunction` uses."""
        return self.basis.view(-1, 4, self.m, self.width).transpose(2, 3).reshape(
            self.basis.shape[0], -1)

    def noise(self) -> torch.Tensor:
        """Return the transition noise variances [upper; lower] (2 m,), positive."""
        return elup1(self.log_noise)

    def predict(self, posterior: Belief, control: Optional[torch.Tensor]) -> Belief:
        """Predict step: z- = A_t z+ + b(a_t) (control (B, 2 m) or None), factorised Sigma-."""
        mean, cov = factorized_predict(posterior.mean, posterior.cov,
                                       self.transition(posterior.mean), self.noise())
        if control is not None:
            mean = mean + control
        return Belief(mean, cov)

    def update(self, prior: Belief, w: torch.Tensor, var_w: torch.Tensor,
               valid: Optional[torch.Tensor] = None) -> Belief:
        """Kalman update with latent observation w, var_w (B, m); valid (B,) or None."""
        return Belief(*kalman_update(prior.mean, prior.cov, w, var_w, valid))

    def run_filter(self, prior: Belief, w: torch.Tensor, var_w: torch.Tensor,
                   valid: Optional[torch.Tensor], controls: Optional[torch.Tensor]
                   ) -> Tuple[Belief, Belief]:
        """
        Run update then predict over a window: w, var_w (B, T, m), controls (B, T, 2 m).

        Returns (posteriors z+_t, priors z-_{t+1}) stacked as Beliefs of (B, T, .). The loop
        body is only the element-wise update and one batched transition: encoders, control
        model and decoders run outside it on whole windows. The loop is `_FilterFunction`
        (hand-written backward); `update`/`predict` are the step-by-step reference.
        """
        gate = (w.new_ones(w.shape[:2]) if valid is None else valid.to(w.dtype)).unsqueeze(-1)
        post_mean, post_cov, prior_mean, prior_cov = _FilterFunction.apply(
            prior.mean, prior.cov, w, var_w, gate, controls, self.coefficients.weight,
            self.coefficients.bias, self.basis_offset_major(), self.noise(), self.width)
        return Belief(post_mean, post_cov), Belief(prior_mean, prior_cov)
