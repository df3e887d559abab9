"""
The replay report: metrics.json, PNG plots and report.md from a `ReplayResult`.

Every number is computed here from the stored predictions, vectorised, with the
definitions in `scores` (nMSE per joint = MSE / variance of the measured torque over the
whole bag, so that short blocks where a joint barely moves do not blow the ratio up and
every split shares one scale: nMSE 1 is the error of always predicting the bag's mean
torque; RMSE in N m). Two sample sets per model: 'prequential'
(training blocks: each sample predicted before the learner trained on it) and 'held_out'
(blocks never trained on). Baselines are scored on exactly the same samples.
"""
import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
from robot_dynamics_learning.learning.metrics import coverage_warnings, range_coverage
from robot_dynamics_learning.learning.replay import input_words, ModelRun, ReplayResult

IDEAL_WITHIN = (0.6827, 0.9545)   # Gaussian shares within 1 and 2 std


def scores(prediction: np.ndarray, target: np.ndarray, mask: np.ndarray,
           variance: np.ndarray) -> Dict[str, Any]:
    """
    Return nMSE and RMSE per joint over the samples in `mask` where the prediction is finite.

    variance: (n,) per-joint normaliser (the torque variance over the whole bag).

    Returns {'samples', 'nmse' (joint mean), 'nmse_per_joint', 'rmse_per_joint'}; NaN
    values (JSON null) when fewer than 2 samples are scored.
    """
    rows = mask & np.all(np.isfinite(prediction), axis=1)
    n = target.shape[1]
    if rows.sum() < 2:
        nan = [float('nan')] * n
        return {'samples': int(rows.sum()), 'nmse': float('nan'), 'nmse_per_joint': nan,
                'rmse_per_joint': nan}
    error = prediction[rows] - target[rows]
    mse = np.mean(error ** 2, axis=0)
    nmse = mse / np.maximum(variance, 1e-12)
    return {'samples': int(rows.sum()), 'nmse': float(np.mean(nmse)),
            'nmse_per_joint': nmse.tolist(), 'rmse_per_joint': np.sqrt(mse).tolist()}


def calibration(prediction: np.ndarray, std: np.ndarray, target: np.ndarray,
                mask: np.ndarray) -> Dict[str, Any]:
    """Shares of errors within 1 and 2 predicted std and the mean Gaussian NLL per value."""
    rows = mask & np.all(np.isfinite(prediction), axis=1) & np.all(np.isfinite(std), axis=1)
    if not rows.any():
        return {'samples': 0}
    error = prediction[rows] - target[rows]
    sigma = np.maximum(std[rows], 1e-9)
    z = np.abs(error) / sigma
    nll = 0.5 * np.log(2 * math.pi * sigma ** 2) + 0.5 * z ** 2
    return {'samples': int(rows.sum()), 'within_1_std': float(np.mean(z <= 1)),
            'within_2_std': float(np.mean(z <= 2)), 'nll': float(np.mean(nll)),
            'ideal_within': list(IDEAL_WITHIN)}


def sliding_nmse(prediction: np.ndarray, target: np.ndarray, mask: np.ndarray,
                 window: int) -> np.ndarray:
    """
    Return the learner's prequential curve (T,), NaN where a sample is not scored.

    At each scored sample: the MSE of the newest `window` scored samples over the variance
    of every target scored so far (as learning/prequential.py), mean over joints.
    """
    rows = np.flatnonzero(mask & np.all(np.isfinite(prediction), axis=1))
    out = np.full(prediction.shape[0], np.nan)
    if rows.size < 2:
        return out
    error2 = (prediction[rows] - target[rows]) ** 2
    y = target[rows]
    count = np.arange(1, rows.size + 1)[:, None]

    def cumulative(x):
        return np.cumsum(x, axis=0)

    c = np.concatenate([np.zeros((1, error2.shape[1])), cumulative(error2)])
    k = np.minimum(count, window)
    mse = (c[count[:, 0]] - c[count[:, 0] - k[:, 0]]) / k
    variance = cumulative(y ** 2) / count - (cumulative(y) / count) ** 2
    curve = np.mean(mse / np.maximum(variance, 1e-12), axis=1)
    curve[0] = np.nan
    out[rows] = curve
    return out


