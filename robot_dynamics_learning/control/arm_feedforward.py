"""
Feed-forward joint-torque control of the arm: PD on the tracking error plus an inverse model.

    tau = Kp (q_ref - q) + Kd (qd_ref - qd) + model(q_ref, qd_ref, qdd_ref)      (N m)

The model is the URDF rigid body (`RigidBodyFeedforward`, RNEA through the hybrid's
`FastRegressor`: Pinocchio when importable), the continual learner's newest checkpoint
(`LearnedFeedforward`, hot-reloaded as torque_predictor does) or none (PD only). As the model
learns the arm, the tracking error falls: tracking RMSE is what a learned model is worth in
control.

`ArmController` is the ROS-free core of nodes/arm_controller.py and of bench/arm_control.py
(one code path). Its reference (sim/trajectories.py) starts with a minimum-jerk approach of
`approach_s` (a quintic from the arm at rest to the trajectory's position, velocity and
acceleration at its start, so PD sees no step). Safety, as car_mpc: a state
stamped more than `stale_timeout_s` in the future is dropped, one older than that on arrival
too (counted); the watchdog sends zero torque while the newest state is stale, and control
resumes only from a state stamped after the brake, restarting with a new approach; a
non-finite torque is never sent (zero instead, counted); every command is clipped to the
effort limits (counted). Units: rad, rad/s, rad/s^2, N m; stamps integer nanoseconds.
"""
import collections
import copy
from dataclasses import dataclass, field
from pathlib import Path
import threading
from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np
from robot_dynamics_learning.core_types import SequenceBatch
from robot_dynamics_learning.data.loading import JOINT_VALUE_LIMIT
from robot_dynamics_learning.dynamics import load_urdf
from robot_dynamics_learning.learning.checkpoint import CheckpointDirectory
from robot_dynamics_learning.learning.continual import (InverseDynamicsStream, Published,
                                                        StreamingPredictor)
from robot_dynamics_learning.models.base import DynamicsModel
from robot_dynamics_learning.models.hybrid import FastRegressor
from robot_dynamics_learning.params import check_ranges, setting
from robot_dynamics_learning.signals.causal import CausalDifferentiator
from robot_dynamics_learning.sim.trajectories import JointReference, ReferenceConfig
import torch

FEEDFORWARD_MODES = ('none', 'urdf', 'learned')
# Checkpoint gate: the measured samples a new checkpoint is scored on (1.5 s at 1 kHz), scored
# in windows of GATE_WINDOW steps whose first GATE_WARMUP only warm the recurrent state up.
GATE_SAMPLES = 1500
GATE_WINDOW = 200
GATE_WARMUP = 20
# How far past its URDF limit a measured position may be (rad or m): overshoot and encoder
# calibration; farther is garbage, a units slip (degrees) or another joint.
POSITION_MARGIN = 0.2


def _floats(*values: float) -> Tuple[float, ...]:
    return tuple(float(v) for v in values)


@dataclass(frozen=True)
class ArmControllerConfig:
    """PD gains (the defaults suit the Panda at 1 kHz), approach, watchdog and reference."""

    kp: Tuple[float, ...] = setting(_floats(600, 600, 600, 600, 250, 150, 50),
                                    'proportional gains per joint (N m/rad)')
    kd: Tuple[float, ...] = setting(_floats(30, 30, 30, 30, 10, 10, 5),
                                    'derivative gains per joint (N m s/rad)')
    approach_s: float = setting(2.0, "move from the first state to the trajectory's start in "
                                'this time (s, minimum jerk)', 0.0, 60.0)
    stale_timeout_s: float = setting(0.05, 'zero torque when the newest state is older than '
                                     'this on the node clock (s)', 0.001, 5.0)
    reference: ReferenceConfig = field(default_factory=ReferenceConfig)

    def __post_init__(self) -> None:
        """Reject values that cannot work, naming them."""
        check_ranges(self)
        if len(self.kp) != len(self.kd):
            raise ValueError(f'kp and kd need one entry per joint, got {self.kp}, {self.kd}')
        for name in ('kp', 'kd'):
            if not all(np.isfinite(v) and v >= 0 for v in getattr(self, name)):
                raise ValueError(f'{name} must be finite and >= 0, got {getattr(self, name)}')


