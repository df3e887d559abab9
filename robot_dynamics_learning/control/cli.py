"""
`rdl car ...`: offline RC-car tools (train, evaluate, replay a bag, scenarios, simulated lap).

    rdl car train --source sim --minutes 15 --epochs 150 --out car_mlp_sim.pt
    rdl car train --source dart --model car_bicycle --epochs 20 --out bicycle_dart.pt
    rdl car train --source bag --data my_bag --command-topic /joy --safety-button 5 --out m.pt
    rdl car evaluate --source csv --data my_csvs/ --checkpoint m.pt --out report/
    rdl car replay my_bag --checkpoint m.pt --out replay/
    rdl car refine --checkpoint config/models/car_mlp_sim.pt --out car_mlp_sim_refined.pt
    rdl car scenarios --checkpoint config/models/car_mlp_sim.pt --out results/
    rdl car lap --laps 1 --out results/
"""
import argparse
import dataclasses
import json
import math
from pathlib import Path
from typing import Dict, Optional, Sequence

from robot_dynamics_learning.control.car_mpc_params import CarMPCConfig
from robot_dynamics_learning.control.car_report import verdict_line, write_car_report
from robot_dynamics_learning.control.car_training import (build_car_model, car_data,
                                                          CAR_MODEL_TYPES, load_car_model,
                                                          save_car_model, StopRule,
                                                          train_car)
from robot_dynamics_learning.control.demo_lap import (DEFAULT_MODEL, DEFAULT_TRACK, drive_laps,
                                                      plot_lap)
from robot_dynamics_learning.control.refine import refine_on_scenarios
from robot_dynamics_learning.control.scenarios import plot_scenarios, run_all
from robot_dynamics_learning.data.bag_io import CAR_COMMAND_TOPIC, CAR_POSE_TOPIC
from robot_dynamics_learning.data.car_datasets import car_dataset, MAX_YAW_RATE
from robot_dynamics_learning.data.car_sources import BagOptions, load_car_bags, SOURCES
from robot_dynamics_learning.data.messages import CommandMapping
from robot_dynamics_learning.params import load_node_config
from robot_dynamics_learning.resources import resource
from robot_dynamics_learning.signals.estimator_check import (estimator_errors,
                                                             reference_states,
                                                             REFERENCE_WINDOW_S,
                                                             stream_estimates,
                                                             window_for_rate)
from robot_dynamics_learning.signals.mocap import MocapEstimatorConfig
from robot_dynamics_learning.sim.car import CarParams
import torch

