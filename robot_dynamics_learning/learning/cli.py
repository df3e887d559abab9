"""
`rdl train` and `rdl evaluate`: offline training and evaluation of any registered model.

Data: a shared dataset name ('kinova', 'pneumatic', 'schunk'; fixed train/test splits, see
`load_split`), a rosbag2 folder (read by `data.bag_io`) or the user's own CSV / npz files with
named columns (`--columns q=Position* tau=Torque[0-9]`, see `data.loading`), split by
`--split` ('time:0.8', 'blocks:500:4', 'files:PATTERN'; `data.splits`). The YAML config names
the model type, its config, the training settings and the windowing, e.g.
config/models/lstm.yaml. Inverse models are scored on the test side after training, next to
the previous-value baseline, with calibration and coverage warnings (`learning.evaluation`).
"""
import argparse
import dataclasses
import json
from pathlib import Path
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from robot_dynamics_learning.data import datasets
from robot_dynamics_learning.data.loading import (derive_each, file_columns, load_files,
                                                  parse_columns, trajectories_from_table)
from robot_dynamics_learning.data.splits import parse_split, Split
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.data.windows import (forward_dynamics_arrays,
                                                  forward_dynamics_windows,
                                                  inverse_dynamics_arrays,
                                                  inverse_dynamics_windows)
from robot_dynamics_learning.learning.checkpoint import load_checkpoint, save_checkpoint
from robot_dynamics_learning.learning.data_checks import check_joint_data
from robot_dynamics_learning.learning.evaluation import format_report, inverse_report
from robot_dynamics_learning.learning.metrics import multi_step_batch, multi_step_rmse
from robot_dynamics_learning.learning.report import json_ready
from robot_dynamics_learning.learning.training import holdout_windows, train_model, TrainConfig
from robot_dynamics_learning.learning.window_choice import train_choosing_window
from robot_dynamics_learning.models.base import DynamicsModel
from robot_dynamics_learning.models.registry import build_model, model_builder, urdf_robot
import torch
import yaml

DATASETS = ('kinova', 'pneumatic', 'schunk')
# The zero-phase qdd filter of each dataset with a derived qdd (`data.datasets`).
DATASET_ACC_WINDOW_S = {'kinova': datasets.KINOVA_ACC_WINDOW_S,
                        'schunk': datasets.SCHUNK_ACC_WINDOW_S}
FILE_SUFFIXES = ('.csv', '.npz', '.txt', '.gz')   # .gz: data.csv.gz
CONFIG_KEYS = {'model_type', 'model', 'training', 'data'}
DATA_KEYS = {'problem', 'window', 'stride', 'val_fraction', 'joint_topic', 'command_topic',
             'acc_window_s'}


def load_config(path: Path) -> Dict[str, Any]:
    """
    Read and check a training YAML (keys model_type, model, training, data).

    Everything is validated here, before any data is read: the model and training sections
    by their config classes (finite numbers, ranges), the data section's numbers by range.
    Any defect is a ValueError naming the file and the field.
    """
    try:
        config = yaml.safe_load(Path(path).read_text()) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ValueError(f'{path}: not a YAML file ({type(error).__name__})') from None
    if not isinstance(config, dict):
        raise ValueError(f'{path}: a training config is a mapping, got {type(config).__name__}')
    unknown = sorted(str(key) for key in set(config) - CONFIG_KEYS)
    if unknown or 'model_type' not in config:
        raise ValueError(f'{path}: needs model_type; allowed keys {sorted(CONFIG_KEYS)}, '
                         f'unknown {unknown}')
    for section in ('model', 'training', 'data'):
        if not isinstance(config.setdefault(section, {}) or {}, dict):
            raise ValueError(f'{path}: {section} must be a mapping')
        config[section] = config[section] or {}
    data = config['data']
    unknown = sorted(str(key) for key in set(data) - DATA_KEYS)
    if unknown:
        raise ValueError(f'{path}: unknown data key(s) {unknown}; allowed {sorted(DATA_KEYS)}')
    if data.get('problem', 'inverse') not in ('inverse', 'forward'):
        raise ValueError(f"{path}: data.problem must be 'inverse' or 'forward'")
    window = data.get('window')
    if isinstance(window, list) and not (
            window and all(_window_length(w) for w in window)
            and len(set(window)) == len(window) and data.get('problem', 'inverse') == 'inverse'):
        raise ValueError(f'{path}: data.window as a list takes distinct lengths of 1 to 100000 '
                         f'steps, for inverse models only; got {window!r}')
    if isinstance(window, list) and (config['training'] or {}).get('refit_all'):
        raise ValueError(f'{path}: training.refit_all would train on the recordings that '
                         'choose among data.window: give one window length')
    checks = {'window': lambda v: _window_length(v) or isinstance(v, list),
              'stride': lambda v: v is None or (type(v) is int and 1 <= v <= 100_000),
              'val_fraction': lambda v: isinstance(v, (int, float)) and 0.0 < v < 1.0,
              'acc_window_s': lambda v: isinstance(v, (int, float)) and 0.0 < v <= 60.0}
    for key, valid in checks.items():
        if key in data and not valid(data[key]):
            raise ValueError(f'{path}: data.{key} is out of range: {data[key]!r}')
    try:
        model_builder(str(config['model_type'])).config_class.from_dict(config['model'])
        TrainConfig.from_dict(config['training'])
    except (TypeError, ValueError) as error:
        raise ValueError(f'{path}: {error}') from None
    return config


