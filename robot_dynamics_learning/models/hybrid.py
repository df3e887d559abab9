"""
Analytic rigid-body inverse dynamics from a URDF, and the hybrid rigid body + learned residual.

Both read the inverse-dynamics convention (x_t = [q, qd, qdd], targets tau_t) and compute the
rigid-body torque with `robot_dynamics_learning.dynamics` (RNEA, float64). The URDF's moving
joints must be the data's joints in the same order (checkpoints store the data's joint names).
- `RigidBodyInverse`: tau = RNEA(q, qd, qdd); optionally learnable inertias, damping and
  Coulomb friction (seed 002), trained on the normalised-torque MSE.
- `HybridInverse`: tau = RNEA(q, qd, qdd) + LSTM residual(x_1..x_t) (seed 002's hybrid use case
  with seed 001's LSTM as the residual model).
"""
import dataclasses
from pathlib import Path
from typing import Optional, Tuple

from robot_dynamics_learning.dynamics import load_urdf
from robot_dynamics_learning.dynamics.learnable import LearnableRigidBody
from robot_dynamics_learning.models.base import (DynamicsModel, Prediction, SequenceBatch,
                                                 StepOutput)
from robot_dynamics_learning.models.common import (check_batch, check_step_input, ModelConfig,
                                                   Normalizer)
from robot_dynamics_learning.models.lstm import LSTMState
import torch
from torch import nn

REPO_ROOT = Path(__file__).resolve().parents[2]


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
        """Return the URDF path, resolved against the repo root when relative."""
        path = Path(self.urdf)
        return path if path.is_absolute() else REPO_ROOT / path


@dataclasses.dataclass(frozen=True)
class HybridConfig(RigidBodyConfig):
    """Rigid-body settings plus the residual LSTM's hidden_size and num_layers."""

    hidden_size: int = 32
    num_layers: int = 1

    def __post_init__(self) -> None:
        """Check the URDF and the LSTM sizes."""
        super().__post_init__()
        self._positive('hidden_size', 'num_layers')
        if self.num_layers > 2:
            raise ValueError(f'HybridConfig.num_layers must be 1 or 2, got {self.num_layers}')


def _rigid_body(config: RigidBodyConfig, n_obs: int, n_target: int) -> LearnableRigidBody:
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


class RigidBodyInverse(DynamicsModel):
    """tau_t = RNEA(q_t, qd_t, qdd_t) from the URDF's (optionally learnable) parameters."""

    kind = 'inverse'
    config_class = RigidBodyConfig
    target_convention = 'absolute joint torque tau_t (N m)'

    def __init__(self, config: RigidBodyConfig, n_obs: int, n_act: int, n_target: int) -> None:
        super().__init__()
        self.config = config
        self.n_obs, self.n_act, self.n_target = n_obs, n_act, n_target
        self.body = _rigid_body(config, n_obs, n_target)
        self.joint_names = tuple(self.body.model.joint_names)
        self.target_norm = Normalizer(n_target)

    def fit_normalization(self, batch: SequenceBatch) -> None:
        """Fit the torque statistics that scale the loss."""
        self.target_norm.fit(batch.targets)

    def init_state(self, batch_size: int) -> None:
        """Return None: the model has no state."""
        return None

    def step(self, state: None, observation: torch.Tensor,
             action: Optional[torch.Tensor] = None) -> StepOutput:
        """Return RNEA torques (B, d) for x_t (B, 3 d)."""
        check_step_input('observation', observation, self.n_obs)
        with torch.no_grad():
            return StepOutput(_rnea(self.body, observation), None, None)

    def forward(self, batch: SequenceBatch) -> Prediction:
        """Return RNEA torques for every step."""
        check_batch(batch, self.n_obs, batch.actions.shape[-1], self.n_target)
        return Prediction(_rnea(self.body, batch.observations), None)

    def loss(self, batch: SequenceBatch) -> Tuple[torch.Tensor, dict]:
        """MSE in normalised torque units (what learnable parameters are fitted on)."""
        error = (self(batch).mean - batch.targets) / self.target_norm.std
        loss = error.pow(2).mean()
        return loss, {'mse_normalized': float(loss.detach())}


class HybridInverse(DynamicsModel):
    """tau_t = RNEA(x_t) + LSTM residual; the residual is normalised by its own statistics."""

    kind = 'inverse'
    config_class = HybridConfig
    target_convention = 'absolute joint torque tau_t (N m) = RNEA + learned residual'

    def __init__(self, config: HybridConfig, n_obs: int, n_act: int, n_target: int) -> None:
        super().__init__()
        self.config = config
        self.n_obs, self.n_act, self.n_target = n_obs, n_act, n_target
        self.body = _rigid_body(config, n_obs, n_target)
        self.joint_names = tuple(self.body.model.joint_names)
        self.input_norm = Normalizer(n_obs)
        self.residual_norm = Normalizer(n_target)
        self.lstm = nn.LSTM(n_obs, config.hidden_size, config.num_layers, batch_first=True)
        self.head = nn.Linear(config.hidden_size, n_target)

    def fit_normalization(self, batch: SequenceBatch) -> None:
        """Fit input statistics and those of the residual tau - RNEA."""
        self.input_norm.fit(batch.observations)
        with torch.no_grad():
            self.residual_norm.fit(batch.targets - _rnea(self.body, batch.observations))

    def init_state(self, batch_size: int) -> LSTMState:
        """Return zero (h, c) of the residual LSTM."""
        shape = (self.config.num_layers, batch_size, self.config.hidden_size)
        return LSTMState(self.head.weight.new_zeros(shape), self.head.weight.new_zeros(shape))

    def step(self, state: Optional[LSTMState], observation: torch.Tensor,
             action: Optional[torch.Tensor] = None) -> StepOutput:
        """Return RNEA + residual torques (B, d) for x_t (B, 3 d)."""
        check_step_input('observation', observation, self.n_obs)
        if state is None:
            state = self.init_state(observation.shape[0])
        with torch.no_grad():
            out, (h, c) = self.lstm(self.input_norm.normalize(observation).unsqueeze(1),
                                    (state.h, state.c))
            residual = self.residual_norm.denormalize(self.head(out[:, 0]))
            tau = _rnea(self.body, observation) + residual
        return StepOutput(tau, None, LSTMState(h, c))

    def _residual(self, batch: SequenceBatch) -> torch.Tensor:
        out, _ = self.lstm(self.input_norm.normalize(batch.observations))
        return self.head(out)

    def forward(self, batch: SequenceBatch) -> Prediction:
        """Return RNEA + residual torques for every step of the windows."""
        check_batch(batch, self.n_obs, batch.actions.shape[-1], self.n_target)
        residual = self.residual_norm.denormalize(self._residual(batch))
        return Prediction(_rnea(self.body, batch.observations) + residual, None)

    def loss(self, batch: SequenceBatch) -> Tuple[torch.Tensor, dict]:
        """MSE of the residual in normalised units (gradients also reach learnable physics)."""
        check_batch(batch, self.n_obs, batch.actions.shape[-1], self.n_target)
        target = self.residual_norm.normalize(batch.targets - _rnea(self.body,
                                                                    batch.observations))
        loss = (self._residual(batch) - target).pow(2).mean()
        return loss, {'mse_residual_normalized': float(loss.detach())}
