"""
7-DoF arm simulator: rigid-body dynamics (ABA) plus what the nominal model does not know.

The arm of `urdf/panda.urdf` is integrated with `robot_dynamics_learning.dynamics.aba` and
these unmodelled effects, so a learner has something real to learn beyond the rigid body:

- series elastic joints: a motor of reflected inertia B drives the link through a spring K
  with damping D (Spong's flexible-joint model):
      B thdd = u - tau_s - f(thd),   tau_s = K (th - q) + D (thd - qd),
      M(q) qdd + h(q, qd) = tau_s        (ABA on the true model, payload included);
- Stribeck plus viscous friction on the motor side (smooth sign via tanh):
      f(v) = (Fc + (Fs - Fc) exp(-(v / vs)^2)) tanh(v / v_eps) + Fv v;
- a payload at the flange whose mass and centre of mass can change at run time (a rigidly
  attached extra body; the true model is rebuilt from the URDF text with it);
- sensor noise on position, velocity and effort (Gaussian, injected generator).

A tracking controller follows `sim.trajectories` references: nominal feedforward (RNEA of the
nominal model on the reference, batched per block, plus motor inertia) and PD on the motor
angle with spring-deflection compensation. The measured effort is the motor torque u (as a
current-based torque estimate); it equals M qdd + h + B thdd + f + ..., so the nominal model
misses friction, motor inertia, elasticity and payload.

Vectorised: `batch` arms in parallel; per step one ABA call plus a few (batch, n) array ops,
and the feedforward for a whole block in one RNEA call. Integration: semi-implicit Euler with
`ArmConfig.euler_steps` per sample (steps of at most 1 ms). Units SI; time in seconds.
"""
from dataclasses import dataclass, field
import math
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple
import xml.etree.ElementTree as ElementTree

from defusedxml import ElementTree as SafeElementTree
import numpy as np
from robot_dynamics_learning.dynamics import aba, crba, load_urdf, rnea
from robot_dynamics_learning.resources import resource
from robot_dynamics_learning.sim.trajectories import JointReference, ReferenceConfig
import torch


def find_urdf(name: str = 'panda.urdf') -> Path:
    """Return a URDF shipped with the package (source tree, else the installed share folder)."""
    return resource(f'urdf/{name}')


def _seven(*values: float) -> Tuple[float, ...]:
    return tuple(float(v) for v in values)


