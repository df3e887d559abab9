"""
Offline training of any registered model on windows (`SequenceBatch`), with early stopping.

Mini-batches of whole windows keep the temporal order inside each window (seed 001: shuffled
samples lose the LSTM's advantage); windows themselves are shuffled each epoch. Forward models
can be trained with a share of observations dropped (seed 004 Appendix B: three quarters),
which teaches multi-step prediction. Models that fit in closed form (the GP) are conditioned
by their `fit_data`, not trained by gradient steps.
"""
import copy
import dataclasses
import math
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from robot_dynamics_learning.core_types import SequenceBatch
from robot_dynamics_learning.data.splits import split_validation
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.data.windows import concat_batches
from robot_dynamics_learning.models.base import DynamicsModel
from robot_dynamics_learning.models.common import ModelConfig
import torch
from tqdm import tqdm


LR_SCHEDULES = ('constant', 'cosine')


def learning_rate_factor(schedule: str, step: int, total_steps: int) -> float:
    """Return the factor on the base learning rate at mini-batch `step` of `total_steps`."""
    if schedule == 'cosine':
        return 0.5 * (1.0 + math.cos(math.pi * min(step, total_steps) / max(total_steps, 1)))
    return 1.0


@dataclasses.dataclass(frozen=True)
class TrainConfig(ModelConfig):
    """
    Optimiser and stopping settings.

    learning_rate (Adam), batch_size in windows, max_epochs, patience in epochs without a
    better validation loss, min_delta (relative improvement that counts), obs_drop share of
    observations dropped for forward models (never the first of a window), grad_clip (norm),
    max_seconds wall-clock budget (None: no limit), seed, progress (tqdm bar), lr_schedule
    'constant' or 'cosine' (the rate decays to 0 over max_epochs, per mini-batch; it removes
    the noise floor of a constant rate, see the LSTM recipe in bench/models.py), refit_all:
    after early stopping, train the initial weights again on the training and validation
    windows together for the epochs early stopping chose, keeping the normalisation and the
    variance calibrated on the validation windows (the GP is conditioned on every sample too).
    Measured for the stateless FFNN: Kinova blocks test nMSE 0.10-0.68 (by which fifth of the
    training blocks validates) -> 0.08-0.13; docs/models.md, "The FFNN baseline".
    """

    learning_rate: float = 3e-3
    batch_size: int = 32
    max_epochs: int = 200
    patience: int = 15
    min_delta: float = 1e-4
    obs_drop: float = 0.0
    grad_clip: float = 10.0
    weight_decay: float = 0.0
    max_seconds: Optional[float] = None
    seed: int = 0
    progress: bool = True
    lr_schedule: str = 'constant'
    refit_all: bool = False

    def __post_init__(self) -> None:
        """Validate ranges, naming the bad value."""
        for name in ('learning_rate', 'batch_size', 'max_epochs', 'patience', 'grad_clip'):
            if getattr(self, name) <= 0:
                raise ValueError(f'TrainConfig.{name} must be > 0, got {getattr(self, name)}')
        if not 0.0 <= self.obs_drop < 1.0:
            raise ValueError(f'TrainConfig.obs_drop must be in [0, 1), got {self.obs_drop}')
        if self.max_seconds is not None and self.max_seconds <= 0:
            raise ValueError(f'TrainConfig.max_seconds must be > 0, got {self.max_seconds}')
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f'TrainConfig.lr_schedule must be one of {list(LR_SCHEDULES)}, '
                             f'got {self.lr_schedule!r}')


class TrainResult(NamedTuple):
    """What a training run did: best validation loss, epochs run, seconds, loss history."""

    best_val_loss: float
    epochs: int
    seconds: float
    history: List[Dict[str, float]]


def select(batch: SequenceBatch, index: torch.Tensor) -> SequenceBatch:
    """Return the windows `index` of a batch."""
    mask = None if batch.observation_valid is None else batch.observation_valid[index]
    return SequenceBatch(batch.observations[index], batch.actions[index], batch.targets[index],
                         mask)


