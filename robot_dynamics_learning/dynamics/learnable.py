"""
Learnable rigid-body parameters that stay physically consistent (seed paper 002, Sec. 3).

Each body's ten inertial parameters (mass, first moment, rotational inertia about the body
origin) are mapped to its 4x4 pseudo-inertia J = [[Sigma, h], [h^T, m]] with
Sigma = tr(I_O)/2 * 1 - I_O and h = m c. J is positive definite exactly when the mass is
positive and the inertia about the centre of mass is positive definite and satisfies the
triangle inequality (Wensing, Kim, Slotine 2017). We parametrise J = U U^T with U upper
triangular and a positive (exponentiated) diagonal: the log-Cholesky parametrisation of
Rucker and Wensing 2022. Damping and friction coefficients are exp(log-parameter) >= 0.
Unlike differentiable-robot-model, which learns mass, centre of mass and inertia as separate
positive scalars and can reach non-physical combinations, every value here is physical.
"""
from typing import Dict, Optional, Sequence, Union

import torch
from torch import nn

from .algorithms import aba, crba, rnea
from .model import DynamicsParams, inertial_parts, RobotModel, skew, spatial_inertia


def pseudo_inertia(inertia: torch.Tensor) -> torch.Tensor:
    """Map (..., 6, 6) spatial inertias (about the body origin) to (..., 4, 4) pseudo-inertias."""
    mass = inertia[..., 3, 3]
    h_skew = inertia[..., :3, 3:]
    h = torch.stack([h_skew[..., 2, 1], h_skew[..., 0, 2], h_skew[..., 1, 0]], -1)
    inertia_o = inertia[..., :3, :3]
    trace = inertia_o.diagonal(dim1=-2, dim2=-1).sum(-1)
    eye = torch.eye(3, dtype=inertia.dtype, device=inertia.device)
    sigma = 0.5 * trace[..., None, None] * eye - inertia_o
    top = torch.cat([sigma, h[..., :, None]], -1)
    bottom = torch.cat([h[..., None, :], mass[..., None, None]], -1)
    return torch.cat([top, bottom], -2)


def spatial_from_pseudo(pseudo: torch.Tensor) -> torch.Tensor:
    """Map (..., 4, 4) pseudo-inertias back to (..., 6, 6) spatial inertias about the origin."""
    sigma = pseudo[..., :3, :3]
    h = pseudo[..., :3, 3]
    mass = pseudo[..., 3, 3]
    trace = sigma.diagonal(dim1=-2, dim2=-1).sum(-1)
    eye = torch.eye(3, dtype=pseudo.dtype, device=pseudo.device)
    inertia_o = trace[..., None, None] * eye - sigma
    hx = skew(h)
    top = torch.cat([inertia_o, hx], -1)
    bottom = torch.cat([hx.transpose(-1, -2), mass[..., None, None] * eye], -1)
    return torch.cat([top, bottom], -2)


class LogCholeskyInertia(nn.Module):
    """
    One body's inertial parameters as 10 unconstrained numbers (log-Cholesky of J).

    theta[:4] are the logs of U's diagonal, theta[4:] its upper off-diagonal entries.
    Any theta gives a physically consistent body; `forward()` returns its (6, 6) inertia.
    """

    _ROWS = (0, 0, 0, 1, 1, 2)
    _COLS = (1, 2, 3, 2, 3, 3)

    def __init__(self, inertia: torch.Tensor) -> None:
        """Initialise from a (6, 6) spatial inertia that must itself be consistent."""
        super().__init__()
        pseudo = pseudo_inertia(inertia.detach().to(torch.float64))
        flip = torch.flip(pseudo, (-2, -1))
        lower, info = torch.linalg.cholesky_ex(flip)
        if int(info) != 0:
            raise ValueError('inertia is not physically consistent (pseudo-inertia not '
                             'positive definite)')
        upper = torch.flip(lower, (-2, -1))
        theta = torch.cat([upper.diagonal().log(), upper[self._ROWS, self._COLS]])
        self.theta = nn.Parameter(theta.to(inertia.dtype))

    def forward(self) -> torch.Tensor:
        """Return the (6, 6) spatial inertia about the body origin."""
        theta = self.theta
        upper = torch.diag_embed(theta[:4].exp())
        off = torch.zeros(4, 4, dtype=theta.dtype, device=theta.device)
        off = off.index_put((torch.tensor(self._ROWS), torch.tensor(self._COLS)), theta[4:])
        upper = upper + off
        return spatial_from_pseudo(upper @ upper.T)