SHIPPED_DART_MODELS = ('config/models/car_mlp_dart.pt', 'config/models/car_bicycle_dart.pt')
TRAIN_H = 0.05   # model step (s) of `rdl car train` without --h


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `rdl car` and its sub-commands."""
    car = subparsers.add_parser('car', help='RC car: train models, scenarios, simulated laps')
    commands = car.add_subparsers(dest='car_command', metavar='CAR_COMMAND', required=True)

    train = commands.add_parser(
        'train', help='train a car model on simulated, DART or your own data (bag, CSV)',
        description='Train to convergence on a validation split (every fifth block of the '
                    'training data; early stopping, best weights restored) unless --epochs '
                    'gives a fixed recipe. Prints the held-out metrics (1 s open loop).')
    _data_arguments(train)
    train.add_argument('--model', choices=CAR_MODEL_TYPES, default='car_mlp')
    train.add_argument('--epochs', type=_positive_int, default=None,
                       help='fixed epochs on all training data instead of early stopping')
    train.add_argument('--max-epochs', type=_positive_int, default=StopRule.max_epochs,
                       help='early stopping: most epochs (the guard)')
    train.add_argument('--patience', type=_positive_int, default=StopRule.patience,
                       help='early stopping: epochs without improvement before stopping')
    train.add_argument('--lr', type=_positive_float, default=None, help='Adam learning rate')
    train.add_argument('--wheelbase', type=_positive_float, default=None,
                       help='car_bicycle: wheelbase (m); default the DART car, 0.1735')
    train.add_argument('--rear-to-cg', type=_positive_float, default=None,
                       help='car_bicycle: rear axle to centre of mass (m); default half the '
                            'wheelbase')
    train.add_argument('--hidden', type=_positive_int, default=None,
                       help='car_mlp: hidden width (64)')
    train.add_argument('--layers', type=_positive_int, default=None,
                       help='car_mlp: hidden layers (8)')
    train.add_argument('--out', type=Path, required=True, help='checkpoint to write')
    train.add_argument('--report', type=Path, default=None,
                       help='also write the evaluation report (report.md, PNG, metrics.json)')
    train.set_defaults(func=_train)

    evaluate = commands.add_parser(
        'evaluate', help='score car checkpoints on held-out data: report.md + PNG + JSON',
        description='Open-loop rollouts of each checkpoint and of a constant-velocity '
                    'baseline on the test split of the data (the same held-out blocks that '
                    "'rdl car train' never trained on, or --test-data).")
    _data_arguments(evaluate)
    evaluate.add_argument('--checkpoint', type=Path, action='append', required=True,
                          help='car model checkpoint (repeat for several)')
    evaluate.add_argument('--horizon', type=_positive_float, default=1.0,
                          help='open-loop horizon (s)')
    evaluate.add_argument('--out', type=Path, default=Path('car_report'), help='report folder')
    evaluate.set_defaults(func=_evaluate)

    replay = commands.add_parser(
        'replay', help='replay a car bag: estimator and models vs measured motion, report',
        description='Reads mocap poses and commands from a rosbag2; replays the poses through '
                    "the causal state estimator (the node's) against a zero-phase reference, "
                    'and rolls each checkpoint and a constant-velocity baseline out open loop '
                    'over the whole bag (none of it trained on). Writes report.md, PNGs and '
                    'metrics.json.')
    replay.add_argument('bag', metavar='BAG', type=Path, help='rosbag2 folder')
    _bag_arguments(replay)
    replay.add_argument('--checkpoint', type=Path, action='append', default=None,
                        help='car model checkpoint (repeat; default the shipped DART MLP and '
                             'bicycle)')
    replay.add_argument('--window-s', type=float, default=None,
                        help='estimator position window (s); default the node default (0.12), '
                             "widened to hold 4 poses at the bag's rate (0.175 at 20 Hz)")
    replay.add_argument('--yaw-window-s', type=float, default=None,
                        help='estimator yaw window (s)')
    replay.add_argument('--order', type=int, choices=(1, 2), default=None,
                        help='estimator polynomial order')
    replay.add_argument('--horizon', type=_positive_float, default=1.0,
                        help='open-loop horizon (s)')
    replay.add_argument('--max-gap-s', type=_positive_float, default=None,
                        help='gap that splits drives (default 5 sample periods, at least 0.05 s)')
    replay.add_argument('--out', type=Path, default=Path('car_replay'), help='report folder')
    replay.set_defaults(func=_replay)

    refine = commands.add_parser('refine', help='fine-tune a car model on simulated runs of '
                                 'the scenario plans (control/refine.py)')
    refine.add_argument('--checkpoint', type=Path, default=DEFAULT_MODEL)
    refine.add_argument('--rounds', type=_positive_int, default=3)
    refine.add_argument('--runs', type=_positive_int, default=10,
                        help='simulated runs per scenario')
    refine.add_argument('--epochs', type=_positive_int, default=15,
                        help='fine-tuning epochs per round')
    refine.add_argument('--out', type=Path, required=True, help='checkpoint to write')
    refine.set_defaults(func=_refine)

    scenarios = commands.add_parser('scenarios', help="the seed's offline scenarios")
    scenarios.add_argument('--checkpoint', type=Path, default=DEFAULT_MODEL)
    scenarios.add_argument('--starts', type=_positive_int, default=20,
                           help='perturbed simulator starts per scenario')
    scenarios.add_argument('--iterations', type=_positive_int, default=300,
                           help="optimiser iterations of each scenario's plan")
    scenarios.add_argument('--out', type=Path, default=None, help='folder for JSON and PNG')
    scenarios.set_defaults(func=_scenarios)

    lap = commands.add_parser('lap', help='drive simulated laps with the MPC (no ROS)')
    lap.add_argument('--checkpoint', type=Path, default=DEFAULT_MODEL)
    lap.add_argument('--track', type=Path, default=DEFAULT_TRACK)
    lap.add_argument('--laps', type=_positive_float, default=1.0)
    lap.add_argument('--params', type=Path, default=resource('config/car.yaml'),
                     help="car_mpc's settings, read from the car_mpc block of this ROS params "
                     'YAML as the node reads it: solver, iterations, step sizes, horizon, '
                     'target speed, limits (default: the package config/car.yaml)')
    lap.add_argument('--target-speed', type=_positive_float, default=None,
                     help='m/s (default: the params file)')
    lap.add_argument('--out', type=Path, default=None, help='folder for car_lap.png/json')
    lap.set_defaults(func=_lap)


def _int_at_least(text: str, minimum: int) -> int:
    """Parse an int >= minimum for argparse (a usage error, not a traceback, otherwise)."""
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise argparse.ArgumentTypeError(f'need an integer >= {minimum}, got {text!r}')
    return value


def _positive_int(text: str) -> int:
    """Parse an int >= 1: 0 or -1 epochs or threads crashed after the data was loaded."""
    return _int_at_least(text, 1)


def _button_index(text: str) -> int:
    """Parse a Joy button index >= 0: -1 would silently read the last button."""
    return _int_at_least(text, 0)


def _positive_float(text: str) -> float:
    """Parse a finite number > 0 (a step, limit or length of 0 gave misleading errors)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f'need a finite number > 0, got {text!r}')
    return value