def split_windows(batch: SequenceBatch, val_fraction: float) -> tuple:
    """Split into (train, validation) by position: the last `val_fraction` of the windows."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f'val_fraction must be in (0, 1), got {val_fraction}')
    n = batch.observations.shape[0]
    n_val = max(1, int(round(n * val_fraction)))
    if n - n_val < 1:
        raise ValueError(f'{n} windows of {batch.observations.shape[1]} steps are too few to '
                         'split off a validation set: give longer recordings or a smaller '
                         'data.window')
    index = torch.arange(n)
    return select(batch, index[:n - n_val]), select(batch, index[n - n_val:])


def holdout_windows(trajectories: Sequence[Trajectory],
                    make_windows: Callable[[Sequence[Trajectory]], SequenceBatch], window: int,
                    val_fraction: float = 0.2) -> Tuple[SequenceBatch, SequenceBatch]:
    """
    Return (train, validation) windows of the recordings split by `split_validation`.

    `make_windows` turns recordings into windows; `window` sizes the held-out blocks. Where
    the recordings are too short to hold out a block, the last `val_fraction` of the windows
    validates (`split_windows`).
    """
    fit, held = split_validation(trajectories, window, val_fraction)
    if held and fit:
        train, val = make_windows(fit), make_windows(held)
        if train.observations.shape[0] and val.observations.shape[0]:
            return train, val
    return split_windows(make_windows(trajectories), val_fraction)


def drop_observations(batch: SequenceBatch, share: float,
                      generator: torch.Generator) -> SequenceBatch:
    """Mark a random `share` of observations missing (the first step of each window stays)."""
    if share <= 0:
        return batch
    valid = torch.rand(batch.observations.shape[:2], generator=generator) >= share
    valid[:, 0] = True
    if batch.observation_valid is not None:
        valid &= batch.observation_valid.to(torch.bool)
    return batch._replace(observation_valid=valid)


def evaluate_loss(model: DynamicsModel, batch: SequenceBatch, batch_size: int = 256) -> float:
    """Mean loss over a batch of windows, in evaluation mode and without gradients."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, batch.observations.shape[0], batch_size):
            part = select(batch, torch.arange(start, min(start + batch_size,
                                                         batch.observations.shape[0])))
            loss, _ = model.loss(part)
            total += float(loss) * part.observations.shape[0]
            count += part.observations.shape[0]
    model.train(was_training)
    return total / max(count, 1)


def _validate_and_calibrate(model: DynamicsModel, val: Optional[SequenceBatch]) -> float:
    """Return the validation loss of a model fitted without epochs; calibrate its variance."""
    if val is None:
        return float('nan')
    loss = evaluate_loss(model, val)
    model.calibrate_variance(val)
    return loss


def train_model(model: DynamicsModel, train: SequenceBatch, val: Optional[SequenceBatch],
                config: TrainConfig) -> TrainResult:
    """
    Fit normalisation on `train`, then train with Adam until validation stops improving.

    The best weights (by validation loss; by training loss without `val`) are restored at the
    end; a model with `calibrate_variance` then sets its error variance on `val`. Forward
    models see the same observation-drop share in training and validation (a fixed validation
    mask), so validation measures what training optimises. With `refit_all` (and `val`) the
    initial weights then train on train and val together for the best epoch count.
    """
    start = time.perf_counter()
    torch.manual_seed(config.seed)
    if model.fits_in_closed_form:
        info = model.fit_data(train)
        _check_finite(model, 'fitted to the training data', train)
        return TrainResult(_validate_and_calibrate(model, val), 1, time.perf_counter() - start,
                           [dict(info)])
    model.fit_normalization(train)
    _check_finite(model, 'normalised on the training data', train)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        return TrainResult(_validate_and_calibrate(model, val), 0, time.perf_counter() - start,
                           [])
    refit_all = config.refit_all and val is not None
    initial = [p.detach().clone() for p in params] if refit_all else []
    descent = _descend(model, params, train, val, config, config.max_epochs, start)
    history = descent.history
    if val is not None:
        model.calibrate_variance(val)   # the error variance on held-out windows, best weights
        if refit_all:
            with torch.no_grad():
                for param, value in zip(params, initial):
                    param.copy_(value)
            refit = _descend(model, params, concat_batches([train, val]), None, config,
                             descent.best_epoch, start, desc='refit')
            history = history + [{**entry, 'refit': True} for entry in refit.history]
    _check_finite(model, 'trained (a diverged loss: lower training.learning_rate)', train)
    return TrainResult(descent.best_loss, descent.epochs, time.perf_counter() - start, history)


