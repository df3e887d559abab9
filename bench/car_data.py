"""
A user's own car data, measured on the DART recordings replayed from rosbag2 folders.

1. estimator: every DART Vicon file written to a bag (PoseStamped + Joy), its poses read back
   and streamed through `MocapEstimator` (the node's core) at several settings; RMSE at zero
   lag against the zero-phase Savitzky-Golay reference (cubic, 0.2 s; and 0.1 s), and the
   delay that would minimise it. Then the command-driven yaw filter (signals/yaw_filter.py,
   the node with `command_type` set) on the same poses and their Joy commands, honestly: the
   files split in two folds (alternate files in sorted order); per fold, on one fold only,
   the yaw model is fitted (`fit_yaw_model`) and its noises chosen from a small grid (the
   filter before the tuning), then everything refined against the filter's own error
   (`tune_yaw_filter`: vy term, speed-dependent lag, steering-step noise); both are measured
   on the other fold; errors pooled over both folds' held-out files, per file too, against
   the fit (order 2, 0.12 s) in the same run. The shipped defaults (the same procedure on
   all files) and the previous ones are measured as well (in-sample).
2. training: the DART file split as bags (15 train, 2 test files), both models trained to
   convergence (`rdl car train --source bag`) against the fixed recipes of
   docs/results_car.md section 1, in the same run; the same at 20 Hz (every fifth pose) and
   on small data (68 s of one training file; the first 15 s of three, as the test fixtures).
   Saves the converged bicycle as config/models/car_bicycle_dart.pt (`rdl car replay`'s
   default with the DART MLP).
Writes bench/results/car_data.json. `python -m bench.car_data estimator` runs only part 1.
"""
import dataclasses
import json
from pathlib import Path
import sys
import tempfile
import time
from typing import Dict, List

import numpy as np
from robot_dynamics_learning.control.car_training import car_data, save_car_model, train_car
from robot_dynamics_learning.data import bag_io, datasets
from robot_dynamics_learning.data.car_datasets import DART_TEST_FILES
from robot_dynamics_learning.data.car_sources import BagOptions
from robot_dynamics_learning.data.messages import JOY
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.signals.estimator_check import (estimator_errors,
                                                             reference_states,
                                                             stream_commanded,
                                                             stream_estimates)
from robot_dynamics_learning.signals.mocap import MocapEstimator, MocapEstimatorConfig
from robot_dynamics_learning.signals.yaw_filter import (fit_yaw_model, replay_yaw_rates,
                                                        tune_yaw_filter, YawModelConfig)
import torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / 'bench' / 'results' / 'car_data.json'
ESTIMATORS = {
    'order 1, 0.08 s (car.yaml for car_sim)':
        MocapEstimatorConfig(window_s=0.08, yaw_window_s=None, order=1),
    'order 2, 0.08 s': MocapEstimatorConfig(window_s=0.08, yaw_window_s=None, order=2),
    'order 2, 0.09 s, yaw 0.12 s': MocapEstimatorConfig(window_s=0.09, yaw_window_s=0.12),
    'order 2, 0.12 s (default)': MocapEstimatorConfig(),
    'order 2, 0.16 s': MocapEstimatorConfig(window_s=0.16),
    'order 2, 0.12 s, yaw 0.2 s': MocapEstimatorConfig(yaw_window_s=0.2),
}
BEFORE = 'order 1, 0.08 s, rotated with the newest yaw (before)'
# (accel_noise, bias_noise, slip_accel) candidates of the yaw filter, chosen per fold on its
# fit files.
NOISES = ((4.0, 2.0, 3.0), (8.0, 2.0, 3.0), (16.0, 2.0, 3.0), (8.0, 0.5, 3.0), (8.0, 8.0, 3.0),
          (8.0, 2.0, 0.0))
# The tuning (tune_yaw_filter) starts from fit_yaw_model's model with these settings, with
# at most TUNE_EVALS filter runs per fold.
TUNE_START = {'step_rate': 0.3, 'step_memory_s': 0.1, 'tau_per_speed': 0.01,
              'lateral_gain': 0.0}
TUNE_EVALS = 200
# The shipped defaults before the tuning (fit_yaw_model and NOISES on all 17 files): no vy
# term, a constant lag, no steering-step noise.
PREVIOUS_DEFAULTS = YawModelConfig(gain=2.30, cubic=-0.81, tau_s=0.08, accel_noise=8.0,
                                   bias_noise=2.0, slip_accel=3.0, step_rate=0.0,
                                   lateral_gain=0.0, tau_per_speed=0.0)
