"""
Why the LSTM trails the GP at 3000 Kinova samples (issue 21, item 3), measured.

The Kinova sample-size curve of `bench.real_data_results` at N = 3000: six shuffled blocks of
0.5 s. Each network trains as there (early stopping on every fifth 200-sample block, best
weights restored) with the windows named here; the GP as there. Every model is scored on the
same test blocks, overall and by the distance of each test input from its nearest training
input ([sin q, cos q, qd] scaled by the training std; quartiles of that distance): a model
that fails near its training data under-fits, one that fails only far from it extrapolates
badly. The GP's fitted length scales (median per input group) say which inputs it uses.

Run: `python -m bench.small_data` (about 4 minutes on one core; `--models NAME` recomputes
that variant only); writes bench/results/small_data.json and prints a Markdown table.
"""
import argparse
import json
from pathlib import Path
from typing import Dict, List, Sequence

from bench import real_data_results as bench
import numpy as np
from robot_dynamics_learning.data import datasets
from robot_dynamics_learning.data.splits import first_samples
from robot_dynamics_learning.data.windows import inverse_dynamics_arrays
from robot_dynamics_learning.learning.evaluation import predict_inverse
from robot_dynamics_learning.learning.metrics import nmse_per_output
from scipy.spatial import cKDTree
import torch
from tqdm import tqdm

RESULTS = Path(__file__).resolve().parent / 'results' / 'small_data.json'
SIZE = 3000
ENSEMBLE = 5   # members of the short-window LSTM ensemble (seeds 0..4)
CHOSEN = bench.CURVE_MODELS['LSTM']


def one_window(window: int) -> tuple:
    """Return the curve's LSTM spec with windows of `window` steps only (no choice)."""
    return CHOSEN[:2] + ({**CHOSEN[2], 'windows': (window,)},)


# name: (spec, seeds); every model trains as `bench.real_data_results` trains it
VARIANTS = {
    'GP (Matern 5/2)': (bench.CURVE_MODELS['GP'], bench.SEEDS),
    'LSTM, windows of 50': (one_window(bench.WINDOW), bench.SEEDS),
    'LSTM, windows of 2': (one_window(2), tuple(range(ENSEMBLE))),
    'LSTM, window chosen on held-out blocks (the recipe)': (CHOSEN, bench.SEEDS),
    'FFNN': (bench.KINOVA_MODELS['FFNN'], bench.SEEDS),
}


def trig_features(inputs: np.ndarray) -> np.ndarray:
    """[q, qd, qdd] rows -> [sin q, cos q, qd]: the inputs the GP's length scales favour."""
    n = inputs.shape[1] // 3
    return np.concatenate([np.sin(inputs[:, :n]), np.cos(inputs[:, :n]), inputs[:, n:2 * n]], 1)


def nearest_training_distance(train_inputs: np.ndarray, test_inputs: np.ndarray) -> np.ndarray:
    """Distance of each test input to its nearest training input, in training std units."""
    train, test = trig_features(train_inputs), trig_features(test_inputs)
    mean, std = train.mean(axis=0), np.maximum(train.std(axis=0), 1e-9)
    return cKDTree((train - mean) / std).query((test - mean) / std)[0]


def by_distance(prediction: np.ndarray, target: np.ndarray, distance: np.ndarray,
                edges: Sequence[float]) -> List[float]:
    """Mean nMSE over the scored joints inside each distance bin (variance: whole test set)."""
    scored = bench.KINOVA_SCORED
    variance = target[:, scored].var(axis=0)
    return [float(np.mean((prediction[inside][:, scored] - target[inside][:, scored]) ** 2
                          / variance))
            for inside in ((distance >= low) & (distance <= high)
                           for low, high in zip(edges[:-1], edges[1:]))]


