"""
How far the Kinova blocks split can judge calibration (issue 21, item 5).

The blocks split tests on 7 blocks of 0.5 s and validates (early stopping, the error
variance) on every fifth of its 22 training blocks: 4 or 5 blocks. Here each model trains
once per choice of those held blocks (offset 0 is `bench.real_data_results`' choice) with the
same seed, and every run is scored on the same test blocks: test nMSE and the share of errors
within 1 and 2 predicted std. For offset 0 the share within 1 std is also resampled over the
test blocks (bootstrap, whole blocks): the spread a 7-block test set allows.

Run: `python -m bench.calibration_folds [--models LSTM,FFNN] [--seed 0]` (about 10 minutes
on one core); writes bench/results/calibration_folds.json (models not named keep their rows)
and prints a Markdown table.
"""
import argparse
import json
from pathlib import Path
from typing import Dict, List, Sequence

from bench.real_data_results import (_fit_inverse, block_bootstrap, KINOVA_MODELS,
                                     KINOVA_SCORED, kinova_splits, VAL_EVERY, within_std)
from robot_dynamics_learning.data import datasets
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.learning.evaluation import predict_inverse, score_inverse
import torch
from tqdm import tqdm

RESULTS = Path(__file__).resolve().parent / 'results' / 'calibration_folds.json'
MODELS = ('LSTM', 'FFNN', 'GP (Matern 5/2)', 'hybrid (URDF + trusted LSTM residual)')


def held_out_first(train: Sequence[Trajectory], offset: int) -> List[Trajectory]:
    """Rotate the training blocks so that `split_validation` holds a different fifth."""
    return list(train[offset:]) + list(train[:offset])


def run(models: Sequence[str], seed: int) -> Dict[str, List[dict]]:
    """Train each model once per held-out offset; score on the fixed test blocks."""
    train, test = kinova_splits()['blocks']
    results: Dict[str, List[dict]] = {}
    for name in models:
        rows = []
        for offset in tqdm(range(VAL_EVERY), desc=name):
            model, fit, _ = _fit_inverse(KINOVA_MODELS[name], held_out_first(train, offset),
                                         seed, quick=False)
            predicted = predict_inverse(model, test)
            score = score_inverse(predicted, KINOVA_SCORED)
            row = {'offset': offset, 'mean_nmse': score['mean_nmse'], 'epochs': fit.epochs,
                   **score['calibration']}
            if offset == 0:
                row['within_1_std_block_bootstrap_5_95'] = block_bootstrap(
                    within_std(predicted, test, KINOVA_SCORED, 1))
            rows.append(row)
        results[name] = rows
    return results


def markdown(results: Dict[str, List[dict]]) -> str:
    """One row per model: nMSE and coverage per offset, the bootstrap interval of offset 0."""
    lines = ['| model | test nMSE per held-out fifth | within 1 std | within 2 std | '
             'offset 0, within 1 std, test blocks resampled (5-95 %) |', '|---|---|---|---|---|']
    for name, rows in results.items():
        low, high = rows[0]['within_1_std_block_bootstrap_5_95']
        nmse = ', '.join(f'{row["mean_nmse"]:.3f}' for row in rows)
        one, two = (', '.join(f'{100 * row[key]:.0f}' for row in rows)
                    for key in ('within_1_std', 'within_2_std'))
        interval = f'{100 * low:.0f}-{100 * high:.0f} %'
        lines.append(f'| {name} | {nmse} | {one} % | {two} % | {interval} |')
    return '\n'.join(lines)


def main(argv=None) -> None:
    """Parse arguments, run, write the JSON, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[1])
    parser.add_argument('--models', default=','.join(MODELS),
                        help=f'comma-separated, of {list(KINOVA_MODELS)}')
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args(argv)
    models = [m for m in args.models.split(',') if m]
    unknown = sorted(set(models) - set(KINOVA_MODELS))
    if unknown:
        parser.error(f'unknown models {unknown}')
    datasets.require_full_data('bench.calibration_folds')
    torch.set_num_threads(1)
    results = run(models, args.seed)
    if RESULTS.exists():   # the models not recomputed keep their rows (same seed only)
        before = json.loads(RESULTS.read_text())
        if before.get('seed') == args.seed:
            results = {**before['models'], **results}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({'seed': args.seed, 'torch': torch.__version__,
                                   'models': results}, indent=1))
    print(markdown(results))


if __name__ == '__main__':
    main()