FASTEST = 'car_1_Datarecording_09_16_2024_10_27_02.csv'


class NewestYawRotation(MocapEstimator):
    """The estimator before this change: the window's mean velocity, newest heading."""

    def _fit(self):
        estimate = super()._fit()
        if estimate is None:
            return None
        cfg = self.config
        times = self._time[(self._head - 1 - np.arange(self._count)) % cfg.capacity]
        at = float(np.mean(times[times >= times[0] - cfg.window_s] - times[0]))
        state = estimate.state.copy()
        turn = -estimate.state[5] * at   # heading change from the fit's instant to the newest
        c, s = np.cos(turn), np.sin(turn)
        state[3], state[4] = c * state[3] + s * state[4], -s * state[3] + c * state[4]
        return estimate._replace(state=state)


FIXED = {'car_mlp': (60, 1e-3), 'car_bicycle': (20, None)}   # results_car.md section 1
SMALL_S = 68.0


def write_bags(drives: List[Trajectory], folder: Path) -> List[Path]:
    """Write one bag per drive (PoseStamped + Joy, as a user's teleoperated car records)."""
    paths = []
    for k, drive in enumerate(drives):
        path = folder / f'drive_{k:02d}'
        bag_io.write_car_trajectories(path, [drive], 'sqlite3', command_type=JOY)
        paths.append(path)
    return paths


def pooled_errors(drives: List[Trajectory], estimates: List[np.ndarray],
                  references: List[np.ndarray]) -> Dict[str, Dict[str, float]]:
    """RMSE and best delay over the samples of several drives (time made disjoint)."""
    time_all = np.concatenate([d.time + 1e4 * k for k, d in enumerate(drives)])
    return estimator_errors(time_all, np.concatenate(estimates), np.concatenate(references))


def fold_drives(drives: List[Trajectory], fitted: Dict[int, np.ndarray],
                references: List[np.ndarray], index: List[int]) -> list:
    """Return the (time, yaw, fit states, steering, reference rate) `tune_yaw_filter` takes."""
    return [(drives[i].time, drives[i].observations[:, 2], fitted[i], drives[i].actions[:, 1],
             references[i][:, 5]) for i in index]


def grid_noises(drives: list, model: YawModelConfig) -> tuple:
    """
    Choose the noises from NOISES on the fit files: the filter as it was before the tuning.

    drives: `fold_drives` of the fit files; scored with `replay_yaw_rates` (the same numbers
    as streaming the poses through `CommandedEstimator`, from the stored fit states).
    """
    scores = {}
    for accel, bias, slip in NOISES:
        candidate = dataclasses.replace(model, accel_noise=accel, bias_noise=bias,
                                        slip_accel=slip)
        errors = np.concatenate([replay_yaw_rates(candidate, *drive[:4]) - drive[4]
                                 for drive in drives])
        scores[(accel, bias, slip)] = float(np.sqrt(np.nanmean(errors ** 2)))
    accel, bias, slip = min(scores, key=scores.get)
    chosen = dataclasses.replace(model, accel_noise=accel, bias_noise=bias, slip_accel=slip)
    return chosen, {'/'.join(f'{x:g}' for x in key): v for key, v in scores.items()}


def identify(drives: List[Trajectory], fitted: Dict[int, np.ndarray],
             references: List[np.ndarray], fit: List[int]) -> tuple:
    """Identify the filter on the files `fit`: (before, its noise scores, tuned, its RMSE)."""
    model = fit_yaw_model([(drives[i].time, drives[i].observations, drives[i].actions[:, 1])
                           for i in fit], base=PREVIOUS_DEFAULTS)
    fold = fold_drives(drives, fitted, references, fit)
    before, scores = grid_noises(fold, model)
    tuned, score = tune_yaw_filter(fold, dataclasses.replace(before, **TUNE_START),
                                   max_evals=TUNE_EVALS)
    return before, scores, tuned, score