def _window_length(value: Any) -> bool:
    return type(value) is int and 1 <= value <= 100_000


def load_split(data: str, split: str) -> List[Trajectory]:
    """
    Return the trajectories of `split` ('train' or 'test') of a dataset name.

    kinova: identification files / validation files; pneumatic: `datasets.split_pneumatic`
    (first 80 % / last 20 % of episodes in sorted order); schunk: `datasets.split_schunk`
    (every fifth run from the third tests).
    """
    if split not in ('train', 'test'):
        raise ValueError(f"split must be 'train' or 'test', got '{split}'")
    if data == 'kinova':
        train, test = datasets.load_kinova_split()
        return train if split == 'train' else test
    if data in ('pneumatic', 'schunk'):
        train, test = (datasets.split_pneumatic(datasets.load_pneumatic()) if data == 'pneumatic'
                       else datasets.split_schunk(datasets.load_schunk()))
        return train if split == 'train' else test
    raise ValueError(f"unknown dataset '{data}'; datasets are {list(DATASETS)}")


def load_bag(data: str, data_config: Dict[str, Any],
             joint_names: Optional[Sequence[str]] = None) -> List[Trajectory]:
    """
    Return a JointState bag's recording in pieces cut at stamp gaps (skipped messages).

    joint_names: the joints in this order, matched by name (None: the first message's).
    Missing qd / qdd stay missing: `_split_then_derive` derives them after the split, as for
    files.
    """
    path = Path(data)
    if not path.exists():
        raise FileNotFoundError(f"'{data}' is neither a dataset {list(DATASETS)} nor a bag")
    from robot_dynamics_learning.data import bag_io
    trajectory = bag_io.read_trajectory(
        path, joint_topic=data_config.get('joint_topic', bag_io.JOINT_TOPIC),
        command_topic=data_config.get('command_topic'), joint_names=joint_names)
    table = {name: getattr(trajectory, name) for name in ('time', 'q', 'qd', 'qdd', 'tau',
                                                          'actions')
             if getattr(trajectory, name) is not None}
    pieces = trajectories_from_table(
        table, {name: name for name in table}, joint_names=trajectory.joint_names,
        derivative_window_s=_derivative_window(data_config), source=trajectory.source,
        derive=False)
    for piece in pieces:
        piece.units = dict(trajectory.units)
    return pieces


def load_data(data: Sequence[str], data_config: Dict[str, Any], split: Optional[str] = None,
              columns: Sequence[str] = (), dt: Optional[float] = None,
              joint_names: Optional[Sequence[str]] = None,
              column_order: Optional[Dict[str, List[str]]] = None
              ) -> Tuple[List[Trajectory], List[Trajectory]]:
    """
    Return (train, test) trajectories of a dataset name, a bag or CSV / npz files.

    Files are read with the column spec `columns` ('field=pattern', `data.loading`) and split
    by `split` (default 'time:0.8'); a dataset keeps its fixed split unless `split` is given,
    which then re-splits all its recordings (qdd derived again on each side); a bag is split
    like files (default 'time:0.8': scoring its training rows, as before, hid overfitting).
    Where `joint_names` are given (a URDF's or a checkpoint's joints), every source keeps
    those joints only, in that order, matched by name (`Trajectory.in_joint_order`). Files
    are read in `column_order` where given (the training's `file_columns`, by name).
    """
    train, test = _load_data(list(data), data_config, split, columns, dt, joint_names,
                             column_order)
    if not joint_names:
        return train, test
    return ([t.in_joint_order(joint_names) for t in train],
            [t.in_joint_order(joint_names) for t in test])


