"""
Analytic rigid-body inverse dynamics from a URDF, and the hybrid rigid body + learned residual.

Both read the inverse-dynamics convention (x_t = [q, qd, qdd], targets tau_t) and compute the
rigid-body torque with `robot_dynamics_learning.dynamics` (RNEA, float64). The URDF's moving
joints must be the data's joints in the same order (checkpoints store the data's joint names).
- `RigidBodyInverse`: tau = RNEA(q, qd, qdd); optionally learnable inertias, damping and
  Coulomb friction (seed 002), trained on the normalised-torque MSE.
- `HybridInverse`: tau = RNEA(q, qd, qdd) + Y_last(q, qd, qdd) dphi + LSTM residual(x_1..x_t)
  (seed 002's hybrid use case with seed 001's LSTM as the residual model). dphi is a change of
  the last body's 10 inertial parameters (a payload at the flange) identified online by
  `PayloadEstimator`; it is zero unless a continual learner identified one.

Online (continual) use, `HybridInverse.split_physics()`: the physics part (URDF + payload,
re-identified by recursive least squares in a few hundred samples) runs beside the learner,
and the network learns only the residual tau - physics, stored per sample with the payload
estimate of its time. The residual (friction, elasticity, sensor delay) does not depend on the
payload, so old data stay valid after a payload change: adaptation without forgetting.

Offline, the residual is trusted only where the training data were: it is scaled by the
`InputSupport` trust w(x) (1 inside the training ranges of q and qd, falling outside), so far
from the data the hybrid returns to its prior, and its variance moves from the residual's
validation error to the prior's own error. (Split for continual learning, the residual is
used as trained.)
"""
import collections
import copy
import dataclasses
import math
from pathlib import Path
import statistics
import threading
from typing import Optional, Tuple

import numpy as np
from robot_dynamics_learning.dynamics import load_urdf
from robot_dynamics_learning.dynamics.algorithms import inertial_regressor, inertial_vector
from robot_dynamics_learning.dynamics.learnable import LearnableRigidBody
from robot_dynamics_learning.dynamics.model import RobotModel
from robot_dynamics_learning.models.base import (DynamicsModel, PhysicsSplit, Prediction,
                                                 SequenceBatch, StepOutput)
from robot_dynamics_learning.models.common import (check_batch, check_step_input, ErrorVariance,
                                                   InputSupport, ModelConfig, Normalizer,
                                                   StatelessStep, SUPPORT_LENGTH)
from robot_dynamics_learning.models.coverage import coverage_variance
from robot_dynamics_learning.models.lstm import lstm_step, LSTMState, NumpyLSTMStepper
from robot_dynamics_learning.resources import resource
import torch
from torch import nn


@dataclasses.dataclass(frozen=True)
class RigidBodyConfig(ModelConfig):
    """urdf: file path (relative paths are from the repo root); which parameters learn."""

    urdf: str = ''
    learn_inertia: bool = False
    learn_damping: bool = False
    learn_friction: bool = False

    def __post_init__(self) -> None:
        """Check that the URDF exists."""
        if not self.urdf or not self.path().is_file():
            raise ValueError(f'{type(self).__name__}.urdf must name an existing URDF file, '
                             f'got {self.urdf!r}')

    def path(self) -> Path:
        """Return the URDF path: as given, else a package file such as 'urdf/panda.urdf'."""
        path = Path(self.urdf)
        if path.is_absolute() or path.is_file():
            return path
        try:
            return resource(str(path))
        except FileNotFoundError:
            return path   # refused by __post_init__ with the value given


@dataclasses.dataclass(frozen=True)
class HybridConfig(RigidBodyConfig):
    """
    Rigid-body settings, the residual LSTM's sizes and the payload RLS (`PayloadConfig`).

    trust_length: how far outside the training ranges of q and qd (in training standard
    deviations, Euclidean over the inputs) the residual keeps exp(-1/2) of its weight.
    """

    hidden_size: int = 32
    num_layers: int = 1
    payload_forgetting: float = 0.999
    payload_start_after: int = 10000
    trust_length: float = SUPPORT_LENGTH

    def __post_init__(self) -> None:
        """Check the URDF, the LSTM sizes and the payload estimator settings."""
        super().__post_init__()
        self._positive('hidden_size', 'num_layers', 'trust_length')
        PayloadConfig(forgetting=self.payload_forgetting, start_after=self.payload_start_after)
        if self.num_layers > 2:
            raise ValueError(f'HybridConfig.num_layers must be 1 or 2, got {self.num_layers}')