def command_filter_results(drives: List[Trajectory], names: List[str],
                           references: List[np.ndarray]) -> Dict[str, object]:
    """
    Part 1b: the command-driven yaw filter, 2-fold cross-validated, vs the fit.

    Per fold, on its fit files only: "before" is `fit_yaw_model` plus the noises chosen from
    NOISES (the filter without the steering-step noise, as shipped before); "tuned" starts
    there and minimises the filter's own error (`tune_yaw_filter`, steering-step noise on).
    Both are measured on the other fold's files, with the fit, in the same run.
    """
    order = np.argsort(names)
    folds = [sorted(order[0::2].tolist()), sorted(order[1::2].tolist())]
    index = sorted(folds[0] + folds[1])
    fitted = {i: stream_estimates(drives[i].time, drives[i].observations)[0] for i in index}
    variants = {'yaw filter, cross-validated (before: grid noises, no step noise)': {},
                'yaw filter, tuned, cross-validated': {}}
    before_key, tuned_key = variants
    out: Dict[str, object] = {'folds': [[names[i] for i in fold] for fold in folds]}
    for k, (fit, test) in enumerate([(folds[0], folds[1]), (folds[1], folds[0])]):
        start = time.perf_counter()
        before, scores, tuned, score = identify(drives, fitted, references, fit)
        out[f'fold_{k}_model'] = dataclasses.asdict(before)
        out[f'fold_{k}_noise_scores_on_fit_files'] = scores
        out[f'fold_{k}_tuned_model'] = dataclasses.asdict(tuned)
        out[f'fold_{k}_tuned_rmse_on_fit_files'] = score
        out[f'fold_{k}_seconds'] = time.perf_counter() - start
        print('fold', k, before, tuned, score, flush=True)
        for i in test:
            for key, chosen in ((before_key, before), (tuned_key, tuned)):
                variants[key][i] = stream_commanded(drives[i].time, drives[i].observations,
                                                    drives[i].actions, model=chosen)[0]
    start = time.perf_counter()
    _, _, all_files, score = identify(drives, fitted, references, index)
    out['tuned_on_all_files'] = {'model': dataclasses.asdict(all_files), 'rmse': score,
                                 'seconds': time.perf_counter() - start}
    print('tuned on all files', all_files, score, flush=True)
    shipped = {i: stream_commanded(drives[i].time, drives[i].observations,
                                   drives[i].actions)[0] for i in index}
    previous = {i: stream_commanded(drives[i].time, drives[i].observations, drives[i].actions,
                                    model=PREVIOUS_DEFAULTS)[0] for i in index}
    without = {i: stream_commanded(drives[i].time, drives[i].observations, None)[0]
               for i in index}
    subset = [drives[i] for i in index]
    refs = [references[i] for i in index]
    runs = {'fit (order 2, 0.12 s)': fitted, **variants,
            'yaw filter, shipped defaults (tuned on all 17: in-sample)': shipped,
            'yaw filter, previous defaults (in-sample)': previous,
            'yaw filter without commands (fit fallback)': without}
    out['pooled'] = {name: pooled_errors(subset, [states[i] for i in index], refs)
                     for name, states in runs.items()}
    fastest = [i for i in index if names[i] == FASTEST]
    rest = [i for i in index if names[i] != FASTEST]
    out['pooled_without_fastest_file'] = {
        name: pooled_errors([drives[i] for i in rest], [runs[name][i] for i in rest],
                            [references[i] for i in rest])
        for name in ('fit (order 2, 0.12 s)', before_key, tuned_key)} if fastest else {}
    out['per_file'] = {names[i]: {
        'poses': len(drives[i]),
        'fit': estimator_errors(drives[i].time, fitted[i], references[i]),
        **{key: estimator_errors(drives[i].time, variants[key][i], references[i])
           for key in variants}} for i in index}
    for name, errors in out['pooled'].items():
        print(name, {k: round(v['rmse'], 4) for k, v in errors.items()}, flush=True)
    return out


def estimator_results(bags: List[Path], names: List[str]) -> Dict[str, object]:
    """Part 1: every estimator setting on every bag's poses, errors pooled over samples."""
    drives = [bag_io.read_car_trajectory(path) for path in bags]
    out: Dict[str, object] = {'files': len(drives),
                              'poses': int(sum(len(d) for d in drives))}
    for window in (0.2, 0.1):
        references = [reference_states(d.time, d.observations, 0.05, window) for d in drives]
        table = {}
        runs = {BEFORE: (ESTIMATORS['order 1, 0.08 s (car.yaml for car_sim)'],
                         NewestYawRotation),
                **{name: (config, MocapEstimator) for name, config in ESTIMATORS.items()}}
        for name, (config, kind) in runs.items():
            pooled = [stream_estimates(d.time, d.observations, config, kind)[0]
                      for d in drives]
            table[name] = pooled_errors(drives, pooled, references)
            print(window, name, {k: round(v['rmse'], 4) for k, v in table[name].items()},
                  flush=True)
        out[f'reference_{window:g}s'] = table
        if window == 0.2:
            out['command_yaw_filter'] = command_filter_results(drives, names, references)
    return out


