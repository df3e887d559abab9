"""
The base of every learned car model (seed 003): state layout, pose integration, loss.

Observation (..., 6): [x, y, yaw, vx, vy, r]: world pose (m, m, rad unwrapped) and body-frame
velocities (m/s, m/s, rad/s). Action (..., 2): [throttle, steering], normalised. A model only
predicts the next body velocity v_{i+1} = f(v_i, u_i) (pose invariant, seed Eq. 2); the pose
follows by integrating the mean body velocity over the step of h seconds at the mid-step
heading (the seed's x_{i+1} = x_i + h f(v_i, u_i) with the velocity rotated to the world).
Data sets are in `data/car_datasets.py`, training in `control/car_training.py`.
"""
import abc
from typing import Any, Optional, Tuple

from robot_dynamics_learning.models.base import (DynamicsModel, Prediction, SequenceBatch,
                                                 StepOutput)
import torch

N_OBS = 6
N_ACT = 2


def integrate_pose(pose: torch.Tensor, v_now: torch.Tensor, v_next: torch.Tensor,
                   h: float) -> torch.Tensor:
    """Advance (B, 3) poses over h seconds with the mean of body velocities v_now, v_next."""
    mean = 0.5 * (v_now + v_next)
    yaw_mid = pose[:, 2] + 0.5 * h * mean[:, 2]
    c, s = torch.cos(yaw_mid), torch.sin(yaw_mid)
    return torch.stack([pose[:, 0] + h * (c * mean[:, 0] - s * mean[:, 1]),
                        pose[:, 1] + h * (s * mean[:, 0] + c * mean[:, 1]),
                        pose[:, 2] + h * mean[:, 2]], dim=1)


def relative_l1(target: torch.Tensor, prediction: torch.Tensor, eps: float) -> torch.Tensor:
    """Seed Eq. 11: mean over samples of |v - f|_1 / (|v|_1 + eps), inputs (..., 3)."""
    error = (target - prediction).abs().sum(-1)
    return (error / (target.abs().sum(-1) + eps)).mean()


