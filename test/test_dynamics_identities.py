"""Identities between the algorithms, batching, dtypes and differentiability."""
from pathlib import Path

import pytest
from robot_dynamics_learning.dynamics import (aba, coriolis_torques, crba, DynamicsParams,
                                              forward_kinematics, gravity_torques, jacobian,
                                              link_pose, load_urdf, rnea)
from robot_dynamics_learning.dynamics.learnable import LearnableRigidBody
from robot_dynamics_learning.dynamics.random_tree import random_tree_urdf
import torch

ROOT = Path(__file__).resolve().parents[1]
PANDA = load_urdf(ROOT / 'urdf' / 'panda.urdf')
PLANAR = load_urdf(ROOT / 'urdf' / 'planar_2link.urdf')
TREE = load_urdf(random_tree_urdf(7, seed=11, prismatic_share=0.4))
MODELS = {'panda': PANDA, 'planar': PLANAR, 'tree': TREE}


def _random(model, *batch, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*batch, model.n_dof, generator=gen, dtype=torch.float64).to(dtype)
                 for _ in range(3))


@pytest.mark.parametrize('name', sorted(MODELS))
def test_aba_inverts_rnea_with_friction_and_wrench(name):
    model = MODELS[name]
    q, qd, qdd = _random(model, 6)
    wrench = torch.randn(6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    flags = {'damping': True, 'friction': True, 'external_wrench': wrench}
    tau = rnea(model, q, qd, qdd, **flags)
    assert torch.allclose(aba(model, q, qd, tau, **flags), qdd, atol=1e-9)


@pytest.mark.parametrize('name', sorted(MODELS))
def test_mass_matrix_symmetric_positive_definite_and_consistent(name):
    model = MODELS[name]
    q, qd, qdd = _random(model, 8)
    mass = crba(model, q)
    assert torch.allclose(mass, mass.transpose(-1, -2), atol=1e-12)
    assert bool((torch.linalg.eigvalsh(mass) > 0).all())
    h = rnea(model, q, qd, torch.zeros_like(q))
    tau = (mass @ qdd[..., None])[..., 0] + h
    assert torch.allclose(rnea(model, q, qd, qdd), tau, atol=1e-9)
    assert torch.allclose(h, gravity_torques(model, q) + coriolis_torques(model, q, qd),
                          atol=1e-9)


def test_external_wrench_enters_as_minus_jacobian_transpose():
    q, qd, qdd = _random(PANDA, 5)
    wrench = torch.randn(5, 6, dtype=torch.float64)
    jac = jacobian(PANDA, q, 'panda_link8')
    expected = rnea(PANDA, q, qd, qdd) - (jac.transpose(-1, -2) @ wrench[..., None])[..., 0]
    got = rnea(PANDA, q, qd, qdd, external_wrench=wrench, wrench_link='panda_link8')
    assert torch.allclose(got, expected, atol=1e-9)


def test_friction_terms_match_urdf_coefficients():
    q, qd, qdd = _random(PLANAR, 4)
    base = rnea(PLANAR, q, qd, qdd)
    assert torch.allclose(rnea(PLANAR, q, qd, qdd, damping=True) - base, 0.1 * qd)
    assert torch.allclose(rnea(PLANAR, q, qd, qdd, friction=True) - base,
                          0.05 * torch.sign(qd))


def test_planar_arm_closed_form():
    """Two-link planar arm about y: M and g from the textbook formulas."""
    q = torch.tensor([[0.3, -0.7]], dtype=torch.float64)
    m1, m2, l1, lc1, lc2, i1, i2 = 1.0, 0.8, 1.0, 0.5, 0.4, 1.0 / 12, 0.8 * 0.64 / 12
    c2 = torch.cos(q[0, 1])
    m11 = i1 + i2 + m1 * lc1 ** 2 + m2 * (l1 ** 2 + lc2 ** 2 + 2 * l1 * lc2 * c2)
    m12 = i2 + m2 * (lc2 ** 2 + l1 * lc2 * c2)
    m22 = i2 + m2 * lc2 ** 2
    expected = torch.tensor([[m11, m12], [m12, m22]], dtype=torch.float64)
    assert torch.allclose(crba(PLANAR, q)[0], expected, atol=1e-12)
    # Rotation about +y lowers +x: height of a point at distance r is -r sin(angle).
    g = 9.81
    a1, a12 = q[0, 0], q[0, 0] + q[0, 1]
    g2 = -m2 * g * lc2 * torch.cos(a12)
    g1 = -(m1 * lc1 + m2 * l1) * g * torch.cos(a1) + g2
    assert torch.allclose(gravity_torques(PLANAR, q)[0], torch.stack([g1, g2]), atol=1e-12)


def _energy(model, q, qd):
    mass = crba(model, q)
    kinetic = 0.5 * (qd[..., None, :] @ mass @ qd[..., :, None])[..., 0, 0]
    poses = forward_kinematics(model, q)
    body_link = [model.link_bodies.index(b) for b in range(model.n_dof)]
    rot, pos = poses[..., body_link, :3, :3], poses[..., body_link, :3, 3]
    inertia = model.inertias
    masses = inertia[:, 3, 3]
    com = torch.stack([inertia[:, 2, 4], inertia[:, 0, 5], inertia[:, 1, 3]], -1) / masses[:, None]
    com_world = (rot @ com[..., None])[..., 0] + pos
    potential = -(masses * (com_world @ model.gravity)).sum(-1)
    return kinetic + potential


@pytest.mark.parametrize('name', ['planar', 'tree'])
def test_energy_conserved_without_friction(name):
    model = MODELS[name]
    q, qd, _ = _random(model, 2, seed=4)
    dt, steps = 1e-3, 250
    start = _energy(model, q, qd)

    def deriv(state_q, state_qd):
        return state_qd, aba(model, state_q, state_qd, torch.zeros_like(state_q))

    for _ in range(steps):
        k1 = deriv(q, qd)
        k2 = deriv(q + 0.5 * dt * k1[0], qd + 0.5 * dt * k1[1])
        k3 = deriv(q + 0.5 * dt * k2[0], qd + 0.5 * dt * k2[1])
        k4 = deriv(q + dt * k3[0], qd + dt * k3[1])
        q = q + dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
        qd = qd + dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
    drift = (_energy(model, q, qd) - start).abs()
    assert bool((drift < 1e-6 * (1.0 + start.abs())).all()), (drift, start)
    assert float(qd.abs().max()) > 0.1  # it really moved


def test_any_leading_dimensions_and_dtype():
    q, qd, qdd = _random(PANDA, 2, 3, dtype=torch.float32)
    tau = rnea(PANDA, q, qd, qdd)
    assert tau.shape == (2, 3, 7) and tau.dtype == torch.float32
    assert crba(PANDA, q).shape == (2, 3, 7, 7)
    assert forward_kinematics(PANDA, q).shape == (2, 3, len(PANDA.link_names), 4, 4)
    assert jacobian(PANDA, q, 'panda_link8', 'local').shape == (2, 3, 6, 7)
    assert link_pose(PANDA, q[0, 0], 'panda_link8').shape == (4, 4)
    single = rnea(PANDA, q[1, 2], qd[1, 2], qdd[1, 2])
    assert single.shape == (7,)
    assert torch.allclose(single, tau[1, 2], atol=1e-5)
    # Broadcasting: one configuration, many velocities.
    many = rnea(PANDA, q[0, 0], qd[0], qdd[0])
    assert many.shape == (3, 7)


def test_gradcheck_float64():
    model = TREE
    q, qd, qdd = (x.requires_grad_() for x in _random(model, 2, seed=7))
    tau = torch.randn(2, model.n_dof, dtype=torch.float64, requires_grad=True)
    link = model.link_names[-1]
    assert torch.autograd.gradcheck(lambda a, b, c: rnea(model, a, b, c), (q, qd, qdd))
    assert torch.autograd.gradcheck(lambda a, b, c: aba(model, a, b, c), (q, qd, tau))
    assert torch.autograd.gradcheck(lambda a: crba(model, a), (q,))
    assert torch.autograd.gradcheck(lambda a: forward_kinematics(model, a), (q,))
    assert torch.autograd.gradcheck(lambda a: jacobian(model, a, link, 'local'), (q,))
    inertia = model.inertias.clone().requires_grad_()
    damping = torch.rand(model.n_dof, dtype=torch.float64, requires_grad=True)
    friction = model.friction

    def through_params(i, d):
        return rnea(model, q.detach(), qd.detach(), qdd.detach(), damping=True,
                    params=DynamicsParams(i, d, friction))
    assert torch.autograd.gradcheck(through_params, (inertia, damping))
    assert torch.autograd.gradcheck(
        lambda i: aba(model, q.detach(), qd.detach(), tau.detach(),
                      params=DynamicsParams(i, model.damping, friction)), (inertia,))
    # And through the log-Cholesky parametrisation of a learnable body.
    body = LearnableRigidBody(model).inertias[model.link_names[1]]
    theta = body.theta.detach().clone().requires_grad_()

    def through_theta(t):
        return torch.func.functional_call(body, {'theta': t}, ())
    assert torch.autograd.gradcheck(through_theta, (theta,))


def test_torch_func_vmap_and_jacrev():
    q, qd, qdd = _random(PANDA, 3)
    jac = torch.func.vmap(torch.func.jacrev(lambda x: rnea(PANDA, x, qd[0], qdd[0])))(q)
    assert jac.shape == (3, 7, 7)
    eps = 1e-6
    bump = torch.zeros(7, dtype=torch.float64)
    bump[2] = eps
    numeric = (rnea(PANDA, q + bump, qd[0], qdd[0]) - rnea(PANDA, q - bump, qd[0], qdd[0]))
    assert torch.allclose(jac[..., 2], numeric / (2 * eps), atol=1e-6)
    # The mass matrix is the Jacobian of RNEA in qdd.
    mass = torch.func.jacrev(lambda a: rnea(PANDA, q[0], qd[0], a))(qdd[0])
    assert torch.allclose(mass, crba(PANDA, q[0]), atol=1e-10)


def test_learnable_stays_physical_and_matches_model():
    module = LearnableRigidBody(PANDA, learn_damping=True, learn_friction=True)
    q, qd, qdd = _random(PANDA, 4)
    assert torch.allclose(module.rnea(q, qd, qdd, damping=False, friction=False),
                          rnea(PANDA, q, qd, qdd), atol=1e-9)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(torch.randn_like(parameter) * 2.0)
    for parts in module.link_inertials().values():
        assert float(parts['mass']) > 0
        eig = torch.linalg.eigvalsh(parts['inertia_com'])
        assert bool((eig > 0).all())
        assert float(2 * eig.max()) <= float(eig.sum()) * (1 + 1e-9)
    tau = module.rnea(q, qd, qdd)
    assert torch.allclose(module.aba(q, qd, tau), qdd, atol=1e-7)
    mass = module.crba(q)
    assert bool((torch.linalg.eigvalsh(mass) > 0).all())


def test_wide_batches_match_narrow_ones():
    """Batches of at least WIDE_BATCH use the memory-lean products: same values."""
    for model in (PANDA, TREE):
        q, qd, qdd = _random(model, 300, seed=9)
        wrench = torch.randn(300, 6, dtype=torch.float64)
        calls = {
            'rnea': lambda a, b, c, w: rnea(model, a, b, c, external_wrench=w, damping=True),
            'aba': lambda a, b, c, w: aba(model, a, b, c, external_wrench=w),
            'crba': lambda a, b, c, w: crba(model, a),
            'fk': lambda a, b, c, w: forward_kinematics(model, a),
            'jacobian': lambda a, b, c, w: jacobian(model, a, model.link_names[-1], 'local'),
        }
        for name, call in calls.items():
            wide = call(q, qd, qdd, wrench)
            narrow = torch.cat([call(q[i:i + 10], qd[i:i + 10], qdd[i:i + 10],
                                     wrench[i:i + 10]) for i in range(0, 300, 10)])
            assert torch.allclose(wide, narrow, rtol=1e-10, atol=1e-10), name
