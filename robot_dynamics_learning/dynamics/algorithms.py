"""
Batched, differentiable rigid-body algorithms on a `RobotModel` (Featherstone, RBDA 2008).

Every public function takes tensors with any leading batch dimensions (..., n), works in the
tensors' dtype and device, returns new tensors and stores nothing on the model.

Why it is fast:
- After forward kinematics (one 4x4 product per joint) every spatial quantity is expressed in
  world coordinates about the world origin. There the motion subspace of body i is
  S_i = X_i S_i^body, velocities are sums over ancestors (v_i = v_parent + S_i qd_i) and
  forces are sums over descendants, so RNEA and CRBA reduce to a few batched tensor ops with
  a constant (n, n) ancestor matrix instead of a Python recursion per joint. ABA keeps its
  O(n) sweeps, but world-coordinate articulated inertias need no frame change inside them.
- Internally the flattened batch is the LAST dimension (n, 6, N): the many tiny 3x3 and 6x6
  products become wide element-wise multiply-adds instead of thousands of tiny matmuls.
Spatial vectors are [angular; linear]; Jacobians follow Pinocchio's [linear; angular] rows.
"""
import math
from typing import Callable, List, Optional, Sequence, Tuple

import torch

from .model import _Constants, DynamicsParams, inertial_parts, RobotModel, ROOT


# Batches at least this wide take the memory-lean formulation of the small products below
# when the broadcast temporary would exceed WIDE_ELEMENTS: one term per summed index instead
# of one broadcast product. Both compute the same values; the broadcast form needs fewer
# operator calls (what matters for a few samples), the lean one much less memory traffic
# (what matters for thousands).
WIDE_BATCH = 128
WIDE_ELEMENTS = 65536


def _broadcast(*shapes: Sequence[int]) -> torch.Size:
    """
    Return the broadcast of `shapes`; raise ValueError where they do not broadcast.

    Written out by hand: `torch.broadcast_shapes` costs about 14 us per call, more than the
    small batched products it would guard.
    """
    rank = max(len(shape) for shape in shapes)
    out = [1] * rank
    for shape in shapes:
        for axis, size in enumerate(shape, start=rank - len(shape)):
            if size != 1:
                if out[axis] not in (1, size):
                    raise ValueError(f'shapes {[tuple(s) for s in shapes]} do not broadcast')
                out[axis] = size
    return torch.Size(out)


