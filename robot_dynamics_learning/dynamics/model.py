"""
Constant robot description built once from a URDF (Pinocchio's `Model` idea).

The kinematic tree is flattened at load time: one body per moving joint, numbered so that
parent < child, with joint type codes, axes (n, 3), placements (n, 4, 4) and spatial inertias
(n, 6, 6). Fixed joints are merged: a link attached by fixed joints only contributes its
inertia to the moving body it hangs from and keeps a constant offset for kinematics queries.
Algorithms in `algorithms.py` read this description and store nothing on it, so trainer and
predictor threads can share one model.

Conventions: spatial vectors are Featherstone's [angular; linear]; the spatial inertia of a
body is expressed in its joint frame (= the URDF child-link frame) about that frame's origin.
"""
from dataclasses import dataclass, field
import io
import math
import os
import threading
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import defusedxml.ElementTree
import numpy as np
import torch
import yourdfpy

JOINT_REVOLUTE = 0
JOINT_PRISMATIC = 1
_MOVING_TYPES = {'revolute': JOINT_REVOLUTE, 'continuous': JOINT_REVOLUTE,
                 'prismatic': JOINT_PRISMATIC}
_SUPPORTED_TYPES = set(_MOVING_TYPES) | {'fixed'}
ROOT = -1  # body index of the fixed base (world)


class JointLimits(NamedTuple):
    """Per-joint limits, (n,) float64 tensors; +-inf where the URDF gives none."""

    lower: torch.Tensor
    upper: torch.Tensor
    velocity: torch.Tensor
    effort: torch.Tensor


class DynamicsParams(NamedTuple):
    """
    The parameters algorithms may take from a learnable module instead of the model.

    spatial_inertia: (n, 6, 6) per body, joint frame, about its origin.
    damping: (n,) viscous coefficients [N m s/rad or N s/m].
    friction: (n,) Coulomb coefficients [N m or N].
    """

    spatial_inertia: torch.Tensor
    damping: torch.Tensor
    friction: torch.Tensor


class URDFError(ValueError):
    """A URDF that cannot describe a rigid-body tree we can simulate correctly."""


def skew(v: torch.Tensor) -> torch.Tensor:
    """Return the (..., 3, 3) cross-product matrix [v]x of (..., 3) vectors."""
    zero = torch.zeros_like(v[..., 0])
    x, y, z = v[..., 0], v[..., 1], v[..., 2]
    return torch.stack([torch.stack([zero, -z, y], -1),
                        torch.stack([z, zero, -x], -1),
                        torch.stack([-y, x, zero], -1)], -2)


def spatial_inertia(mass: torch.Tensor, com: torch.Tensor,
                    inertia_com: torch.Tensor) -> torch.Tensor:
    """
    Build (..., 6, 6) spatial inertias about the frame origin (Featherstone eq. 2.63).

    mass (...,) [kg], com (..., 3) [m] in the frame, inertia_com (..., 3, 3) [kg m^2] about the
    centre of mass with the frame's axes.
    """
    c = skew(com)
    m = mass[..., None, None]
    eye = torch.eye(3, dtype=com.dtype, device=com.device).expand_as(c)
    top = torch.cat([inertia_com + m * (c @ c.transpose(-1, -2)), m * c], -1)
    bottom = torch.cat([m * c.transpose(-1, -2), m * eye], -1)
    return torch.cat([top, bottom], -2)