def _load_data(data: List[str], data_config: Dict[str, Any], split: Optional[str],
               columns: Sequence[str], dt: Optional[float],
               joint_names: Optional[Sequence[str]],
               column_order: Optional[Dict[str, List[str]]]
               ) -> Tuple[List[Trajectory], List[Trajectory]]:
    """`load_data` before the joints are put in order (a bag is read by name already)."""
    if _all_files(data):
        resolved = [Path(item).resolve() for item in data]
        twice = sorted({item for item, path in zip(data, resolved) if resolved.count(path) > 1})
        if twice:   # its rows could land on both sides of a blocks split
            raise ValueError(f'files given more than once: {twice}')
        spec = parse_columns(columns) if columns else None
        splitter = parse_split(split or 'time:0.8')
        trajectories = load_files(data, spec, dt, _derivative_window(data_config), derive=False,
                                  order=column_order)
        _check_same_widths(trajectories)
        return _split_then_derive(trajectories, splitter, data_config)
    if len(data) != 1:
        raise ValueError(f'give one dataset name or bag, or only CSV / npz files; got {data}')
    if data[0] not in DATASETS:   # a bag: split like files
        return _split_then_derive(load_bag(data[0], data_config, joint_names),
                                  parse_split(split or 'time:0.8'), data_config)
    train, test = (load_split(data[0], name) for name in ('train', 'test'))
    if split is None:
        return train, test
    window = DATASET_ACC_WINDOW_S.get(data[0])
    if window is None:   # no derived column to keep apart
        return parse_split(split)(train + test)
    # qdd was differentiated over whole recordings: derive it again on each side's pieces.
    raw = [dataclasses.replace(t, qdd=None) for t in train + test]
    return _split_then_derive(raw, parse_split(split), {'acc_window_s': window})


def _derivative_window(data_config: Dict[str, Any]) -> float:
    """Return the Savitzky-Golay window (s) that derives a user's missing qd / qdd."""
    return float(data_config.get('acc_window_s', datasets.KINOVA_ACC_WINDOW_S))


def _split_then_derive(trajectories: List[Trajectory],
                       splitter: Callable[[Sequence[Trajectory]], Split],
                       data_config: Dict[str, Any]) -> Split:
    """
    Split raw recordings, then derive missing qd / qdd on each side's pieces.

    A zero-phase derivative taken before the split would give the training rows next to a
    test block derivatives of the test block's samples (half the window on each side).
    """
    window = _derivative_window(data_config)
    train, test = splitter(trajectories)
    return derive_each(train, window, 'training'), derive_each(test, window, 'test')


def _check_same_widths(trajectories: Sequence[Trajectory]) -> None:
    """Raise ValueError naming two files whose fields differ in width (joints, columns)."""
    first = trajectories[0]
    for trajectory in trajectories[1:]:
        for name in Trajectory.ARRAY_FIELDS:
            a, b = getattr(first, name), getattr(trajectory, name)
            if (a is None) != (b is None) or a is not None and a.shape[1] != b.shape[1]:
                raise ValueError(
                    f'{trajectory.source} has {name} of width {None if b is None else b.shape[1]}'
                    f', {first.source} {None if a is None else a.shape[1]}: all files need the '
                    'same columns')


def _problem_widths(problem: str, trajectories: List[Trajectory]) -> Tuple[int, int, int]:
    arrays = (inverse_dynamics_arrays if problem == 'inverse' else
              forward_dynamics_arrays)(trajectories[0])
    return arrays[0].shape[1], arrays[1].shape[1], arrays[2].shape[1]