def _bag_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--pose-topic', default=CAR_POSE_TOPIC,
                        help=f'PoseStamped mocap topic (default {CAR_POSE_TOPIC})')
    parser.add_argument('--command-topic', default=CAR_COMMAND_TOPIC,
                        help=f'Joy, Twist or TwistStamped commands (default {CAR_COMMAND_TOPIC})')
    parser.add_argument('--throttle-axis', type=int, default=1,
                        help='Joy throttle axis (default 1)')
    parser.add_argument('--steering-axis', type=int, default=3,
                        help='Joy steering axis (default 3)')
    parser.add_argument('--throttle-scale', type=float, default=1.0,
                        help='throttle = scale * axis (Joy) or linear.x (Twist)')
    parser.add_argument('--steering-scale', type=float, default=1.0,
                        help='steering = scale * axis (Joy) or angular.z (Twist)')
    parser.add_argument('--safety-button', type=_button_index, default=None,
                        help='Joy deadman button index: throttle counts as 0 while released')
    parser.add_argument('--typestore', default='jazzy', choices=('humble', 'jazzy', 'kilted'),
                        help='types for bags without definitions')
    parser.add_argument('--yaw-offset-deg', type=float, default=0.0,
                        help='bags and CSV files: degrees added to the mocap yaw, for a rigid '
                             "body whose x axis is not the car's forward (default 0)")
    parser.add_argument('--no-heading-check', dest='heading_check', action='store_false',
                        help='keep recordings whose car travels sideways or backward against '
                             'its mocap heading (refused by default: a wrong rigid-body axis)')


def _data_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--source', choices=SOURCES, default='sim',
                        help='sim (the default): simulator; dart: the DART recordings (file '
                             'split); bag: rosbag2 folders; csv: DART-style CSV files or '
                             'folder trees')
    parser.add_argument('--data', type=Path, nargs='+', default=(),
                        help='bag folders or CSV files / folders (source bag, csv)')
    parser.add_argument('--test-data', type=Path, nargs='+', default=(),
                        help='held-out bags or CSVs (default: every fifth block of --data; '
                             'evaluate then needs no --data)')
    _bag_arguments(parser)
    parser.add_argument('--max-gap-s', type=_positive_float, default=None,
                        help='gap that splits drives (default 5 sample periods, at least 0.05 s: '
                             '0.25 s at 20 Hz)')
    parser.add_argument('--max-speed', type=_positive_float, default=8.0,
                        help='fastest plausible speed (m/s); faster states are mocap glitches')
    parser.add_argument('--max-yaw-rate', type=_positive_float, default=MAX_YAW_RATE,
                        help='fastest plausible yaw rate (rad/s)')
    parser.add_argument('--minutes', type=_positive_float, default=15.0,
                        help='simulated driving to collect (source sim)')
    parser.add_argument('--mass', type=_positive_float, default=None,
                        help='source sim: car mass (kg)')
    parser.add_argument('--sim-wheelbase', type=_positive_float, default=None,
                        help='source sim: wheelbase of the simulated car (m)')
    parser.add_argument('--h', type=_positive_float, default=None,
                        help=f'model step (s); train: default {TRAIN_H}, evaluate: default '
                             "the checkpoints' step")
    parser.add_argument('--seed', type=int, default=0,
                        help='seed of the training and of the simulated drives')
    parser.add_argument('--threads', type=_positive_int, default=1, help='torch threads')