def inertial_parts(inertia: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Split (..., 6, 6) spatial inertias into mass (...,), com (..., 3), inertia about com."""
    mass = inertia[..., 3, 3]
    h_skew = inertia[..., :3, 3:]
    h = torch.stack([h_skew[..., 2, 1], h_skew[..., 0, 2], h_skew[..., 1, 0]], -1)
    com = h / mass[..., None]
    c = skew(com)
    inertia_com = inertia[..., :3, :3] - mass[..., None, None] * (c @ c.transpose(-1, -2))
    return mass, com, inertia_com


def _shift_inertia(mass: float, com: np.ndarray, inertia_com: np.ndarray,
                   to_body: np.ndarray) -> np.ndarray:
    """Return the 6x6 spatial inertia of a link whose frame sits at `to_body` in the body."""
    rot, pos = to_body[:3, :3], to_body[:3, 3]
    com_b = rot @ com + pos
    inertia_b = rot @ inertia_com @ rot.T
    return spatial_inertia(torch.tensor(mass, dtype=torch.float64),
                           torch.from_numpy(com_b), torch.from_numpy(inertia_b)).numpy()


class _Constants(NamedTuple):
    """
    Model constants converted once per (dtype, device); see `RobotModel.constants`.

    Shapes end in a singleton batch dimension: the algorithms keep the flattened batch last
    (..., N) so that small 3x3 and 6x6 products become wide element-wise operations.
    """

    # Local transform parent body -> body, placement @ [Rodrigues rotation | slide], flattened:
    # local0 + local_basis @ [sin(q), 1 - cos(q), q] with the columns of local_basis
    # [rot0 [axis]x, 0] and [rot0 [axis]x^2, 0] (revolute), [0, rot0 axis] (prismatic).
    local0: torch.Tensor        # (n, 16, 1) the placement (joint at zero)
    local_basis: torch.Tensor   # (n, 16, 3)
    revolute: torch.Tensor      # (n, 1) 1 for revolute joints
    revolute3: torch.Tensor     # (n, 1, 1) the same, to scale (n, 3, N) vectors
    prismatic3: torch.Tensor    # (n, 1, 1) 1 for prismatic joints
    axis: torch.Tensor          # (n, 3, 1) unit joint axes in joint frames
    bottom: torch.Tensor        # (1, 1, 4, 1) homogeneous row [0, 0, 0, 1]
    subtree: torch.Tensor       # (n, n) subtree[i, j] = 1 if j is i or a descendant of i
    subtree_t: torch.Tensor     # (n, n) its transpose: row j marks j's ancestors and j
    strict: torch.Tensor        # (n, n, 1) subtree without the diagonal
    subtree3: torch.Tensor      # (n, n, 1) subtree with a batch dimension
    spatial_inertia: torch.Tensor  # (n, 6, 6, 1) the URDF's body inertias
    mass: torch.Tensor          # (n, 1, 1) body masses
    com: torch.Tensor           # (n, 3, 1) centres of mass in body frames
    inertia_com: torch.Tensor   # (n, 3, 3, 1) rotational inertia about the com, body axes
    damping: torch.Tensor       # (n, 1)
    friction: torch.Tensor      # (n, 1)
    gravity_accel: torch.Tensor  # (6, 1) spatial acceleration of the base, [0; -g]
    link_offsets: torch.Tensor  # (L, 4, 4, 1) body frame -> link frame


@dataclass(frozen=True, eq=False)
class RobotModel:
    """
    A fixed-base robot as a flattened tree of moving bodies (constant after loading).

    joint_names: the n moving joints in tree order (parent < child); body i is moved by joint i.
    parents: parent body of each body, -1 for the base.
    joint_types: JOINT_REVOLUTE or JOINT_PRISMATIC per joint.
    axes: (n, 3) unit joint axes in the joint frame.
    placements: (n, 4, 4) parent body frame -> joint frame at q = 0 (URDF joint origins, with
        any fixed joints in between folded in).
    inertias: (n, 6, 6) spatial inertia of each body including merged fixed links.
    link_names: every link of the URDF; link_bodies[k] is the body carrying link k (-1: base)
        and link_offsets[k] (4, 4) its frame in that body's frame.
    limits, damping, friction: from the URDF `<limit>` and `<dynamics>` elements.
    gravity: (3,) [m/s^2] in the base frame.
    """

    name: str
    joint_names: Tuple[str, ...]
    parents: Tuple[int, ...]
    joint_types: Tuple[int, ...]
    axes: torch.Tensor
    placements: torch.Tensor
    inertias: torch.Tensor
    link_names: Tuple[str, ...]
    link_bodies: Tuple[int, ...]
    link_offsets: torch.Tensor
    joint_limits: JointLimits
    damping: torch.Tensor
    friction: torch.Tensor
    gravity: torch.Tensor
    _cache: Dict[Tuple[torch.dtype, torch.device], _Constants] = field(
        default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def n_dof(self) -> int:
        """Return the number of moving joints."""
        return len(self.joint_names)

    @property
    def root_link(self) -> str:
        """Return the name of the fixed base link."""
        return self.link_names[0]

    def link_index(self, link: str) -> int:
        """Return the index of `link` in `link_names`, or raise naming the known links."""
        try:
            return self.link_names.index(link)
        except ValueError:
            raise KeyError(f'unknown link {link!r} in robot {self.name!r}; known links: '
                           f'{", ".join(self.link_names)}') from None

    def joint_index(self, joint: str) -> int:
        """Return the index of moving joint `joint`, or raise naming the known joints."""
        try:
            return self.joint_names.index(joint)
        except ValueError:
            raise KeyError(f'unknown joint {joint!r} in robot {self.name!r}; moving joints: '
                           f'{", ".join(self.joint_names)}') from None

    def body_of_link(self, link: str) -> int:
        """Return the body index that carries `link` (-1 for links fixed to the base)."""
        return self.link_bodies[self.link_index(link)]

    def link_masses(self) -> torch.Tensor:
        """Return (n,) body masses [kg] including merged fixed links."""
        return self.inertias[:, 3, 3].clone()

    def params(self) -> DynamicsParams:
        """Return the URDF's own inertias, damping and friction as `DynamicsParams`."""
        return DynamicsParams(self.inertias, self.damping, self.friction)

    def constants(self, dtype: torch.dtype, device: torch.device) -> _Constants:
        """Return the model's constants as tensors of `dtype` on `device` (cached)."""
        key = (dtype, torch.device(device))
        found = self._cache.get(key)
        if found is not None:
            return found
        with self._lock:
            if key not in self._cache:
                self._cache[key] = self._build_constants(dtype, key[1])
            return self._cache[key]

    def _build_constants(self, dtype: torch.dtype, device: torch.device) -> _Constants:
        n = self.n_dof
        f64 = torch.float64
        axes = self.axes
        k = skew(axes)
        rot0 = self.placements[:, :3, :3]
        local_basis = torch.zeros(n, 4, 4, 3, dtype=f64)
        revolute = torch.tensor([t == JOINT_REVOLUTE for t in self.joint_types], dtype=f64)
        prismatic = 1.0 - revolute
        local_basis[:, :3, :3, 0] = rot0 @ k * revolute[:, None, None]
        local_basis[:, :3, :3, 1] = rot0 @ k @ k * revolute[:, None, None]
        local_basis[:, :3, 3, 2] = (rot0 @ axes[:, :, None])[..., 0] * prismatic[:, None]
        bottom = torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=f64).reshape(1, 1, 4)
        subtree = torch.zeros(n, n, dtype=f64)
        for j in range(n):
            i = j
            while i != ROOT:
                subtree[i, j] = 1.0
                i = self.parents[i]
        mass, com, inertia_com = inertial_parts(self.inertias)
        values = _Constants(
            local0=self.placements.reshape(n, 16, 1), local_basis=local_basis.reshape(n, 16, 3),
            revolute=revolute, revolute3=revolute[:, None], prismatic3=prismatic[:, None],
            axis=axes, bottom=bottom, subtree=subtree,
            subtree_t=subtree.T, strict=subtree - torch.eye(n, dtype=f64), subtree3=subtree,
            spatial_inertia=self.inertias, mass=mass[:, None], com=com,
            inertia_com=inertia_com, damping=self.damping, friction=self.friction,
            gravity_accel=torch.cat([torch.zeros(3, dtype=f64), -self.gravity]),
            link_offsets=self.link_offsets)
        batch_free = ('subtree', 'subtree_t', 'local0', 'local_basis')
        return _Constants(**{
            name: (value if name in batch_free else value[..., None]).to(
                dtype=dtype, device=device).contiguous()
            for name, value in values._asdict().items()})


