"""
The "repeat the previous value" baseline (seed 004 Fig. 4c dashed line).

- kind 'inverse': tau^_t = tau_{t-1}, the previously executed torque (the `actions` channel);
  with a URDF, plus the change of the rigid-body torque without its inertial term,
  tau^_t = tau_{t-1} + p(q_t, qd_t) - p(q_{t-1}, qd_{t-1}), p = RNEA(q, qd, 0) (gravity,
  Coriolis, centrifugal). Why: a model fed tau_{t-1} is judged on the change, and this needs
  no training. At a 10 ms control period on the Kinova its change nMSE is 0.51 inside the
  training ranges and 0.88 on the validation files (0.45x and 0.87x the previous value's);
  with the inertial term M(q) qdd 143 and 76: qdd differentiated from measured velocities is
  noise at this scale (docs/results.md section 2).
- extrapolate (inverse): tau^_t = tau_{t-1} + (tau_{t-1} - tau_{t-2}), the last change
  continued. Where the measured torque is smooth at the control period it is much stronger
  than repeating tau_{t-1} (Kinova blocks at 10 ms: change nMSE 0.03; docs/results.md
  section 2); where the change is noise it is worse (Kinova validation files: 1.26).
- kind 'forward': o^_{t+k} = the last measured observation for every horizon k.
"""
import dataclasses
from typing import Optional, Tuple

from robot_dynamics_learning.models.base import (DynamicsModel, Prediction, SequenceBatch,
                                                 StepOutput)
from robot_dynamics_learning.models.common import check_batch, check_step_input, ModelConfig
from robot_dynamics_learning.models.feedback import FeedbackForwardModel
from robot_dynamics_learning.models.hybrid import (rigid_body_from_urdf, RigidBodyConfig,
                                                   SharesURDFModel, velocity_torque)
import torch


@dataclasses.dataclass(frozen=True)
class PreviousValueConfig(ModelConfig):
    """
    kind: 'inverse' (repeat tau_{t-1}) or 'forward' (repeat o_t).

    urdf (inverse only; '' for none): add the change of the URDF's torque without inertia.
    extrapolate (inverse only, not with urdf): add the last change, tau_{t-1} - tau_{t-2}.
    """

    kind: str = 'inverse'
    urdf: str = ''
    extrapolate: bool = False

    def __post_init__(self) -> None:
        """Validate kind; a URDF must exist and goes with kind 'inverse' only."""
        self._choice('kind', ('inverse', 'forward'))
        if self.extrapolate and (self.kind != 'inverse' or self.urdf):
            raise ValueError("PreviousValueConfig.extrapolate needs kind 'inverse' and no urdf")
        if self.urdf:
            if self.kind != 'inverse':
                raise ValueError("PreviousValueConfig.urdf needs kind 'inverse'")
            RigidBodyConfig(urdf=self.urdf)


class PreviousValueInverse(SharesURDFModel, DynamicsModel):
    """
    tau^_t = tau_{t-1} (+ the rigid-body change with a URDF); needs n_act == n_target.

    Streaming state: None, or with a URDF the rigid-body term p of the previous step (B, d),
    or extrapolating the previous torque tau_{t-1} (B, d). The first step of a stream or
    window has no previous p or tau_{t-2}: its change counts as zero.
    """

    kind = 'inverse'
    config_class = PreviousValueConfig
    sees_previous_torque = True
    target_convention = 'absolute joint torque tau_t (N m)'
    convention = 'joint_torque/1'

    def __init__(self, config: PreviousValueConfig, n_obs: int, n_act: int,
                 n_target: int) -> None:
        super().__init__()
        if n_act != n_target:
            raise ValueError(f'previous_value (inverse) repeats the previous torque: n_act '
                             f'({n_act}) must equal n_target ({n_target})')
        self.config = config
        self.n_obs, self.n_act, self.n_target = n_obs, n_act, n_target
        self.body = (rigid_body_from_urdf(RigidBodyConfig(urdf=config.urdf), n_obs, n_target)
                     if config.urdf else None)
        self.joint_names = None if self.body is None else tuple(self.body.model.joint_names)

    def init_state(self, batch_size: int) -> None:
        """Return None: no previous step yet."""
        return None

    def step(self, state: Optional[torch.Tensor], observation: torch.Tensor,
             action: Optional[torch.Tensor] = None) -> StepOutput:
        """Return tau_{t-1} (+ the rigid-body change); the previous torque is required."""
        check_step_input('observation', observation, self.n_obs)
        if action is None:
            raise ValueError('previous_value needs the previous torque as `action`')
        check_step_input('action', action, self.n_act)
        if self.config.extrapolate:
            change = torch.zeros_like(action) if state is None else action - state
            return StepOutput(action + change, None, action.clone())
        if self.body is None:
            return StepOutput(action.clone(), None, None)
        term = velocity_torque(self.body, observation)
        change = torch.zeros_like(term) if state is None else term - state
        return StepOutput(action + change.to(action.dtype), None, term)

    def forward(self, batch: SequenceBatch) -> Prediction:
        """Return the previous torques (+ the rigid-body change from the window's last step)."""
        check_batch(batch, self.n_obs, self.n_act, self.n_target)
        if self.config.extrapolate:
            actions = batch.actions
            return Prediction(actions + torch.diff(actions, dim=1, prepend=actions[:, :1]), None)
        if self.body is None:
            return Prediction(batch.actions.clone(), None)
        term = velocity_torque(self.body, batch.observations)
        change = torch.diff(term, dim=1, prepend=term[:, :1])
        return Prediction(batch.actions + change.to(batch.actions.dtype), None)

    def loss(self, batch: SequenceBatch) -> Tuple[torch.Tensor, dict]:
        """MSE in N m^2 (no parameters to train)."""
        loss = (self(batch).mean - batch.targets).pow(2).mean()
        return loss, {'mse': float(loss)}


class PreviousValueForward(FeedbackForwardModel):
    """o^_{t+1} = m_t: the difference is zero; normalisation is left at identity."""

    config_class = PreviousValueConfig

    def __init__(self, config: PreviousValueConfig, n_obs: int, n_act: int,
                 n_target: int) -> None:
        super().__init__(n_obs, n_act, n_target)
        self.config = config

    def fit_normalization(self, batch: SequenceBatch) -> None:
        """Keep identity statistics: a zero normalised difference must mean no change."""

    def _init_cell(self, batch_size: int) -> None:
        return None

    def _cell(self, state: None, memory: torch.Tensor, action: torch.Tensor,
              valid: torch.Tensor) -> Tuple[torch.Tensor, None, None]:
        return torch.zeros_like(memory), None, None


def build_previous_value(config: PreviousValueConfig, n_obs: int, n_act: int,
                         n_target: int) -> DynamicsModel:
    """Build the inverse or forward previous-value baseline named by `config.kind`."""
    cls = PreviousValueInverse if config.kind == 'inverse' else PreviousValueForward
    return cls(config, n_obs, n_act, n_target)


build_previous_value.config_class = PreviousValueConfig
