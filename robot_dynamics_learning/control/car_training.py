"""
Train the learned car models on simulated, DART or a user's own driving data.

One entry point for `rdl car train`, the benchmarks and the demo: data from the simulator
(random driver seen through emulated mocap), the DART recordings or a user's bags / CSV
trees, the same pipeline (`data/car_datasets.car_dataset`), the same trainer, and metrics on
held-out drives. `fit_until_converged` trains to convergence on a validation split (early
stopping, best weights restored, a max-epoch guard) instead of a fixed epoch count: a fixed
recipe that suits 12 minutes of DART driving collapses on a one-minute recording (the MLP
learned "no change") and under-fits the bicycle model.
"""
import copy
from dataclasses import dataclass
import logging
import math
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from robot_dynamics_learning.control.car_evaluation import (evaluate_car_model,
                                                            trajectory_validation_error)
from robot_dynamics_learning.core_types import SequenceBatch
from robot_dynamics_learning.data.car_datasets import (car_dataset, CarDataset, dart_split,
                                                       MAX_YAW_RATE)
from robot_dynamics_learning.data.car_sources import (BagOptions, car_source_files,
                                                      load_car_drives)
from robot_dynamics_learning.learning.checkpoint import load_checkpoint, save_checkpoint
from robot_dynamics_learning.models.car_base import CarModel, relative_l1
from robot_dynamics_learning.models.registry import build_model
from robot_dynamics_learning.sim.car import CarParams, MocapNoise
from robot_dynamics_learning.sim.driving import simulated_drives
import torch
from tqdm import tqdm

LOG = logging.getLogger(__name__)
CAR_MODEL_TYPES = ('car_mlp', 'car_bicycle')
# Learning rates that work for each model with `fit_car_model` (Adam, cosine decay).
DEFAULT_LR = {'car_mlp': 2e-3, 'car_bicycle': 1e-2}
# Held-out blocks of a user's data: every HOLD_EVERY-th block of driving is the test split,
# another one of the rest the validation split (early stopping).
HOLD_EVERY = 5
# The open-loop horizon of the reported metrics (s); a held block must hold one such window
# (a block of exactly 1 s has one sample too few), hence the shortest block.
EVAL_HORIZON_S = 1.0
MIN_BLOCK_S = 1.5 * EVAL_HORIZON_S


def smoothing_guard(data: CarDataset) -> int:
    """
    Model steps a held block's neighbours lose: half the smoothing window plus one pose.

    The states are smoothed and differentiated (zero phase, `car_dataset`) before blocks
    are held out; without the guard the training states next to a held block would carry
    its poses. Data not made by `car_dataset` (no 'window_s' in its info) loses nothing.
    """
    window_s, rate_hz = data.info.get('window_s'), data.info.get('rate_hz_min')
    if not window_s or not rate_hz:
        return 0
    return int(math.ceil((window_s / 2.0 + 1.0 / rate_hz) / data.h - 1e-9))


def hold_out_blocks(data: CarDataset, offset: int) -> Tuple[CarDataset, CarDataset]:
    """
    Return (rest, held): every HOLD_EVERY-th block of driving held back.

    Blocks are 5 s long, shorter (down to MIN_BLOCK_S) on recordings under 100 s so that
    even a one-minute drive gives several held blocks in different situations. The rest
    loses `smoothing_guard` steps next to each held block.
    """
    block_s = min(5.0, max(MIN_BLOCK_S, data.duration_s / 20.0))
    rest, held = data.split_blocks(block_s, HOLD_EVERY, offset, smoothing_guard(data))
    if len(held.segments) == 0 or len(rest.segments) == 0:
        raise ValueError(f'{data.duration_s:.1f} s of driving is too little to hold back '
                         f'blocks of {block_s:g} s (need at least '
                         f'{HOLD_EVERY * block_s:g} s of driving); record more')
    return rest, held