def _safe_xml_bytes(source: Union[str, os.PathLike, bytes]) -> Tuple[bytes, str]:
    """Read the URDF text and reject DTDs and entities (billion-laughs, external entities)."""
    if isinstance(source, bytes):
        data, label = source, '<robot_description bytes>'
    elif isinstance(source, str) and source.lstrip().startswith('<'):
        data, label = source.encode('utf-8'), '<robot_description string>'
    else:
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise FileNotFoundError(f'URDF file not found: {path}')
        with open(path, 'rb') as handle:
            data = handle.read()
        label = path
    try:
        defusedxml.ElementTree.fromstring(data, forbid_dtd=True, forbid_entities=True,
                                          forbid_external=True)
    except defusedxml.DefusedXmlException as error:
        raise URDFError(f'{label}: refused unsafe XML ({type(error).__name__}: {error}); '
                        'URDFs must not declare a DTD or entities') from None
    except defusedxml.ElementTree.ParseError as error:
        raise URDFError(f'{label}: malformed XML: {error}') from None
    return data, label


def _check_inertial(link: yourdfpy.Link, label: str, moves: bool
                    ) -> Optional[Tuple[float, np.ndarray, np.ndarray]]:
    """
    Return (mass, com, inertia about com in the link frame) or None if absent.

    Every value must be finite. Physical consistency is checked only for links that move:
    links fixed to the base never enter the dynamics, and many real URDFs give a fixed base
    a zero mass with a non-zero inertia (Pinocchio loads those too).
    """
    inertial = link.inertial
    if inertial is None or inertial.mass is None:
        return None
    mass = float(inertial.mass)
    origin = inertial.origin if inertial.origin is not None else np.eye(4)
    inertia = inertial.inertia if inertial.inertia is not None else np.zeros((3, 3))
    if not np.all(np.isfinite(inertia)) or not np.isfinite(mass) \
            or not np.all(np.isfinite(origin)):
        raise URDFError(f'{label}: link {link.name!r} has a non-finite inertial')
    if not moves:
        return None
    if mass < 0.0:
        raise URDFError(f'{label}: link {link.name!r} has negative mass {mass}')
    rot = origin[:3, :3]
    inertia_link = rot @ inertia @ rot.T
    if mass > 0.0:
        eig = np.linalg.eigvalsh(0.5 * (inertia + inertia.T))
        tol = 1e-12 * max(1.0, float(np.abs(eig).max()))
        if eig.min() <= 0.0:
            raise URDFError(f'{label}: link {link.name!r} inertia is not positive definite '
                            f'(eigenvalues {eig.tolist()})')
        if 2.0 * eig.max() > eig.sum() + tol:
            raise URDFError(f'{label}: link {link.name!r} inertia violates the triangle '
                            f'inequality (principal moments {eig.tolist()})')
    elif np.abs(inertia).max() > 0.0:
        raise URDFError(f'{label}: link {link.name!r} has zero mass but non-zero inertia')
    return mass, origin[:3, 3].copy(), inertia_link


