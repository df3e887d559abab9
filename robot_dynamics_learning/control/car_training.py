"""
Train and evaluate the learned car models on simulated or real (DART) driving data.

One entry point for `rdl car train`, the benchmarks and the demo: data from the simulator
(random driver seen through emulated mocap) or the DART recordings, the same pipeline
(`car_dataset`), the same trainer, and metrics on held-out drives.
"""
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from robot_dynamics_learning.core_types import SequenceBatch
from robot_dynamics_learning.learning.checkpoint import load_checkpoint, save_checkpoint
from robot_dynamics_learning.models.car_common import (car_dataset, CarDataset, CarModel,
                                                       dart_split, evaluate_car_model,
                                                       fit_car_model, fit_epochs, relative_l1)
from robot_dynamics_learning.models.registry import build_model
from robot_dynamics_learning.sim.car import CarParams, MocapNoise
from robot_dynamics_learning.sim.driving import simulated_drives
import torch

CAR_MODEL_TYPES = ('car_mlp', 'car_bicycle')
# Learning rates that work for each model with `fit_car_model` (Adam, cosine decay).
DEFAULT_LR = {'car_mlp': 2e-3, 'car_bicycle': 1e-2}


def car_data(source: str, h: float, minutes: float = 15.0, seed: int = 0
             ) -> Tuple[CarDataset, CarDataset]:
    """
    Return (train, test) data sets of model transitions at step h.

    'sim' drives `minutes` of random driving (test: 2 minutes with another seed), 'dart'
    is the DART file split (`dart_split`).
    """
    if source == 'dart':
        return dart_split(h)
    if source != 'sim':
        raise ValueError(f"unknown data source '{source}'; use 'sim' or 'dart'")
    if minutes <= 0:
        raise ValueError(f'minutes must be positive, got {minutes}')
    train = simulated_drives(60.0 * minutes, CarParams(), MocapNoise(), seed)
    test = simulated_drives(120.0, CarParams(), MocapNoise(), seed + 1000)
    return car_dataset(train, h), car_dataset(test, h)


def build_car_model(model_type: str, h: float = 0.05) -> CarModel:
    """Build a car model by registry name with step h (s)."""
    if model_type not in CAR_MODEL_TYPES:
        raise ValueError(f"unknown car model '{model_type}'; known: {list(CAR_MODEL_TYPES)}")
    return build_model(model_type, {'h': h}, 6, 2, 6)


def train_car(model_type: str, train: CarDataset, test: CarDataset, epochs: int,
              seed: int = 0, lr: Optional[float] = None, log_every: int = 0
              ) -> Tuple[CarModel, Dict[str, float]]:
    """Train one model on `train` and return it with its metrics on `test` (1 s rollouts)."""
    torch.manual_seed(seed)
    model = build_car_model(model_type, train.h)
    model.fit_normalization(train.transitions())
    history = fit_car_model(model, train, epochs, lr or DEFAULT_LR[model_type], seed=seed,
                            log_every=log_every)
    metrics = evaluate_car_model(model, test, int(round(1.0 / train.h)))
    metrics['final_train_loss'] = history[-1]
    metrics['train_transitions'] = int(train.transitions().observations.shape[0])
    return model, metrics


def rollout_loss(model: CarModel, windows: SequenceBatch, position_weight: float = 1.0
                 ) -> torch.Tensor:
    """
    Open-loop loss of windows (observations (B, H + 1, 6), actions (B, H, 2)).

    Relative L1 (Eq. 11) of the body velocities predicted along the whole window from its
    first state, plus position_weight (1/m) times the mean position error (m) of the rollout.
    """
    pred = model.rollout(windows.observations[:, 0], windows.actions).mean
    true = windows.observations[:, 1:]
    position = torch.linalg.norm(pred[..., :2] - true[..., :2], dim=-1).mean()
    return relative_l1(true[..., 3:], pred[..., 3:], model.loss_eps) + position_weight * position


def fit_car_rollout(model: CarModel, train: CarDataset, epochs: int, horizon: int = 20,
                    lr: float = 3e-4, batch_size: int = 64, stride: int = 2,
                    position_weight: float = 1.0, max_grad_norm: float = 1.0,
                    seed: int = 0) -> List[float]:
    """
    Fine-tune a one-step-trained model on open-loop windows of `horizon` steps.

    Why: the offline scenarios play whole plans open loop, and a model fitted only one step
    ahead lets small per-step errors pile up along them (the seed's systematic end offsets).
    Training through the rollout (backpropagation through time, Adam, cosine decay to 5 %,
    gradient norm clipped to max_grad_norm: a window through a drift can give a huge
    gradient) weighs those errors directly. Returns the mean loss per epoch.
    """
    if epochs < 1 or horizon < 1:
        raise ValueError(f'epochs and horizon must be >= 1, got {epochs}, {horizon}')
    return fit_epochs(model, train.windows(horizon, stride),
                      lambda m, batch: rollout_loss(m, batch, position_weight), epochs, lr,
                      batch_size, seed, max_grad_norm)


def save_car_model(path: Path, model: CarModel, metadata: Dict[str, object]) -> Path:
    """Write an atomic checkpoint (weights, config, normalisation, metadata)."""
    return save_checkpoint(Path(path), model, metadata=metadata)


def load_car_model(path: Path) -> CarModel:
    """Load a car model checkpoint (weights_only); refuses a non-car model."""
    loaded = load_checkpoint(Path(path))
    if loaded.model_type not in CAR_MODEL_TYPES:
        raise ValueError(f"{path}: holds a '{loaded.model_type}' model, not a car model")
    return loaded.model
