"""
`rdl identify`: fit a URDF's inertial, damping and friction parameters to recorded data.

The data are read as `rdl train` reads them (`learning.cli.load_data`: a dataset name, a
rosbag2 folder, CSV / npz files with `--columns`, `--dt` and `--split`), so NaN rows are
skipped, recordings are cut at gaps, qd / qdd are derived after the split, and the
identified model is scored on the held-out side. An npz of q, qd, qdd, tau arrays (N, n)
without a time column, the first input format, is still read whole.
"""
import argparse
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from robot_dynamics_learning.data.loading import time_column
from robot_dynamics_learning.data.trajectory import default_joint_names, joint_columns, Trajectory
from robot_dynamics_learning.dynamics.identify import identify
from robot_dynamics_learning.dynamics.model import load_urdf, RobotModel
from robot_dynamics_learning.learning.cli import data_arguments, load_data
from robot_dynamics_learning.learning.data_checks import check_joint_data
from robot_dynamics_learning.learning.metrics import nmse_per_output, quiet_targets
from robot_dynamics_learning.learning.urdf_range import check_urdf_range
from robot_dynamics_learning.resources import resource
import torch

ARRAYS = ('q', 'qd', 'qdd', 'tau')
Samples = Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `identify` command to `rdl`."""
    parser = subparsers.add_parser(
        'identify', help='identify rigid-body parameters from (q, qd, qdd, tau) data',
        description='Fit masses, centres of mass and inertias (physically consistent, '
                    'log-Cholesky) and optionally joint damping and Coulomb friction of a URDF '
                    'to recorded joint data, by least squares on the inertial regressor, and '
                    'score the result on the held-out side of --split. DATA is read as `rdl '
                    'train --data` reads it: a dataset name, a rosbag2 folder with '
                    'sensor_msgs/JointState (position, velocity, effort), or CSV / npz files '
                    '(`rdl bag export` output loads as it is); missing velocities and '
                    'accelerations come from a zero-phase Savitzky-Golay filter (--window). '
                    'Also read: an .npz with arrays q, qd, qdd, tau (N, n), optional '
                    'joint_names and no time column (fitted whole, nothing held out).')
    parser.add_argument('data', nargs='+',
                        help='dataset name, rosbag2 folder, or CSV / npz files')
    parser.add_argument('--urdf', type=Path, default=None,
                        help="robot URDF (default: the package's urdf/panda.urdf)")
    parser.add_argument('--joint-topic', default='/joint_states',
                        help='bag input: JointState topic (default /joint_states)')
    parser.add_argument('--window', type=float, default=0.05,
                        help='Savitzky-Golay window of derived qd / qdd in seconds (0.05)')
    data_arguments(parser)
    parser.add_argument('--links', nargs='+', metavar='LINK',
                        help='identify only these moving links (default: all)')
    parser.add_argument('--damping', action='store_true', help='also fit viscous damping')
    parser.add_argument('--friction', action='store_true', help='also fit Coulomb friction')
    parser.add_argument('--max-iter', type=int, default=500, help='L-BFGS iterations (500)')
    parser.add_argument('--out', type=Path, required=True, help='output JSON file')
    parser.set_defaults(func=_run)


def load_samples(data: Sequence[str], model: RobotModel, joint_topic: str = '/joint_states',
                 window_s: float = 0.05, columns: Sequence[str] = (),
                 dt: Optional[float] = None, split: Optional[str] = None
                 ) -> Tuple[Samples, Optional[Samples]]:
    """
    Return (fit, held out or None): (q, qd, qdd, tau) arrays (N, n) in the model's joint order.

    Joints are matched to the URDF's by name where the data name them (bags, exports, CSV
    columns such as q_<joint>); unnamed joint columns are taken in the URDF's order. Data a
    URDF model must not learn from (degrees, velocities or torques of another unit, sign or
    joint, torques never measured) are a ValueError (`data_checks.check_joint_data`; the
    timeless npz only by its positions): identification would fit garbage torques to them.
    """
    data = [str(item) for item in data]
    legacy = _timeless_arrays(data) if dt is None and not columns else None
    if legacy is not None:
        arrays, names = legacy
        width = arrays['q'].shape[1]
        order = joint_columns(names or default_joint_names(width), model.joint_names, data[0])
        fit = tuple(arrays[k][:, order] for k in ARRAYS)
        check_urdf_range(model, fit[0], data[0])
        return fit, None
    config = {'joint_topic': joint_topic, 'acc_window_s': window_s}
    train, test = load_data(data, config, split, columns, dt, model.joint_names)
    if not train:
        raise ValueError(f'the split {split or "time:0.8"} leaves no data to identify from')
    check_joint_data(model, train + test, window_s, ' '.join(data))
    return _samples(train), _samples(test) if test else None


def _timeless_arrays(data: Sequence[str]
                     ) -> Optional[Tuple[Dict[str, np.ndarray], Optional[List[str]]]]:
    """Return (arrays, joint names) of the one npz of q, qd, qdd, tau without time, else None."""
    if len(data) != 1 or Path(data[0]).suffix.lower() != '.npz' or not Path(data[0]).is_file():
        return None
    with np.load(data[0], allow_pickle=False) as archive:
        if not set(ARRAYS) <= set(archive.files) or time_column(archive.files) is not None:
            return None
        arrays = {k: np.asarray(archive[k], dtype=np.float64) for k in ARRAYS}
        names = archive['joint_names'].tolist() if 'joint_names' in archive.files else None
    return arrays, names


def _samples(trajectories: Sequence[Trajectory]) -> Samples:
    """Stack the pieces' q, qd, qdd, tau (`load_data` put them in the model's joint order)."""
    first = trajectories[0]
    missing = [k for k in ARRAYS if getattr(first, k) is None]
    if missing:
        raise ValueError(f'{first.source}: no {missing}: identification needs joint '
                         'positions, velocities, accelerations and torques')
    return tuple(np.concatenate([getattr(t, k) for t in trajectories]) for k in ARRAYS)


def _held_out_nmse(result, samples: Samples) -> np.ndarray:
    """Return the identified model's per-joint torque nMSE on held-out samples."""
    q, qd, qdd, tau = (torch.as_tensor(a, dtype=torch.float64) for a in samples)
    with torch.no_grad():
        predicted = result.module.rnea(q, qd, qdd).numpy()
    return nmse_per_output(predicted, samples[3])