def _bag_options(args: argparse.Namespace) -> BagOptions:
    return BagOptions(args.pose_topic, args.command_topic,
                      CommandMapping(args.throttle_axis, args.steering_axis,
                                     args.throttle_scale, args.steering_scale),
                      args.safety_button, args.typestore, args.yaw_offset_deg,
                      args.heading_check)


def _load_data(args: argparse.Namespace, h: float, test_only: bool = False):
    torch.set_num_threads(args.threads)
    params = CarParams()
    if args.mass is not None:
        params = dataclasses.replace(params, mass=args.mass)
    if args.sim_wheelbase is not None:
        params = dataclasses.replace(params, wheelbase=args.sim_wheelbase,
                                     rear_to_cg=args.sim_wheelbase / 2)
    return car_data(args.source, h, args.minutes, args.seed, args.data, args.test_data,
                    _bag_options(args), params, args.max_gap_s, args.max_speed,
                    args.max_yaw_rate, progress=True, test_only=test_only)


def _describe(args: argparse.Namespace) -> str:
    paths = ', '.join(str(p) for p in args.data)
    return args.source + (f' ({paths})' if paths else '')


def _train(args: argparse.Namespace) -> int:
    settings = {k: v for k, v in (('wheelbase', args.wheelbase),
                                  ('rear_to_cg', args.rear_to_cg or (
                                      args.wheelbase / 2 if args.wheelbase else None)),
                                  ('hidden', args.hidden), ('layers', args.layers))
                if v is not None}
    h = args.h or TRAIN_H
    build_car_model(args.model, h, settings)   # a bad setting fails before a long data read
    _refuse_wrong_kind(args.out, folder=False)
    _refuse_wrong_kind(args.report, folder=True)
    train, test = _load_data(args, h)
    rule = StopRule(args.max_epochs, args.patience)
    model, metrics = train_car(args.model, train, test, args.seed, args.lr, rule, settings,
                               args.epochs, progress=True)
    save_car_model(args.out, model, {'source': _describe(args), 'epochs': args.epochs,
                                     'settings': settings, 'test_metrics': metrics})
    if args.report is not None:
        report = write_car_report(args.report, {args.model: model}, test, _describe(args))
        print(verdict_line(report))
    print(json.dumps({'checkpoint': str(args.out), **metrics}, indent=2))
    return 0


def _models(paths: Sequence[Path]) -> Dict[str, object]:
    models = {}
    for path in paths:
        model = load_car_model(path)
        name = f'{type(model).__name__} ({Path(path).name})'
        models[name] = model
    return models


def _model_step(models: Dict[str, object], h: Optional[float]) -> float:
    """Return the checkpoints' common model step (s): the data is built at it."""
    steps = sorted({round(model.h, 9) for model in models.values()})
    if len(steps) > 1:
        raise ValueError(f'the checkpoints have different model steps {steps} s; score them '
                         'in separate runs')
    if h is not None and abs(h - steps[0]) > 1e-9:
        raise ValueError(f"--h {h:g} differs from the checkpoints' model step {steps[0]:g} s; "
                         'leave --h out')
    return steps[0]


def _refuse_wrong_kind(path: Optional[Path], folder: bool) -> None:
    """Refuse an output path of the wrong kind (file, folder) before the work, not after it."""
    if path is None or not path.exists() or path.is_dir() == folder:
        return
    kind = 'a folder (for the report)' if folder else 'a file (the checkpoint to write)'
    raise FileExistsError(f'{path} exists and is not {kind}')


