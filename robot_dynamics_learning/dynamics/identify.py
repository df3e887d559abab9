"""
System identification of inertial, damping and friction parameters from (q, qd, qdd, tau).

Rigid-body torques are linear in each body's ten inertial parameters phi (Atkeson, An,
Hollerbach 1986): tau = Y(q, qd, qdd) phi + B qd + F sign(qd). We compute Y once with the
same forward pass as `rnea` (`inertial_regressor`), reduce the data to the normal equations
(a (10n + 2n)-square Gram matrix), and minimise the joint-normalised squared error over the
log-Cholesky parameters of `LearnableRigidBody` with L-BFGS. So every iterate is physically
consistent (positive mass, positive-definite inertia, triangle inequality), and 10k samples
cost one regressor pass, not one RNEA per optimiser step. A small pull towards the initial
parameters fixes the directions torques cannot see (the non-identifiable combinations).
"""
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
import torch
from tqdm import tqdm

from .algorithms import inertial_regressor, inertial_vector
from .learnable import LearnableRigidBody, LogCholeskyInertia
from .model import DynamicsParams, RobotModel


@dataclass
class IdentificationResult:
    """
    What `identify` found.

    module: the fitted `LearnableRigidBody` (float64).
    nmse: per-joint normalised MSE on the fitting data, MSE_j / Var(tau_j), (n,) numpy.
    iterations: L-BFGS iterations run; loss: final objective value.
    """

    module: LearnableRigidBody
    nmse: np.ndarray
    iterations: int
    loss: float

    def summary(self) -> Dict:
        """Return a JSON-ready dict: per-link inertials, joint coefficients and errors."""
        params = self.module.params()
        links = {name: {key: value.tolist() for key, value in parts.items()}
                 for name, parts in self.module.link_inertials().items()}
        joints = self.module.model.joint_names
        return {
            'robot': self.module.model.name,
            'links': links,
            'damping': dict(zip(joints, params.damping.detach().tolist())),
            'friction': dict(zip(joints, params.friction.detach().tolist())),
            'nmse_per_joint': dict(zip(joints, self.nmse.tolist())),
            'nmse_mean': float(self.nmse.mean()),
            'iterations': self.iterations,
            'loss': self.loss,
        }


def _as_tensor(name: str, value, n: int) -> torch.Tensor:
    array = torch.as_tensor(np.asarray(value, dtype=np.float64))
    if array.dim() != 2 or array.shape[1] != n:
        raise ValueError(f'{name} must have shape (N, {n}), got {tuple(array.shape)}')
    if not torch.isfinite(array).all():
        raise ValueError(f'{name} contains NaN or inf values')
    return array