def rigid_body_from_urdf(config: RigidBodyConfig, n_obs: int, n_target: int
                         ) -> LearnableRigidBody:
    """Build the URDF's rigid body; its joints must be the data's (n_obs = 3 d, n_target = d)."""
    robot = load_urdf(config.path())
    if n_target != robot.n_dof or n_obs != 3 * robot.n_dof:
        raise ValueError(f'{config.urdf} has {robot.n_dof} joints {list(robot.joint_names)}: '
                         f'needs n_obs = {3 * robot.n_dof} and n_target = {robot.n_dof}, got '
                         f'{n_obs}, {n_target}')
    return LearnableRigidBody(robot, learn_inertia=config.learn_inertia,
                              learn_damping=config.learn_damping,
                              learn_friction=config.learn_friction)


def _rnea(body: LearnableRigidBody, x: torch.Tensor) -> torch.Tensor:
    """Rigid-body torque (..., d) for x = [q, qd, qdd] (..., 3 d), computed in float64."""
    q, qd, qdd = x.double().chunk(3, dim=-1)
    return body.rnea(q, qd, qdd).to(x.dtype)


def velocity_torque(body: LearnableRigidBody, x: torch.Tensor) -> torch.Tensor:
    """
    RNEA(q, qd, 0) (..., d) in float64 for x = [q, qd, qdd]: gravity, Coriolis, centrifugal.

    Why without inertia: its change over one control period is the physics a model fed
    tau_{t-1} can add; M(q) qdd with qdd differentiated from measured velocities is noise at
    that scale (`models.baselines`).
    """
    q, qd, _ = x.double().chunk(3, dim=-1)
    with torch.no_grad():
        return body.rnea(q, qd, torch.zeros_like(q))


class SharesURDFModel:
    """Deep copies (a continual learner's snapshots) share the constant URDF model `body.model`."""

    body: Optional[LearnableRigidBody]

    def __deepcopy__(self, memo: dict) -> 'SharesURDFModel':
        """Copy parameters and state; share the URDF model (it holds a lock, and is constant)."""
        if self.body is not None:
            memo[id(self.body.model)] = self.body.model
        clone = type(self).__new__(type(self))
        memo[id(self)] = clone
        clone.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return clone


# pinocchio orders a body's inertia entries (xx, xy, yy, xz, yz, zz); the package's phi
# (dynamics.algorithms.inertial_regressor) uses (xx, xy, xz, yy, yz, zz).
_OURS_FROM_PINOCCHIO = (0, 1, 2, 3, 4, 5, 7, 6, 8, 9)


class FastRegressor:
    """
    Per-sample inertial regressor Y(q, qd, qdd) (d, 10 d) with tau = Y phi, package convention.

    Why: the hybrid's physics runs once per message at 1 kHz. The package's torch regressor
    costs about 0.5 ms for one sample (op dispatch); Pinocchio's
    computeJointTorqueRegressor about 5 us. Pinocchio (the `pin` test dependency) is used when
    it is importable and its model of the URDF has the same joints, otherwise the package's
    regressor (same numbers to 1e-9, test/test_continual_hybrid.py). Copies share one
    instance; calls are serialised by a lock (one Pinocchio workspace).
    """

    def __init__(self, robot: RobotModel, urdf: Path) -> None:
        self.robot = robot
        self.n = robot.n_dof
        self.phi = inertial_vector(robot.inertias.double()).numpy()   # (10 d,) the URDF's
        self._pin = None
        self._lock = threading.Lock()
        try:
            import pinocchio
            model = pinocchio.buildModelFromUrdf(str(urdf))
        except (ImportError, ValueError, RuntimeError):   # no Pinocchio, or it refuses the URDF
            return
        names = tuple(model.names[i] for i in range(1, model.njoints))
        if model.nq == self.n and names == tuple(robot.joint_names):
            self._pin = (pinocchio, model, model.createData())
            self._order = np.concatenate([10 * j + np.array(_OURS_FROM_PINOCCHIO)
                                          for j in range(self.n)])

    @property
    def backend(self) -> str:
        """Return 'pinocchio' or 'torch'."""
        return 'torch' if self._pin is None else 'pinocchio'

    def __call__(self, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray) -> np.ndarray:
        """Return Y (d, 10 d) for one sample (rad, rad/s, rad/s^2)."""
        if self._pin is not None:
            pinocchio, model, data = self._pin
            with self._lock:
                y = pinocchio.computeJointTorqueRegressor(model, data, q, qd, qdd)
            return y[:, self._order]
        with torch.no_grad():
            return inertial_regressor(self.robot, *(torch.as_tensor(v, dtype=torch.float64)
                                                    for v in (q, qd, qdd))).numpy()

    def __deepcopy__(self, memo: dict) -> 'FastRegressor':
        """Share one instance: the URDF model is constant (a Pinocchio model is not copyable)."""
        return self