def _add_joint(joint: yourdfpy.Joint, label: str, types: List[int], axes: List[np.ndarray],
               lower: List[float], upper: List[float], velocity: List[float],
               effort: List[float], damping: List[float], friction: List[float]) -> None:
    """Append a moving joint's type, unit axis, limits and dynamics, validating each."""
    axis = np.asarray(joint.axis if joint.axis is not None else (1.0, 0.0, 0.0),
                      dtype=np.float64)
    norm = float(np.linalg.norm(axis))
    if not np.all(np.isfinite(axis)) or norm < 1e-9:
        raise URDFError(f'{label}: joint {joint.name!r} has a zero or invalid axis '
                        f'{axis.tolist()}')
    types.append(_MOVING_TYPES[joint.type])
    axes.append(axis / norm)
    limit = joint.limit
    bounded = joint.type != 'continuous' and limit is not None
    lower.append(float(limit.lower) if bounded and limit.lower is not None else -np.inf)
    upper.append(float(limit.upper) if bounded and limit.upper is not None else np.inf)
    velocity.append(float(limit.velocity) if limit is not None and limit.velocity is not None
                    else np.inf)
    effort.append(float(limit.effort) if limit is not None and limit.effort is not None
                  else np.inf)
    dyn = joint.dynamics
    damping.append(float(dyn.damping) if dyn is not None and dyn.damping else 0.0)
    friction.append(float(dyn.friction) if dyn is not None and dyn.friction else 0.0)
    if not (math.isfinite(damping[-1]) and math.isfinite(friction[-1])):
        raise URDFError(f'{label}: joint {joint.name!r} has non-finite damping or friction')
    if damping[-1] < 0.0 or friction[-1] < 0.0:
        raise URDFError(f'{label}: joint {joint.name!r} has negative damping or friction')
    if any(math.isnan(values[-1]) for values in (lower, upper, velocity, effort)):
        raise URDFError(f'{label}: joint {joint.name!r} has a NaN limit')
    if lower[-1] > upper[-1]:
        raise URDFError(f'{label}: joint {joint.name!r} has lower limit {lower[-1]} above '
                        f'upper limit {upper[-1]}')


