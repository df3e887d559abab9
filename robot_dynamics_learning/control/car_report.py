"""
The car evaluation report: metrics.json, PNG plots and report.md for held-out drives.

Every model (learned checkpoints and the constant-velocity baseline) is rolled out open
loop from the measured state at the start of each window with the measured commands, and
compared with the measured motion (zero-phase mocap estimate) step by step: errors vs
horizon, a per-model table at 1 s (as `rdl car train` prints), rollouts vs measured paths.
`rdl car replay` adds the causal state estimator replayed on the bag's poses against the
zero-phase reference (`signals/estimator_check.py`). Formatting helpers are the arm replay
report's (`learning/report.py`).
"""
import json
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np
from robot_dynamics_learning.control.car_evaluation import evaluate_car_model, horizon_errors
from robot_dynamics_learning.data.car_datasets import CarDataset
from robot_dynamics_learning.learning.report import json_ready, short_number
from robot_dynamics_learning.models.car_base import CarModel, ConstantVelocityCar
import torch

BASELINE = 'constant velocity'


def evaluate_models(models: Dict[str, CarModel], test: CarDataset, horizon_s: float = 1.0
                    ) -> Dict[str, Any]:
    """Score every model plus the constant-velocity baseline on `test` (see module doc)."""
    steps = max(1, int(round(horizon_s / test.h)))
    windows = test.windows(steps, max(1, steps // 2))
    every = {**models, BASELINE: ConstantVelocityCar(test.h)}
    out = {}
    for name, model in every.items():
        if abs(model.h - test.h) > 1e-9:
            raise ValueError(f'{name}: model step {model.h} s differs from the data step '
                             f'{test.h} s; rebuild the data with --h {model.h}')
        metrics = evaluate_car_model(model, test, steps)
        metrics['horizon'] = {k: v.tolist() for k, v in horizon_errors(model, windows).items()}
        out[name] = metrics
    return out


def verdict(scores: Dict[str, Any]) -> Dict[str, Any]:
    """
    Best model by 1 s end-position error, and its ratio to the baseline's error.

    Both errors 0 (a car that stands still throughout the test data) is a ratio of 1.
    """
    learned = {k: v for k, v in scores.items() if k != BASELINE}
    base = scores[BASELINE]['position_error_m']
    if not learned:
        return {'best_model': None, 'baseline_error_m': base}
    best = min(learned, key=lambda k: learned[k]['position_error_m'])
    error = learned[best]['position_error_m']
    return {'best_model': best, 'model_error_m': error, 'baseline_error_m': base,
            'baseline_over_model': base / max(error, 1e-12) if base > 0 or error > 0 else 1.0}


def _verdict_text(metrics: Dict[str, Any]) -> str:
    v = metrics['verdict']
    horizon = metrics['horizon_s']
    if v['best_model'] is None:
        return (f"Only the baseline ran: {short_number(v['baseline_error_m'])} m after "
                f'{horizon:g} s.')
    ratio = v['baseline_over_model']
    if ratio == 1.0:   # both 0 (the car stood still) or equal
        compare = 'the same as'
    elif ratio > 1:
        compare = f'{ratio:.2f} times smaller than'
    elif ratio > 0:
        compare = f'{1 / ratio:.2f} times LARGER than'
    else:   # the baseline is exact: nothing moved in the test data
        compare = 'LARGER than'
    return (f"Best model: **{v['best_model']}**, end-position error "
            f"{short_number(v['model_error_m'])} m after {horizon:g} s open loop, {compare} the "
            f"constant-velocity baseline's ({short_number(v['baseline_error_m'])} m).")


def _plot_horizon(metrics: Dict[str, Any], h: float, path: Path) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for name, m in metrics['models'].items():
        curve = m['horizon']
        t = h * np.arange(1, len(curve['position_m']) + 1)
        style = '--' if name == BASELINE else '-'
        axes[0].plot(t, curve['position_m'], style, label=name)
        axes[1].plot(t, curve['yaw_rad'], style, label=name)
    axes[0].set(xlabel='horizon (s)', ylabel='mean position error (m)',
                title='open-loop position error')
    axes[1].set(xlabel='horizon (s)', ylabel='mean |yaw error| (rad)', title='yaw error')
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_rollouts(models: Dict[str, CarModel], test: CarDataset, steps: int, path: Path,
                   count: int = 4) -> None:
    """Plot the `count` fastest windows: measured path and every model's prediction."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    windows = test.windows(steps, steps)
    speed = torch.hypot(windows.observations[:, :, 3], windows.observations[:, :, 4]).mean(1)
    chosen = np.argsort(-speed.numpy())[:count]
    every = {**models, BASELINE: ConstantVelocityCar(test.h)}
    fig, axes = plt.subplots(1, len(chosen), figsize=(3.6 * len(chosen), 3.6), squeeze=False)
    for ax, index in zip(axes[0], chosen):
        obs = windows.observations[index:index + 1]
        act = windows.actions[index:index + 1]
        ax.plot(obs[0, :, 0], obs[0, :, 1], 'k-', lw=2.5, label='measured')
        for name, model in every.items():
            with torch.no_grad():
                pred = model.rollout(obs[:, 0], act).mean[0]
            path_xy = torch.cat([obs[0, :1, :2], pred[:, :2]])
            ax.plot(path_xy[:, 0], path_xy[:, 1], '--' if name == BASELINE else '-',
                    label=name)
        ax.set(title=f'{float(speed[index]):.2f} m/s', xlabel='x (m)', ylabel='y (m)')
        ax.set_aspect('equal', adjustable='datalim')
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_estimator(estimator: Dict[str, Any], path: Path, seconds: float = 8.0) -> None:
    """Causal estimate vs zero-phase reference over the busiest `seconds` of the bag."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    time, est, ref = estimator['time'], estimator['estimates'], estimator['reference']
    activity = np.nan_to_num(np.abs(ref[:, 5]))
    rate = 1.0 / max(np.median(np.diff(time)), 1e-6)
    span = max(2, int(seconds * rate))
    start = int(np.argmax(np.convolve(activity, np.ones(span), mode='valid'))) \
        if len(activity) > span else 0
    rows = slice(start, start + span)
    fig, axes = plt.subplots(3, 1, figsize=(10, 6.5), sharex=True)
    for ax, k, label in zip(axes, (3, 4, 5), ('vx (m/s)', 'vy (m/s)', 'yaw rate (rad/s)')):
        ax.plot(time[rows], ref[rows, k], 'k-', lw=2, label='zero-phase reference')
        ax.plot(time[rows], est[rows, k], '-', lw=1, label='causal estimator')
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    axes[-1].set_xlabel('bag time (s)')
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _markdown(metrics: Dict[str, Any], files: Dict[str, str]) -> str:
    data = metrics['data']
    lines = ['# Car model evaluation', '',
             f"Data: {metrics['source']}; {data['test_windows']} open-loop windows of "
             f"{metrics['horizon_s']:g} s from {data['test_seconds']:.1f} s of held-out driving "
             f"(model step {metrics['h']} s; mocap {short_number(data.get('rate_hz'))} Hz, "
             f"drives split at gaps over {short_number(data.get('max_gap_s'))} s).", '',
             '## Verdict', '', _verdict_text(metrics), '',
             '## How to read this', '',
             '- Each window starts from the measured state (zero-phase smoothed mocap) and '
             'plays the measured commands open loop through the model; errors compare the '
             'predicted with the measured motion. The drives are held out: blocks or files '
             "that 'rdl car train' never trained on (for 'rdl car replay': the whole bag, so "
             'its checkpoints must come from other recordings).',
             '- **constant velocity**: the body velocities stay as they were at the start '
             '(the pose still integrates them): what a model must beat.',
             '- One-step relative L1 is seed Eq. 11; TVE is seed Eq. 10 (L1 of the final '
             '[x, y, yaw]). Change spread: std of the predicted one-step velocity changes over '
             'the measured ones; near 0 is a model that learned "no change".', '',
             '## Per model', '',
             f"| model | one-step relative L1 | end position error at {metrics['horizon_s']:g} s "
             '(m) | yaw error (rad) | TVE | predicted / measured change spread |',
             '|---|---|---|---|---|---|']
    for name, m in metrics['models'].items():
        lines.append(f"| {name} | {short_number(m['rel_l1_one_step'])} | "
                     f"{short_number(m['position_error_m'])} | "
                     f"{short_number(m['yaw_error_rad'])} | {short_number(m['tve'])} | "
                     f"{short_number(m['change_std_ratio'])} |")
    est = metrics.get('estimator')
    if est:
        lines += ['', '## State estimator (causal, as the node runs it)', '',
                  f"Poses replayed one by one through `MocapEstimator` ({est['config']}); "
                  'compared at zero lag with the zero-phase reference (cubic Savitzky-Golay '
                  f"over {est['reference_window_s']:g} s). Counters: {est['counters']}.", '',
                  '| channel | RMSE at zero lag | delay minimising the error (s) | '
                  'RMSE at that delay |', '|---|---|---|---|']
        for name, e in est['errors'].items():
            lines.append(f"| {name} | {short_number(e['rmse'])} | "
                         f"{short_number(e.get('best_delay_s'))} | "
                         f"{short_number(e.get('rmse_at_best_delay'))} |")
    lines += ['', '## Plots', '']
    lines += [f'![{title}]({name})' for title, name in files.items()]
    lines += ['', 'All numbers: `metrics.json`.', '']
    return '\n'.join(lines)


def write_car_report(out: Path, models: Dict[str, CarModel], test: CarDataset, source: str,
                     estimator: Optional[Dict[str, Any]] = None, horizon_s: float = 1.0
                     ) -> Dict[str, Any]:
    """
    Write metrics.json, the PNGs and report.md to `out`; return the metrics.

    horizon_s is rounded to whole model steps (at least one); the report names that horizon.

    estimator: from `rdl car replay`: time, estimates, reference (arrays), errors, counters,
    config, reference_window_s.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    scores = evaluate_models(models, test, horizon_s)
    steps = max(1, int(round(horizon_s / test.h)))
    metrics: Dict[str, Any] = {
        'source': source, 'h': test.h, 'horizon_s': round(steps * test.h, 9), 'models': scores,
        'verdict': verdict(scores),
        'data': {**test.info, 'test_seconds': test.duration_s,
                 'test_windows': next(iter(scores.values()))['windows']}}
    files = {'open-loop error vs horizon': 'error_vs_horizon.png',
             'rollouts vs measured': 'rollouts.png'}
    if estimator is not None:
        metrics['estimator'] = {k: estimator[k] for k in
                                ('errors', 'counters', 'config', 'reference_window_s')}
        files['estimator vs reference'] = 'estimator.png'
        _plot_estimator(estimator, out / files['estimator vs reference'])
    _plot_horizon(metrics, test.h, out / files['open-loop error vs horizon'])
    _plot_rollouts(models, test, steps, out / files['rollouts vs measured'])
    (out / 'metrics.json').write_text(json.dumps(json_ready(metrics), indent=1,
                                                 allow_nan=False))
    (out / 'report.md').write_text(_markdown(metrics, files))
    return metrics


def verdict_line(metrics: Dict[str, Any]) -> str:
    """Return the verdict as plain text for the terminal."""
    return _verdict_text(metrics).replace('**', '')