def length_scales(model) -> Dict[str, float]:
    """Median fitted length scale (normalised inputs) per input group, scored joints."""
    scales = model.log_lengthscale.exp().numpy()[bench.KINOVA_SCORED]
    n = scales.shape[1] // 3
    return {group: float(np.median(scales[:, k * n:(k + 1) * n]))
            for k, group in enumerate(('q', 'qd', 'qdd'))}


def run(names: Sequence[str]) -> dict:
    """Train the variants `names` at N = SIZE; score overall and by distance."""
    stream, test, _ = bench.curve_data('kinova')
    train = first_samples(stream, SIZE)
    results: Dict[str, dict] = {}
    distance = edges = None
    for name in names:
        spec, seeds = VARIANTS[name]
        rows, predictions = [], []
        for seed in tqdm(seeds, desc=name):
            model, fit, _ = bench._fit_inverse(spec, train, seed, False, gp_sees_all=True)
            predicted = predict_inverse(model, test)
            if distance is None:
                train_inputs = np.concatenate([inverse_dynamics_arrays(t)[0] for t in train])
                distance = nearest_training_distance(train_inputs, predicted['inputs'])
                edges = np.percentile(distance, [0, 25, 50, 75, 100]).tolist()
            target = predicted['target']
            predictions.append(predicted['prediction'])
            rows.append({'seed': seed, 'epochs': fit.epochs, 'seconds': fit.seconds,
                         'mean_nmse': float(np.mean(nmse_per_output(
                             predicted['prediction'], target)[bench.KINOVA_SCORED])),
                         'by_distance': by_distance(predicted['prediction'], target, distance,
                                                    edges)})
            if spec[0] == 'gp':
                rows[-1]['length_scales'] = length_scales(model)
        mean = np.mean(predictions, axis=0)
        results[name] = {'runs': rows,
                         'ensemble_mean_nmse': float(np.mean(nmse_per_output(
                             mean, target)[bench.KINOVA_SCORED]))}
    return {'size': SIZE, 'distance_quartile_edges': edges, 'models': results}


def markdown(results: dict) -> str:
    """One row per model: nMSE per seed, ensemble of the seeds, nMSE per distance quartile."""
    edges = results['distance_quartile_edges']
    bins = [f'{low:.2f}-{high:.2f}' for low, high in zip(edges[:-1], edges[1:])]
    lines = ["| model | nMSE per seed | mean of the seeds' predictions | "
             + ' | '.join(f'nMSE, distance {b}' for b in bins) + ' |',
             '|---' * (3 + len(bins)) + '|']
    for name, entry in results['models'].items():
        runs = entry['runs']
        per_bin = np.mean([r['by_distance'] for r in runs], axis=0)
        lines.append(f'| {name} | ' + ', '.join(f'{r["mean_nmse"]:.3f}' for r in runs)
                     + f' | {entry["ensemble_mean_nmse"]:.3f} | '
                     + ' | '.join(f'{v:.3f}' for v in per_bin) + ' |')
    gp = next(e for n, e in results['models'].items() if n.startswith('GP'))['runs'][0]
    lines += ['', 'GP length scales (median, normalised inputs): '
              + ', '.join(f'{k} {v:.2f}' for k, v in gp['length_scales'].items())]
    return '\n'.join(lines)


def main(argv=None) -> None:
    """Parse arguments, run, write the JSON, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[1])
    parser.add_argument('--models', action='append', choices=list(VARIANTS),
                        help='a variant to recompute (repeat for more); the others keep their '
                             'rows in the JSON (default: all)')
    args = parser.parse_args(argv)
    datasets.require_full_data('bench.small_data')
    torch.set_num_threads(1)
    results = run(args.models or list(VARIANTS))
    if args.models and RESULTS.exists():   # the other variants keep their rows
        results['models'] = {**json.loads(RESULTS.read_text())['models'], **results['models']}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({'torch': torch.__version__, **results}, indent=1))
    print(markdown(results))


if __name__ == '__main__':
    main()