def car_data(source: str, h: float, minutes: float = 15.0, seed: int = 0,
             paths: Sequence[Path] = (), test_paths: Sequence[Path] = (),
             options: BagOptions = BagOptions(), params: CarParams = CarParams(),
             max_gap_s: Optional[float] = None, max_speed: float = 8.0,
             max_yaw_rate: float = MAX_YAW_RATE, progress: bool = False, test_only: bool = False
             ) -> Tuple[CarDataset, CarDataset]:
    """
    Return (train, test) data sets of model transitions at step h.

    'sim' drives `minutes` of random driving of a car with `params` (test: 2 minutes with
    another seed); 'dart' is the DART file split (`dart_split`); 'bag' and 'csv' read a
    user's recordings from `paths` (`data/car_sources.py`): test drives from `test_paths`
    (never trained on, even where they lie inside a --data tree), or without them every
    fifth block of the recordings (`hold_out_blocks`), never trained on. max_gap_s: gap
    threshold (default from the detected sample rate); max_speed (m/s), max_yaw_rate
    (rad/s): faster states of a user's recordings are mocap glitches, cut out. test_only
    (`rdl car evaluate`): with test_paths the training recordings are neither read nor
    needed, and train is empty.
    """
    if source in ('sim', 'dart') and (paths or test_paths):
        # the default source is sim: a user's --data was ignored, the model trained on sim
        raise ValueError(f"source '{source}' reads no --data or --test-data; add --source bag "
                         'or --source csv to train on your recordings')
    if source == 'dart':
        return dart_split(h)
    if source in ('bag', 'csv'):
        limits = {'max_gap_s': max_gap_s, 'max_speed': max_speed, 'max_yaw_rate': max_yaw_rate}
        if test_paths:
            test_files = car_source_files(source, test_paths)
            test = car_dataset(load_car_drives(source, test_files, options, progress), h,
                               **limits)
            if test_only:
                return test.subset([]), test
            return car_dataset(load_car_drives(source, paths, options, progress, test_files), h,
                               **limits), test
        return hold_out_blocks(car_dataset(load_car_drives(source, paths, options, progress), h,
                                           **limits), HOLD_EVERY - 1)
    if source != 'sim':
        raise ValueError(f"unknown data source '{source}'; use sim, dart, bag or csv")
    if minutes <= 0:
        raise ValueError(f'minutes must be positive, got {minutes}')
    train = simulated_drives(60.0 * minutes, params, MocapNoise(), seed)
    if not train:   # the simulator splits the time among its cars and keeps drives of 2 s
        raise ValueError(f'{minutes:g} minutes of simulated driving gave no drive long enough '
                         'to learn from; give more --minutes (0.5 or more)')
    test = simulated_drives(120.0, params, MocapNoise(), seed + 1000)
    return car_dataset(train, h), car_dataset(test, h)


def build_car_model(model_type: str, h: float = 0.05,
                    settings: Optional[Dict[str, Any]] = None) -> CarModel:
    """
    Build a car model by registry name with step h (s).

    settings: config fields of the model (e.g. wheelbase, rear_to_cg for `car_bicycle`,
    hidden, layers for `car_mlp`); an unknown name is refused by the model's config. h
    beyond EVAL_HORIZON_S is refused: no window of the scored horizon would hold a step.
    """
    if model_type not in CAR_MODEL_TYPES:
        raise ValueError(f"unknown car model '{model_type}'; known: {list(CAR_MODEL_TYPES)}")
    if not 0 < h <= EVAL_HORIZON_S:
        raise ValueError(f'the model step h must be in (0, {EVAL_HORIZON_S:g}] s, got {h}')
    return build_model(model_type, {**(settings or {}), 'h': h}, 6, 2, 6)


