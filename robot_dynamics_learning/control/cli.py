"""
`rdl car ...`: offline RC-car tools (train, evaluate on DART, scenarios, simulated lap).

    rdl car train --source sim --minutes 15 --epochs 150 --out car_mlp_sim.pt
    rdl car train --source dart --model car_bicycle --epochs 20 --out bicycle_dart.pt
    rdl car refine --checkpoint config/models/car_mlp_sim.pt --out car_mlp_sim_refined.pt
    rdl car scenarios --checkpoint config/models/car_mlp_sim.pt --out results/
    rdl car lap --laps 1 --out results/
"""
import argparse
import json
from pathlib import Path

from robot_dynamics_learning.control.car_training import (car_data, CAR_MODEL_TYPES,
                                                          load_car_model, save_car_model,
                                                          train_car)
from robot_dynamics_learning.control.demo_lap import (DEFAULT_MODEL, DEFAULT_TRACK, drive_laps,
                                                      plot_lap)
from robot_dynamics_learning.control.refine import refine_on_scenarios
from robot_dynamics_learning.control.scenarios import plot_scenarios, run_all
from robot_dynamics_learning.sim.car import CarParams
import torch


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `rdl car` and its sub-commands."""
    car = subparsers.add_parser('car', help='RC car: train models, scenarios, simulated laps')
    commands = car.add_subparsers(dest='car_command', metavar='CAR_COMMAND', required=True)

    train = commands.add_parser('train', help='train a car model on simulated or DART data')
    train.add_argument('--source', choices=('sim', 'dart'), default='sim')
    train.add_argument('--model', choices=CAR_MODEL_TYPES, default='car_mlp')
    train.add_argument('--minutes', type=float, default=15.0,
                       help='simulated driving to collect (source sim)')
    train.add_argument('--epochs', type=int, default=150)
    train.add_argument('--lr', type=float, default=None, help='Adam learning rate')
    train.add_argument('--h', type=float, default=0.05, help='model step (s)')
    train.add_argument('--seed', type=int, default=0)
    train.add_argument('--threads', type=int, default=1, help='torch threads')
    train.add_argument('--out', type=Path, required=True, help='checkpoint to write')
    train.set_defaults(func=_train)

    refine = commands.add_parser('refine', help='fine-tune a car model on simulated runs of '
                                 'the scenario plans (control/refine.py)')
    refine.add_argument('--checkpoint', type=Path, default=DEFAULT_MODEL)
    refine.add_argument('--rounds', type=int, default=3)
    refine.add_argument('--runs', type=int, default=10, help='simulated runs per scenario')
    refine.add_argument('--epochs', type=int, default=15, help='fine-tuning epochs per round')
    refine.add_argument('--out', type=Path, required=True, help='checkpoint to write')
    refine.set_defaults(func=_refine)

    scenarios = commands.add_parser('scenarios', help="the seed's offline scenarios")
    scenarios.add_argument('--checkpoint', type=Path, default=DEFAULT_MODEL)
    scenarios.add_argument('--starts', type=int, default=20)
    scenarios.add_argument('--iterations', type=int, default=300)
    scenarios.add_argument('--out', type=Path, default=None, help='folder for JSON and PNG')
    scenarios.set_defaults(func=_scenarios)

    lap = commands.add_parser('lap', help='drive simulated laps with the MPC (no ROS)')
    lap.add_argument('--checkpoint', type=Path, default=DEFAULT_MODEL)
    lap.add_argument('--track', type=Path, default=DEFAULT_TRACK)
    lap.add_argument('--laps', type=float, default=1.0)
    lap.add_argument('--target-speed', type=float, default=1.5, help='m/s')
    lap.add_argument('--out', type=Path, default=None, help='folder for car_lap.png/json')
    lap.set_defaults(func=_lap)


def _train(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    train, test = car_data(args.source, args.h, args.minutes, args.seed)
    model, metrics = train_car(args.model, train, test, args.epochs, args.seed, args.lr,
                               log_every=max(1, args.epochs // 10))
    save_car_model(args.out, model, {'source': args.source, 'epochs': args.epochs,
                                     'minutes': args.minutes, 'test_metrics': metrics})
    print(json.dumps({'checkpoint': str(args.out), **metrics}, indent=2))
    return 0


def _refine(args: argparse.Namespace) -> int:
    torch.set_num_threads(1)
    model = load_car_model(args.checkpoint)
    history = refine_on_scenarios(model, args.rounds, args.runs, epochs=args.epochs)
    save_car_model(args.out, model, {'source': f'{args.checkpoint} refined on scenario runs',
                                     'rounds': args.rounds, 'test_metrics': history[-1]})
    print(json.dumps({'checkpoint': str(args.out), 'before': history[0],
                      'after': history[-1]}, indent=2))
    return 0


def _scenarios(args: argparse.Namespace) -> int:
    torch.set_num_threads(1)
    results = run_all(load_car_model(args.checkpoint), CarParams(), args.starts,
                      iterations=args.iterations)
    summary = [{k: v for k, v in r.items() if k not in ('controls', 'predicted', 'simulated')}
               for r in results]
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / 'car_scenarios.json').write_text(json.dumps(summary, indent=2))
        plot_scenarios(results, args.out / 'car_scenarios.png')
    print(json.dumps(summary, indent=2))
    return 0


def _lap(args: argparse.Namespace) -> int:
    result = drive_laps(args.checkpoint, args.track, args.laps, args.target_speed,
                        progress=True)
    metrics = {k: v for k, v in result.items() if k not in ('arrays', 'track')}
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        metrics['plot'] = str(plot_lap(result, args.out / 'car_lap.png'))
        (args.out / 'car_lap.json').write_text(json.dumps(metrics, indent=2))
    print(json.dumps(metrics, indent=2))
    return 0