def quintic(t: float, duration: float, start: Sequence[np.ndarray], end: Sequence[np.ndarray]
            ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """
    Return p, v, a at t of the quintic joining (p, v, a) `start` at 0 to `end` at `duration`.

    The unique fifth-order polynomial meeting position, velocity and acceleration at both
    ends (per joint); t is clipped to [0, duration].
    """
    (p0, v0, a0), (p1, v1, a1), span = start, end, duration
    t = min(max(t, 0.0), span)
    dp = p1 - p0
    c3 = (20 * dp - (8 * v1 + 12 * v0) * span - (3 * a0 - a1) * span ** 2) / (2 * span ** 3)
    c4 = (-30 * dp + (14 * v1 + 16 * v0) * span + (3 * a0 - 2 * a1) * span ** 2) / (2 * span ** 4)
    c5 = (12 * dp - 6 * (v1 + v0) * span - (a0 - a1) * span ** 2) / (2 * span ** 5)
    position = p0 + t * (v0 + t * (a0 / 2 + t * (c3 + t * (c4 + t * c5))))
    velocity = v0 + t * (a0 + t * (3 * c3 + t * (4 * c4 + t * 5 * c5)))
    acceleration = a0 + t * (6 * c3 + t * (12 * c4 + t * 20 * c5))
    return position, velocity, acceleration


class Feedforward:
    """
    A model's torque for the reference: tau (n,) N m = f(t, q_ref, qd_ref, qdd_ref).

    t: s since the (re)start. `reset` is called when the reference restarts (after a brake);
    a feed-forward with state (a recurrent model, an acceleration fit) forgets it there.
    """

    def __call__(self, t: float, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray
                 ) -> np.ndarray:
        """Return tau (n,) N m for one reference sample."""
        raise NotImplementedError

    def reset(self) -> None:
        """Forget any state (the reference restarted); a stateless one keeps nothing."""


class FunctionFeedforward(Feedforward):
    """A stateless feed-forward from a function of (t, q, qd, qdd) (PD only, tests)."""

    def __init__(self, function: Callable[[float, np.ndarray, np.ndarray, np.ndarray],
                                          np.ndarray]) -> None:
        self.function = function

    def __call__(self, t: float, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray
                 ) -> np.ndarray:
        """Return the function's torque."""
        return self.function(t, q, qd, qdd)


no_feedforward = FunctionFeedforward(lambda t, q, qd, qdd: np.zeros_like(q))   # PD only


class RigidBodyFeedforward(Feedforward):
    """RNEA of the URDF as given (no friction, armature or payload): tau = Y(q, qd, qdd) phi."""

    def __init__(self, urdf: Path) -> None:
        robot = load_urdf(Path(urdf))
        self.joint_names = tuple(robot.joint_names)
        self._regressor = FastRegressor(robot, Path(urdf))

    def __call__(self, t: float, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray
                 ) -> np.ndarray:
        """Return tau (n,) N m for one reference sample."""
        return self._regressor(q, qd, qdd) @ self._regressor.phi


class LearnedFeedforward(Feedforward):
    """
    The newest checkpoint of `folder` stepped on the reference; `fallback` until one loads.

    `poll()` (a timer thread) loads a newer checkpoint and swaps it in between calls; the
    recurrent state is rebuilt on the recent reference inputs (`StreamingPredictor`, as the
    learner's own predictor does). Observation x = [q_ref, qd_ref, a]; the action (the
    previous torque, for models that use one) is the previous feed-forward output.
    a is the acceleration formed as the learner forms it: `differentiator` (the learner's
    causal fit, `accel_window` samples) on qd_ref, not the exact qdd_ref. Why: the model was
    fitted on that delayed estimate (its residual learned to make up for the delay); fed the
    exact acceleration, it tracked worse than the URDF alone at the trajectory's fastest
    changes (bench/arm_control.py, 26 Nov). qdd_ref stands in while the fit warms up.

    The checkpoint gate: a new checkpoint replaces the model in use only if its torque error
    (nMSE) on the last `gate_samples` measured samples (`observe`) is no larger. An online
    learner's snapshot can be fitted to the last second of motion and worse elsewhere
    (the hybrid's payload estimate also absorbs friction in phase with the reference): in
    closed loop on MuJoCo such snapshots raised the tracking error to 3-7 mrad for a second
    at a time, against 2.4 for the URDF model. Until `gate_samples` // 2 samples were
    observed (or when `observe` is never called, or with `gate_samples` 0) every newer
    checkpoint is used.
    """

    def __init__(self, folder: Path, joint_names: Sequence[str], fallback: Feedforward,
                 differentiator: CausalDifferentiator, history_size: int = 32,
                 gate_samples: int = GATE_SAMPLES) -> None:
        self.checkpoints = CheckpointDirectory(Path(folder))
        self.joint_names = list(joint_names)
        self.fallback = fallback
        self._differentiator = differentiator
        # The measured samples formed as the learner forms them (its own stream class).
        self._stream = InverseDynamicsStream(len(joint_names), copy.deepcopy(differentiator))
        self._history_size = history_size
        self._lock = threading.Lock()
        self._published: Optional[Published] = None
        self._predictor: Optional[StreamingPredictor] = None
        self._previous = np.zeros(len(joint_names))
        self._measured = collections.deque(maxlen=gate_samples)
        self.path: Optional[Path] = None
        self.loads = 0
        self.load_errors = 0
        self.refused = 0
        self.fallback_calls = 0

    def observe(self, t: float, q: np.ndarray, qd: np.ndarray, tau: np.ndarray) -> None:
        """Record one measured sample (s, rad, rad/s, N m) for the checkpoint gate."""
        sample = self._stream.sample(t, q, qd, np.asarray(tau, float))
        if sample is None:
            return
        row = np.concatenate(sample)
        if np.all(np.isfinite(row)):
            with self._lock:
                self._measured.append(row)

    def poll(self) -> Optional[str]:
        """Load the newest checkpoint if it is new and passes the gate; say what happened."""
        paths = self.checkpoints.paths()
        if not paths or paths[-1] == self.path:
            return None
        try:
            loaded = self.checkpoints.load_latest(self.joint_names)
        except (ValueError, FileNotFoundError, OSError) as error:
            self.load_errors += 1
            return f'checkpoint not loaded, keeping the current model: {error}'
        if loaded.path == self.path:   # the newest file was corrupt: still the same model
            return None
        model: DynamicsModel = loaded.model.eval()
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        current = self._source()
        with self._lock:
            measured = np.array(self._measured)
        if (current is not None and self._measured.maxlen
                and measured.shape[0] >= max(self._measured.maxlen // 2, GATE_WINDOW)):
            new_error, old_error = (_gate_error(m, measured, len(self.joint_names))
                                    for m in (model, current.model))
            if not new_error <= old_error:
                self.path = loaded.path
                self.refused += 1
                return (f'checkpoint {loaded.path.name} not used: nMSE {new_error:.4f} on the '
                        f'last {measured.shape[0]} measured samples, the model in use '
                        f'{old_error:.4f}')
        with self._lock:
            version = 1 if self._published is None else self._published.version + 1
            self._published = Published(version, model)
        self.path = loaded.path
        self.loads += 1
        return f"using checkpoint {loaded.path} (step {loaded.metadata.get('steps', '?')})"

    def _source(self) -> Published:
        with self._lock:
            return self._published

    def reset(self) -> None:
        """Forget the recurrent state and the acceleration fit (the reference restarted)."""
        self._differentiator.reset()
        if self._predictor is not None:
            self._predictor.reset()

    def __call__(self, t: float, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray
                 ) -> np.ndarray:
        """Return tau (n,) N m for one reference sample at t s."""
        estimate = self._differentiator.update(t, qd)
        published = self._source()
        if published is None:
            self.fallback_calls += 1
            return self.fallback(t, q, qd, qdd)
        if self._predictor is None:
            model = published.model
            self._predictor = StreamingPredictor(self._source, model.n_obs, model.n_act,
                                                 self._history_size)
        action = self._previous if published.model.n_act else None
        acceleration = qdd if estimate is None else estimate
        mean, _ = self._predictor.predict(np.concatenate([q, qd, acceleration]), action)
        self._previous = np.asarray(mean, dtype=np.float64)
        return self._previous


def _gate_error(model: DynamicsModel, measured: np.ndarray, n: int) -> float:
    """Return `model`'s torque nMSE (mean over joints) on rows [q, qd, a, tau_prev, tau]."""
    count = measured.shape[0] // GATE_WINDOW * GATE_WINDOW
    rows = torch.as_tensor(measured[-count:], dtype=torch.float32)
    rows = rows.reshape(-1, GATE_WINDOW, measured.shape[1])
    batch = SequenceBatch(rows[..., :3 * n], rows[..., 3 * n:3 * n + model.n_act],
                          rows[..., 4 * n:])
    with torch.no_grad():
        mean = model(batch).mean[:, GATE_WARMUP:]
    target = batch.targets[:, GATE_WARMUP:]
    variance = target.reshape(-1, n).var(0).clamp_min(1e-9)
    return float(((mean - target) ** 2).reshape(-1, n).mean(0).div(variance).mean())


class ArmController:
    """
    PD plus feed-forward on a reference, with stale-state, limit and finiteness safety.

    Call `on_state` for every joint state (returns the torque to send, or None when the state
    was dropped) and `watchdog` periodically (returns the brake torque while states are
    stale, else None). Counters in `counts`. One thread at a time.
    """

    def __init__(self, config: ArmControllerConfig, feedforward: Feedforward,
                 lower: np.ndarray, upper: np.ndarray, effort_limit: np.ndarray) -> None:
        self.config = config
        self.feedforward = feedforward
        self.reference = JointReference(lower, upper, config.reference)
        # Where a measured position can be: its URDF limits, widened for overshoot and
        # calibration (continuous joints: unbounded).
        self._reachable = (np.asarray(lower, dtype=np.float64) - POSITION_MARGIN,
                           np.asarray(upper, dtype=np.float64) + POSITION_MARGIN)
        self.effort_limit = np.asarray(effort_limit, dtype=np.float64)
        n = self.effort_limit.size
        if len(config.kp) != n:
            raise ValueError(f'kp and kd have {len(config.kp)} entries for {n} joints')
        self._kp, self._kd = np.asarray(config.kp), np.asarray(config.kd)
        self._start_ns: Optional[int] = None
        self._start_q = np.zeros(n)
        self._last_stamp: Optional[int] = None
        self._brake_stamp = -1
        self.braking = True   # nothing to control before the first state
        self.last_error = np.zeros(n)
        self.counts: Dict[str, int] = dict.fromkeys(
            ('commands', 'clipped', 'non_finite_output', 'brake_stale', 'restarts',
             'rejected_future_stamp', 'rejected_stale', 'skipped_after_brake',
             'rejected_implausible'), 0)

    def reference_at(self, t: float) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return q_ref, qd_ref, qdd_ref (n,) at t s after the (re)start, approach included."""
        approach = self.config.approach_s
        if t >= approach:
            q, qd, qdd = self.reference(np.array([t - approach]))
            return q[0], qd[0], qdd[0]
        goal = tuple(value[0] for value in self.reference(np.array([0.0])))
        rest = np.zeros_like(self._start_q)
        return quintic(t, approach, (self._start_q, rest, rest), goal)

    def _stale(self, now_ns: int) -> bool:
        timeout = self.config.stale_timeout_s * 1e9
        return self._last_stamp is None or now_ns - self._last_stamp > timeout

    def on_state(self, stamp_ns: int, now_ns: int, q: np.ndarray, qd: np.ndarray
                 ) -> Optional[np.ndarray]:
        """Return the torque (n,) N m for a parsed, finite joint state, or None if dropped."""
        timeout = self.config.stale_timeout_s * 1e9
        if stamp_ns - now_ns > timeout:
            self.counts['rejected_future_stamp'] += 1
            return None
        if now_ns - stamp_ns > timeout:
            self.counts['rejected_stale'] += 1
            return None
        if stamp_ns <= self._brake_stamp:
            self.counts['skipped_after_brake'] += 1
            return None
        if not self._plausible(q, qd):   # garbage is no state: stale, the watchdog brakes
            self.counts['rejected_implausible'] += 1
            return None
        self._last_stamp = stamp_ns
        if self.braking:   # (re)start: approach the trajectory from where the arm is
            if self._start_ns is not None:
                self.counts['restarts'] += 1
            self._start_ns, self._start_q = stamp_ns, np.array(q, dtype=np.float64)
            self.feedforward.reset()
            self.braking = False
        t = (stamp_ns - self._start_ns) * 1e-9
        q_ref, qd_ref, qdd_ref = self.reference_at(t)
        self.last_error = q_ref - q
        torque = (self._kp * self.last_error + self._kd * (qd_ref - qd)
                  + self.feedforward(t, q_ref, qd_ref, qdd_ref))
        if not np.all(np.isfinite(torque)):
            self.counts['non_finite_output'] += 1
            return np.zeros_like(torque)
        clipped = np.clip(torque, -self.effort_limit, self.effort_limit)
        if np.any(clipped != torque):
            self.counts['clipped'] += 1
        self.counts['commands'] += 1
        return clipped

    def _plausible(self, q: np.ndarray, qd: np.ndarray) -> bool:
        """
        Whether a state can be the arm's: q within its reachable range, |qd| within the limit.

        Why: a (re)start approaches the trajectory from the first state; one at 1e300 rad
        made the approach reference 1e300 and every command full effort for approach_s.
        """
        low, high = self._reachable
        return bool(np.all(q >= low) and np.all(q <= high)
                    and np.all(np.abs(qd) <= JOINT_VALUE_LIMIT))

    def watchdog(self, now_ns: int) -> Optional[np.ndarray]:
        """Return zero torque (and count the first tick) while the newest state is stale."""
        if not self._stale(now_ns):
            return None
        if not self.braking:
            self.counts['brake_stale'] += 1
            self.braking = True
            self._brake_stamp = -1 if self._last_stamp is None else self._last_stamp
        return np.zeros_like(self.effort_limit)