class LearnableRigidBody(nn.Module):
    """
    A rigid-body model whose chosen parameters are torch parameters.

    model: the constant `RobotModel` (kinematics stay fixed).
    learn_inertia: names of moving links (child links of moving joints) whose mass, centre of
        mass and inertia are learnable; True = every moving link, False/None = none. A body
        includes links merged into it through fixed joints.
    learn_damping, learn_friction: make all joints' viscous / Coulomb coefficients learnable.
    use_damping, use_friction: include those torques in `rnea` / `aba` (default: when
        learnable or non-zero in the URDF).
    `rnea`, `aba` and `crba` call the same batched algorithms with `params()`.
    """

    def __init__(self, model: RobotModel, learn_inertia: Union[bool, Sequence[str]] = True,
                 learn_damping: bool = False,
                 learn_friction: bool = False, use_damping: Optional[bool] = None,
                 use_friction: Optional[bool] = None, dtype: torch.dtype = torch.float64
                 ) -> None:
        super().__init__()
        self.model = model
        moving_links = self.moving_links(model)
        if learn_inertia is True:
            chosen: Sequence[str] = list(moving_links)
        elif not learn_inertia:
            chosen = []
        else:
            chosen = list(learn_inertia)
        for name in chosen:
            if name not in moving_links:
                raise KeyError(f'link {name!r} is not moved by a joint of robot '
                               f'{model.name!r}; learnable links: {", ".join(moving_links)}')
        self.learnable_links = tuple(chosen)
        self._body_of = {name: moving_links.index(name) for name in chosen}
        self.inertias = nn.ModuleDict({
            name: LogCholeskyInertia(model.inertias[index].to(dtype))
            for name, index in self._body_of.items()})
        self.register_buffer('fixed_inertia', model.inertias.to(dtype).clone())
        floor = 1e-6
        if learn_damping:
            self.log_damping = nn.Parameter(model.damping.to(dtype).clamp_min(floor).log())
        else:
            self.register_buffer('damping_value', model.damping.to(dtype).clone())
        if learn_friction:
            self.log_friction = nn.Parameter(model.friction.to(dtype).clamp_min(floor).log())
        else:
            self.register_buffer('friction_value', model.friction.to(dtype).clone())
        self.learn_damping = learn_damping
        self.learn_friction = learn_friction
        self.use_damping = bool(learn_damping or model.damping.abs().sum() > 0
                                if use_damping is None else use_damping)
        self.use_friction = bool(learn_friction or model.friction.abs().sum() > 0
                                 if use_friction is None else use_friction)

    @staticmethod
    def moving_links(model: RobotModel) -> tuple:
        """Return the child link of each moving joint, in body order."""
        names = [''] * model.n_dof
        for link, body in zip(model.link_names, model.link_bodies):
            if body >= 0 and not names[body]:
                names[body] = link
        return tuple(names)

    def params(self) -> DynamicsParams:
        """Return the current inertias (n, 6, 6), damping (n,) and friction (n,)."""
        inertia = self.fixed_inertia
        if self._body_of:
            rows = list(inertia.unbind(0))
            for name, index in self._body_of.items():
                rows[index] = self.inertias[name]()
            inertia = torch.stack(rows, 0)
        damping = self.log_damping.exp() if self.learn_damping else self.damping_value
        friction = self.log_friction.exp() if self.learn_friction else self.friction_value
        return DynamicsParams(inertia, damping, friction)

    def link_inertials(self) -> Dict[str, Dict[str, torch.Tensor]]:
        """Return {moving link: {'mass', 'com', 'inertia_com'}} of the current parameters."""
        mass, com, inertia_com = inertial_parts(self.params().spatial_inertia.detach())
        return {name: {'mass': mass[i], 'com': com[i], 'inertia_com': inertia_com[i]}
                for i, name in enumerate(self.moving_links(self.model))}

    def rnea(self, q: torch.Tensor, qd: torch.Tensor, qdd: torch.Tensor,
             **kwargs) -> torch.Tensor:
        """Inverse dynamics with the current parameters; see `algorithms.rnea`."""
        kwargs.setdefault('damping', self.use_damping)
        kwargs.setdefault('friction', self.use_friction)
        return rnea(self.model, q, qd, qdd, params=self.params(), **kwargs)

    def aba(self, q: torch.Tensor, qd: torch.Tensor, tau: torch.Tensor,
            **kwargs) -> torch.Tensor:
        """Forward dynamics with the current parameters; see `algorithms.aba`."""
        kwargs.setdefault('damping', self.use_damping)
        kwargs.setdefault('friction', self.use_friction)
        return aba(self.model, q, qd, tau, params=self.params(), **kwargs)

    def crba(self, q: torch.Tensor) -> torch.Tensor:
        """Mass matrix with the current parameters; see `algorithms.crba`."""
        return crba(self.model, q, params=self.params())

    def forward(self, q: torch.Tensor, qd: torch.Tensor, qdd: torch.Tensor) -> torch.Tensor:
        """Return predicted torques (..., n): the same as `rnea`."""
        return self.rnea(q, qd, qdd)


def perturbed_inertias(model: RobotModel, scale: float, generator: torch.Generator
                       ) -> torch.Tensor:
    """
    Return (n, 6, 6) consistent inertias with masses, coms and principal moments perturbed.

    Masses and principal moments are multiplied by exp(scale * N(0, 1)), coms shifted by
    scale * N(0, 1) * 0.05 m, so the result is still physical (used to test identification).
    """
    mass, com, inertia_com = inertial_parts(model.inertias)
    n = model.n_dof

    def noise(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    new_mass = mass * torch.exp(scale * noise(n))
    new_com = com + 0.05 * scale * noise(n, 3)
    eigval, eigvec = torch.linalg.eigh(inertia_com)
    eigval = eigval * torch.exp(scale * noise(n, 3))
    eigval = torch.minimum(eigval, 0.999 * (eigval.sum(-1, keepdim=True) - eigval))
    new_inertia = eigvec @ torch.diag_embed(eigval) @ eigvec.transpose(-1, -2)
    return spatial_inertia(new_mass, new_com, new_inertia)
