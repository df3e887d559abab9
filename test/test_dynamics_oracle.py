"""Agreement with Pinocchio (the test oracle) on our URDFs and on random trees."""
from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
from robot_dynamics_learning.dynamics import (aba, crba, forward_kinematics, jacobian,
                                              load_urdf, rnea)
from robot_dynamics_learning.dynamics.random_tree import random_tree_urdf
import torch

ROOT = Path(__file__).resolve().parents[1]
URDFS = {
    'panda': (ROOT / 'urdf' / 'panda.urdf').read_text(),
    'planar_2link': (ROOT / 'urdf' / 'planar_2link.urdf').read_text(),
    'tree_a': random_tree_urdf(8, seed=1),
    'tree_b': random_tree_urdf(6, seed=2, prismatic_share=0.5, fixed_links=3),
    'tree_c': random_tree_urdf(10, seed=3),
}
TOL = {torch.float64: 1e-9, torch.float32: 1e-4}
BATCH = 4


class Oracle:
    """Pinocchio model of the same URDF with index maps to our joint order."""

    def __init__(self, xml: str) -> None:
        self.model = pin.buildModelFromXML(xml)
        self.data = self.model.createData()
        self.ours = load_urdf(xml)
        ids = [self.model.getJointId(name) for name in self.ours.joint_names]
        assert self.model.nq == self.model.nv == self.ours.n_dof
        self.iq = np.array([self.model.joints[j].idx_q for j in ids])
        self.iv = np.array([self.model.joints[j].idx_v for j in ids])

    def q(self, ours: np.ndarray) -> np.ndarray:
        out = np.zeros(self.model.nq)
        out[self.iq] = ours
        return out

    def v(self, ours: np.ndarray) -> np.ndarray:
        out = np.zeros(self.model.nv)
        out[self.iv] = ours
        return out

    def frame(self, link: str) -> int:
        return self.model.getFrameId(link, pin.BODY)


@pytest.fixture(scope='module', params=sorted(URDFS))
def oracle(request) -> Oracle:
    return Oracle(URDFS[request.param])


def _states(n: int, dtype: torch.dtype, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    q, qd, qdd = (torch.randn(BATCH, n, generator=gen, dtype=torch.float64) for _ in range(3))
    return q.to(dtype), qd.to(dtype), qdd.to(dtype)


def _close(ours: torch.Tensor, ref: np.ndarray, dtype: torch.dtype, what: str) -> None:
    ref = np.asarray(ref)
    scale = max(1.0, float(np.abs(ref).max()))
    err = float(np.abs(ours.detach().double().numpy() - ref).max())
    assert err <= TOL[dtype] * scale, f'{what}: max error {err:.3g} (scale {scale:.3g})'


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
def test_dynamics_match_pinocchio(oracle: Oracle, dtype: torch.dtype) -> None:
    model = oracle.ours
    q, qd, qdd = _states(model.n_dof, dtype)
    tau = rnea(model, q, qd, qdd)
    mass = crba(model, q)
    tau_in = torch.randn(q.shape, generator=torch.Generator().manual_seed(5),
                         dtype=torch.float64).to(dtype) * 5.0
    acc = aba(model, q, qd, tau_in)
    for b in range(BATCH):
        qb, vb, ab = (oracle.q(x[b].double().numpy()) for x in (q, qd, qdd))
        vb, ab = oracle.v(qd[b].double().numpy()), oracle.v(qdd[b].double().numpy())
        ref_tau = pin.rnea(oracle.model, oracle.data, qb, vb, ab)[oracle.iv]
        _close(tau[b], ref_tau, dtype, 'rnea')
        ref_m = pin.crba(oracle.model, oracle.data, qb)
        ref_m = np.triu(ref_m) + np.triu(ref_m, 1).T
        _close(mass[b], ref_m[np.ix_(oracle.iv, oracle.iv)], dtype, 'crba')
        ref_acc = pin.aba(oracle.model, oracle.data, qb, vb,
                          oracle.v(tau_in[b].double().numpy()))[oracle.iv]
        _close(acc[b], ref_acc, dtype, 'aba')


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
def test_kinematics_match_pinocchio(oracle: Oracle, dtype: torch.dtype) -> None:
    model = oracle.ours
    q, _, _ = _states(model.n_dof, dtype, seed=1)
    poses = forward_kinematics(model, q)
    jacobians = {(link, frame): jacobian(model, q, link, frame)
                 for link in model.link_names for frame in ('world', 'local')}
    for b in range(BATCH):
        qb = oracle.q(q[b].double().numpy())
        pin.framesForwardKinematics(oracle.model, oracle.data, qb)
        pin.computeJointJacobians(oracle.model, oracle.data, qb)
        for k, link in enumerate(model.link_names):
            fid = oracle.frame(link)
            _close(poses[b, k], oracle.data.oMf[fid].homogeneous, dtype, f'fk {link}')
            for frame, ref_frame in (('world', pin.LOCAL_WORLD_ALIGNED), ('local', pin.LOCAL)):
                ref = pin.getFrameJacobian(oracle.model, oracle.data, fid, ref_frame)
                _close(jacobians[(link, frame)][b], ref[:, oracle.iv], dtype,
                       f'jacobian {link} {frame}')