def fit_epochs(model: CarModel, data: SequenceBatch,
               loss_fn: Callable[[CarModel, SequenceBatch], torch.Tensor], epochs: int,
               lr: float, batch_size: int, seed: int = 0,
               max_grad_norm: Optional[float] = None, log_every: int = 0) -> List[float]:
    """
    Minimise `loss_fn(model, batch)` with Adam over shuffled rows of `data`, epoch by epoch.

    The learning rate decays by cosine to 5 %; gradients are clipped to `max_grad_norm` when
    given. A batch with a non-finite loss or gradient is skipped and counted in a warning (a
    NaN never reaches the weights). Returns the mean training loss per epoch (NaN for an
    epoch without a usable batch); the model ends in eval mode.
    """
    generator = torch.Generator().manual_seed(seed)
    count = data.observations.shape[0]
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epochs, lr * 0.05)
    for parameter in model.parameters():
        parameter.requires_grad_(True)   # an optimisation through the model may have frozen them
    history, skipped = [], 0
    model.train()
    for epoch in range(epochs):
        order = torch.randperm(count, generator=generator)
        total, used = 0.0, 0
        for start in range(0, count, batch_size):
            index = order[start:start + batch_size]
            loss = loss_fn(model, SequenceBatch(data.observations[index], data.actions[index],
                                                data.targets[index]))
            optimizer.zero_grad()
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                  max_grad_norm or math.inf)
            if not (torch.isfinite(loss) and torch.isfinite(norm)):
                skipped += 1
                continue
            optimizer.step()
            total += float(loss.detach()) * index.numel()
            used += index.numel()
        schedule.step()
        history.append(total / used if used else math.nan)
        if log_every and (epoch + 1) % log_every == 0:
            print(f'epoch {epoch + 1}: loss {history[-1]:.4f}', flush=True)
    if skipped:
        LOG.warning('skipped %d batches with a non-finite loss or gradient (learning rate %g)',
                    skipped, lr)
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


@dataclass(frozen=True)
class StopRule:
    """
    When `fit_until_converged` stops.

    After patience epochs without a relative improvement of min_delta in the validation
    score, or after max_epochs (the guard); the learning rate halves after patience // 3
    epochs without improvement. The first warmup_epochs minimise the squared velocity
    change error instead of the relative L1 loss (see `fit_until_converged`).
    """

    max_epochs: int = 400
    patience: int = 30
    min_delta: float = 1e-3
    warmup_epochs: int = 10

    def __post_init__(self) -> None:
        """Refuse rules that never train or never stop."""
        if (self.max_epochs < 1 or self.patience < 1 or not 0 <= self.min_delta < 1
                or self.warmup_epochs < 0):
            raise ValueError(f'need max_epochs >= 1, patience >= 1, 0 <= min_delta < 1, '
                             f'warmup_epochs >= 0; got {self}')


def squared_change_loss(model: CarModel, batch: SequenceBatch, scale: torch.Tensor
                        ) -> torch.Tensor:
    """Mean squared error of the next body velocities, per component over `scale` (3,)."""
    prediction = model(batch).mean[..., 3:]
    return (((prediction - batch.targets[..., 3:]) / scale) ** 2).mean()


