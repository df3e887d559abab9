"""
What every learned car model shares (seed 003): state layout, pose integration, loss, data.

Observation (..., 6): [x, y, yaw, vx, vy, r]: world pose (m, m, rad unwrapped) and body-frame
velocities (m/s, m/s, rad/s). Action (..., 2): [throttle, steering], normalised. A model only
predicts the next body velocity v_{i+1} = f(v_i, u_i) (pose invariant, seed Eq. 2); the pose
follows by integrating the mean body velocity over the step of h seconds at the mid-step
heading (the seed's x_{i+1} = x_i + h f(v_i, u_i) with the velocity rotated to the world).
"""
import abc
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from robot_dynamics_learning.data.datasets import load_rc_car, rc_car_files
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.models.base import (DynamicsModel, Prediction, SequenceBatch,
                                                 StepOutput)
from robot_dynamics_learning.signals.mocap import offline_body_states
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


class CarDataset:
    """
    Transitions of one or more drives at the model step h: arrays of (N, 6), (N, 2), (N, 6).

    `segments` keeps, per drive, the index range of consecutive samples so that open-loop
    windows never cross a gap between recordings.
    """

    def __init__(self, observations: np.ndarray, actions: np.ndarray, h: float,
                 segments: List[Tuple[int, int]]) -> None:
        self.observations = observations
        self.actions = actions
        self.h = h
        self.segments = segments

    def transitions(self) -> SequenceBatch:
        """All (obs_t, u_t, obs_{t+1}) pairs as a batch with T = 1."""
        index = np.concatenate([np.arange(a, b - 1) for a, b in self.segments])
        return _batch(self.observations[index, None], self.actions[index, None],
                      self.observations[index + 1, None])

    def windows(self, length: int, stride: int) -> SequenceBatch:
        """Windows of `length` steps: observations (B, length + 1, 6), actions (B, length, 2)."""
        starts = [s for a, b in self.segments for s in range(a, b - length, stride)]
        if not starts:
            raise ValueError(f'no drive is longer than {length} steps of {self.h} s')
        obs = np.stack([self.observations[s:s + length + 1] for s in starts])
        act = np.stack([self.actions[s:s + length] for s in starts])
        return _batch(obs, act, obs[:, 1:])


def _batch(obs: np.ndarray, act: np.ndarray, target: np.ndarray) -> SequenceBatch:
    return SequenceBatch(torch.as_tensor(obs, dtype=torch.float32),
                         torch.as_tensor(act, dtype=torch.float32),
                         torch.as_tensor(target, dtype=torch.float32))


def split_at_gaps(trajectories: Sequence[Trajectory], max_gap_s: float
                  ) -> List[Trajectory]:
    """Split drives where mocap samples are missing for more than max_gap_s seconds."""
    pieces = []
    for trajectory in trajectories:
        if trajectory.observations is None or trajectory.actions is None:
            raise ValueError(f'{trajectory.source}: needs observations and actions')
        cuts = np.flatnonzero(np.diff(trajectory.time) > max_gap_s) + 1
        bounds = [0, *cuts.tolist(), len(trajectory)]
        pieces += [trajectory.segment(a, b) for a, b in zip(bounds[:-1], bounds[1:])
                   if b - a > 20]
    return pieces


def car_dataset(trajectories: Sequence[Trajectory], h: float, fine_dt: float = 0.01,
                window_s: float = 0.1, max_gap_s: float = 0.05, max_speed: float = 8.0,
                max_yaw_rate: float = 15.0) -> CarDataset:
    """
    Turn mocap drives (observations [x, y, yaw], actions, ~100-240 Hz) into model transitions.

    Drives are split at mocap gaps longer than max_gap_s; poses are Savitzky-Golay smoothed
    and differentiated on a `fine_dt` grid (offline, zero phase), then sampled every h
    seconds; the action of a step is the mean command over it. Runs of states faster than
    max_speed (m/s) or max_yaw_rate (rad/s), mocap glitches, are cut out.
    """
    stride = int(round(h / fine_dt))
    if stride < 1 or abs(stride * fine_dt - h) > 1e-9:
        raise ValueError(f'h ({h}) must be a multiple of fine_dt ({fine_dt})')
    observations, actions, segments = [], [], []
    count = 0
    for trajectory in split_at_gaps(trajectories, max_gap_s):
        grid, states = offline_body_states(trajectory.time, trajectory.observations, fine_dt,
                                           window_s)
        commands = np.stack([np.interp(grid, trajectory.time, trajectory.actions[:, i])
                             for i in range(trajectory.actions.shape[1])], axis=1)
        steps = (len(grid) - 1) // stride
        if steps < 2:
            continue
        coarse = states[:steps * stride + 1:stride][:steps]
        mean_cmd = commands[:steps * stride].reshape(steps, stride, -1).mean(axis=1)
        # Mocap glitches show as impossible velocities: keep only runs of plausible states.
        plausible = ((np.hypot(coarse[:, 3], coarse[:, 4]) < max_speed)
                     & (np.abs(coarse[:, 5]) < max_yaw_rate))
        edges = np.flatnonzero(np.diff(np.concatenate([[0], plausible.astype(int), [0]])))
        for a, b in zip(edges[::2], edges[1::2]):
            if b - a < 2:
                continue
            observations.append(coarse[a:b])
            actions.append(mean_cmd[a:b])
            segments.append((count, count + b - a))
            count += b - a
    if not observations:
        raise ValueError('no drive is long enough for one transition')
    return CarDataset(np.concatenate(observations), np.concatenate(actions), h, segments)