# A restart's trial lasts this many test windows (`PayloadEstimator._judge_restart`).
TRIAL_WINDOWS = 4


@dataclasses.dataclass(frozen=True)
class PayloadConfig:
    """
    Recursive least squares on the last body's inertial parameters (a payload at the flange).

    forgetting: lambda of exponentially weighted RLS, memory about 1 / (1 - lambda) samples
        (0.999: about 1 s at 1 kHz); a sudden change is handled by `change_ratio`.
    prior_std: initial standard deviation of [m (kg), m c (kg m), inertia about the body
        origin (kg m^2)]; also the cap of the covariance (no wind-up while the arm rests).
    start_after: samples seen before the estimate moves (the residual network first learns
        friction and elasticity; before that their error would be pushed into the payload).
    change_ratio: the median innovation of the last `change_window` samples this many times
        its long-term level is a payload change: the covariance restarts from the prior (0
        disables); a trial then keeps or undoes the restart (`_judge_restart`). Measured on
        the demo's arm at 1 kHz (two trajectory seeds, docs/continual.md): with 40 samples
        at most 13-38x on the trajectory's own bursts, 115-220x after a +2 kg change,
        crossing 30x 6-36 ms after it.
    change_window: samples in that median (40 ms at 1 kHz). Longer windows pass fewer
        bursts (100 samples: 6.5-14.5x) but detect later (36-65 ms), and every millisecond
        of an unmodelled 2 kg counts: the 10 s after the change had 0.0185 / 0.0183 nMSE
        with 100 samples against 0.0172 / 0.0154 with 40 and the trial.
    fast_change_ratio, fast_change_window: the same test on the newest `fast_change_window`
        samples at a higher ratio (0 disables). A median of 40 needs 21 changed samples
        whatever the size of the change, and an unmodelled change costs its square per
        sample: returning from +2 kg at a pose where it weighs 0.7 N m, the first 20 ms
        held 43 % of the next 10 s's squared error. 8 samples cross 60x 5-9 samples after
        a +2 kg change in the bench and demo replays (peaks 70-250x); the trajectories'
        bursts reached 44-54x on 8 samples there.
    recall, recall_ratio: the estimates a confirmed restart replaced (payloads seen before),
        the newest `recall` kept (0 disables); one of them is taken back after a restart
        when it fits the newest samples within `recall_ratio` of the long-term level
        (`_recall`). Returning from +2 kg in the bench replay: the first 10 s after it
        1.58x the error before the change without, 1.47x with (ratios 5-20 alike).
    """

    forgetting: float = 0.999
    prior_std: Tuple[float, float, float] = (3.0, 0.3, 0.05)
    start_after: int = 10000
    change_ratio: float = 30.0
    change_window: int = 40
    fast_change_ratio: float = 60.0
    fast_change_window: int = 8
    recall: int = 4
    recall_ratio: float = 10.0

    def __post_init__(self) -> None:
        """Reject values that cannot work, naming the bad value."""
        if not 0.9 <= self.forgetting <= 1.0:
            raise ValueError(f'PayloadConfig.forgetting must be in [0.9, 1], got '
                             f'{self.forgetting}')
        if len(self.prior_std) != 3 or not all(v > 0 for v in self.prior_std):
            raise ValueError(f'PayloadConfig.prior_std must be 3 positive values, got '
                             f'{self.prior_std}')
        for name, least in (('start_after', 0), ('change_ratio', 0), ('change_window', 1),
                            ('fast_change_ratio', 0), ('recall', 0), ('recall_ratio', 0)):
            if getattr(self, name) < least:
                raise ValueError(f'PayloadConfig.{name} must be >= {least}, got '
                                 f'{getattr(self, name)}')
        if not 1 <= self.fast_change_window <= self.change_window:
            raise ValueError(f'PayloadConfig.fast_change_window must be in [1, change_window '
                             f'= {self.change_window}], got {self.fast_change_window}')


