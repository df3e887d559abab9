"""
Error variances chosen by how many errors they cover, not by the mean squared error.

Torque and state errors on real robots are heavy-tailed: a few large errors (contacts, the
turn of a joint's friction, a sensor spike) set the mean squared error, so a std equal to the
RMS error held 70-75 % of the 10-step errors within 1 std and 91-94 % within 2 (forward
LSTM, GRU and FFNN on the pneumatic and Schunk arms, `docs/results.md` before 27 Nov) instead
of a Gaussian's 68 / 95 %. A user reading "1 std" expects 68 % and "2 std" 95 %: the variance
here is the one whose 1- and 2-std intervals come closest to both on held-out errors. For
Gaussian errors it is the MSE; for heavier tails it is smaller, trading a little 2-std
coverage for an honest 1-std band.
"""
import math

import torch

WITHIN_1_STD = 0.6827   # a Gaussian's share within 1 std
WITHIN_2_STD = 0.9545   # and within 2
# Candidate std's, relative to the RMS error: 0.05-20x in 0.65 % steps, 1 (the MSE) included.
_RELATIVE_STD = torch.exp(torch.arange(-460, 461, dtype=torch.float64) * (math.log(20.0) / 460))
# Among equally good candidates, prefer the one nearest the MSE (the Gaussian answer).
_TIE_BREAK = 1e-9


def coverage_variance(squared_error: torch.Tensor) -> torch.Tensor:
    """
    Return per output (last dim) the variance whose 1 / 2 std cover closest to 68 / 95 %.

    `squared_error` (..., d) holds held-out squared errors; all leading dims are samples. The
    chosen variance minimises the larger of |share within 1 std - 68.3 %| and |share within
    2 std - 95.4 %|. An output whose errors are all zero gets 0 (callers floor it).
    """
    flat = squared_error.detach().reshape(-1, squared_error.shape[-1]).to(torch.float64)
    if flat.shape[0] == 0:
        raise ValueError('coverage_variance needs at least one error')
    mse = flat.mean(dim=0)
    ordered = flat.t().sort(dim=1).values.contiguous()                      # (d, N)
    candidates = mse.unsqueeze(1) * _RELATIVE_STD.pow(2).unsqueeze(0)        # (d, G)
    count = float(flat.shape[0])
    within_1 = torch.searchsorted(ordered, candidates, right=True) / count
    within_2 = torch.searchsorted(ordered, 4.0 * candidates, right=True) / count
    gap = torch.maximum((within_1 - WITHIN_1_STD).abs(), (within_2 - WITHIN_2_STD).abs())
    gap = gap + _TIE_BREAK * _RELATIVE_STD.log().abs().unsqueeze(0)
    best = candidates.gather(1, gap.argmin(dim=1, keepdim=True)).squeeze(1)
    return best.to(squared_error.dtype)


def coverage_scale(squared_error: torch.Tensor, variance: torch.Tensor) -> torch.Tensor:
    """
    Return per output the factor on a model's own variance that best covers its errors.

    For models whose variance changes from sample to sample (a GP, an RKN's decoder): the
    factor is `coverage_variance` of the standardised squared errors e^2 / var, so the
    shape of the model's variance is kept and only its size is calibrated.
    """
    return coverage_variance(squared_error / variance.clamp_min(1e-300))