def subsample(drive: Trajectory, every: int) -> Trajectory:
    """Every `every`-th pose and command (a slower mocap)."""
    return Trajectory(time=drive.time[::every], observations=drive.observations[::every],
                      actions=drive.actions[::every], source=f'{drive.source}[::{every}]')


def first_seconds(drive: Trajectory, seconds: float) -> Trajectory:
    """Return the first `seconds` of a drive."""
    return drive.segment(0, int(np.searchsorted(drive.time, seconds)))


def train_both(train, test, fixed: bool) -> Dict[str, object]:
    """Train both models (converged, and the fixed recipe when asked) on one data pair."""
    out = {'train_s': train.duration_s, 'test_s': test.duration_s, 'data': train.info}
    for model_type, (epochs, lr) in FIXED.items():
        runs = {'converged': {'epochs': None, 'lr': None}}
        if fixed:
            runs['fixed'] = {'epochs': epochs, 'lr': lr}
        for name, kwargs in runs.items():
            start = time.perf_counter()
            model, metrics = train_car(model_type, train, test, progress=True, **kwargs)
            metrics['train_seconds'] = time.perf_counter() - start
            out[f'{model_type}_{name}'] = metrics
            print(model_type, name, round(metrics['position_error_m'], 4), flush=True)
            if model_type == 'car_bicycle' and name == 'converged' and fixed:
                out['model'] = model
    return out


def training_results(folder: Path, train_drives: List[Trajectory],
                     test_drives: List[Trajectory]) -> Dict[str, object]:
    """Part 2: converged vs fixed recipes from bags at 100 Hz, 20 Hz and on 68 s of data."""
    options = BagOptions(command_topic=bag_io.CAR_COMMAND_TOPIC)
    cases = {
        'dart_100hz': (train_drives, test_drives, True),
        'dart_20hz': ([subsample(d, 5) for d in train_drives],
                      [subsample(d, 5) for d in test_drives], False),
        'small_68s': ([first_seconds(max(train_drives, key=len), SMALL_S)], test_drives, True),
        'small_3x15s': ([first_seconds(d, 15.0) for d in train_drives[:3]], test_drives, True),
    }
    out = {}
    for name, (train_part, test_part, fixed) in cases.items():
        train_bags = write_bags(train_part, folder / name / 'train')
        test_bags = write_bags(test_part, folder / name / 'test')
        train, test = car_data('bag', 0.05, paths=train_bags, test_paths=test_bags,
                               options=options)
        out[name] = train_both(train, test, fixed)
    bicycle = out['dart_100hz'].pop('model')
    save_car_model(ROOT / 'config' / 'models' / 'car_bicycle_dart.pt', bicycle,
                   {'source': 'dart (bench.car_data, converged)',
                    'test_metrics': out['dart_100hz']['car_bicycle_converged']})
    for case in out.values():
        case.pop('model', None)
    return out


def main() -> None:
    """Run the parts, write bench/results/car_data.json."""
    torch.set_num_threads(1)
    datasets.require_full_data('the car data benchmark')
    files = datasets.rc_car_files()
    train_drives = [datasets.load_rc_car(f) for f in files if f.name not in DART_TEST_FILES]
    test_drives = [datasets.load_rc_car(f) for f in files if f.name in DART_TEST_FILES]
    result = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        bags = write_bags(train_drives + test_drives, folder / 'all')
        names = [f.name for f in files if f.name not in DART_TEST_FILES] + \
            [f.name for f in files if f.name in DART_TEST_FILES]
        result['estimator'] = estimator_results(bags, names)
        if sys.argv[1:2] != ['estimator']:
            result['training'] = training_results(folder, train_drives, test_drives)
    result['threads'] = 1
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2, default=float))
    print(json.dumps(result, indent=2, default=float))


if __name__ == '__main__':
    main()
