"""
Random but physically valid URDF trees, for oracle tests and benchmarks.

Random axes (not only x, y, z), revolute and prismatic joints, branches, fixed joints that
carry extra mass and massless frames: the cases where a rigid-body library is most likely
to be silently wrong.
"""
from typing import List

import numpy as np


def _inertia(rng: np.random.Generator) -> np.ndarray:
    """Return a random 3x3 inertia about the centre of mass obeying the triangle inequality."""
    principal = rng.uniform(0.06, 0.1, size=3)
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    return q @ np.diag(principal) @ q.T


def _num(*values: float) -> str:
    """Format numbers exactly (shortest round-trip repr), space separated."""
    return ' '.join(repr(float(v)) for v in values)


def _inertial_xml(rng: np.random.Generator) -> str:
    i = _inertia(rng)
    com = rng.uniform(-0.2, 0.2, size=3)
    return (f'    <inertial>\n      <origin xyz="{_num(*com)}" rpy="0 0 0"/>\n'
            f'      <mass value="{_num(rng.uniform(0.5, 3.0))}"/>\n'
            f'      <inertia ixx="{_num(i[0, 0])}" ixy="{_num(i[0, 1])}" ixz="{_num(i[0, 2])}" '
            f'iyy="{_num(i[1, 1])}" iyz="{_num(i[1, 2])}" izz="{_num(i[2, 2])}"/>\n'
            '    </inertial>\n')


def _origin_xml(rng: np.random.Generator) -> str:
    xyz = rng.uniform(-0.4, 0.4, size=3)
    rpy = rng.uniform(-np.pi, np.pi, size=3)
    return f'    <origin xyz="{_num(*xyz)}" rpy="{_num(*rpy)}"/>\n'


def random_tree_urdf(n_joints: int, seed: int, prismatic_share: float = 0.3,
                     fixed_links: int = 2) -> str:
    """
    Return a URDF string with `n_joints` moving joints on a random tree.

    Each moving link hangs from a random earlier link (so trees branch), joints are revolute
    or prismatic (share `prismatic_share`) about random unit axes with random origins, and
    `fixed_links` extra links are attached by fixed joints (half carry mass, half do not).
    """
    if n_joints < 1:
        raise ValueError(f'n_joints must be >= 1, got {n_joints}')
    rng = np.random.default_rng(seed)
    parts: List[str] = [f'<?xml version="1.0"?>\n<robot name="random_tree_{seed}">\n',
                        '  <link name="base"/>\n']
    links = ['base']
    for i in range(n_joints):
        name = f'link{i}'
        parent = links[int(rng.integers(0, len(links)))]
        kind = 'prismatic' if rng.uniform() < prismatic_share else 'revolute'
        axis = rng.normal(size=3)
        axis /= np.linalg.norm(axis)
        parts.append(f'  <link name="{name}">\n{_inertial_xml(rng)}  </link>\n')
        parts.append(f'  <joint name="joint{i}" type="{kind}">\n{_origin_xml(rng)}'
                     f'    <parent link="{parent}"/>\n    <child link="{name}"/>\n'
                     f'    <axis xyz="{_num(*axis)}"/>\n'
                     '    <limit lower="-3" upper="3" velocity="5" effort="100"/>\n'
                     f'    <dynamics damping="{_num(rng.uniform(0.0, 0.5))}" '
                     f'friction="{_num(rng.uniform(0.0, 0.5))}"/>\n  </joint>\n')
        links.append(name)
    for k in range(fixed_links):
        name = f'fixed{k}'
        parent = links[int(rng.integers(1, len(links)))]
        inertial = _inertial_xml(rng) if k % 2 == 0 else ''
        parts.append(f'  <link name="{name}">\n{inertial}  </link>\n')
        parts.append(f'  <joint name="fixed_joint{k}" type="fixed">\n{_origin_xml(rng)}'
                     f'    <parent link="{parent}"/>\n    <child link="{name}"/>\n  </joint>\n')
        links.append(name)
    parts.append('</robot>\n')
    return ''.join(parts)