class CarModel(DynamicsModel):
    """
    Base of the car models: subclasses implement `velocity_step`, the rest is shared.

    Stateless: `init_state` returns None; `rollout(state, actions)` takes the current
    observation (B, 6) as its state and returns (B, H, 6) predictions, differentiable with
    respect to actions, state and parameters.
    """

    kind = 'forward'
    target_convention = 'next observation o_{t+1} = [x, y, yaw, vx, vy, r] after h seconds'
    convention = 'car_next_pose_velocity/1'

    def __init__(self, config: Any, n_obs: int = N_OBS, n_act: int = N_ACT,
                 n_target: int = N_OBS) -> None:
        super().__init__()
        if (n_obs, n_act, n_target) != (N_OBS, N_ACT, N_OBS):
            raise ValueError(f'car models need n_obs={N_OBS}, n_act={N_ACT}, '
                             f'n_target={N_OBS}; got {n_obs}, {n_act}, {n_target}')
        self.config = config
        self.n_obs, self.n_act, self.n_target = n_obs, n_act, n_target
        self.h = float(config.h)
        self.loss_eps = float(config.loss_eps)

    @abc.abstractmethod
    def velocity_step(self, v: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Predict (B, 3) body velocities after h seconds from (B, 3) v and (B, 2) u."""

    def transition(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Predict the (B, 6) next observation from (B, 6) observations and (B, 2) actions."""
        v_next = self.velocity_step(observation[:, 3:], action)
        pose = integrate_pose(observation[:, :3], observation[:, 3:], v_next, self.h)
        return torch.cat([pose, v_next], dim=1)

    def fused_rollout(self, workers: int = 1) -> Optional[Any]:
        """
        Return the model's fast MPC rollout (the interface of `car_mlp.FusedRollout`) or None.

        An optional ability: a model with a hand-written batched rollout and reverse pass
        returns one built from its current weights; the MPC uses autograd without it.
        """
        return None

    def init_state(self, batch_size: int) -> None:
        """Return None: the car models are stateless (the observation is the state)."""
        return None

    def step(self, state: None, observation: torch.Tensor,
             action: Optional[torch.Tensor] = None) -> StepOutput:
        """One streaming prediction of the next observation (no autograd)."""
        if action is None:
            raise ValueError('car models need an action to predict the next observation')
        with torch.no_grad():
            return StepOutput(self.transition(observation, action), None, None)

    def forward(self, batch: SequenceBatch) -> Prediction:
        """One-step predictions (B, T, 6) of targets (next observations) for every step."""
        b, t, _ = batch.observations.shape
        flat = self.transition(batch.observations.reshape(b * t, N_OBS),
                               batch.actions.reshape(b * t, N_ACT))
        return Prediction(flat.reshape(b, t, N_OBS), None)

    def loss(self, batch: SequenceBatch) -> Tuple[torch.Tensor, dict]:
        """Relative L1 loss on next body velocities (seed Eq. 11) and an absolute L1 metric."""
        prediction = self.forward(batch).mean
        loss = relative_l1(batch.targets[..., 3:], prediction[..., 3:], self.loss_eps)
        abs_l1 = (batch.targets[..., 3:] - prediction[..., 3:]).abs().sum(-1).mean()
        return loss, {'loss': float(loss.detach()), 'velocity_l1': float(abs_l1.detach())}

    def velocity_sequence(self, v0: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Body velocities (B, H, 3) after each of (B, H, 2) actions from (B, 3) v0."""
        current = v0
        outputs = []
        for i in range(actions.shape[1]):
            current = self.velocity_step(current, actions[:, i])
            outputs.append(current)
        return torch.stack(outputs, dim=1)

    def rollout(self, state: torch.Tensor, actions: torch.Tensor) -> Prediction:
        """
        Predict (B, H, 6) observations from (B, 6) current observations, (B, H, 2) actions.

        The same numbers as chaining `transition`, but the velocity recurrence runs first and
        the poses follow in one vectorised pass (`integrate_poses`): the per-step work, which
        dominates MPC solves at small batches, is only the velocity model.
        """
        velocities = self.velocity_sequence(state[:, 3:], actions)
        poses = integrate_poses(state[:, :3], state[:, 3:], velocities, self.h)
        return Prediction(torch.cat([poses, velocities], dim=-1), None)


def integrate_poses(pose: torch.Tensor, v0: torch.Tensor, velocities: torch.Tensor,
                    h: float) -> torch.Tensor:
    """
    Poses (B, H, 3) after each step from (B, 3) pose, (B, 3) v0 and (B, H, 3) velocities.

    `integrate_pose` applied along the sequence, vectorised: yaw and position increments of
    each step at its mid-step heading, accumulated with cumulative sums.
    """
    mean = 0.5 * (torch.cat([v0.unsqueeze(1), velocities[:, :-1]], dim=1) + velocities)
    dyaw = h * mean[..., 2]
    yaw = pose[:, 2:3] + torch.cumsum(dyaw, dim=1)
    yaw_mid = yaw - 0.5 * dyaw
    c, s = torch.cos(yaw_mid), torch.sin(yaw_mid)
    x = pose[:, 0:1] + torch.cumsum(h * (c * mean[..., 0] - s * mean[..., 1]), dim=1)
    y = pose[:, 1:2] + torch.cumsum(h * (s * mean[..., 0] + c * mean[..., 1]), dim=1)
    return torch.stack([x, y, yaw], dim=-1)


class ConstantVelocityCar(CarModel):
    """
    Baseline: the body velocities stay as they are (the pose still integrates them).

    What a learned model must beat: over a short horizon a car mostly keeps its speed and
    turn rate. No parameters; `config` only carries h.
    """

    def __init__(self, h: float = 0.05) -> None:
        super().__init__(_StepOnly(h))

    def velocity_step(self, v: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Return v unchanged."""
        return v


class _StepOnly:
    """The two settings `CarModel` reads, for models without a config class."""

    def __init__(self, h: float) -> None:
        if not h > 0:
            raise ValueError(f'h must be positive, got {h}')
        self.h = h
        self.loss_eps = 0.05