def run_train(args: argparse.Namespace) -> int:
    """Train the configured model on `--data` and write checkpoint and summary to `--out`."""
    config = load_config(args.config)
    data_config = config['data']
    problem = data_config.get('problem', 'inverse')
    train_config = TrainConfig.from_dict({**config.get('training', {}),
                                          **({'seed': args.seed} if args.seed is not None
                                             else {})})
    torch.manual_seed(train_config.seed)
    robot = urdf_robot(config['model_type'], config.get('model'))
    trajectories, test = load_data(args.data, data_config, args.split, args.columns, args.dt,
                                   None if robot is None else robot.joint_names)
    if not trajectories:
        raise ValueError(f'the split {args.split or "time:0.8"} leaves no training data')
    checks = check_joint_data(robot, trajectories + test, _derivative_window(data_config),
                              ' '.join(args.data))
    if not test:
        print(f'rdl: warning: the split {args.split or "time:0.8"} leaves no test data; no '
              'test report', file=sys.stderr)
    make = inverse_dynamics_windows if problem == 'inverse' else forward_dynamics_windows
    window = data_config.get('window', 50)
    val_fraction = float(data_config.get('val_fraction', 0.2))

    def build() -> DynamicsModel:
        return build_model(config['model_type'], config.get('model', {}),
                           *_problem_widths(problem, trajectories))

    choice = {}
    if isinstance(window, list):   # one model per window length, the best on held-out data
        chosen = train_choosing_window(build, trajectories, window, train_config, val_fraction)
        model, result = chosen.model, chosen.result
        choice = {'window_choice': {'window': chosen.window, 'sliding': chosen.sliding,
                                    'held_nmse': chosen.held_nmse,
                                    'held_nmse_sliding': chosen.held_nmse_sliding}}
        print(f'window {chosen.window} chosen{", on sliding windows" if chosen.sliding else ""}'
              '; held-out nMSE per window: '
              + ', '.join(f'{w}: {v:.4f}' + (f' ({chosen.held_nmse_sliding[w]:.4f} sliding)'
                                             if w in chosen.held_nmse_sliding else '')
                          for w, v in chosen.held_nmse.items())
              if chosen.held_nmse else f'too little data to hold out a block: window '
              f'{chosen.window} trained alone')
    else:
        train, val = holdout_windows(
            trajectories, lambda pieces: make(pieces, window, data_config.get('stride')),
            window, val_fraction)
        model = build()
        result = train_model(model, train, val, train_config)
    out = Path(args.out)
    metadata = {'data': [str(item) for item in args.data], 'problem': problem,
                'split': args.split, 'columns': list(args.columns), 'dt': args.dt,
                'column_names': _column_names(args),
                'data_config': dict(data_config), 'epochs': result.epochs,
                'seconds': result.seconds, 'best_val_loss': result.best_val_loss,
                'training': dict(train_config.__dict__), **choice}
    path = save_checkpoint(out / 'model.pt', model, trajectories[0].joint_names, metadata)
    report = inverse_report(model, trajectories, test) if problem == 'inverse' and test else None
    (out / 'train_summary.json').write_text(json.dumps(json_ready(
        {**metadata, 'checkpoint': str(path), **checks, 'test': report,
         'history': result.history}),
        indent=1, allow_nan=False))
    refit = sum(1 for entry in result.history if entry.get('refit'))
    print(f'trained {config["model_type"]} in {result.seconds:.1f} s ({result.epochs} epochs'
          + (f', then {refit} on the training and validation data together' if refit else '')
          + f'), best validation loss {result.best_val_loss:.5f}; checkpoint {path}')
    if report is not None:
        print(format_report(report))
    return 0


def _column_names(args: argparse.Namespace) -> Optional[Dict[str, List[str]]]:
    """
    Return the columns each field took from the first training file (None: not files).

    `rdl evaluate` reads files in this order by name: a file with the same columns in
    another order must not be scored with its joints swapped.
    """
    if not _all_files(args.data):
        return None
    spec = parse_columns(args.columns) if args.columns else None
    return file_columns(args.data[0], spec, args.dt)


def _checked_column_names(names: Any) -> Optional[Dict[str, List[str]]]:
    """Return a checkpoint's `_column_names` if well formed, else None (read by patterns)."""
    if isinstance(names, dict) and all(
            isinstance(v, list) and all(isinstance(n, str) for n in v) for v in names.values()):
        return names
    return None


def _all_files(data: Sequence[str]) -> bool:
    return all(Path(item).suffix.lower() in FILE_SUFFIXES for item in data)