def _evaluate(args: argparse.Namespace) -> int:
    models = _models(args.checkpoint)   # a wrong checkpoint path fails before a long read
    _refuse_wrong_kind(args.out, folder=True)
    _, test = _load_data(args, _model_step(models, args.h), test_only=True)
    metrics = write_car_report(args.out, models, test, _describe(args), horizon_s=args.horizon)
    print(verdict_line(metrics))
    print(f'report: {args.out / "report.md"}')
    return 0


def _replay(args: argparse.Namespace) -> int:
    torch.set_num_threads(1)
    settings = {k: v for k, v in (('window_s', args.window_s),
                                  ('yaw_window_s', args.yaw_window_s), ('order', args.order))
                if v is not None}
    asked = MocapEstimatorConfig(**settings)   # bad settings fail before the bag is read
    models = _models(args.checkpoint or [resource(p) for p in SHIPPED_DART_MODELS])
    _refuse_wrong_kind(args.out, folder=True)
    drive = load_car_bags([args.bag], _bag_options(args), progress=True)[0]
    test = car_dataset([drive], _model_step(models, None), max_gap_s=args.max_gap_s)
    config = window_for_rate(asked, 1.0 / test.info['rate_hz'])
    if config != asked:
        print(f'estimator windows widened to {config.window_s:.3f} s to hold '
              f"{config.min_samples} poses at {test.info['rate_hz']:.1f} Hz (set the node's "
              'window_s to at least that for this mocap rate)')
    estimates, counters = stream_estimates(drive.time, drive.observations, config)
    reference = reference_states(drive.time, drive.observations, test.info['max_gap_s'])
    estimator = {'time': drive.time, 'estimates': estimates, 'reference': reference,
                 'errors': estimator_errors(drive.time, estimates, reference),
                 'counters': counters, 'config': dataclasses.asdict(config),
                 'reference_window_s': REFERENCE_WINDOW_S}
    metrics = write_car_report(args.out, models, test, f'bag {args.bag}', estimator,
                               args.horizon)
    print(verdict_line(metrics))
    errors = metrics['estimator']['errors']
    print('estimator RMSE at zero lag: ' + ', '.join(
        f"{k} {v['rmse']:.4f}" for k, v in errors.items()))
    print(f'report: {args.out / "report.md"}')
    return 0


def _refine(args: argparse.Namespace) -> int:
    torch.set_num_threads(1)
    _refuse_wrong_kind(args.out, folder=False)
    model = load_car_model(args.checkpoint)
    history = refine_on_scenarios(model, args.rounds, args.runs, epochs=args.epochs,
                                  progress=True)
    save_car_model(args.out, model, {'source': f'{args.checkpoint} refined on scenario runs',
                                     'rounds': args.rounds, 'test_metrics': history[-1]})
    print(json.dumps({'checkpoint': str(args.out), 'before': history[0],
                      'after': history[-1]}, indent=2))
    return 0


def _scenarios(args: argparse.Namespace) -> int:
    torch.set_num_threads(1)
    results = run_all(load_car_model(args.checkpoint), CarParams(), args.starts,
                      iterations=args.iterations, progress=True)
    summary = [{k: v for k, v in r.items() if k not in ('controls', 'predicted', 'simulated')}
               for r in results]
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / 'car_scenarios.json').write_text(json.dumps(summary, indent=2))
        plot_scenarios(results, args.out / 'car_scenarios.png')
    print(json.dumps(summary, indent=2))
    return 0


def _lap(args: argparse.Namespace) -> int:
    settings = load_node_config(CarMPCConfig, args.params, 'car_mpc')
    mpc_config = dataclasses.replace(   # solve time is not simulated: no budget
        settings.mpc_config(), budget_s=10.0,
        target_speed=args.target_speed or settings.target_speed)
    result = drive_laps(args.checkpoint, args.track, args.laps, iterations=settings.iterations,
                        candidates=settings.candidates, solver=settings.solver,
                        refine_candidates=settings.refine_candidates, mpc_config=mpc_config,
                        progress=True)
    metrics = {k: v for k, v in result.items() if k not in ('arrays', 'track')}
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        metrics['plot'] = str(plot_lap(result, args.out / 'car_lap.png'))
        (args.out / 'car_lap.json').write_text(json.dumps(metrics, indent=2))
    print(json.dumps(metrics, indent=2))
    return 0
