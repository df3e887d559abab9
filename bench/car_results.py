"""
Accuracy results of the car stack (numbers for docs/results_car.md).

1. Real DART data, file split (15 files train, 2 held out): the seed's MLP vs the kinematic
   bicycle baseline, one-step relative velocity error (Eq. 11) and 1 s open-loop rollout
   errors (end position, yaw, TVE Eq. 10). Saves config/models/car_mlp_dart.pt.
2. Simulated data: the shipped sim model vs a bicycle fitted to the same data.
3. The seed's offline scenarios in the simulator (20 starts each) and 3 offline MPC laps.
Writes bench/results/car_results.json and docs/img/car_scenarios.png, docs/img/car_lap.png.
`python -m bench.car_results scenarios` reruns only part 3's scenarios (and the shipped sim
model's held-out numbers of part 2) and updates the JSON.
`python -m bench.car_results train_sim BASE.pt` rebuilds the shipped sim model from BASE.pt,
the one-step model of `rdl car train --source sim --minutes 40 --epochs 300` (`train_sim`).
"""
import json
from pathlib import Path
import sys
import time

from robot_dynamics_learning.control.car_evaluation import evaluate_car_model
from robot_dynamics_learning.control.car_training import (car_data, fit_car_rollout,
                                                          load_car_model, save_car_model,
                                                          train_car)
from robot_dynamics_learning.control.demo_lap import DEFAULT_MODEL, drive_laps, plot_lap
from robot_dynamics_learning.control.refine import refine_on_scenarios
from robot_dynamics_learning.control.scenarios import plot_scenarios, run_all
from robot_dynamics_learning.data import datasets
from robot_dynamics_learning.data.car_datasets import car_dataset
from robot_dynamics_learning.sim.car import CarParams, DrivingStyle, MocapNoise
from robot_dynamics_learning.sim.driving import simulated_drives
import torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / 'bench' / 'results' / 'car_results.json'
IMG = ROOT / 'docs' / 'img'
DART_MLP_EPOCHS = 60
DART_MLP_LR = 1e-3
BICYCLE_EPOCHS = 20
# The shipped sim model after its one-step training: open-loop fine-tuning on random driving
# with plan-like stepped commands, then rounds of scenario data (docs/results_car.md, 3).
SIM_STYLE = DrivingStyle(step_probability=0.3)
SIM_ROLLOUT = {'minutes': 40.0, 'epochs': 8, 'horizon': 20, 'lr': 3e-4}
SIM_REFINE = {'rounds': 8, 'runs': 10, 'rollout_epochs': 2}


def dart_results() -> dict:
    """Train both models on the DART training files, evaluate on the held-out files."""
    datasets.require_full_data('the DART car results')
    train, test = car_data('dart', 0.05)
    out = {'train_transitions': int(len(train.observations)),
           'test_transitions': int(len(test.observations))}
    for model_type, epochs, lr in (('car_mlp', DART_MLP_EPOCHS, DART_MLP_LR),
                                   ('car_bicycle', BICYCLE_EPOCHS, None)):
        start = time.perf_counter()
        model, metrics = train_car(model_type, train, test, lr=lr, epochs=epochs)
        metrics['train_seconds'] = time.perf_counter() - start
        out[model_type] = metrics
        if model_type == 'car_mlp':
            save_car_model(ROOT / 'config' / 'models' / 'car_mlp_dart.pt', model,
                           {'source': 'dart', 'epochs': epochs, 'test_metrics': metrics})
    return out


def sim_results() -> dict:
    """Evaluate the shipped sim model and a bicycle fitted to simulated data."""
    train, test = car_data('sim', 0.05, minutes=15.0)
    _, bicycle = train_car('car_bicycle', train, test, epochs=BICYCLE_EPOCHS)
    shipped = evaluate_car_model(load_car_model(DEFAULT_MODEL), test, 20)
    return {'car_mlp_shipped': shipped, 'car_bicycle': bicycle}


def scenario_results() -> list:
    """Run the three scenarios on the shipped sim model; save the plot."""
    scenarios = run_all(load_car_model(DEFAULT_MODEL), CarParams(), starts=20)
    plot_scenarios(scenarios, IMG / 'car_scenarios.png')
    return [{k: v for k, v in r.items() if k not in ('controls', 'predicted', 'simulated')}
            for r in scenarios]


def train_sim(base: Path, out: Path = DEFAULT_MODEL) -> dict:
    """
    Fine-tune the one-step sim model in `base` open loop, then on scenario runs; save `out`.

    Returns the held-out metrics (random driving of the human-like driver, 1 s rollouts) of
    the base, after the open-loop fine-tuning and after each refinement round.
    """
    model = load_car_model(base)
    test = car_data('sim', model.h, minutes=1.0)[1]
    metrics = {'base': evaluate_car_model(model, test, 20)}
    drives = simulated_drives(60.0 * SIM_ROLLOUT['minutes'], CarParams(), MocapNoise(), 0,
                              style=SIM_STYLE)
    fit_car_rollout(model, car_dataset(drives, model.h), SIM_ROLLOUT['epochs'],
                    SIM_ROLLOUT['horizon'], SIM_ROLLOUT['lr'])
    metrics['rollout_fine_tuned'] = evaluate_car_model(model, test, 20)
    metrics['refined'] = refine_on_scenarios(model, SIM_REFINE['rounds'], SIM_REFINE['runs'],
                                             rollout_epochs=SIM_REFINE['rollout_epochs'],
                                             style=SIM_STYLE)[1:]
    save_car_model(out, model, {'source': 'sim', 'base': str(base), 'rollout': SIM_ROLLOUT,
                                'refine': SIM_REFINE, 'metrics': metrics})
    return metrics


def main() -> None:
    """Run all parts (or only the scenarios), then write the JSON and the plots."""
    torch.set_num_threads(1)
    IMG.mkdir(parents=True, exist_ok=True)
    if sys.argv[1:2] == ['train_sim']:
        out = Path(sys.argv[3]) if len(sys.argv) > 3 else DEFAULT_MODEL
        metrics = train_sim(Path(sys.argv[2]), out)
        if out == DEFAULT_MODEL:
            result = json.loads(RESULTS.read_text())
            result['sim_model_training'] = metrics
            RESULTS.write_text(json.dumps(result, indent=2))
        print(json.dumps(metrics, indent=2))
        return
    if 'scenarios' in sys.argv[1:]:
        result = json.loads(RESULTS.read_text())
        test = car_data('sim', 0.05, minutes=1.0)[1]
        result['sim']['car_mlp_shipped'] = evaluate_car_model(load_car_model(DEFAULT_MODEL),
                                                              test, 20)
        result['scenarios'] = scenario_results()
        RESULTS.write_text(json.dumps(result, indent=2))
        print(json.dumps(result['scenarios'], indent=2))
        return
    result = {'threads': 1, 'dart': dart_results(), 'sim': sim_results()}
    result['scenarios'] = scenario_results()
    lap = drive_laps(laps=3.0, max_time_s=120.0)
    plot_lap(lap, IMG / 'car_lap.png')
    result['offline_laps'] = {k: v for k, v in lap.items() if k not in ('arrays', 'track')}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == '__main__':
    main()
