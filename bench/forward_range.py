"""
Forward models' uncertainty inside and outside the training range (issue 21, item 5).

Pneumatic arm (seed 004's data): the episodes are ranked by how far their joint angles reach
(largest |q - median| over joints and time); the 80 % that stay closest train (every fifth of
them held out as the in-range test), the 20 % that reach furthest are the out-of-range test.
Each model trains as in `bench.real_data_results` (early stopping, 75 % of observations
dropped); then 20 observed steps and 10 predicted from actions alone, on both tests. Reported
per test: 10-step RMSE, shares of errors within 1 and 2 predicted std, mean predicted std,
the share of windows whose inputs leave the range; and the same calibration with the
out-of-range rise switched off (the model's own variance only), so its effect shows.

Run: `python -m bench.forward_range [--seeds 0,1]` (a few minutes per seed on one core);
writes bench/results/forward_range.json.
"""
import argparse
import json
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from bench.real_data_results import (_train_config, FORWARD_MODELS, FORWARD_SETUP, OBS_DROP,
                                     WINDOW)
import numpy as np
from robot_dynamics_learning.data import datasets
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.data.windows import forward_dynamics_windows
from robot_dynamics_learning.learning.metrics import (calibration, multi_step_batch,
                                                      multi_step_rmse, predict_with_variance)
from robot_dynamics_learning.learning.training import split_windows, train_model
from robot_dynamics_learning.models.feedback import FeedbackForwardModel
from robot_dynamics_learning.models.registry import build_model
import torch
from tqdm import tqdm

RESULTS = Path(__file__).resolve().parent / 'results' / 'forward_range.json'
MODELS = ('ac-RKN', 'LSTM', 'FFNN')
OUT_SHARE = 0.2   # the episodes reaching furthest: the out-of-range test


def range_split(episodes: Sequence[Trajectory]
                ) -> Tuple[List[Trajectory], List[Trajectory], List[Trajectory]]:
    """Return (train, in-range test, out-of-range test) episodes by how far each reaches."""
    centre = np.median(np.concatenate([e.observations for e in episodes]), axis=0)
    reach = [float(np.abs(e.observations - centre).max()) for e in episodes]
    order = np.argsort(reach)
    cut = int(round(len(episodes) * (1.0 - OUT_SHARE)))
    inside = [episodes[i] for i in order[:cut]]
    return ([e for k, e in enumerate(inside) if k % 5 != 4],
            [e for k, e in enumerate(inside) if k % 5 == 4],
            [episodes[i] for i in order[cut:]])


def score(model: FeedbackForwardModel, test: Sequence[Trajectory]) -> Dict[str, float]:
    """10-step RMSE, calibration with and without the out-of-range rise, share out of range."""
    dims, _, warmup, horizon = FORWARD_SETUP['pneumatic']
    batch = multi_step_batch(test, warmup, horizon, 5)
    last = warmup - 2 + horizon
    mean, variance = predict_with_variance(model, batch)
    target = batch.targets[:, last, dims].numpy()
    with torch.no_grad():
        inputs = model._support_inputs(batch.observations, batch.actions)
        outside = (model.support.trust(inputs[:, :warmup]) < 0.99).any(dim=1)
    hold_count = int(model.hold_variance.count)
    model.hold_variance.count.fill_(0)   # the model's own variance only
    _, own = predict_with_variance(model, batch)
    model.hold_variance.count.fill_(hold_count)
    with_rise = calibration(mean[:, last, dims].numpy(), variance[:, last, dims].numpy(), target)
    without = calibration(mean[:, last, dims].numpy(), own[:, last, dims].numpy(), target)
    return {'rmse_10': float(multi_step_rmse(model, batch, warmup, horizon, dims)[-1]),
            'within_1_std': with_rise['within_1_std'], 'within_2_std': with_rise['within_2_std'],
            'nll': with_rise['nll'],
            'mean_std': float(variance[:, last, dims].sqrt().mean()),
            'own_within_1_std': without['within_1_std'],
            'own_within_2_std': without['within_2_std'], 'own_nll': without['nll'],
            'own_mean_std': float(own[:, last, dims].sqrt().mean()),
            'windows': int(batch.observations.shape[0]),
            'share_out_of_range': float(outside.float().mean())}


def main(argv=None) -> None:
    """Train each model per seed on the in-range episodes, score both tests, write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--seeds', default='0', help='comma list of seeds')
    args = parser.parse_args(argv)
    datasets.require_full_data('bench.forward_range')
    torch.set_num_threads(1)
    episodes = [e.segment(1, len(e) - 1) for e in datasets.load_pneumatic()]
    train_eps, inside, outside = range_split(episodes)
    _, stride, _, _ = FORWARD_SETUP['pneumatic']
    train, val = split_windows(forward_dynamics_windows(train_eps, WINDOW, stride), 0.15)
    cells = []
    todo = [(name, int(seed)) for seed in args.seeds.split(',') for name in MODELS]
    for name, seed in tqdm(todo, desc='models', unit='model'):
        model_type, config, overrides = FORWARD_MODELS[name]
        torch.manual_seed(seed)
        model = build_model(model_type, config, train.observations.shape[-1],
                            train.actions.shape[-1], train.observations.shape[-1])
        result = train_model(model, train, val, _train_config({**overrides,
                                                               'obs_drop': OBS_DROP}, seed,
                                                              False))
        cells.append({'model': name, 'seed': seed, 'epochs': result.epochs,
                      'in_range': score(model, inside), 'out_of_range': score(model, outside)})
    RESULTS.write_text(json.dumps({'episodes': {'train': len(train_eps), 'in_range_test':
                                                len(inside), 'out_of_range_test': len(outside)},
                                   'cells': cells}, indent=1))
    for cell in cells:
        for test in ('in_range', 'out_of_range'):
            c = cell[test]
            print(f"{cell['model']} seed {cell['seed']} {test}: rmse10 {c['rmse_10']:.4f}, "
                  f"within 1/2 std {c['within_1_std']:.2f}/{c['within_2_std']:.2f} "
                  f"(own {c['own_within_1_std']:.2f}/{c['own_within_2_std']:.2f}), mean std "
                  f"{c['mean_std']:.4f} (own {c['own_mean_std']:.4f}), out of range "
                  f"{c['share_out_of_range']:.2f}")


if __name__ == '__main__':
    main()
