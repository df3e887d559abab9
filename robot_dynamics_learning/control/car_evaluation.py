"""
Scores of car models on held-out drives: one-step error, open-loop rollouts, TVE (Eq. 10).

`evaluate_car_model` gives the headline numbers (`rdl car train` prints them);
`horizon_errors` the open-loop error at every step of the horizon, for the report's error
vs horizon curves.
"""
from typing import Dict

import numpy as np
from robot_dynamics_learning.core_types import SequenceBatch
from robot_dynamics_learning.data.car_datasets import CarDataset
from robot_dynamics_learning.models.car_base import CarModel
import torch


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
    yaw_error_rad and tve (Eq. 10) of the windows, and change_std_ratio: the spread of the
    predicted one-step velocity changes over the measured ones (near 0: a model that
    collapsed to "no change").
    """
    model.eval()
    with torch.no_grad():
        transitions = dataset.transitions()
        one, metrics = model.loss(transitions)
        now = transitions.observations[:, 0, 3:]
        predicted = model(transitions).mean[:, 0, 3:] - now
        measured = transitions.targets[:, 0, 3:] - now
        windows = dataset.windows(horizon_steps, max(1, horizon_steps // 2))
        pred = model.rollout(windows.observations[:, 0], windows.actions).mean
    end_true = windows.observations[:, -1]
    return {'rel_l1_one_step': float(one), 'velocity_l1_one_step': metrics['velocity_l1'],
            'position_error_m': float(torch.linalg.norm(pred[:, -1, :2] - end_true[:, :2],
                                                        dim=1).mean()),
            'yaw_error_rad': float((pred[:, -1, 2] - end_true[:, 2]).abs().mean()),
            'tve': trajectory_validation_error(model, windows),
            'change_std_ratio': float(predicted.std() / measured.std().clamp_min(1e-9)),
            'windows': int(windows.actions.shape[0])}


def horizon_errors(model: CarModel, windows: SequenceBatch) -> Dict[str, np.ndarray]:
    """
    Mean open-loop errors after each step of the windows, (H,) arrays.

    position_m (Euclidean), yaw_rad (absolute), speed_mps (|v_xy| error), yaw_rate_radps.
    """
    model.eval()
    with torch.no_grad():
        pred = model.rollout(windows.observations[:, 0], windows.actions).mean.numpy()
    true = windows.observations[:, 1:].numpy()
    return {'position_m': np.linalg.norm(pred[..., :2] - true[..., :2], axis=-1).mean(0),
            'yaw_rad': np.abs(pred[..., 2] - true[..., 2]).mean(0),
            'speed_mps': np.abs(np.hypot(pred[..., 3], pred[..., 4])
                                - np.hypot(true[..., 3], true[..., 4])).mean(0),
            'yaw_rate_radps': np.abs(pred[..., 5] - true[..., 5]).mean(0)}