def run_evaluate(args: argparse.Namespace) -> int:
    """
    Evaluate a checkpoint on `--data`'s test split; print and write JSON metrics.

    --split, --columns and --dt default to the training's (checkpoint metadata): any other
    split of the training data would score rows the model was trained on.
    """
    loaded = load_checkpoint(args.checkpoint)
    model = loaded.model
    trained = loaded.metadata
    problem = trained.get('problem', model.kind)
    side, spec = args.side, args.split
    if spec in ('train', 'test'):   # the side, as `--split` meant before data splits
        side, spec = spec, None
    spec = trained.get('split') if spec is None else spec
    columns = args.columns or trained.get('columns', ())
    dt = trained.get('dt') if args.dt is None else args.dt
    data_config = trained.get('data_config', {})   # the training's qdd filter
    order = None if args.columns else _checked_column_names(trained.get('column_names'))
    train, test = load_data(args.data, data_config, spec, columns, dt,
                            loaded.joint_names or None, order)
    trajectories = test if side == 'test' else train
    if not trajectories:
        raise ValueError(f'the {side} side of {args.data} is empty (split {spec!r})')
    if loaded.joint_names and trajectories[0].joint_names and \
            list(trajectories[0].joint_names) != loaded.joint_names:
        raise ValueError(f"checkpoint joints {loaded.joint_names} differ from the data's "
                         f'{trajectories[0].joint_names}')
    checks = check_joint_data(urdf_robot(loaded.model_type, loaded.config), train + test,
                              _derivative_window(data_config), ' '.join(args.data))
    if problem == 'inverse':
        report = inverse_report(model, train, trajectories)
        metrics = {'rmse_per_joint': report['model']['rmse'],
                   'nmse_per_joint': report['model']['nmse'], **report}
    else:
        batch = multi_step_batch(trajectories, args.warmup, args.horizon, args.stride)
        metrics = {'multi_step_rmse': multi_step_rmse(model, batch, args.warmup,
                                                      args.horizon).tolist()}
    metrics.update({'checkpoint': str(args.checkpoint), 'data': list(args.data),
                    'split': spec, 'side': side, 'model_type': loaded.model_type,
                    **checks})
    text = json.dumps(json_ready(metrics), indent=1, allow_nan=False)   # NaN: null
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


def data_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options that read and split a user's files (train and evaluate alike)."""
    parser.add_argument('--columns', nargs='*', default=(),
                        help="files: 'field=pattern[,pattern]' per field (time, q, qd, qdd, tau, "
                        'observations, actions), e.g. q=Position* tau=Torque[0-9]; default: '
                        'columns named like the fields (q or q_1, q_2, ...) or as `rdl bag '
                        'export` names them, time the first of time, t, timestamp, stamp, '
                        "time_* in any case; a time column named '*_ns' is in nanoseconds, "
                        "'*_ms' / '*_us' (or '[ms]', '(us)') in milli- / microseconds")
    parser.add_argument('--dt', type=float, default=None,
                        help='files: sample period in seconds (in place of a time column)')
    parser.add_argument('--split', default=None,
                        help="'time:0.8' (head of every recording trains; the default for "
                        "files and bags), 'blocks:500:4' (every 4th block of 500 samples "
                        "tests) or 'files:PATTERN[,PATTERN]'; a dataset keeps its fixed split "
                        'unless given')


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `train` and `evaluate` to `rdl`."""
    train = subparsers.add_parser('train', help='train a dynamics model offline')
    train.add_argument('--config', required=True, type=Path,
                       help='training YAML (model_type, model, training, data)')
    train.add_argument('--data', required=True, nargs='+',
                       help=f'dataset name {list(DATASETS)}, a rosbag2 folder or CSV / npz '
                       'files')
    data_arguments(train)
    train.add_argument('--out', default='runs/latest', help='output folder (model.pt, JSON)')
    train.add_argument('--seed', type=int, default=None, help='override training.seed')
    train.set_defaults(func=run_train)
    evaluate = subparsers.add_parser('evaluate', help='evaluate a checkpoint')
    evaluate.add_argument('--checkpoint', required=True, type=Path)
    evaluate.add_argument('--data', required=True, nargs='+',
                          help=f'dataset name {list(DATASETS)}, a rosbag2 folder or CSV / npz '
                          'files (--columns, --dt and --split default to those of the training, '
                          'so that the test side is the one `rdl train` held out)')
    data_arguments(evaluate)
    evaluate.add_argument('--side', default='test', choices=('train', 'test'),
                          help='which side of the split to score')
    evaluate.add_argument('--warmup', type=int, default=20,
                          help='forward models: observed steps before predicting')
    evaluate.add_argument('--horizon', type=int, default=10,
                          help='forward models: steps predicted ahead')
    evaluate.add_argument('--stride', type=int, default=5,
                          help='forward models: step between evaluation windows')
    evaluate.add_argument('--out', default=None, help='write the metrics JSON here')
    evaluate.set_defaults(func=run_evaluate)