def _check_finite(model: DynamicsModel, stage: str, train: SequenceBatch) -> None:
    """
    Raise ValueError naming the first NaN or inf tensor of `model` after `stage`.

    Such a model must never be saved or used: its checkpoint would be refused at every load.
    Values that fit float32 but not its sums and squares (|x| from about 1e19) break the
    normalisation, so the message gives the largest training values.
    """
    for name, value in model.state_dict().items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            largest = [float(t.abs().max()) if t.numel() else 0.0
                       for t in (train.observations, train.targets)]
            raise ValueError(f'model tensor {name!r} is NaN or inf after it was {stage} '
                             f'(largest |input| {largest[0]:.3g}, |target| {largest[1]:.3g}; '
                             'float32 statistics overflow from about 1e19: rescale the data)')


class _Descent(NamedTuple):
    best_loss: float
    best_epoch: int   # epochs trained when the kept weights were reached
    epochs: int
    history: List[Dict[str, float]]


def _descend(model: DynamicsModel, params: List[torch.nn.Parameter], train: SequenceBatch,
             val: Optional[SequenceBatch], config: TrainConfig, max_epochs: int,
             start: float, desc: str = 'train') -> _Descent:
    """Run Adam epochs until `val` (or the training loss) stops improving; keep the best."""
    generator = torch.Generator().manual_seed(config.seed)
    drop = config.obs_drop if model.kind == 'forward' else 0.0
    val_batch = None if val is None else drop_observations(
        val, drop, torch.Generator().manual_seed(config.seed + 1))
    optimizer = torch.optim.Adam(params, lr=config.learning_rate,
                                 weight_decay=config.weight_decay)
    best_loss, best_state, best_epoch, stale = (float('inf'), copy.deepcopy(model.state_dict()),
                                                0, 0)
    history: List[Dict[str, float]] = []
    n = train.observations.shape[0]
    total_steps = max_epochs * math.ceil(n / config.batch_size)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda k: learning_rate_factor(config.lr_schedule, k, total_steps))
    bar = tqdm(range(max_epochs), disable=not config.progress, desc=desc, unit='epoch',
               leave=False)
    epoch = 0
    for epoch in bar:
        model.train()
        order = torch.randperm(n, generator=generator)
        epoch_loss = 0.0
        for first in range(0, n, config.batch_size):
            part = drop_observations(select(train, order[first:first + config.batch_size]),
                                     drop, generator)
            optimizer.zero_grad()
            loss, _ = model.loss(part)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, config.grad_clip)
            optimizer.step()
            scheduler.step()
            epoch_loss += float(loss.detach()) * part.observations.shape[0]
        epoch_loss /= n
        val_loss = evaluate_loss(model, val_batch) if val_batch is not None else epoch_loss
        history.append({'epoch': epoch, 'train_loss': epoch_loss, 'val_loss': val_loss})
        bar.set_postfix(train=f'{epoch_loss:.4f}', val=f'{val_loss:.4f}')
        if not math.isfinite(best_loss) or val_loss < best_loss - config.min_delta * best_loss:
            best_loss, best_state, best_epoch, stale = (val_loss,
                                                        copy.deepcopy(model.state_dict()),
                                                        epoch + 1, 0)
        else:
            stale += 1
        out_of_time = (config.max_seconds is not None
                       and time.perf_counter() - start > config.max_seconds)
        if stale >= config.patience or out_of_time:
            break
    bar.close()
    model.load_state_dict(best_state)
    model.eval()
    return _Descent(best_loss, best_epoch, epoch + 1, history)