def events(result: ReplayResult) -> Dict[str, List]:
    """Gaps (a step over gap_factor median periods), time resets and rejections, as times."""
    stream = result.stream
    step = np.diff(stream.stamp_s)
    period = 1.0 / stream.rate_hz if np.isfinite(stream.rate_hz) else np.inf
    gap = (step > float(result.params.get('gap_factor', 3.0)) * period) \
        & ~stream.reset_before[1:]
    return {'gaps_s': stream.receive_s[1:][gap].tolist(),
            'gap_lengths_s': step[gap].tolist(),
            'time_resets_s': stream.receive_s[stream.reset_before].tolist(),
            'rejections': [[t, reason] for t, reason in stream.rejections]}


def run_metrics(run: ModelRun, result: ReplayResult) -> Dict[str, Any]:
    """Return every metric of one model or baseline."""
    tau, held = result.stream.tau, result.held_out
    out: Dict[str, Any] = {
        'kind': run.kind,
        'prequential': scores(run.prediction, tau, ~held, np.var(tau, axis=0)),
        'held_out': scores(run.prediction, tau, held, np.var(tau, axis=0)),
        'wall_s': run.wall_s,
        'realtime_factor': (result.stream.duration_s / run.wall_s if run.wall_s > 0
                            else float('inf')),
        **run.extra}
    if run.std is not None:
        out['calibration'] = {'prequential': calibration(run.prediction, run.std, tau, ~held),
                              'held_out': calibration(run.prediction, run.std, tau, held)}
    if run.latency_s is not None:
        latency = run.latency_s[np.isfinite(run.latency_s)] * 1e3
        out['latency_ms'] = {'p50': float(np.percentile(latency, 50)),
                             'p99': float(np.percentile(latency, 99)),
                             'mean': float(latency.mean())}
        out['train_steps'] = int(run.steps[-1])
        out['rejected_steps'] = run.rejected_steps
        out['train_s'] = run.train_s
        out['trained_samples'] = int(run.trained.sum())
        out['trained_held_out_samples'] = int((run.trained & held).sum())
    return out


def verdict(metrics: Dict[str, Any], split: str) -> Dict[str, Any]:
    """Return the best model and best baseline on `split` and the ratio of their nMSE."""
    def best(kind: str) -> Optional[str]:
        ranked = [(m[split]['nmse'], name) for name, m in metrics.items()
                  if m['kind'] == kind and np.isfinite(m[split]['nmse'])]
        return min(ranked)[1] if ranked else None

    model, baseline = best('model'), best('baseline')
    out = {'split': split, 'best_model': model, 'best_baseline': baseline}
    if model and baseline:
        out['model_nmse'] = metrics[model][split]['nmse']
        out['baseline_nmse'] = metrics[baseline][split]['nmse']
        out['baseline_over_model'] = out['baseline_nmse'] / max(out['model_nmse'], 1e-300)
    return out


def compute_metrics(result: ReplayResult) -> Dict[str, Any]:
    """Return the content of metrics.json."""
    stream = result.stream
    per_run = {run.name: run_metrics(run, result) for run in result.runs}
    split = 'held_out' if result.held_out.any() else 'prequential'
    return {
        'bag': result.bag, 'topic': stream.topic, 'joint_names': stream.joint_names,
        'samples': len(stream), 'duration_s': stream.duration_s, 'rate_hz': stream.rate_hz,
        'torque_source': stream.torque_source, 'velocity_source': stream.velocity_source,
        'times': stream.times,
        'seed': result.seed,
        'holdout': {'mode': result.holdout.mode, 'every': result.holdout.every,
                    'fraction': result.holdout.fraction, 'block_s': result.holdout.block_s,
                    'held_out_samples': int(result.held_out.sum()),
                    'held_out_blocks': sorted(set(result.blocks[result.held_out].tolist()))},
        'messages': stream.counts, 'events': events(result), 'skipped': result.skipped,
        'learner_params': {k: v for k, v in result.params.items()
                           if isinstance(v, (int, float, str, bool))},
        'models': per_run, 'verdict': verdict(per_run, split),
        'coverage_warnings': _coverage(result)}


def _coverage(result: ReplayResult) -> List[str]:
    """Per joint, where held-out q / qd leave the ranges of the training blocks."""
    held, stream = result.held_out, result.stream
    if not held.any() or held.all():
        return []
    inputs = np.hstack([stream.q, stream.qd])
    names = [f'{kind} {joint}' for kind in ('q', 'qd') for joint in stream.joint_names]
    return coverage_warnings(range_coverage(inputs[~held], inputs[held]), names)


