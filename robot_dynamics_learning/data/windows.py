"""
Cut trajectories into training windows (`SequenceBatch`) that never cross a recording boundary.

Conventions (see `models/registry.py`):
- inverse dynamics: observations x_t = [q, qd, qdd] (3 d), actions tau_{t-1} (the torque executed
  one step earlier), targets tau_t; the first sample of each recording is dropped because it
  has no previous torque.
- forward dynamics: observations o_t, actions a_t, targets o_{t+1}; the last sample of each
  recording only serves as a target.
"""
from typing import Iterable, Optional, Tuple

import numpy as np
from robot_dynamics_learning.core_types import SequenceBatch
from robot_dynamics_learning.data.trajectory import Trajectory
import torch


def inverse_dynamics_arrays(trajectory: Trajectory) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (x_t = [q, qd, qdd], tau_{t-1}, tau_t), each (T - 1, .), of one recording."""
    for name in ('q', 'qd', 'qdd', 'tau'):
        if getattr(trajectory, name) is None:
            raise ValueError(f'inverse dynamics needs {name}; {trajectory.source} has none')
    x = np.concatenate([trajectory.q, trajectory.qd, trajectory.qdd], axis=1)
    return x[1:], trajectory.tau[:-1], trajectory.tau[1:]


def forward_dynamics_arrays(trajectory: Trajectory) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (o_t, a_t, o_{t+1}), each (T - 1, .), of one recording."""
    if trajectory.observations is None or trajectory.actions is None:
        raise ValueError(f'forward dynamics needs observations and actions; '
                         f'{trajectory.source} lacks them')
    obs, act = trajectory.observations, trajectory.actions
    return obs[:-1], act[:-1], obs[1:]


def window_arrays(observations: np.ndarray, actions: np.ndarray, targets: np.ndarray,
                  window: int, stride: Optional[int] = None) -> SequenceBatch:
    """
    Cut one recording's aligned arrays (T, .) into windows of `window` steps every `stride`.

    A tail shorter than `window` is dropped. Returns float32 tensors (N, window, .).
    """
    stride = stride or window
    if window < 1 or stride < 1:
        raise ValueError(f'window and stride must be >= 1, got {window}, {stride}')
    n = observations.shape[0]
    starts = np.arange(0, n - window + 1, stride)
    index = starts[:, None] + np.arange(window)[None, :]

    def cut(array: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(array[index] if starts.size else
                               np.zeros((0, window, array.shape[1])), dtype=torch.float32)

    return SequenceBatch(cut(observations), cut(actions), cut(targets))


def concat_batches(batches: Iterable[SequenceBatch]) -> SequenceBatch:
    """Stack windows of several recordings into one batch (masks kept if all have them)."""
    batches = list(batches)
    if not batches:
        raise ValueError('no windows to concatenate')
    masks = [b.observation_valid for b in batches]
    return SequenceBatch(torch.cat([b.observations for b in batches]),
                         torch.cat([b.actions for b in batches]),
                         torch.cat([b.targets for b in batches]),
                         torch.cat(masks) if all(m is not None for m in masks) else None)


def inverse_dynamics_windows(trajectories: Iterable[Trajectory], window: int,
                             stride: Optional[int] = None) -> SequenceBatch:
    """Windows of inverse-dynamics data from several recordings."""
    return concat_batches(window_arrays(*inverse_dynamics_arrays(t), window, stride)
                          for t in trajectories)


def forward_dynamics_windows(trajectories: Iterable[Trajectory], window: int,
                             stride: Optional[int] = None) -> SequenceBatch:
    """Windows of forward-dynamics data from several recordings."""
    return concat_batches(window_arrays(*forward_dynamics_arrays(t), window, stride)
                          for t in trajectories)


def whole_sequence(arrays: Tuple[np.ndarray, np.ndarray, np.ndarray]) -> SequenceBatch:
    """One recording as a single window (1, T, .): for evaluation of whole trajectories."""
    return window_arrays(*arrays, window=arrays[0].shape[0])