def _lean(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Return True when the broadcast product of a and b is wide and large."""
    if max(a.shape[-1], b.shape[-1]) < WIDE_BATCH:
        return False
    return math.prod(_broadcast(a.shape, b.shape)) >= WIDE_ELEMENTS


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Batch-last matrix product: (..., i, j, N) x (..., j, k, N) -> (..., i, k, N)."""
    left, right = a.unsqueeze(-2), b.unsqueeze(-4)
    if not _lean(left, right):
        return (left * right).sum(-3)
    out = a[..., :, :1, :] * b[..., :1, :, :]
    for j in range(1, a.shape[-2]):
        out = torch.addcmul(out, a[..., :, j:j + 1, :], b[..., j:j + 1, :, :])
    return out


def _mv(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Batch-last matrix-vector product: (..., i, j, N) x (..., j, N) -> (..., i, N)."""
    right = x.unsqueeze(-3)
    if not _lean(a, right):
        return (a * right).sum(-2)
    out = a[..., :, 0, :] * x[..., :1, :]
    for j in range(1, a.shape[-2]):
        out = torch.addcmul(out, a[..., :, j, :], x[..., j:j + 1, :])
    return out


_CONSTANTS: dict = {}


def _cached(name: str, dtype: torch.dtype, device: torch.device,
            build: Callable[[torch.dtype, torch.device], object]):
    """Return the small constant tensor(s) `name` for (dtype, device), built once."""
    key = (name, dtype, device)
    value = _CONSTANTS.get(key)
    if value is None:
        value = build(dtype, device)
        _CONSTANTS[key] = value
    return value


_LEVI_CIVITA = ((0, 1, 2, 1.0), (1, 2, 0, 1.0), (2, 0, 1, 1.0),
                (0, 2, 1, -1.0), (1, 0, 2, -1.0), (2, 1, 0, -1.0))


def _levi_civita(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Return the (3, 9) Levi-Civita tensor: (a x b)_i = eps_i,jk a_j b_k."""
    eps = torch.zeros(3, 3, 3, dtype=dtype, device=device)
    for i, j, k, sign in _LEVI_CIVITA:
        eps[i, j, k] = sign
    return eps.reshape(3, 9)


def _cross(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """
    Cross product of batch-last vectors (..., 3, N) with the Levi-Civita contraction.

    One outer product and one matmul: faster than torch.linalg.cross for wide batches and
    cheaper to dispatch for single samples.
    """
    if max(a.shape[-1], b.shape[-1]) >= WIDE_BATCH:
        a0, a1, a2 = a.unbind(-2)
        b0, b1, b2 = b.unbind(-2)
        return torch.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], -2)
    outer = (a.unsqueeze(-2) * b.unsqueeze(-3)).flatten(-3, -2)
    return torch.matmul(_cached('eps', a.dtype, a.device, _levi_civita), outer)


def _spatial_cross_tensors(dtype: torch.dtype, device: torch.device
                           ) -> Tuple[torch.Tensor, torch.Tensor]:
    """
    Return constant (6, 36) tensors C, D with v x m = C vec(v m^T) and v x* f = D vec(v f^T).

    crm: [w x m_w; w x m_v + v x m_w], crf: [w x f_w + v x f_v; w x f_v] (RBDA eqs. 2.31-2.32)
    written as bilinear forms, so each spatial cross product is one outer product and one
    small matmul.
    """
    motion = torch.zeros(6, 6, 6, dtype=dtype, device=device)
    force = torch.zeros(6, 6, 6, dtype=dtype, device=device)
    for i, j, k, sign in _LEVI_CIVITA:
        motion[i, j, k] = sign
        motion[3 + i, j, 3 + k] = sign
        motion[3 + i, 3 + j, k] = sign
        force[i, j, k] = sign
        force[i, 3 + j, 3 + k] = sign
        force[3 + i, j, 3 + k] = sign
    return motion.reshape(6, 36), force.reshape(6, 36)


def _sparse_cross_tensors(dtype: torch.dtype, device: torch.device
                          ) -> Tuple[Tuple[torch.Tensor, torch.Tensor, torch.Tensor], ...]:
    """
    Return (matrix (6, 18), left (18,), right (18,)) for the motion and the force product.

    Only 18 of the 36 pairs v_j m_k enter a spatial cross product: for wide batches forming
    just those pairs (two index_selects) halves the outer product's memory traffic.
    """
    result = []
    for full in _spatial_cross_tensors(dtype, device):
        pairs = full.abs().sum(0).nonzero()[:, 0]
        result.append((full[:, pairs].contiguous(), torch.div(pairs, 6, rounding_mode='floor'),
                       pairs % 6))
    return tuple(result)


def _spatial_cross(kind: int, v: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Spatial cross product on batch-last (..., 6, N) tensors: kind 0 motion, 1 force."""
    if max(v.shape[-1], m.shape[-1]) >= WIDE_BATCH:
        matrix, left, right = _cached('sparse_cross', v.dtype, v.device,
                                      _sparse_cross_tensors)[kind]
        return torch.matmul(matrix, v.index_select(-2, left) * m.index_select(-2, right))
    outer = (v.unsqueeze(-2) * m.unsqueeze(-3)).flatten(-3, -2)
    return torch.matmul(_cached('cross', v.dtype, v.device, _spatial_cross_tensors)[kind],
                        outer)


def _crm(v: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Spatial motion cross product v x m on batch-last (..., 6, N) tensors."""
    return _spatial_cross(0, v, m)


def _crf(v: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """Spatial force cross product v x* f on batch-last (..., 6, N) tensors."""
    return _spatial_cross(1, v, f)


def _tree(matrix: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Sum body quantities over ancestors or subtrees: (n, n) x (n, ..., N) -> (n, ..., N)."""
    return torch.mm(matrix, x.reshape(x.shape[0], -1)).reshape(x.shape)


def _flat(model: RobotModel, q: torch.Tensor, **others: Optional[torch.Tensor]
          ) -> Tuple[torch.Size, List[Optional[torch.Tensor]]]:
    """Validate (..., n) inputs, broadcast them and return (batch shape, [(n, N) tensors])."""
    n = model.n_dof
    if not isinstance(q, torch.Tensor):
        raise TypeError(f'q must be a torch.Tensor, got {type(q).__name__}')
    if not q.is_floating_point():
        raise TypeError(f'q must be a floating-point tensor, got {q.dtype}')
    given = {'q': q, **{k: v for k, v in others.items() if v is not None}}
    for name, value in given.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f'{name} must be a torch.Tensor, got {type(value).__name__}')
        if value.dim() == 0 or value.shape[-1] != n:
            raise ValueError(f'{name} must have shape (..., {n}) for robot {model.name!r} '
                             f'(joints {list(model.joint_names)}), got {tuple(value.shape)}')
        if value.dtype != q.dtype or value.device != q.device:
            raise ValueError(f'{name} has dtype {value.dtype} on {value.device}, but q has '
                             f'{q.dtype} on {q.device}; convert explicitly')
    try:
        batch = _broadcast(*(v.shape[:-1] for v in given.values()))
    except ValueError:
        shapes = {k: tuple(v.shape) for k, v in given.items()}
        raise ValueError(f'batch dimensions do not broadcast: {shapes}') from None
    flat = [None if v is None else _batch_last(v, batch, n) for v in [q, *others.values()]]
    return batch, flat


def _batch_last(value: torch.Tensor, batch: torch.Size, n: int) -> torch.Tensor:
    """Return (..., n) `value` broadcast to `batch` as a contiguous (n, N) tensor."""
    if value.shape[:-1] != batch:
        value = value.expand(batch + (n,))
    if value.dim() == 1:
        return value[:, None]
    return value.reshape(-1, n).T.contiguous()


def _unflat(x: torch.Tensor, batch: torch.Size) -> torch.Tensor:
    """Move the batch-last layout (..., N) back to a contiguous (*batch, ...) tensor."""
    return x.movedim(-1, 0).reshape(batch + x.shape[:-1]).contiguous()


def _kinematics(model: RobotModel, c: _Constants, q: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor]:
    """
    Return world <- body transforms [R | p] (n, 3, 4, N) and world motion subspaces (n, 6, N).

    Joint transform: placement then rotation about (Rodrigues) or translation along the axis.
    S_i = [w; p x w] for a revolute joint with world axis w through p, [0; w] for prismatic.
    """
    n, batch = q.shape
    terms = torch.stack([torch.sin(q), 1.0 - torch.cos(q), q], 1)
    local = torch.baddbmm(c.local0, c.local_basis, terms).view(n, 4, 4, batch)
    tops = local[:, :3].unbind(0)
    # (1, 4, 4, N) per joint: pre-shaped for the batch-last product below.
    local = local.unsqueeze(1).unbind(0)
    world: List[torch.Tensor] = []
    for i, parent in enumerate(model.parents):
        if parent == ROOT:
            world.append(tops[i])
        else:  # [R_p | p_p] @ [[R, p], [0, 1]], batch-last
            world.append((world[parent].unsqueeze(-2) * local[i]).sum(-3))
    transforms = torch.stack(world, 0)
    direction = _mv(transforms[:, :, :3], c.axis)
    origin = transforms[:, :, 3]
    angular = direction * c.revolute3
    linear = _cross(origin, angular) + direction * c.prismatic3
    return transforms, torch.cat([angular, linear], 1)


def _param_tensors(model: RobotModel, c: _Constants, params: Optional[DynamicsParams],
                   like: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (spatial inertia (n, 6, 6, 1), damping (n, 1), friction (n, 1))."""
    if params is None:
        return c.spatial_inertia, c.damping, c.friction
    n = model.n_dof
    expected = {'spatial_inertia': (n, 6, 6), 'damping': (n,), 'friction': (n,)}
    for name, shape in expected.items():
        value = getattr(params, name)
        if tuple(value.shape) != shape:
            raise ValueError(f'params.{name} must have shape {shape}, got {tuple(value.shape)}')
        if value.dtype != like.dtype or value.device != like.device:
            raise ValueError(f'params.{name} has dtype {value.dtype} on {value.device}, but q '
                             f'has {like.dtype} on {like.device}')
    return params.spatial_inertia[..., None], params.damping[:, None], params.friction[:, None]


def _body_parts(c: _Constants, params: Optional[DynamicsParams], inertia: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return mass (n, 1, 1), com (n, 3, 1), inertia about com (n, 3, 3, 1) in body frames."""
    if params is None:
        return c.mass, c.com, c.inertia_com
    mass, com, inertia_com = inertial_parts(inertia[..., 0])
    return mass[:, None, None], com[..., None], inertia_com[..., None]


def _world_inertia(transforms: torch.Tensor, mass: torch.Tensor, com: torch.Tensor,
                   inertia_com: torch.Tensor) -> torch.Tensor:
    """
    Return body spatial inertias about the world origin in world axes, (n, 6, 6, N).

    I = [[I_O, [h]x], [[h]x^T, m 1]] with h = m c_w and I_O = R I_c R^T + m [c_w]x [c_w]x^T
    (RBDA eq. 2.63 with the parallel-axis theorem), built from 3x3 blocks.
    """
    rot, pos = transforms[:, :, :3], transforms[:, :, 3]
    com_w = _mv(rot, com) + pos
    h = mass * com_w
    eye = torch.eye(3, dtype=pos.dtype, device=pos.device)[:, :, None]
    # R I_c R^T + m (|c|^2 1 - c c^T) = R I_c R^T - h c^T + (h . c) 1
    inertia_o = (_mm(_mm(rot, inertia_com), rot.transpose(1, 2))
                 - h[:, :, None] * com_w[:, None, :] + (h * com_w).sum(1)[:, None, None] * eye)
    hx = torch.matmul(_cached('skew', h.dtype, h.device, _skew_basis), h).unflatten(1, (3, 3))
    # Block assignment into one buffer: cheaper than concatenating, and differentiable.
    out = inertia_o.new_empty(inertia_o.shape[:1] + (6, 6) + inertia_o.shape[-1:])
    out[:, :3, :3] = inertia_o
    out[:, :3, 3:] = hx
    out[:, 3:, :3] = hx.transpose(1, 2)
    out[:, 3:, 3:] = mass[..., None] * eye
    return out


def _skew_basis(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Return E (9, 3) with vec([h]x) = E h (row-major)."""
    basis = torch.zeros(3, 3, 3, dtype=dtype, device=device)
    for i, j, k, sign in _LEVI_CIVITA:  # ([h]x)_ik = eps_ijk h_j
        basis[i, k, j] = sign
    return basis.reshape(9, 3)


def _external(model: RobotModel, c: _Constants, transforms: torch.Tensor,
              wrench: torch.Tensor, link: Optional[str], batch: torch.Size) -> torch.Tensor:
    """World spatial force at the origin per body, (n, 6, N), from a wrench on `link`."""
    name = link if link is not None else model.link_names[-1]
    index = model.link_index(name)
    if not isinstance(wrench, torch.Tensor) or wrench.shape[-1:] != (6,):
        raise ValueError(f'external_wrench must be a (..., 6) tensor [force, torque], got '
                         f'{getattr(wrench, "shape", type(wrench).__name__)}')
    try:
        wrench = wrench.to(transforms).expand(batch + (6,)).reshape(-1, 6).T
    except RuntimeError:
        raise ValueError(f'external_wrench batch {tuple(wrench.shape[:-1])} does not '
                         f'broadcast to {tuple(batch)}') from None
    body = model.link_bodies[index]
    if body == ROOT:
        return torch.zeros_like(transforms[:, :, :2]).reshape(model.n_dof, 6, -1)
    point = _mm(transforms[body], c.link_offsets[index])[:, 3]
    force, torque = wrench[:3], wrench[3:]
    spatial = torch.cat([torque + _cross(point, force), force], 0)
    onehot = torch.zeros(model.n_dof, 1, 1, dtype=wrench.dtype, device=wrench.device)
    onehot[body] = 1.0
    return onehot * spatial


def _losses(damping_coef: torch.Tensor, friction_coef: torch.Tensor, qd: torch.Tensor,
            damping: bool, friction: bool) -> Optional[torch.Tensor]:
    loss = None
    if damping:
        loss = damping_coef * qd
    if friction:
        coulomb = friction_coef * torch.sign(qd)
        loss = coulomb if loss is None else loss + coulomb
    return loss


def forward_kinematics(model: RobotModel, q: torch.Tensor) -> torch.Tensor:
    """Return (..., L, 4, 4) world <- link transforms for every link in `model.link_names`."""
    batch, (qf,) = _flat(model, q)
    c = model.constants(q.dtype, q.device)
    transforms, _ = _kinematics(model, c, qf)
    n_batch = qf.shape[1]
    eye = torch.eye(4, dtype=q.dtype, device=q.device)[None, :3, :, None]
    with_base = torch.cat([eye.expand(1, 3, 4, n_batch), transforms], 0)
    index = torch.tensor([b + 1 for b in model.link_bodies], device=q.device)
    chosen = with_base.index_select(0, index)
    full = torch.cat([chosen, c.bottom.expand(chosen.shape[0], 1, 4, n_batch)], 1)
    return _unflat(_mm(full, c.link_offsets), batch)


def link_pose(model: RobotModel, q: torch.Tensor, link: str) -> torch.Tensor:
    """Return the (..., 4, 4) world <- `link` transform."""
    return forward_kinematics(model, q)[..., model.link_index(link), :, :]


def jacobian(model: RobotModel, q: torch.Tensor, link: str, frame: str = 'world'
             ) -> torch.Tensor:
    """
    Geometric Jacobian of `link`'s frame, (..., 6, n), rows [linear; angular].

    frame='world': velocity of the link origin and angular velocity in world axes (Pinocchio
    LOCAL_WORLD_ALIGNED); frame='local': the same twist in the link's own axes (Pinocchio
    LOCAL). Column j is S_j moved to the link origin, zero unless joint j is an ancestor.
    """
    if frame not in ('world', 'local'):
        raise ValueError(f"frame must be 'world' or 'local', got {frame!r}")
    index = model.link_index(link)
    batch, (qf,) = _flat(model, q)
    c = model.constants(q.dtype, q.device)
    body = model.link_bodies[index]
    if body == ROOT:
        return q.new_zeros(batch + (6, model.n_dof))
    transforms, motion = _kinematics(model, c, qf)
    pose = _mm(transforms[body], c.link_offsets[index])
    angular = motion[:, :3]
    linear = motion[:, 3:] + _cross(angular, pose[None, :, 3])
    columns = torch.stack([linear, angular], 1) * c.subtree3[:, body, None, None]
    if frame == 'local':
        columns = _mv(pose[None, None, :, :3].transpose(2, 3), columns)
    return _unflat(columns.reshape(model.n_dof, 6, -1).transpose(0, 1), batch)


def _body_motion(model: RobotModel, c: _Constants, q: torch.Tensor, qd: torch.Tensor,
                 qdd: torch.Tensor, gravity: bool
                 ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """
    RNEA forward pass: return transforms, motion subspaces and body motion (n, 2, 6, N).

    v = A^T (S qd), a = A^T (S qdd + v x S qd) + a_0 in world coordinates (A: subtree
    matrix, a_0 = -gravity), then both moved to body axes at the body origin, where the
    body's inertia is constant: body[:, 0] = velocity, body[:, 1] = acceleration.
    """
    transforms, motion = _kinematics(model, c, q)
    sqd = motion * qd[:, None]
    vel = _tree(c.subtree_t, sqd)
    acc = _tree(c.subtree_t, motion * qdd[:, None] + _crm(vel, sqd))
    if gravity:
        acc = acc + c.gravity_accel
    rot, pos = transforms[:, :, :3], transforms[:, :, 3]
    pair = torch.stack([vel, acc], 1)
    angular = pair[:, :, :3]
    linear = pair[:, :, 3:] + _cross(angular, pos[:, None])
    body = _mv(rot.transpose(1, 2)[:, None], torch.cat([angular, linear], 1))
    return transforms, motion, torch.cat([body[:, :2], body[:, 2:]], 2)


def _world_force(transforms: torch.Tensor, force_body: torch.Tensor) -> torch.Tensor:
    """Map body-axis forces at body origins (n, ..., 6, N) to world forces at the origin."""
    rot, pos = transforms[:, :, :3], transforms[:, :, 3]
    extra = force_body.dim() - 3
    rot = rot.reshape(rot.shape[:1] + (1,) * extra + rot.shape[1:])
    pos = pos.reshape(pos.shape[:1] + (1,) * extra + pos.shape[1:])
    halves = torch.stack([force_body[..., :3, :], force_body[..., 3:, :]], -3)
    world = _mv(rot.unsqueeze(-4), halves)
    linear = world[..., 1, :, :]
    return torch.cat([world[..., 0, :, :] + _cross(pos, linear), linear], -2)


def rnea(model: RobotModel, q: torch.Tensor, qd: torch.Tensor, qdd: torch.Tensor, *,
         gravity: bool = True, damping: bool = False, friction: bool = False,
         external_wrench: Optional[torch.Tensor] = None, wrench_link: Optional[str] = None,
         params: Optional[DynamicsParams] = None) -> torch.Tensor:
    """
    Inverse dynamics tau = M(q) qdd + C(q, qd) qd + g(q) [+ friction - J^T f_ext], (..., n).

    RNEA (RBDA Table 5.1) in world coordinates (see `_body_motion`), with the body forces
    f_i = I_i a_i + v_i x* I_i v_i evaluated in body axes and tau_i = S_i . (sum of f over
    the subtree of i). damping adds B qd, friction adds F sign(qd) (Coulomb; its gradient in
    qd is zero). external_wrench (..., 6) = [force; torque] in world axes acting at the
    origin of `wrench_link` (default: the last link), exerted by the environment on the
    robot. params: inertias, damping and friction to use instead of the model's.
    """
    batch, (qf, qdf, qddf) = _flat(model, q, qd=qd, qdd=qdd)
    c = model.constants(q.dtype, q.device)
    inertia, damping_coef, friction_coef = _param_tensors(model, c, params, q)
    transforms, motion, body = _body_motion(model, c, qf, qdf, qddf, gravity)
    momentum = torch.matmul(inertia[:, None, :, :, 0], body)
    force = _world_force(transforms, momentum[:, 1] + _crf(body[:, 0], momentum[:, 0]))
    if external_wrench is not None:
        force = force - _external(model, c, transforms, external_wrench, wrench_link, batch)
    tau = (motion * _tree(c.subtree, force)).sum(1)
    losses = _losses(damping_coef, friction_coef, qdf, damping, friction)
    if losses is not None:
        tau = tau + losses
    return _unflat(tau, batch)


def inertial_regressor(model: RobotModel, q: torch.Tensor, qd: torch.Tensor,
                       qdd: torch.Tensor, *, gravity: bool = True) -> torch.Tensor:
    """
    Return Y (..., n, 10 n) with rnea(q, qd, qdd) = Y phi (no friction), phi linear.

    phi holds, per body, [m, m c_x, m c_y, m c_z, Ixx, Ixy, Ixz, Iyy, Iyz, Izz] with the
    inertia about the body origin in body axes (Atkeson et al. 1986): the parameters rigid-
    body dynamics is linear in, used for identification. Same forward pass as `rnea`.
    """
    batch, (qf, qdf, qddf) = _flat(model, q, qd=qd, qdd=qdd)
    c = model.constants(q.dtype, q.device)
    transforms, motion, body = _body_motion(model, c, qf, qdf, qddf, gravity)
    basis = parameter_basis(q.dtype, q.device)
    momentum = torch.matmul(basis[None, :, None], body[:, None])
    force_body = momentum[:, :, 1] + _crf(body[:, None, 0], momentum[:, :, 0])
    force = _world_force(transforms, force_body)
    n = model.n_dof
    # Y[i, (j, p)] = S_i . f_jp over the subtree: one contraction, no (n, n, 10, 6, B) product.
    columns = torch.einsum('ikb,jpkb->ijpb', motion, force) * c.subtree[:, :, None, None]
    return _unflat(columns.reshape(n, 10 * n, -1), batch)


def parameter_basis(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Return (10, 6, 6): the spatial inertia of each unit inertial parameter (see phi)."""
    basis = torch.zeros(10, 6, 6, dtype=dtype, device=device)
    basis[0, 3:, 3:] = torch.eye(3, dtype=dtype, device=device)
    for k, (i, j, sign) in enumerate(((2, 1, 1.0), (0, 2, 1.0), (1, 0, 1.0))):
        h = torch.zeros(3, 3, dtype=dtype, device=device)
        h[i, j] = sign
        h[j, i] = -sign
        basis[1 + k, :3, 3:] = h
        basis[1 + k, 3:, :3] = h.T
    entries = ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))
    for k, (i, j) in enumerate(entries):
        basis[4 + k, i, j] = 1.0
        basis[4 + k, j, i] = 1.0
    return basis


def inertial_vector(inertia: torch.Tensor) -> torch.Tensor:
    """Map (n, 6, 6) spatial inertias to the (10 n,) parameter vector phi of the regressor."""
    mass = inertia[:, 3, 3]
    hx = inertia[:, :3, 3:]
    h = torch.stack([hx[:, 2, 1], hx[:, 0, 2], hx[:, 1, 0]], -1)
    rot = inertia[:, :3, :3]
    upper = torch.stack([rot[:, 0, 0], rot[:, 0, 1], rot[:, 0, 2], rot[:, 1, 1], rot[:, 1, 2],
                         rot[:, 2, 2]], -1)
    return torch.cat([mass[:, None], h, upper], -1).reshape(-1)


def crba(model: RobotModel, q: torch.Tensor, *, params: Optional[DynamicsParams] = None
         ) -> torch.Tensor:
    """
    Joint-space mass matrix M(q), (..., n, n), by the composite-rigid-body algorithm.

    RBDA Table 6.2 in world coordinates: composite inertias I^c_j = sum of I over the subtree
    of j, M_ij = S_i . I^c_j S_j where i is j or an ancestor of j, mirrored below.
    """
    batch, (qf,) = _flat(model, q)
    c = model.constants(q.dtype, q.device)
    inertia, _, _ = _param_tensors(model, c, params, q)
    transforms, motion = _kinematics(model, c, qf)
    world = _world_inertia(transforms, *_body_parts(c, params, inertia))
    force = _mv(_tree(c.subtree, world), motion)
    projected = (motion[:, None] * force[None, :]).sum(2)
    mass = projected * c.subtree3 + (projected * c.strict).transpose(0, 1)
    return _unflat(mass, batch)


def gravity_torques(model: RobotModel, q: torch.Tensor, *,
                    params: Optional[DynamicsParams] = None) -> torch.Tensor:
    """Return g(q), (..., n): the torques that hold the robot still against gravity."""
    zero = torch.zeros_like(q)
    return rnea(model, q, zero, zero, params=params)


def coriolis_torques(model: RobotModel, q: torch.Tensor, qd: torch.Tensor, *,
                     params: Optional[DynamicsParams] = None) -> torch.Tensor:
    """Return C(q, qd) qd, (..., n): Coriolis and centrifugal torques (no gravity)."""
    return rnea(model, q, qd, torch.zeros_like(qd), gravity=False, params=params)


def aba(model: RobotModel, q: torch.Tensor, qd: torch.Tensor, tau: torch.Tensor, *,
        gravity: bool = True, damping: bool = False, friction: bool = False,
        external_wrench: Optional[torch.Tensor] = None, wrench_link: Optional[str] = None,
        params: Optional[DynamicsParams] = None) -> torch.Tensor:
    """
    Forward dynamics qdd (..., n) by the articulated-body algorithm (RBDA Table 7.1).

    World-coordinate form: articulated inertias I^A and bias forces p^A are accumulated from
    the leaves without frame changes (U = I^A S, D = S.U, u = tau - S.p^A,
    I^a = I^A - U U^T / D, p^a = p^A + I^a c + U u / D with c = v x S qd), then
    qdd_i = (u_i - U_i . (a_parent + c_i)) / D_i from the root. Keyword flags as in `rnea`;
    damping and friction torques oppose the motion.
    """
    batch, (qf, qdf, tauf) = _flat(model, q, qd=qd, tau=tau)
    c = model.constants(q.dtype, q.device)
    inertia, damping_coef, friction_coef = _param_tensors(model, c, params, q)
    transforms, motion = _kinematics(model, c, qf)
    sqd = motion * qdf[:, None]
    vel = _tree(c.subtree_t, sqd)
    bias_acc = _crm(vel, sqd)
    world = _world_inertia(transforms, *_body_parts(c, params, inertia))
    bias = _crf(vel, _mv(world, vel))
    if external_wrench is not None:
        bias = bias - _external(model, c, transforms, external_wrench, wrench_link, batch)
    losses = _losses(damping_coef, friction_coef, qdf, damping, friction)
    if losses is not None:
        tauf = tauf - losses
    art = list(world.unbind(0))
    art_bias = list(bias.unbind(0))
    s_list = motion.unbind(0)
    c_list = bias_acc.unbind(0)
    tau_list = tauf.unbind(0)
    n = model.n_dof
    u_vec: List[torch.Tensor] = list(s_list)
    d_inv: List[torch.Tensor] = list(tau_list)
    u_sc: List[torch.Tensor] = list(tau_list)
    for i in range(n - 1, -1, -1):
        si, articulated = s_list[i], art[i]
        ui = (articulated * si).sum(1)  # I^A S: I^A is symmetric, contract its contiguous axis
        di_inv = torch.reciprocal((si * ui).sum(0))
        torque = tau_list[i] - (si * art_bias[i]).sum(0)
        u_vec[i], d_inv[i], u_sc[i] = ui, di_inv, torque
        parent = model.parents[i]
        if parent != ROOT:
            scaled = ui * di_inv
            reduced = torch.addcmul(articulated, ui[:, None], scaled[None, :], value=-1.0)
            art[parent] = art[parent] + reduced
            passed = torch.addcmul(art_bias[i] + (reduced * c_list[i]).sum(1), scaled, torque)
            art_bias[parent] = art_bias[parent] + passed
    base = c.gravity_accel if gravity else torch.zeros_like(c.gravity_accel)
    acc: List[torch.Tensor] = []
    qdd: List[torch.Tensor] = []
    for i in range(n):
        parent = model.parents[i]
        before = (base if parent == ROOT else acc[parent]) + c_list[i]
        qddi = (u_sc[i] - (u_vec[i] * before).sum(0)) * d_inv[i]
        qdd.append(qddi)
        acc.append(torch.addcmul(before, s_list[i], qddi))
    return _unflat(torch.stack(qdd, 0), batch)