def _plot_curves(result: ReplayResult, metrics: Dict[str, Any], path: Path) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    stream, window = result.stream, int(result.params.get('prequential_window', 5000))
    fig, ax = plt.subplots(figsize=(11, 4.5))
    t = stream.receive_s
    shown = []
    for run in result.runs:
        curve = sliding_nmse(run.prediction, stream.tau, ~result.held_out, window)
        keep = np.flatnonzero(np.isfinite(curve))
        keep = keep[::max(1, keep.size // 3000)]
        shown.append(curve[keep])
        line, = ax.plot(t[keep], curve[keep], lw=1.2, label=run.name,
                        ls='--' if run.kind == 'baseline' else '-')
        for block in sorted(set(result.blocks[result.held_out].tolist())):
            rows = result.held_out & (result.blocks == block)
            score = scores(run.prediction, stream.tau, rows, np.var(stream.tau, axis=0))['nmse']
            ax.plot(t[rows].mean(), score, 'o', color=line.get_color(), ms=5)
    for block in sorted(set(result.blocks[result.held_out].tolist())):
        span = t[result.blocks == block]
        ax.axvspan(span[0], span[-1], color='0.9', zorder=0)
    marks = metrics['events']
    for k, x in enumerate(marks['gaps_s']):
        ax.axvline(x, color='tab:red', ls=':', lw=1, label='gap' if k == 0 else None)
    for k, x in enumerate(marks['time_resets_s']):
        ax.axvline(x, color='k', ls='-.', lw=1, label='time reset' if k == 0 else None)
    if marks['rejections']:
        ax.plot([r[0] for r in marks['rejections']], [0.02] * len(marks['rejections']), '|',
                color='tab:orange', ms=12, transform=ax.get_xaxis_transform(),
                label=f"rejected message ({len(marks['rejections'])})")
    ax.set_yscale('log')
    values = np.concatenate(shown) if shown else np.zeros(0)
    if values.size:   # the untrained start can reach 1e9: keep the rest readable
        ax.set_ylim(top=min(ax.get_ylim()[1], 30 * float(np.percentile(values, 95))))
    ax.set_xlabel('bag time (s)')
    ax.set_ylabel(f'nMSE (lines: sliding {window} samples)')
    ax.set_title('Prediction error over time: lines prequential (predicted before training), '
                 'dots held-out blocks (grey)', fontsize=10)
    ax.grid(True, which='both', alpha=0.3)
    ax.legend(fontsize=8, ncol=3, loc='upper right')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_predictions(result: ReplayResult, path: Path, seconds: float = 2.0) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    stream = result.stream
    t = stream.receive_s
    if result.held_out.any():   # the last held-out block, at most `seconds` of it
        block = result.held_out & (result.blocks == result.blocks[result.held_out][-1])
        start = t[block][0]
        rows = block & (t <= start + seconds)
    else:
        rows = t >= max(t[0], t[-1] - seconds)
    n = len(stream.joint_names)
    fig, axes = plt.subplots(n, 1, figsize=(11, 1.6 * n + 0.8), sharex=True, squeeze=False)
    for j, ax in enumerate(axes[:, 0]):
        ax.plot(t[rows], stream.tau[rows, j], color='k', lw=2.0, label='measured')
        for run in result.runs:
            ax.plot(t[rows], run.prediction[rows, j], lw=1.0, label=run.name,
                    ls='--' if run.kind == 'baseline' else '-')
            if run.std is not None:
                ax.fill_between(t[rows], run.prediction[rows, j] - 2 * run.std[rows, j],
                                run.prediction[rows, j] + 2 * run.std[rows, j], alpha=0.2)
        ax.set_ylabel(f'{stream.joint_names[j]}\n(N m)', fontsize=8)
        ax.grid(True, alpha=0.3)
    axes[0, 0].legend(fontsize=7, ncol=4, loc='upper right')
    axes[0, 0].set_title(('held-out block' if result.held_out.any() else 'last seconds')
                         + ': predicted vs measured torque', fontsize=10)
    axes[-1, 0].set_xlabel('bag time (s)')
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_joints(metrics: Dict[str, Any], split: str, path: Path) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    names = metrics['joint_names']
    runs = list(metrics['models'])
    fig, ax = plt.subplots(figsize=(11, 3.8))
    width = 0.8 / max(1, len(runs))
    for k, name in enumerate(runs):
        values = np.array(metrics['models'][name][split]['nmse_per_joint'], float)
        ax.bar(np.arange(len(names)) + k * width, values, width, label=name)
    ax.set_xticks(np.arange(len(names)) + 0.4 - width / 2)
    ax.set_xticklabels(names, fontsize=8)
    ax.set_yscale('log')
    ax.set_ylabel(f'nMSE ({split})')
    ax.grid(True, axis='y', which='both', alpha=0.3)
    ax.legend(fontsize=8, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def short_number(value: Any, digits: int = 3) -> str:
    """Format a number for a table: 3 significant digits, - for missing or non-finite."""
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return '-'
    return f'{value:.{digits}g}' if isinstance(value, float) else str(value)


def _verdict_text(metrics: Dict[str, Any]) -> str:
    v = metrics['verdict']
    where = ('on the held-out blocks (never trained on)' if v['split'] == 'held_out'
             else 'prequentially (each sample predicted before it was trained on)')
    if not v.get('best_model'):
        return (f"No learned model ran; the best baseline {where} is {v['best_baseline']}. "
                'Run with --models to compare learned models.')
    m = metrics['models'][v['best_model']]
    ratio = v.get('baseline_over_model', float('nan'))
    if not (np.isfinite(ratio) and ratio > 0):   # a baseline without error: nothing to beat
        compare = (f"cannot be compared with the best baseline, {v['best_baseline']}, whose "
                   f"nMSE is {short_number(v.get('baseline_nmse'))}: the torques barely "
                   'change on this bag (is the effort field filled? are these the joints to '
                   'learn?)')
    elif ratio >= 1:
        compare = (f"beats the best baseline, {v['best_baseline']} (nMSE "
                   f"{short_number(v['baseline_nmse'])}), by a factor of {ratio:.2f}")
    else:
        compare = (f"does NOT beat the best baseline, {v['best_baseline']} (nMSE "
                   f"{short_number(v['baseline_nmse'])}, {short_number(1 / ratio)} times "
                   'lower): on this bag, deploy the baseline or give the model more data')
    speed = m.get('latency_ms')
    timing = '' if speed is None else (
        f"It replayed {metrics['duration_s']:.1f} s of data in {m['wall_s']:.1f} s "
        f"({m['realtime_factor']:.1f}x real time, prediction p99 {short_number(speed['p99'])} ms "
        f"per sample, {m['train_steps']} training updates). ")
    return (f"Best model {where}: **{v['best_model']}** with nMSE {short_number(v['model_nmse'])} "
            f"(mean over {len(metrics['joint_names'])} joints); it {compare}. {timing}"
            "nMSE 1 is the error of always predicting the bag's mean torque; 0 is perfect.")


def verdict_line(metrics: Dict[str, Any]) -> str:
    """Return the verdict as plain text for the terminal."""
    return _verdict_text(metrics).replace('**', '')


def _markdown(metrics: Dict[str, Any], files: Dict[str, str]) -> str:
    names = metrics['joint_names']
    h = metrics['holdout']
    lines = [
        '# Replay evaluation', '',
        f"Bag `{metrics['bag']}`, topic `{metrics['topic']}`: {metrics['samples']} samples, "
        f"{metrics['duration_s']:.1f} s at {metrics['rate_hz']:.1f} Hz, joints "
        f"{', '.join(names)}; torque from {metrics['torque_source']}; "
        + '; '.join(input_words(metrics['velocity_source'], metrics['times']))
        + f"; seed {metrics['seed']}.",
        '', '## Verdict', '', _verdict_text(metrics), '',
        *(['Held-out inputs outside the training ranges (learned models extrapolate):', '']
          + [f'- {line}' for line in metrics['coverage_warnings']] + ['']
          if metrics.get('coverage_warnings') else []),
        '## How to read this', '',
        '- **prequential**: on the training blocks every sample is predicted *before* the '
        "learner trains on it (the node's own streaming learner: predict, score, store, "
        'train within the `updates_per_sample` budget). It includes the start, when the '
        'models know nothing yet.',
        f"- **held-out**: blocks of {h['block_s']:g} s "
        + (f"(every {h['every']}-th)" if h['mode'] == 'every'
           else f"after {h['fraction']:.0%} of the bag" if h['mode'] == 'after' else '(none)')
        + f" ({h['held_out_samples']} samples) are predicted but never trained on.",
        '- nMSE = MSE / variance of the measured torque over the whole bag, per joint '
        "(table: mean over joints; 1 = always predicting the bag's mean torque); RMSE in "
        'N m. Baselines: previous torque (tau_{t-1}), linear regression on [q, qd, qdd, 1] '
        'refitted on all earlier training blocks, and the URDF rigid-body model when a URDF '
        'is given.', '',
        '## Scores', '',
        '| model | kind | prequential nMSE | held-out nMSE | held-out RMSE per joint (N m) | '
        'updates | latency p50 / p99 (ms) | x real time |',
        '|---|---|---|---|---|---|---|---|']
    for name, m in metrics['models'].items():
        rmse = ', '.join(short_number(v, 2) for v in m['held_out']['rmse_per_joint'])
        lat = m.get('latency_ms')
        lines.append(
            f"| {name} | {m['kind']} | {short_number(m['prequential']['nmse'])} | "
            f"{short_number(m['held_out']['nmse'])} | {rmse} | {m.get('train_steps', '-')} | "
            + (f"{lat['p50']:.3f} / {lat['p99']:.3f}" if lat else '-')
            + f" | {short_number(m['realtime_factor'], 3)} |")
    lines += ['', '### nMSE per joint (held-out, or prequential without held-out blocks)', '',
              '| model | ' + ' | '.join(names) + ' |', '|---|' + '---|' * len(names)]
    split = metrics['verdict']['split']
    for name, m in metrics['models'].items():
        lines.append(f'| {name} | '
                     + ' | '.join(short_number(v) for v in m[split]['nmse_per_joint']) + ' |')
    calibrated = {k: m['calibration'] for k, m in metrics['models'].items()
                  if 'calibration' in m}
    if calibrated:
        lines += ['', '## Calibration of the predicted std', '',
                  f'Shares of errors within 1 and 2 predicted std (a calibrated Gaussian: '
                  f'{IDEAL_WITHIN[0]:.3f} and {IDEAL_WITHIN[1]:.3f}); NLL per value '
                  '(lower is better).', '',
                  '| model | split | within 1 std | within 2 std | NLL |', '|---|---|---|---|---|']
        for name, c in calibrated.items():
            for split_name, values in c.items():
                if values.get('samples'):
                    lines.append(f"| {name} | {split_name} | {values['within_1_std']:.3f} | "
                                 f"{values['within_2_std']:.3f} | {values['nll']:.3f} |")
    ev = metrics['events']
    lines += ['', '## Events in the stream', '',
              f"Messages: {metrics['messages']}. Gaps (a step over "
              f"{metrics['learner_params'].get('gap_factor', 3.0)} periods): "
              f"{len(ev['gaps_s'])}; time resets: {len(ev['time_resets_s'])}; rejected "
              f"messages: {len(ev['rejections'])}. They are marked in the error plot.", '']
    if metrics['skipped']:
        lines += ['## Skipped models', '']
        lines += [f'- {name}: {reason}' for name, reason in metrics['skipped'].items()]
        lines.append('')
    lines += ['## Plots', '']
    lines += [f'![{title}]({name})' for title, name in files.items()]
    lines += ['', 'All numbers: `metrics.json`.', '']
    return '\n'.join(lines)


def json_ready(value: Any) -> Any:
    """JSON-ready copy: NaN and infinities become null (strict JSON has neither)."""
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def write_report(result: ReplayResult, out: Path) -> Dict[str, Any]:
    """Write metrics.json, the PNGs and report.md to `out`; return the metrics."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    metrics = compute_metrics(result)
    (out / 'metrics.json').write_text(json.dumps(json_ready(metrics), indent=1, allow_nan=False))
    files = {'error over time': 'nmse_over_time.png',
             'predicted vs measured torque': 'predicted_vs_measured.png',
             'nMSE per joint': 'nmse_per_joint.png'}
    _plot_curves(result, metrics, out / files['error over time'])
    _plot_predictions(result, out / files['predicted vs measured torque'])
    _plot_joints(metrics, metrics['verdict']['split'], out / files['nMSE per joint'])
    (out / 'report.md').write_text(_markdown(metrics, files))
    return metrics