def load_urdf(source: Union[str, os.PathLike, bytes],
              gravity: Sequence[float] = (0.0, 0.0, -9.81)) -> RobotModel:
    """
    Load a fixed-base `RobotModel` from a URDF file path or a `robot_description` string.

    Supports revolute, continuous, prismatic and fixed joints with any axis and origin in
    branching trees. Raises `URDFError` (a ValueError) naming the link or joint for unsafe XML,
    unsupported joint types, cycles, several roots, a moving body with no mass, or an inertia
    that is not physically consistent.
    """
    data, label = _safe_xml_bytes(source)
    try:
        robot = yourdfpy.URDF.load(io.BytesIO(data), build_scene_graph=False,
                                   load_meshes=False, load_collision_meshes=False).robot
    except Exception as error:  # yourdfpy raises bare KeyError/AttributeError on bad trees
        raise URDFError(f'{label}: cannot parse URDF: {type(error).__name__}: {error}') from None
    links = {link.name: link for link in robot.links}
    if len(links) != len(robot.links):
        raise URDFError(f'{label}: duplicate link names')
    children: Dict[str, List[yourdfpy.Joint]] = {name: [] for name in links}
    parent_joint: Dict[str, yourdfpy.Joint] = {}
    for joint in robot.joints:
        if joint.type not in _SUPPORTED_TYPES:
            raise URDFError(f'{label}: joint {joint.name!r} has unsupported type '
                            f'{joint.type!r} (supported: {", ".join(sorted(_SUPPORTED_TYPES))})')
        if joint.mimic is not None:
            raise URDFError(f'{label}: joint {joint.name!r} is a mimic joint (not supported)')
        for end in (joint.parent, joint.child):
            if end not in links:
                raise URDFError(f'{label}: joint {joint.name!r} refers to unknown link {end!r}')
        if joint.child in parent_joint:
            raise URDFError(f'{label}: link {joint.child!r} is the child of two joints '
                            f'({parent_joint[joint.child].name!r}, {joint.name!r}): '
                            'the joints form a cycle or a closed chain')
        parent_joint[joint.child] = joint
        children[joint.parent].append(joint)
    roots = [name for name in links if name not in parent_joint]
    if len(roots) != 1:
        if not roots:
            raise URDFError(f'{label}: no root link: the joints form a cycle')
        raise URDFError(f'{label}: several root links {roots}: the URDF is not one tree')
    root = roots[0]

    joint_names: List[str] = []
    parents: List[int] = []
    types: List[int] = []
    axes: List[np.ndarray] = []
    placements: List[np.ndarray] = []
    inertias: List[np.ndarray] = []
    lower: List[float] = []
    upper: List[float] = []
    velocity: List[float] = []
    effort: List[float] = []
    damping: List[float] = []
    friction: List[float] = []
    link_names: List[str] = []
    link_bodies: List[int] = []
    link_offsets: List[np.ndarray] = []
    body_has_mass: List[bool] = []

    # Depth-first pre-order walk in URDF child order: every body's parent is numbered first.
    stack: List[Tuple[str, int, np.ndarray, Optional[yourdfpy.Joint]]] = [
        (root, ROOT, np.eye(4), None)]
    visited = set()
    while stack:
        link_name, body, offset, joint = stack.pop()
        if link_name in visited:
            raise URDFError(f'{label}: link {link_name!r} reached twice: cycle in the joints')
        visited.add(link_name)
        if joint is not None:
            parents.append(body)
            body = len(joint_names)
            joint_names.append(joint.name)
            placements.append(offset)
            offset = np.eye(4)
            _add_joint(joint, label, types, axes, lower, upper, velocity, effort, damping,
                       friction)
            inertias.append(np.zeros((6, 6)))
            body_has_mass.append(False)
        link_names.append(link_name)
        link_bodies.append(body)
        link_offsets.append(offset)
        inertial = _check_inertial(links[link_name], label, moves=body != ROOT)
        if inertial is not None and inertial[0] > 0.0:
            inertias[body] = inertias[body] + _shift_inertia(*inertial, offset)
            body_has_mass[body] = True
        for child in reversed(children[link_name]):
            origin = child.origin if child.origin is not None else np.eye(4)
            if not np.all(np.isfinite(origin)):
                raise URDFError(f'{label}: joint {child.name!r} has a non-finite origin')
            moving = None if child.type == 'fixed' else child
            stack.append((child.child, body, offset @ origin, moving))
    if len(visited) != len(links):
        missing = sorted(set(links) - visited)
        raise URDFError(f'{label}: links {missing} are not connected to root {root!r}')
    for index, has_mass in enumerate(body_has_mass):
        if not has_mass:
            child = next(j.child for j in robot.joints if j.name == joint_names[index])
            raise URDFError(f'{label}: moving link {child!r} (joint {joint_names[index]!r}) has '
                            'a missing or zero mass; give it a positive <inertial> mass')
    if not joint_names:
        raise URDFError(f'{label}: robot {robot.name!r} has no moving joints')
    if len(gravity) != 3 or not all(math.isfinite(float(g)) for g in gravity):
        raise URDFError(f'{label}: gravity must be three finite values, got {list(gravity)}')

    def tensor(values: Sequence) -> torch.Tensor:
        return torch.tensor(np.asarray(values, dtype=np.float64))

    return RobotModel(
        name=robot.name, joint_names=tuple(joint_names), parents=tuple(parents),
        joint_types=tuple(types), axes=tensor(axes), placements=tensor(placements),
        inertias=tensor(inertias), link_names=tuple(link_names),
        link_bodies=tuple(link_bodies), link_offsets=tensor(link_offsets),
        joint_limits=JointLimits(tensor(lower), tensor(upper), tensor(velocity),
                                 tensor(effort)),
        damping=tensor(damping), friction=tensor(friction),
        gravity=torch.tensor([float(g) for g in gravity], dtype=torch.float64))