@dataclass(frozen=True)
class ArmConfig:
    """
    Physical and numerical settings of the simulated arm (per-joint tuples have n entries).

    urdf: URDF path ('' = urdf/panda.urdf). dt: sample period (s; 1 kHz by default). substeps:
    Euler steps per sample, raised to keep steps of at most max_step_s (the elastic joints
    diverged within 2 s at 2 ms steps, e.g. sampling at 500 Hz): `euler_steps`. integrator:
    'aba' (one ABA call per substep, the reference) or 'block' (mass matrix and bias batched
    per block, see `run`: about four torch calls per block instead of one per substep, for real
    time); corrections: its correction passes. coulomb, static, viscous: friction Fc, Fs (N m),
    Fv (N m s/rad); stribeck_velocity vs and friction_smoothing v_eps (rad/s). stiffness K (N
    m/rad), spring_damping D (N m s/rad), motor_inertia B (kg m^2, reflected). kp (N m/rad), kd
    (N m s/rad): PD gains on the motor angle. noise_*: standard deviations of position (rad),
    velocity (rad/s) and effort (N m) noise. payload_mass (kg), payload_com (m, flange frame).
    seed: noise. reference: the trajectory to track.
    """

    urdf: str = ''
    dt: float = 1e-3
    substeps: int = 1
    max_step_s: float = 1e-3
    integrator: str = 'block'
    corrections: int = 1
    coulomb: Tuple[float, ...] = _seven(0.8, 0.8, 0.6, 0.6, 0.3, 0.2, 0.2)
    static: Tuple[float, ...] = _seven(1.2, 1.2, 0.9, 0.9, 0.45, 0.3, 0.3)
    viscous: Tuple[float, ...] = _seven(0.5, 0.5, 0.3, 0.3, 0.15, 0.1, 0.1)
    stribeck_velocity: float = 0.05
    friction_smoothing: float = 0.01
    stiffness: Tuple[float, ...] = _seven(6000, 6000, 4000, 4000, 1500, 800, 600)
    spring_damping: Tuple[float, ...] = _seven(15, 15, 10, 10, 3, 1.0, 0.5)
    motor_inertia: Tuple[float, ...] = _seven(0.4, 0.4, 0.25, 0.25, 0.08, 0.04, 0.04)
    kp: Tuple[float, ...] = _seven(800, 800, 500, 500, 120, 60, 40)
    kd: Tuple[float, ...] = _seven(40, 40, 25, 25, 6, 3, 2)
    noise_position: float = 1e-4
    noise_velocity: float = 2e-3
    noise_effort: float = 0.05
    payload_mass: float = 0.0
    payload_com: Tuple[float, float, float] = (0.0, 0.0, 0.05)
    seed: int = 0
    reference: ReferenceConfig = field(default_factory=ReferenceConfig)

    def __post_init__(self) -> None:
        """Reject values that cannot work, naming them."""
        if not self.dt > 0:
            raise ValueError(f'dt must be > 0, got {self.dt}')
        if self.integrator not in ('aba', 'block'):
            raise ValueError(f"integrator must be 'aba' or 'block', got {self.integrator!r}")
        if self.corrections < 0:
            raise ValueError(f'corrections must be >= 0, got {self.corrections}')
        if self.substeps < 1:
            raise ValueError(f'substeps must be >= 1, got {self.substeps}')
        if not self.max_step_s > 0:
            raise ValueError(f'max_step_s must be > 0, got {self.max_step_s}')
        for name in ('stiffness', 'motor_inertia'):
            if min(getattr(self, name)) <= 0:
                raise ValueError(f'{name} must be > 0 for every joint, got {getattr(self, name)}')
        for name in ('coulomb', 'static', 'viscous', 'spring_damping', 'kp', 'kd'):
            if min(getattr(self, name)) < 0:
                raise ValueError(f'{name} must be >= 0, got {getattr(self, name)}')
        for name in ('noise_position', 'noise_velocity', 'noise_effort', 'payload_mass'):
            if getattr(self, name) < 0:
                raise ValueError(f'{name} must be >= 0, got {getattr(self, name)}')
        for name in ('stribeck_velocity', 'friction_smoothing'):
            if not getattr(self, name) > 0:
                raise ValueError(f'{name} must be > 0, got {getattr(self, name)}')
        if len(self.payload_com) != 3:
            raise ValueError(f'payload_com must have 3 entries, got {self.payload_com}')

    @property
    def euler_steps(self) -> int:
        """Return the Euler steps per sample: `substeps`, more if dt / substeps > max_step_s."""
        return max(self.substeps, math.ceil(self.dt / self.max_step_s - 1e-9))


def urdf_with_payload(urdf_text: str, mass: float, com: Tuple[float, float, float],
                      parent_link: str) -> str:
    """
    Return URDF text with a payload body fixed to `parent_link` (mass kg at com m).

    The payload is a solid sphere of radius 5 cm (inertia 2/5 m r^2); the loader merges fixed
    joints into the parent's inertia, so the true model sees the combined flange body.
    """
    root = SafeElementTree.fromstring(urdf_text)
    if mass <= 0:
        return urdf_text
    if root.find(f"link[@name='{parent_link}']") is None:
        raise ValueError(f'payload parent link {parent_link!r} not in the URDF')
    inertia = 0.4 * mass * 0.05 ** 2
    link = ElementTree.SubElement(root, 'link', name='sim_payload')
    inertial = ElementTree.SubElement(link, 'inertial')
    ElementTree.SubElement(inertial, 'origin', xyz=' '.join(str(float(c)) for c in com),
                           rpy='0 0 0')
    ElementTree.SubElement(inertial, 'mass', value=str(float(mass)))
    ElementTree.SubElement(inertial, 'inertia', ixx=str(inertia), iyy=str(inertia),
                           izz=str(inertia), ixy='0', ixz='0', iyz='0')
    joint = ElementTree.SubElement(root, 'joint', name='sim_payload_joint', type='fixed')
    ElementTree.SubElement(joint, 'parent', link=parent_link)
    ElementTree.SubElement(joint, 'child', link='sim_payload')
    ElementTree.SubElement(joint, 'origin', xyz='0 0 0', rpy='0 0 0')
    return ElementTree.tostring(root, encoding='unicode')


def _flange_link(urdf_text: str, joint_names: List[str]) -> str:
    """Return the tip link: the last movable joint's child, then down fixed joints."""
    joints = SafeElementTree.fromstring(urdf_text).findall('joint')
    link = next((j.find('child').get('link') for j in joints
                 if j.get('name') == joint_names[-1]), None)
    if link is None:
        raise ValueError(f'joint {joint_names[-1]!r} not found in the URDF')
    fixed = {j.find('parent').get('link'): j.find('child').get('link') for j in joints
             if j.get('type') == 'fixed'}
    while link in fixed:
        link = fixed[link]
    return link


