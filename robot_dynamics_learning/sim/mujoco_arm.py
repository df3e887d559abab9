"""
An arm on an independent physics engine: MuJoCo loads our URDF and steps it under torque.

Why: `sim/arm.py` integrates the package's own rigid-body code, so a hybrid learner (that same
rigid body plus a residual) tested on it cannot reveal a modelling error. MuJoCo (its own
parser, its own recursive Newton-Euler / composite rigid body, constraint-based joint friction)
is the independent world, and it differs from the URDF the learner is given by
`MujocoArmConfig`: per-joint dry friction (`frictionloss`, N m), viscous damping (N m s/rad),
rotor armature (kg m^2, added to the mass matrix diagonal) and a payload at the flange whose
mass (kg) and centre of mass (m, flange frame; a 5 cm solid sphere) change at run time.

The ros2_control effort-controller contract (`nodes/mujoco_arm.py`): `command(tau)` takes one
torque vector (N m, URDF joint order), refuses it when it has the wrong size or a non-finite
entry (counted, the previous command stays), clips it to the URDF's `<limit effort>` (counted)
and holds it for at most `command_timeout_s` of simulated time; then the arm gets zero torque
or a damping brake tau = -brake_damping qd (`timeout_action`). `step()` advances
`timestep` (1 ms) with the applied torque in `qfrc_applied`; `applied` is what a JointState's
effort reports.
"""
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple

import mujoco
import numpy as np
from robot_dynamics_learning.params import check_ranges, setting
from robot_dynamics_learning.resources import resource

TIMEOUT_ACTIONS = ('zero', 'damping')
PAYLOAD_RADIUS_M = 0.05   # the payload is a solid sphere: inertia 2/5 m r^2 about its centre


def _floats(*values: float) -> Tuple[float, ...]:
    return tuple(float(v) for v in values)


@dataclass(frozen=True)
class MujocoArmConfig:
    """
    The simulated world; per-joint tuples have one entry per moving joint (URDF order).

    Friction, damping and armature are what the URDF does not model (the defaults: a
    Panda-like gear train).
    """

    urdf: str = setting('', 'arm URDF path (empty: the package urdf/panda.urdf)')
    flange: str = setting('', 'body the payload is fixed to (empty: the last body)')
    timestep: float = setting(1e-3, 'simulation step and publish period (s)', 1e-4, 0.01)
    friction: Tuple[float, ...] = setting(_floats(0.8, 0.8, 0.6, 0.6, 0.3, 0.2, 0.2),
                                          'dry (Coulomb) joint friction, N m')
    damping: Tuple[float, ...] = setting(_floats(0.5, 0.5, 0.3, 0.3, 0.15, 0.1, 0.1),
                                         'viscous joint damping, N m s/rad')
    armature: Tuple[float, ...] = setting(_floats(0.3, 0.3, 0.2, 0.2, 0.05, 0.03, 0.03),
                                          'rotor inertia at each joint, kg m^2')
    payload_mass: float = setting(0.0, 'payload at the flange (kg); may change at run time',
                                  0.0, 50.0, dynamic=True)
    payload_com: Tuple[float, ...] = setting((0.0, 0.0, 0.05), 'payload centre of mass in '
                                             'the flange frame (m)')
    command_timeout_s: float = setting(0.05, 'a command is held this long (simulated s), then '
                                       'timeout_action applies', 0.0, 10.0)
    timeout_action: str = setting('damping', f'one of {TIMEOUT_ACTIONS}: zero torque or a '
                                  'damping brake')
    brake_damping: float = setting(20.0, 'damping of the timeout brake, N m s/rad (every '
                                   'joint)', 0.0, 1000.0)

    def __post_init__(self) -> None:
        """Reject values that cannot work, naming them."""
        check_ranges(self)
        for name in ('friction', 'damping', 'armature'):
            values = np.asarray(getattr(self, name), dtype=float)
            if values.ndim != 1 or not np.all(np.isfinite(values)) or np.any(values < 0):
                raise ValueError(f'{name} must be finite values >= 0, got {getattr(self, name)}')
        if self.timeout_action not in TIMEOUT_ACTIONS:
            raise ValueError(f'timeout_action must be one of {TIMEOUT_ACTIONS}, got '
                             f'{self.timeout_action!r}')
        _check_payload(self.payload_mass, self.payload_com)


def _check_payload(mass: float, com: Tuple[float, ...]) -> None:
    if not (np.isfinite(mass) and mass >= 0):
        raise ValueError(f'payload mass must be finite and >= 0 kg, got {mass}')
    if len(com) != 3 or not np.all(np.isfinite(com)):
        raise ValueError(f'payload centre of mass must be 3 finite values (m), got {com}')


class ArmState(NamedTuple):
    """Simulated time (s), q (rad), qd (rad/s) and the applied torque (N m), each (n,)."""

    time: float
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray


class MujocoArm:
    """
    One MuJoCo arm under torque control. Not thread-safe: the node serialises calls.

    Counters (`counts`): commands accepted, rejected_size, rejected_non_finite, clipped
    (accepted commands with at least one entry at a limit), timeouts (times the held command
    expired), timeout_steps (steps under the timeout action), steps.
    """

    def __init__(self, config: MujocoArmConfig = MujocoArmConfig()) -> None:
        self.config = config
        path = Path(config.urdf) if config.urdf else resource('urdf/panda.urdf')
        spec = mujoco.MjSpec.from_file(str(path))
        # Keep fixed-joint links as bodies: the flange exists to carry the payload body.
        spec.compiler.fusestatic = False
        flange = spec.body(config.flange) if config.flange else spec.bodies[-1]
        if flange is None:
            raise ValueError(f'flange body {config.flange!r} not in {path}')
        self.flange = flange.name
        flange.add_body(name='rdl_payload', pos=[0.0, 0.0, 0.0], mass=0.0,
                        inertia=[0.0, 0.0, 0.0])
        self.model = spec.compile()
        model = self.model
        model.opt.timestep = config.timestep
        model.opt.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
        self.joint_names: List[str] = [model.joint(j).name for j in range(model.njnt)]
        n = len(self.joint_names)
        if model.nv != n or np.any(model.jnt_type != mujoco.mjtJoint.mjJNT_HINGE):
            raise ValueError(f'{path}: only revolute joints are supported, got joint types '
                             f'{list(model.jnt_type)}')
        if not np.all(model.jnt_actfrclimited):
            raise ValueError(f'{path}: every joint needs <limit effort=...> (torque clipping)')
        self.effort_limit = model.jnt_actfrcrange[:, 1].copy()
        for name in ('friction', 'damping', 'armature'):
            if len(getattr(config, name)) != n:
                raise ValueError(f'{name} has {len(getattr(config, name))} entries for {n} '
                                 f'joints {self.joint_names}')
        model.dof_frictionloss[:] = config.friction
        model.dof_damping[:] = config.damping
        model.dof_armature[:] = config.armature
        self._payload_body = model.body('rdl_payload').id
        self.data = mujoco.MjData(model)
        self.counts: Dict[str, int] = dict.fromkeys(
            ('steps', 'commands', 'rejected_size', 'rejected_non_finite', 'clipped', 'timeouts',
             'timeout_steps'), 0)
        self._command = np.zeros(n)
        self._command_time = -np.inf
        self._timed_out = True   # no command yet: the timeout action applies
        self.applied = np.zeros(n)
        self.payload: Tuple[float, Tuple[float, ...]] = (0.0, (0.0, 0.0, 0.0))
        self.set_payload(config.payload_mass, config.payload_com)
        mujoco.mj_forward(model, self.data)

    @property
    def n_dof(self) -> int:
        """Return the number of joints."""
        return len(self.joint_names)

    @property
    def timed_out(self) -> bool:
        """Return True while no command is held (none yet, or the last one expired)."""
        return self._timed_out

    @property
    def time(self) -> float:
        """Return the simulated time in seconds."""
        return float(self.data.time)

    def reset(self, position: np.ndarray, velocity: Optional[np.ndarray] = None) -> None:
        """Put the arm at q (rad), qd (rad/s; default 0), time 0, no command held."""
        for name, value in (('position', position), ('velocity', velocity)):
            if value is not None and np.shape(value) != (self.n_dof,):
                raise ValueError(f'initial {name} needs {self.n_dof} values '
                                 f'{self.joint_names}, got {np.shape(value)}')
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[:] = position
        self.data.qvel[:] = 0.0 if velocity is None else velocity
        self._command[:] = 0.0
        self._command_time = -np.inf
        self._timed_out = True
        self.applied[:] = 0.0
        mujoco.mj_forward(self.model, self.data)

    def set_payload(self, mass: float, com: Optional[Tuple[float, ...]] = None) -> None:
        """Change the payload at the flange from the next step on (kg; m in the flange frame)."""
        com = tuple(float(c) for c in (self.config.payload_com if com is None else com))
        _check_payload(mass, com)
        model, body = self.model, self._payload_body
        model.body_mass[body] = mass
        model.body_inertia[body] = 0.4 * mass * PAYLOAD_RADIUS_M ** 2
        model.body_ipos[body] = com
        # The compiler marked the massless body's inertial frame as its own frame
        # (body_sameframe); with an offset centre of mass that shortcut would drop the offset.
        model.body_sameframe[body] = mujoco.mjtSameFrame.mjSAMEFRAME_NONE
        self.payload = (float(mass), com)

    def command(self, torque: np.ndarray) -> bool:
        """Hold `torque` (n,) N m from now on, clipped; return False (counted) if refused."""
        torque = np.asarray(torque, dtype=np.float64)
        if torque.shape != (self.n_dof,):
            self.counts['rejected_size'] += 1
            return False
        if not np.all(np.isfinite(torque)):
            self.counts['rejected_non_finite'] += 1
            return False
        clipped = np.clip(torque, -self.effort_limit, self.effort_limit)
        if np.any(clipped != torque):
            self.counts['clipped'] += 1
        self.counts['commands'] += 1
        self._command = clipped
        self._command_time = self.time
        self._timed_out = False
        return True

    def _torque(self) -> np.ndarray:
        """Return the torque of the next step: the held command, or the timeout action."""
        if self.time - self._command_time <= self.config.command_timeout_s:
            return self._command
        if not self._timed_out:
            self._timed_out = True
            self.counts['timeouts'] += 1
        self.counts['timeout_steps'] += 1
        if self.config.timeout_action == 'zero':
            return np.zeros(self.n_dof)
        brake = -self.config.brake_damping * self.data.qvel
        return np.clip(brake, -self.effort_limit, self.effort_limit)

    def step(self) -> ArmState:
        """Advance one timestep under the applied torque; return the new state."""
        self.applied = self._torque()
        self.data.qfrc_applied[:] = self.applied
        mujoco.mj_step(self.model, self.data)
        self.counts['steps'] += 1
        if not (np.all(np.isfinite(self.data.qpos)) and np.all(np.isfinite(self.data.qvel))):
            raise FloatingPointError(f'MuJoCo arm diverged at t = {self.time:.3f} s')
        return self.state()

    def state(self) -> ArmState:
        """Return copies of the current state, with the torque applied in the last step."""
        return ArmState(self.time, self.data.qpos.copy(), self.data.qvel.copy(),
                        self.applied.copy())