def validation_score(model: CarModel, val: CarDataset) -> float:
    """
    Seed Eq. 10 (TVE) on 1 s open-loop windows of `val`: the seed's validation error.

    A validation set without a 1 s window falls back to the one-step loss (Eq. 11).
    """
    steps = max(1, int(round(1.0 / val.h)))
    model.eval()
    try:
        windows = val.windows(steps, max(1, steps // 2))
    except ValueError:
        with torch.no_grad():
            return float(model.loss(val.transitions())[0])
    return trajectory_validation_error(model, windows)


def fit_until_converged(model: CarModel, train: CarDataset, val: CarDataset, lr: float,
                        rule: StopRule = StopRule(), batch_size: Optional[int] = None,
                        seed: int = 0, progress: bool = False) -> Dict[str, Any]:
    """
    Adam on the one-step loss until the validation score stops improving; best weights kept.

    batch_size: default n / 20 clamped to [32, 256], so a small recording still gets 20
    updates per epoch. Warm-up: the relative L1 loss (Eq. 11) is minimised by the median
    change, and where most samples barely change (a recording that stands still for half
    its length) that is "no change": on 45 s of DART driving the MLP collapsed to predicted
    changes of 7e-5 m/s (the measured ones: 0.07). A few epochs of squared error first
    (minimised by the mean) start it from a model that follows the changes. A batch with a
    non-finite loss is skipped and counted (a NaN never reaches the weights). Returns the
    history: val scores, best epoch, epochs run, skipped batches.
    """
    data = train.transitions()
    count = data.observations.shape[0]
    if count < 2 or not val.segments:
        raise ValueError(f'need training and validation transitions; got {count} and '
                         f'{len(val.segments)} validation drives')
    batch_size = batch_size or min(256, max(32, count // 20))
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, factor=0.5, patience=max(1, rule.patience // 3), threshold=rule.min_delta)
    for parameter in model.parameters():
        parameter.requires_grad_(True)
    change = (data.targets - data.observations)[..., 3:].reshape(-1, 3)
    scale = torch.nan_to_num(change, nan=0.0).std(0).clamp_min(1e-3)
    warmup = min(rule.warmup_epochs, rule.max_epochs // 2)
    best, best_epoch, since_best = math.inf, 0, 0
    best_state = copy.deepcopy(model.state_dict())
    scores, skipped = [validation_score(model, val)], 0
    bar = tqdm(range(rule.max_epochs), disable=not progress, unit='epoch', desc='train')
    for epoch in bar:
        model.train()
        order = torch.randperm(count, generator=generator)
        for start in range(0, count, batch_size):
            index = order[start:start + batch_size]
            batch = SequenceBatch(data.observations[index], data.actions[index],
                                  data.targets[index])
            loss = (squared_change_loss(model, batch, scale) if epoch < warmup
                    else model.loss(batch)[0])
            if not torch.isfinite(loss):
                skipped += 1
                continue
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        score = validation_score(model, val)
        scores.append(score)
        if epoch < warmup:
            continue
        plateau.step(score)
        if math.isfinite(score) and score < best * (1.0 - rule.min_delta):
            best, best_epoch, since_best = score, epoch + 1, 0
            best_state = copy.deepcopy(model.state_dict())
        else:
            since_best += 1
        bar.set_postfix(val=f'{score:.4f}', best=f'{best:.4f}')
        if since_best >= rule.patience:
            break
    model.load_state_dict(best_state)
    model.eval()
    return {'val_scores': scores, 'best_val': best, 'best_epoch': best_epoch,
            'epochs_run': len(scores) - 1, 'skipped_non_finite': skipped,
            'batch_size': batch_size}


def train_car(model_type: str, train: CarDataset, test: CarDataset, seed: int = 0,
              lr: Optional[float] = None, rule: StopRule = StopRule(),
              settings: Optional[Dict[str, Any]] = None, epochs: Optional[int] = None,
              progress: bool = False) -> Tuple[CarModel, Dict[str, Any]]:
    """
    Train one model and return it with its metrics on `test` (1 s rollouts).

    Default: to convergence (`fit_until_converged`) with every fifth block of `train` as
    the validation split (`hold_out_blocks`). epochs: instead the fixed recipe on all of
    `train` (`fit_car_model`, cosine decay; what the published DART numbers used).
    settings: model config fields (`build_car_model`).
    """
    if epochs is not None and epochs < 1:
        raise ValueError(f'epochs must be >= 1, got {epochs}')
    steps = int(round(EVAL_HORIZON_S / train.h))
    if not any(b - a > steps for a, b in test.segments):
        # checked before training: the scores come after it, and a crash there loses the model
        raise ValueError(f'the test data ({test.duration_s:.1f} s) has no unbroken '
                         f'{EVAL_HORIZON_S:g} s of driving to score the model on; record '
                         'longer drives or give other --test-data')
    torch.manual_seed(seed)
    fit, val = (train, None) if epochs is not None else hold_out_blocks(train, 2)
    model = build_car_model(model_type, train.h, settings)
    model.fit_normalization(fit.transitions())
    lr = lr or DEFAULT_LR[model_type]
    if val is None:
        losses = fit_car_model(model, fit, epochs, lr, seed=seed)
        history: Dict[str, Any] = {'epochs_run': epochs, 'final_train_loss': losses[-1]}
    else:
        history = fit_until_converged(model, fit, val, lr, rule, seed=seed, progress=progress)
        history.pop('val_scores')
        history['validation_transitions'] = int(val.transitions().observations.shape[0])
    metrics: Dict[str, Any] = evaluate_car_model(model, test, steps)
    metrics.update(history)
    diverged = [k for k in ('final_train_loss', 'best_val', 'rel_l1_one_step',
                            'position_error_m') if k in metrics and not math.isfinite(metrics[k])]
    if diverged:   # refused here: the caller would save a model that only gives NaN
        raise ValueError(f"training diverged at learning rate {lr:g} ({', '.join(diverged)} "
                         'not finite); try a smaller --lr')
    metrics['train_transitions'] = int(fit.transitions().observations.shape[0])
    metrics['data'] = dict(train.info)
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