class ArmSamples(NamedTuple):
    """
    A block of simulated samples: time (T,) s; the rest (T, batch, n).

    position, velocity, effort: what the sensors report (noisy); acceleration: the true link
    acceleration (for oracles and tests, not published); command: the motor torque u.
    """

    time: np.ndarray
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray
    acceleration: np.ndarray
    command: np.ndarray


class ArmSimulator:
    """
    `batch` independent arms following the same reference, stepped together.

    Not thread-safe: one owner calls `run` and `set_payload` (the node does so from its
    simulation thread).
    """

    def __init__(self, config: ArmConfig = ArmConfig(), batch: int = 1) -> None:
        self.config = config
        path = Path(config.urdf) if config.urdf else find_urdf()
        self._urdf_text = path.read_text()
        self.nominal = load_urdf(self._urdf_text)
        self.joint_names = list(self.nominal.joint_names)
        n = len(self.joint_names)
        for name in ('coulomb', 'static', 'viscous', 'stiffness', 'spring_damping',
                     'motor_inertia', 'kp', 'kd'):
            if len(getattr(config, name)) != n:
                raise ValueError(f'{name} has {len(getattr(config, name))} entries for {n} '
                                 f'joints')
        self._flange = _flange_link(self._urdf_text, self.joint_names)
        self._models: Dict[Tuple[float, Tuple[float, ...]], object] = {}
        self.batch = batch
        self._rng = np.random.default_rng(config.seed)
        lower, upper = (np.asarray(limit, dtype=np.float64) for limit in
                        (self.nominal.joint_limits.lower, self.nominal.joint_limits.upper))
        self.reference = JointReference(lower, upper, config.reference)
        arrays = {name: np.asarray(getattr(config, name), dtype=np.float64) for name in
                  ('coulomb', 'static', 'viscous', 'stiffness', 'spring_damping',
                   'motor_inertia', 'kp', 'kd')}
        self._p = arrays
        self.time = 0.0
        q0, qd0, _ = self.reference(np.array([0.0]))
        tau0 = self._nominal_rnea(q0, np.zeros_like(q0), np.zeros_like(q0))
        self.q = np.repeat(q0, batch, axis=0)
        self.qd = np.zeros((batch, n))
        self.th = self.q + np.repeat(tau0, batch, axis=0) / arrays['stiffness']
        self.thd = np.zeros((batch, n))
        self.set_payload(config.payload_mass, config.payload_com)

    @property
    def n_dof(self) -> int:
        """Return the number of joints."""
        return len(self.joint_names)

    @property
    def payload(self) -> Tuple[float, Tuple[float, ...]]:
        """Return the current payload: mass (kg) and centre of mass (m)."""
        return self._payload

    def set_payload(self, mass: float, com: Optional[Tuple[float, ...]] = None) -> None:
        """Change the payload at the flange from the next step on (mass >= 0 kg)."""
        if not np.isfinite(mass) or mass < 0:
            raise ValueError(f'payload mass must be finite and >= 0, got {mass}')
        com = tuple(float(c) for c in (self.config.payload_com if com is None else com))
        if len(com) != 3 or not np.all(np.isfinite(com)):
            raise ValueError(f'payload centre of mass must be 3 finite values, got {com}')
        key = (float(mass), com)
        if key not in self._models:
            self._models[key] = load_urdf(urdf_with_payload(self._urdf_text, mass, com,
                                                            self._flange))
        self._true = self._models[key]
        self._payload = key

    def _nominal_rnea(self, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray) -> np.ndarray:
        as_tensor = (torch.from_numpy(np.ascontiguousarray(v)) for v in (q, qd, qdd))
        return rnea(self.nominal, *as_tensor).numpy()

    def _friction(self, velocity: np.ndarray) -> np.ndarray:
        p = self._p
        level = p['coulomb'] + (p['static'] - p['coulomb']) * np.exp(
            -(velocity / self.config.stribeck_velocity) ** 2)
        return (level * np.tanh(velocity / self.config.friction_smoothing)
                + p['viscous'] * velocity)

    def _mass_and_bias(self, q: np.ndarray, qd: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Return M(q)^-1 (..., n, n) and h(q, qd) (..., n) of the true model, batched."""
        q_t, qd_t = torch.from_numpy(q), torch.from_numpy(qd)
        mass = crba(self._true, q_t)
        bias = rnea(self._true, q_t, qd_t, torch.zeros_like(q_t))
        return torch.linalg.inv(mass).numpy(), bias.numpy()

    def _integrate(self, u_ff: np.ndarray, th_ref: np.ndarray, qd_ref: np.ndarray,
                   dynamics) -> Dict[str, np.ndarray]:
        """
        Run the controller and semi-implicit Euler over one block from the current state.

        u_ff, th_ref, qd_ref: (steps, n) feedforward torque, motor-angle and velocity
        references. The PD command u is computed once per sample from the motor state at the
        sample's start. dynamics(j, q, qd, tau_s) -> qdd for substep j. Returns per-sample q,
        qd, qdd, u, the states visited per substep (for re-evaluation) and the end state;
        nothing is committed.
        """
        c, p = self.config, self._p
        steps, sub = u_ff.shape[0], c.euler_steps
        h = c.dt / sub
        q, qd, th, thd = self.q, self.qd, self.th, self.thd
        shape = (steps,) + q.shape
        out = {name: np.empty(shape) for name in ('q', 'qd', 'qdd', 'u')}
        visited_q = np.empty((steps * sub,) + q.shape)
        visited_qd = np.empty_like(visited_q)
        for k in range(steps):
            u = u_ff[k] + p['kp'] * (th_ref[k] - th) + p['kd'] * (qd_ref[k] - thd)
            for i in range(sub):
                j = k * sub + i
                visited_q[j], visited_qd[j] = q, qd
                tau_s = p['stiffness'] * (th - q) + p['spring_damping'] * (thd - qd)
                qdd = dynamics(j, q, qd, tau_s)
                thdd = (u - tau_s - self._friction(thd)) / p['motor_inertia']
                qd = qd + h * qdd
                q = q + h * qd
                thd = thd + h * thdd
                th = th + h * thd
            out['q'][k], out['qd'][k], out['qdd'][k], out['u'][k] = q, qd, qdd, u
        out.update(visited_q=visited_q, visited_qd=visited_qd, end=(q, qd, th, thd))
        return out

    def run(self, steps: int) -> ArmSamples:
        """Simulate `steps` samples; return them (the state continues from the last one)."""
        if steps < 1:
            raise ValueError(f'steps must be >= 1, got {steps}')
        c, p = self.config, self._p
        times = self.time + c.dt * np.arange(1, steps + 1)
        q_ref, qd_ref, qdd_ref = self.reference(times)
        tau_ff = self._nominal_rnea(q_ref, qd_ref, qdd_ref)
        # Motor-side reference: link reference plus the spring deflection the torque needs.
        th_ref = q_ref + tau_ff / p['stiffness']
        u_ff = tau_ff + p['motor_inertia'] * qdd_ref
        if c.integrator == 'aba':
            true = self._true

            def dynamics(j, q, qd, tau_s):
                return aba(true, torch.from_numpy(q), torch.from_numpy(qd),
                           torch.from_numpy(tau_s)).numpy()
            result = self._integrate(u_ff, th_ref, qd_ref, dynamics)
        else:
            # Block integrator: M^-1 and h frozen at the block start for a predictor pass, then
            # evaluated in one batched call at every state the predictor visited, and the block
            # integrated again with them (each correction reduces the error by about the
            # relative change of M and h over the block).
            inverse, bias = self._mass_and_bias(self.q[None], self.qd[None])
            index = np.zeros(steps * c.euler_steps, dtype=np.intp)
            for correction in range(c.corrections + 1):
                if correction:
                    inverse, bias = self._mass_and_bias(result['visited_q'],
                                                        result['visited_qd'])
                    index = np.arange(steps * c.euler_steps)

                def dynamics(j, q, qd, tau_s, inverse=inverse, bias=bias, index=index):
                    return np.einsum('bij,bj->bi', inverse[index[j]], tau_s - bias[index[j]])
                result = self._integrate(u_ff, th_ref, qd_ref, dynamics)
        q, qd, th, thd = result['end']
        if not (np.isfinite(q).all() and np.isfinite(th).all()):
            raise FloatingPointError(f'arm simulation diverged at t = {times[-1]:.3f} s')
        self.q, self.qd, self.th, self.thd = q, qd, th, thd
        self.time = float(times[-1])
        noise = self._rng.normal
        u = result['u']
        return ArmSamples(
            times,
            result['q'] + noise(0.0, c.noise_position, u.shape),
            result['qd'] + noise(0.0, c.noise_velocity, u.shape),
            u + noise(0.0, c.noise_effort, u.shape),
            result['qdd'], u)