def _run(args: argparse.Namespace) -> int:
    urdf = args.urdf or resource('urdf/panda.urdf')
    model = load_urdf(urdf)
    fit, held = load_samples(args.data, model, args.joint_topic, args.window, args.columns,
                             args.dt, args.split)
    q, qd, qdd, tau = fit
    result = identify(model, q, qd, qdd, tau, learn_inertia=args.links or True,
                      learn_damping=args.damping, learn_friction=args.friction,
                      max_iter=args.max_iter, progress=True)
    summary: Dict[str, Any] = result.summary()
    summary.update({'urdf': str(urdf), 'data': list(args.data), 'split': args.split,
                    'samples': int(len(q))})
    if held is not None:
        nmse = _held_out_nmse(result, held)
        quiet = quiet_targets(tau, held[3])
        summary['test'] = {'samples': int(len(held[0])),
                           'nmse_per_joint': dict(zip(model.joint_names, nmse.tolist())),
                           'nmse_mean': float(np.nanmean(nmse)),
                           'quiet_targets': [j for j, q in zip(model.joint_names, quiet) if q]}
        if quiet.any() and not quiet.all():
            summary['test']['nmse_mean_varying'] = float(np.nanmean(nmse[~quiet]))
    try:   # NaN/inf are not JSON: refuse them instead of writing an unreadable file
        text = json.dumps(summary, indent=2, allow_nan=False)
    except ValueError:
        raise ValueError(f'{args.out}: identification gave non-finite values; nothing '
                         'written') from None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    test = summary.get('test')
    print(f'identified {model.name} from {len(q)} samples: mean torque nMSE '
          f'{summary["nmse_mean"]:.3g} on them'
          + (f', {test["nmse_mean"]:.3g} on {test["samples"]} held-out samples' if test
             else '') + f' ({result.iterations} L-BFGS iterations) -> {args.out}')
    if test and test['quiet_targets']:
        varying = test.get('nmse_mean_varying')
        print(f'note: the torque of {", ".join(test["quiet_targets"])} hardly varies in the '
              'held-out data (nMSE there divides by a near-zero variance)'
              + ('' if varying is None else f'; nMSE over the other joints {varying:.3g}'))
    return 0