class PayloadEstimator:
    """
    Physics part of the online hybrid: tau_phys = Y(x) phi_URDF + Y_last(x) dphi.

    `predict(x)` gives tau_phys for one sample; `update(z)` takes z = measured torque minus
    the residual network's prediction and runs one weighted RLS step on dphi (the 10 inertial
    parameters added to the last body, package convention, see `inertial_regressor`):
        e = W (z - Y phi_URDF - Y_last dphi),  K = P A^T (lambda I + A P A^T)^-1,  A = W Y_last
        dphi += K e,  P = (P - K A P) / lambda,  capped at trace(P_0).
    W = diag(1 / std of each joint's torque) weighs joints as the normalised error does.
    Thread-safe: the message callback predicts and updates, the trainer thread reads `state()`
    for checkpoints.
    """

    def __init__(self, regressor: FastRegressor, config: PayloadConfig,
                 dphi: Optional[np.ndarray] = None) -> None:
        self.regressor = regressor
        self.config = config
        self.n = regressor.n
        m, h, inertia = config.prior_std
        self._p0 = np.diag(np.array([m] + [h] * 3 + [inertia] * 6) ** 2)
        self._cap = float(np.trace(self._p0))
        self._covariance = self._p0.copy()
        self._dphi = np.zeros(10) if dphi is None else np.array(dphi, dtype=np.float64)
        self._weight = np.ones(self.n)
        self._moments = np.zeros((2, self.n))
        self._lock = threading.Lock()
        self._y = np.zeros((self.n, 10 * self.n))
        self._nominal = np.zeros(self.n)
        self.updates = 0
        self.resets = 0
        self.false_alarms = 0   # restarts undone: the estimate before fitted better
        # While a restart is on trial: the estimate before it (dphi, P) and, per sample since,
        # the squared innovation of the restarted estimate (row 0) and of that one (row 1).
        self._before: Optional[Tuple[np.ndarray, np.ndarray]] = None
        self._trial = np.zeros((2, TRIAL_WINDOWS * config.change_window))
        self._trial_count = 0
        self._recent = np.zeros(config.change_window)   # the newest innovations, a ring
        self._recent_count = 0                            # innovations in it since a reset
        self._fast_offsets = np.arange(config.fast_change_window)
        self._log_level: Optional[float] = None           # log of the long-term median
        # The newest samples' weighted regressors and residuals, a ring beside `_recent`, and
        # the estimates that a kept restart replaced (payloads seen before), newest last.
        self._recent_a = np.zeros((config.change_window, self.n, 10))
        self._recent_residual = np.zeros((config.change_window, self.n))
        self._ring_count = 0
        self._recalled: collections.deque = collections.deque(maxlen=config.recall)
        self._recall_left = 0   # samples after a restart on which a recall is still tried
        self._recall_offsets = np.arange(max(config.fast_change_window // 2, 1))
        self.recalls = 0

    def predict(self, observation: np.ndarray) -> np.ndarray:
        """Return tau_phys (d,) N m for x = [q, qd, qdd] (3 d,) and remember Y for `update`."""
        n = self.n
        y = self.regressor(*(np.asarray(observation[k * n:(k + 1) * n], np.float64)
                             for k in range(3)))
        self._y = y
        self._nominal = y @ self.regressor.phi
        with self._lock:
            return self._nominal + y[:, -10:] @ self._dphi

    def update(self, target: np.ndarray) -> None:
        """One RLS step on the sample of the last `predict`; target: tau - residual (d,)."""
        if not np.all(np.isfinite(target)) or not np.all(np.isfinite(self._y)):
            return   # the learner never passes these; a NaN must not reach the statistics
        self.updates += 1
        self._moments += (np.stack([target, target * target]) - self._moments) * 1e-3
        if self.updates <= self.config.start_after:
            return
        if self.updates == self.config.start_after + 1 or self.updates % 1000 == 0:
            self._set_weight()
        a = self._weight[:, None] * self._y[:, -10:]
        lam = self.config.forgetting
        with self._lock:
            residual = self._weight * (target - self._nominal)
            error = residual - a @ self._dphi
            slot = self._ring_count % self.config.change_window
            self._ring_count += 1
            self._recent_a[slot], self._recent_residual[slot] = a, residual
            if self._before is not None:
                if self._recall_left:
                    self._recall_left = 0 if self._recall(slot) else self._recall_left - 1
                self._judge_restart(error, residual - a @ self._before[0])
                error = residual - a @ self._dphi   # the estimate kept (or recalled)
            elif self._detect_change(float(error @ error) / self.n):
                self._before = (self._dphi.copy(), self._covariance.copy())
                self._covariance = self._p0.copy()
                self._recall_left = self.config.change_window if self._recalled else 0
            pa = self._covariance @ a.T
            gain = np.linalg.solve(lam * np.eye(self.n) + a @ pa, pa.T).T
            dphi = self._dphi + gain @ error
            covariance = (self._covariance - gain @ pa.T) / lam
            trace = float(np.trace(covariance))
            if trace > self._cap:
                covariance *= self._cap / trace
            if np.all(np.isfinite(dphi)) and np.all(np.isfinite(covariance)):
                self._dphi, self._covariance = dphi, 0.5 * (covariance + covariance.T)

    def _judge_restart(self, error: np.ndarray, error_before: np.ndarray) -> None:
        """
        Keep a restart, or undo it: whichever estimate predicted the samples since fits best.

        For TRIAL_WINDOWS x `change_window` samples after a restart the estimate from before
        it stays aside; then the median squared innovation of each decides. After a real
        change the old estimate misses every sample; after a false alarm (a burst of the
        residual network's error) it fits again once the burst is over, while the restarted
        one, fitted to the burst, is off. The trial outlasts a burst that set off the test
        (under 2 windows) so that most of it is judged after the burst. Live (demo arm,
        docs/continual.md) the restarted estimate still won most trials: all 14 with a trial
        of one window, 21 of 22 with four.
        """
        self._trial[:, self._trial_count] = (error @ error, error_before @ error_before)
        self._trial_count += 1
        if self._trial_count < self._trial.shape[1]:
            return
        restarted, before = np.median(self._trial, axis=1)
        if before <= restarted:
            self._dphi, self._covariance = self._before
            self.resets -= 1
            self.false_alarms += 1
        else:
            self._recalled.append(self._before)   # none kept with recall 0 (maxlen 0)
        self._before, self._trial_count = None, 0

    def _recall(self, slot: int) -> bool:
        """
        Return to a payload seen before if it fits the newest samples; True when one did.

        A restart re-identifies from the prior: tens of noisy samples before the estimate
        settles, every one predicted with a wandering payload. A payload put back (a tool
        returned, a box set down) is one the estimator knew: its estimate and covariance,
        kept when a restart replaced them, predict the samples once the change's transient
        is over. Tried on each of the `change_window` samples after a restart (the first
        ones after a change fit no payload: the causal acceleration lags the step by about
        half its window), the best is taken once its median squared innovation on the
        newest half of the short window is within `recall_ratio` of the long-term level.
        """
        newest = (slot - self._recall_offsets) % self.config.change_window
        a, residual = self._recent_a[newest], self._recent_residual[newest]
        fits = [float(np.median(np.sum((residual - a @ dphi) ** 2, axis=1))) / self.n
                for dphi, _ in self._recalled]
        best = int(np.argmin(fits))
        if fits[best] > self.config.recall_ratio * math.exp(self._log_level):
            return False
        dphi, covariance = self._recalled[best]
        self._dphi, self._covariance = dphi.copy(), covariance.copy()
        self.recalls += 1
        return True

    def _detect_change(self, innovation: float) -> bool:
        """
        Return True when the payload has just changed: restart the estimate's covariance.

        The median squared weighted innovation of the last `change_window` samples against its
        long-term level: a new payload raises every innovation by orders of magnitude, and
        resetting P to its prior lets least squares re-identify in tens of samples instead
        of waiting for the forgetting factor (without restarts a +2 kg change cost 7.7x the
        error before it over the next 10 s, offline replay). A median,
        not a short mean: the trajectory's own bursts (tens of samples at 20-30x, at the same
        phase of every period) raised a 20-sample mean as high as a +2 kg change did, and
        each false restart threw the estimate around (the wrist joints' error doubled for the
        rest of a run).
        The level follows the median in log space (it spans orders of magnitude while the
        estimate first converges): down within ~200 samples, up within ~2000, so a change
        does not raise its own threshold. The newest `fast_change_window` samples are tested
        too, at `fast_change_ratio`: a large change restarts in a few samples, not 21. After
        a restart the window refills before the next test. The medians are taken on lists
        (`statistics.median`): on these few values a fifth of np.median's time, per message.
        """
        config = self.config
        window = config.change_window
        self._recent[self._recent_count % window] = innovation
        self._recent_count += 1
        if self._log_level is None:
            if self._recent_count >= window:
                self._log_level = math.log(max(statistics.median(self._recent.tolist()), 1e-300))
            return False
        level = math.exp(self._log_level)
        fast = config.fast_change_window
        if config.fast_change_ratio and self._recent_count >= fast:
            newest = self._recent[(self._recent_count - 1 - self._fast_offsets) % window]
            if statistics.median(newest.tolist()) > config.fast_change_ratio * level:
                return self._restart()
        if self._recent_count < window:
            return False
        median = max(statistics.median(self._recent.tolist()), 1e-300)
        if config.change_ratio and median > config.change_ratio * level:
            return self._restart()
        gap = math.log(median) - self._log_level
        self._log_level += gap * (5e-3 if gap < 0 else 5e-4)
        return False

    def _restart(self) -> bool:
        """Count a detected change and empty the test's window; return True."""
        self._recent_count = 0
        self.resets += 1
        return True

    def _set_weight(self) -> None:
        moments = self._moments / (1.0 - (1.0 - 1e-3) ** self.updates)   # EMA bias removed
        variance = moments[1] - moments[0] ** 2
        scale = np.sqrt(np.maximum(variance, 1e-12))
        self._weight = 1.0 / np.maximum(scale, 1e-3 * max(float(scale.max()), 1e-6))

    def state(self) -> np.ndarray:
        """Return a copy of dphi (10,): [m, m c (3), inertia about the body origin (6)]."""
        with self._lock:
            return self._dphi.copy()


class RigidBodyInverse(SharesURDFModel, StatelessStep, DynamicsModel):
    """
    tau_t = RNEA(q_t, qd_t, qdd_t) from the URDF's (optionally learnable) parameters.

    Its variance is one per joint (`ErrorVariance`): the held-out MSE after training, the
    targets' variance before; the same everywhere, since the URDF model knows no range.
    """

    kind = 'inverse'
    config_class = RigidBodyConfig
    target_convention = 'absolute joint torque tau_t (N m)'
    convention = 'joint_torque/1'

    def __init__(self, config: RigidBodyConfig, n_obs: int, n_act: int, n_target: int) -> None:
        super().__init__()
        self.config = config
        self.n_obs, self.n_act, self.n_target = n_obs, n_act, n_target
        self.body = rigid_body_from_urdf(config, n_obs, n_target)
        self.joint_names = tuple(self.body.model.joint_names)
        self.target_norm = Normalizer(n_target)
        self.error = ErrorVariance(n_target)

    def fit_normalization(self, batch: SequenceBatch) -> None:
        """Fit the torque statistics that scale the loss; the variance: the targets'."""
        self.target_norm.fit(batch.targets)
        self.error.store(self.target_norm.std.pow(2))

    def calibrate_variance(self, val: SequenceBatch) -> None:
        """Set the variance per joint from held-out windows (`coverage_variance`)."""
        with torch.no_grad():
            error = self(val).mean - val.targets
        self.error.store(coverage_variance(error.pow(2)))

    def _predict_step(self, observation: torch.Tensor) -> torch.Tensor:
        return _rnea(self.body, observation)

    def _step_variance(self, observation: torch.Tensor) -> Optional[torch.Tensor]:
        return self.error.like(observation[:, :self.n_target])

    def forward(self, batch: SequenceBatch) -> Prediction:
        """Return RNEA torques for every step, with the per-joint error variance."""
        check_batch(batch, self.n_obs, batch.actions.shape[-1], self.n_target)
        mean = _rnea(self.body, batch.observations)
        return Prediction(mean, self.error.like(mean))

    def loss(self, batch: SequenceBatch) -> Tuple[torch.Tensor, dict]:
        """MSE in normalised torque units (what learnable parameters are fitted on)."""
        error = (self(batch).mean - batch.targets) / self.target_norm.std
        loss = error.pow(2).mean()
        return loss, {'mse_normalized': float(loss.detach())}


class HybridInverse(SharesURDFModel, DynamicsModel):
    """
    tau_t = RNEA(x_t) + Y_last(x_t) dphi + LSTM residual; the residual has its own statistics.

    dphi (buffer `payload`, 10 values, saved with the weights) is the online payload estimate
    (zero offline). `split_physics()` returns the continual learner's split: a copy whose
    `step`, `forward` and `loss` see only the residual, and a `PayloadEstimator` that computes
    and re-identifies the physics per sample.
    """

    kind = 'inverse'
    config_class = HybridConfig
    target_convention = 'absolute joint torque tau_t (N m) = RNEA + learned residual'
    convention = 'joint_torque_rnea_plus_residual/1'

    def __init__(self, config: HybridConfig, n_obs: int, n_act: int, n_target: int) -> None:
        super().__init__()
        self.config = config
        self.n_obs, self.n_act, self.n_target = n_obs, n_act, n_target
        self.body = rigid_body_from_urdf(config, n_obs, n_target)
        self.joint_names = tuple(self.body.model.joint_names)
        self.input_norm = Normalizer(n_obs)
        self.residual_norm = Normalizer(n_target)
        self.lstm = nn.LSTM(n_obs, config.hidden_size, config.num_layers, batch_first=True)
        self.head = nn.Linear(config.hidden_size, n_target)
        self.register_buffer('payload', torch.zeros(10, dtype=torch.float64))
        self.regressor = FastRegressor(self.body.model, config.path())
        self.residual_only = False
        # the residual: only where it has seen data
        self.support = InputSupport(n_obs, n_target, range(2 * n_obs // 3), config.trust_length,
                                    margin=0.0, keep_inputs=False)

    def split_physics(self) -> PhysicsSplit:
        """
        Return a residual-only copy of this model and the online physics part.

        The copy's `step`, `forward` and `loss` see only the residual; this model is left
        unchanged. The estimator starts from the saved payload. Needs the URDF's own
        parameters: learnable inertias, damping or friction are trained offline, not in this
        split.
        """
        config = self.config
        if config.learn_inertia or config.learn_damping or config.learn_friction:
            raise ValueError('split_physics (continual learning) needs learn_inertia, '
                             'learn_damping and learn_friction false')
        residual = copy.deepcopy(self)
        residual.residual_only = True
        return PhysicsSplit(residual, PayloadEstimator(
            self.regressor, PayloadConfig(forgetting=config.payload_forgetting,
                                          start_after=config.payload_start_after),
            self.payload.numpy()))

    def _physics(self, observation: torch.Tensor) -> torch.Tensor:
        """Rigid-body torque with the payload estimate, (..., d) for x (..., 3 d)."""
        if observation.dim() == 2 and observation.shape[0] == 1:   # one message: fast path
            n = self.n_target
            x = observation[0].double().numpy()
            y = self.regressor(x[:n], x[n:2 * n], x[2 * n:])
            tau = y @ self.regressor.phi + y[:, -10:] @ self.payload.numpy()
            return torch.from_numpy(tau).to(observation.dtype)[None]
        tau = _rnea(self.body, observation)
        if bool(self.payload.any()):
            q, qd, qdd = observation.double().chunk(3, dim=-1)
            y_last = inertial_regressor(self.body.model, q, qd, qdd)[..., -10:]
            tau = tau + (y_last @ self.payload).to(observation.dtype)
        return tau

    def fit_normalization(self, batch: SequenceBatch) -> None:
        """Fit input statistics and those of the residual (the targets themselves when split)."""
        self.input_norm.fit(batch.observations)
        with torch.no_grad():
            residual = (batch.targets if self.residual_only
                        else batch.targets - self._physics(batch.observations))
            self.residual_norm.fit(residual)
        self.support.fit_range(self.input_norm.normalize(batch.observations))

    def calibrate_variance(self, val: SequenceBatch) -> None:
        """
        Set the residual's validation error (near) and the prior's own error (far).

        Both in normalised residual units: the prior alone predicts a zero residual.
        """
        with torch.no_grad():
            residual = val.targets if self.residual_only else (
                val.targets - self._physics(val.observations))
            target = self.residual_norm.normalize(residual)
            near = (self._residual(val) - target).pow(2)
            far = (self.residual_norm.normalize(torch.zeros_like(residual)) - target).pow(2)
            self.support.fit_errors(coverage_variance(near), coverage_variance(far))

    def _trusted(self, observation: torch.Tensor, residual: torch.Tensor
                 ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Return (trust-scaled residual, variance) in N m and N m^2 for raw inputs."""
        normalized = self.input_norm.normalize(observation)
        weight = self.support.trust(normalized).unsqueeze(-1)
        variance = self.residual_norm.denormalize_variance(self.support.variance(normalized))
        return weight * residual, variance

    def init_state(self, batch_size: int) -> LSTMState:
        """Return zero (h, c) of the residual LSTM."""
        shape = (self.config.num_layers, batch_size, self.config.hidden_size)
        return LSTMState(self.head.weight.new_zeros(shape), self.head.weight.new_zeros(shape))

    def step(self, state: Optional[LSTMState], observation: torch.Tensor,
             action: Optional[torch.Tensor] = None) -> StepOutput:
        """Return physics + residual torques (B, d) for x_t (B, 3 d) (the residual when split)."""
        check_step_input('observation', observation, self.n_obs)
        if state is None:
            state = self.init_state(observation.shape[0])
        variance = None
        with torch.no_grad():
            out, h, c = lstm_step(self.lstm, self.input_norm.normalize(observation), state)
            tau = self.residual_norm.denormalize(self.head(out))
            if not self.residual_only:
                tau, variance = self._trusted(observation, tau)
                tau = tau + self._physics(observation)
        return StepOutput(tau, variance, LSTMState(h, c))

    def numpy_stepper(self) -> Optional[NumpyLSTMStepper]:
        """Return the numpy twin of `step` once split (residual only); None before."""
        if not self.residual_only:
            return None
        return NumpyLSTMStepper(self.lstm, self.head, self.input_norm, self.residual_norm)

    def _residual(self, batch: SequenceBatch) -> torch.Tensor:
        out, _ = self.lstm(self.input_norm.normalize(batch.observations))
        return self.head(out)

    def forward(self, batch: SequenceBatch) -> Prediction:
        """Return physics + trusted residual and its variance per step (residual: split)."""
        check_batch(batch, self.n_obs, batch.actions.shape[-1], self.n_target)
        residual = self.residual_norm.denormalize(self._residual(batch))
        if self.residual_only:
            return Prediction(residual, None)
        residual, variance = self._trusted(batch.observations, residual)
        return Prediction(self._physics(batch.observations) + residual, variance)

    def loss(self, batch: SequenceBatch) -> Tuple[torch.Tensor, dict]:
        """MSE of the residual in normalised units (gradients also reach learnable physics)."""
        check_batch(batch, self.n_obs, batch.actions.shape[-1], self.n_target)
        self.support.widen(self.input_norm.normalize(batch.observations))
        residual = batch.targets if self.residual_only else (
            batch.targets - self._physics(batch.observations))
        target = self.residual_norm.normalize(residual)
        loss = (self._residual(batch) - target).pow(2).mean()
        return loss, {'mse_residual_normalized': float(loss.detach())}