def identify(model: RobotModel, q, qd, qdd, tau, *,
             learn_inertia: Union[bool, Sequence[str]] = True,
             learn_damping: bool = False, learn_friction: bool = False,
             init: Optional[DynamicsParams] = None, prior_weight: float = 1e-8,
             max_iter: int = 500, chunk: int = 2000,
             memory_budget: int = 256 * 2 ** 20,
             progress: bool = False) -> IdentificationResult:
    """
    Fit a `LearnableRigidBody` to samples (N, n) of q, qd, qdd, tau (numpy or torch).

    learn_inertia: True (all moving links), or a list of link names; learn_damping /
    learn_friction: fit viscous / Coulomb coefficients too. init: starting parameters
    (default: the URDF's). prior_weight: weight of ||phi - phi_init||^2 relative to the
    normalised torque error. chunk: most samples per regressor pass; memory_budget (bytes)
    lowers it for many links, since one sample's regressor is (n, 10 n): the peak is the
    budget plus the (10 n)-square Gram matrix, whatever the number of samples. progress: a
    bar of L-BFGS loss evaluations (at most 1.25 max_iter). Raises ValueError on bad shapes,
    non-finite data or constant torques (nMSE undefined).
    """
    n = model.n_dof
    arrays = [_as_tensor(name, value, n) for name, value in
              (('q', q), ('qd', qd), ('qdd', qdd), ('tau', tau))]
    q_t, qd_t, qdd_t, tau_t = arrays
    count = q_t.shape[0]
    if any(a.shape[0] != count for a in arrays):
        raise ValueError(f'q, qd, qdd, tau must have the same length, got '
                         f'{[a.shape[0] for a in arrays]}')
    variance = tau_t.var(0)
    if bool((variance <= 0).any()):
        bad = [model.joint_names[j] for j in torch.nonzero(variance <= 0).flatten().tolist()]
        raise ValueError(f'torque of joints {bad} is constant: nMSE is undefined')
    weight = 1.0 / variance
    module = LearnableRigidBody(model, learn_inertia=learn_inertia,
                                learn_damping=learn_damping, learn_friction=learn_friction,
                                use_damping=learn_damping or None,
                                use_friction=learn_friction or None)
    if init is not None:
        _load_init(module, init)
    use_damping, use_friction = module.use_damping, module.use_friction
    size = 10 * n + n * use_damping + n * use_friction
    # About six float64 copies of a sample's (n, size) regressor are alive at once.
    chunk = max(1, min(chunk, memory_budget // (6 * 8 * n * size)))
    gram = torch.zeros(size, size, dtype=torch.float64)
    rhs = torch.zeros(size, dtype=torch.float64)
    total = float((tau_t ** 2 * weight).sum())
    for start in range(0, count, chunk):
        stop = min(start + chunk, count)
        blocks = [inertial_regressor(model, q_t[start:stop], qd_t[start:stop],
                                     qdd_t[start:stop])]
        if use_damping:
            blocks.append(torch.diag_embed(qd_t[start:stop]))
        if use_friction:
            blocks.append(torch.diag_embed(torch.sign(qd_t[start:stop])))
        design = torch.cat(blocks, -1) * weight.sqrt()[:, None]
        target = tau_t[start:stop] * weight.sqrt()
        gram += torch.einsum('bjp,bjq->pq', design, design)
        rhs += torch.einsum('bjp,bj->p', design, target)
    norm = float(count * n)

    def vector() -> torch.Tensor:
        params = module.params()
        parts = [inertial_vector(params.spatial_inertia)]
        if use_damping:
            parts.append(params.damping)
        if use_friction:
            parts.append(params.friction)
        return torch.cat(parts)

    with torch.no_grad():
        start_vec = vector().clone()
        scale = start_vec.abs().clamp_min(1e-3)
    trainable = [p for p in module.parameters() if p.requires_grad]
    if not trainable:
        raise ValueError('nothing to identify: no learnable inertia, damping or friction')
    optimizer = torch.optim.LBFGS(trainable, lr=1.0, max_iter=max_iter, history_size=50,
                                  tolerance_grad=1e-14, tolerance_change=1e-16,
                                  line_search_fn='strong_wolfe')

    bar = tqdm(total=int(1.25 * max_iter), disable=not progress, desc='L-BFGS',
               unit='eval', mininterval=1.0)

    def closure() -> torch.Tensor:
        bar.update()
        optimizer.zero_grad()
        phi = vector()
        loss = (phi @ gram @ phi - 2.0 * rhs @ phi + total) / norm
        loss = loss + prior_weight * (((phi - start_vec) / scale) ** 2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    bar.close()
    state = optimizer.state[trainable[0]]
    final = float(closure().detach())
    with torch.no_grad():
        predicted = torch.cat([module.rnea(q_t[k:k + chunk], qd_t[k:k + chunk],
                                           qdd_t[k:k + chunk]) for k in range(0, count, chunk)])
        nmse = ((predicted - tau_t) ** 2).mean(0) / variance
    return IdentificationResult(module=module, nmse=nmse.numpy(),
                                iterations=int(state.get('n_iter', 0)), loss=final)


def _load_init(module: LearnableRigidBody, init: DynamicsParams) -> None:
    """Start `module` from `init` (each learnable body re-parametrised)."""
    with torch.no_grad():
        module.fixed_inertia.copy_(init.spatial_inertia)
        for name, index in module._body_of.items():
            fresh = LogCholeskyInertia(init.spatial_inertia[index].to(torch.float64))
            module.inertias[name].theta.copy_(fresh.theta)
        if module.learn_damping:
            module.log_damping.copy_(init.damping.clamp_min(1e-6).log())
        else:
            module.damping_value.copy_(init.damping)
        if module.learn_friction:
            module.log_friction.copy_(init.friction.clamp_min(1e-6).log())
        else:
            module.friction_value.copy_(init.friction)


def base_parameter_error(model: RobotModel, q, qd, qdd, estimate: torch.Tensor,
                         truth: torch.Tensor, rtol: float = 1e-8) -> Dict[str, List[float]]:
    """
    Compare inertial parameters only where torques can see them.

    Projects phi(estimate) - phi(truth) onto the row space of the regressor of (q, qd, qdd)
    (the identifiable, 'base' parameter combinations) and returns the relative error of that
    projection, plus which bodies' masses are individually identifiable and their errors.
    """
    regressor = inertial_regressor(model, torch.as_tensor(q), torch.as_tensor(qd),
                                   torch.as_tensor(qdd)).reshape(-1, 10 * model.n_dof)
    _, singular, vh = torch.linalg.svd(regressor, full_matrices=False)
    rows = vh[singular > rtol * singular[0]]
    phi_hat, phi_true = inertial_vector(estimate), inertial_vector(truth)
    relative = float((rows @ (phi_hat - phi_true)).norm() / (rows @ phi_true).norm())
    mass_index = torch.arange(model.n_dof) * 10
    seen = (rows[:, mass_index] ** 2).sum(0)
    identifiable = [int(i) for i in torch.nonzero(seen > 1.0 - 1e-6).flatten()]
    errors = [float(abs(estimate[i, 3, 3] / truth[i, 3, 3] - 1.0)) for i in identifiable]
    return {'relative_error': [relative], 'identifiable_mass_bodies': identifiable,
            'mass_relative_errors': errors, 'rank': [int(rows.shape[0])]}