def trajectory_validation_error(model: CarModel, windows: SequenceBatch) -> float:
    """
    Seed Eq. 10: mean L1 error of the final pose [x, y, yaw] after open-loop rollouts.

    windows: observations (B, n + 1, 6) and actions (B, n, 2) from `CarDataset.windows`.
    """
    with torch.no_grad():
        pred = model.rollout(windows.observations[:, 0], windows.actions).mean
    return float((pred[:, -1, :3] - windows.observations[:, -1, :3]).abs().sum(-1).mean())


def evaluate_car_model(model: CarModel, dataset: CarDataset, horizon_steps: int
                       ) -> Dict[str, float]:
    """
    One-step relative velocity error and open-loop rollout errors over `horizon_steps`.

    Returns rel_l1_one_step (Eq. 11), position_error_m (mean Euclidean end-position error),
    yaw_error_rad and tve (Eq. 10) of the windows.
    """
    model.eval()
    with torch.no_grad():
        one, metrics = model.loss(dataset.transitions())
        windows = dataset.windows(horizon_steps, max(1, horizon_steps // 2))
        pred = model.rollout(windows.observations[:, 0], windows.actions).mean
    end_true = windows.observations[:, -1]
    return {'rel_l1_one_step': float(one), 'velocity_l1_one_step': metrics['velocity_l1'],
            'position_error_m': float(torch.linalg.norm(pred[:, -1, :2] - end_true[:, :2],
                                                        dim=1).mean()),
            'yaw_error_rad': float((pred[:, -1, 2] - end_true[:, 2]).abs().mean()),
            'tve': trajectory_validation_error(model, windows),
            'windows': int(windows.actions.shape[0])}


def fit_epochs(model: CarModel, data: SequenceBatch,
               loss_fn: Callable[[CarModel, SequenceBatch], torch.Tensor], epochs: int,
               lr: float, batch_size: int, seed: int = 0,
               max_grad_norm: Optional[float] = None, log_every: int = 0) -> List[float]:
    """
    Minimise `loss_fn(model, batch)` with Adam over shuffled rows of `data`, epoch by epoch.

    The learning rate decays by cosine to 5 %; gradients are clipped to `max_grad_norm` when
    given. Returns the mean training loss per epoch; the model ends in eval mode.
    """
    generator = torch.Generator().manual_seed(seed)
    count = data.observations.shape[0]
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epochs, lr * 0.05)
    for parameter in model.parameters():
        parameter.requires_grad_(True)   # an optimisation through the model may have frozen them
    history = []
    model.train()
    for epoch in range(epochs):
        order = torch.randperm(count, generator=generator)
        total = 0.0
        for start in range(0, count, batch_size):
            index = order[start:start + batch_size]
            loss = loss_fn(model, SequenceBatch(data.observations[index], data.actions[index],
                                                data.targets[index]))
            optimizer.zero_grad()
            loss.backward()
            if max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            optimizer.step()
            total += float(loss.detach()) * index.numel()
        schedule.step()
        history.append(total / count)
        if log_every and (epoch + 1) % log_every == 0:
            print(f'epoch {epoch + 1}: loss {history[-1]:.4f}', flush=True)
    model.eval()
    return history


def fit_car_model(model: CarModel, train: CarDataset, epochs: int, lr: float = 1e-3,
                  batch_size: int = 256, seed: int = 0,
                  log_every: int = 0) -> List[float]:
    """
    Minimise the model's one-step loss with Adam over shuffled transitions.

    Returns the mean training loss per epoch. The learning rate decays by cosine to 5 %.
    """
    return fit_epochs(model, train.transitions(), lambda m, batch: m.loss(batch)[0], epochs,
                      lr, batch_size, seed, log_every=log_every)


# Held-out DART drives: one free-driving and one steering-identification recording (the
# rest, 15 files and about 12 minutes, train). Chosen so both kinds of driving are tested.
DART_TEST_FILES = ('car_1_Datarecording_09_16_2024_10_12_05.csv',
                   'car_1_Datarecording_09_25_2024_09_50_18.csv')


def dart_split(h: float, root: Optional[Path] = None) -> Tuple[CarDataset, CarDataset]:
    """Return (train, test) `CarDataset`s of the DART recordings with Vicon (file split)."""
    files = rc_car_files(root)
    if not files:
        raise FileNotFoundError('no DART RC-car recordings with Vicon poses found')
    train = [load_rc_car(f) for f in files if f.name not in DART_TEST_FILES]
    test = [load_rc_car(f) for f in files if f.name in DART_TEST_FILES]
    if not test:
        raise FileNotFoundError(f'the DART test files {DART_TEST_FILES} are missing')
    return car_dataset(train, h), car_dataset(test, h)
