"""`rdl identify`: fit a URDF's inertial, damping and friction parameters to recorded data."""
import argparse
import json
from pathlib import Path
from typing import Tuple

import numpy as np

from robot_dynamics_learning.dynamics.identify import identify
from robot_dynamics_learning.dynamics.model import load_urdf, RobotModel
from robot_dynamics_learning.resources import resource


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `identify` command to `rdl`."""
    parser = subparsers.add_parser(
        'identify', help='identify rigid-body parameters from (q, qd, qdd, tau) data',
        description='Fit masses, centres of mass and inertias (physically consistent, '
                    'log-Cholesky) and optionally joint damping and Coulomb friction of a URDF '
                    'to recorded joint data, by least squares on the inertial regressor. '
                    'Input: an .npz with arrays q, qd, qdd, tau (N, n) and optional '
                    'joint_names; an .npz written by `rdl bag export --format npz` '
                    '(stamp_ns, position, velocity, effort, joint_names); or a rosbag2 folder '
                    'with sensor_msgs/JointState (position, velocity, effort). For the last '
                    'two, missing velocities and all accelerations are computed with a '
                    'zero-phase Savitzky-Golay filter.')
    parser.add_argument('data', type=Path, help='.npz file or rosbag2 folder')
    parser.add_argument('--urdf', type=Path, default=None,
                        help="robot URDF (default: the package's urdf/panda.urdf)")
    parser.add_argument('--joint-topic', default='/joint_states',
                        help='bag input: JointState topic (default /joint_states)')
    parser.add_argument('--window', type=float, default=0.05,
                        help='bag input: Savitzky-Golay window in seconds (default 0.05)')
    parser.add_argument('--links', nargs='+', metavar='LINK',
                        help='identify only these moving links (default: all)')
    parser.add_argument('--damping', action='store_true', help='also fit viscous damping')
    parser.add_argument('--friction', action='store_true', help='also fit Coulomb friction')
    parser.add_argument('--max-iter', type=int, default=500, help='L-BFGS iterations (500)')
    parser.add_argument('--out', type=Path, required=True, help='output JSON file')
    parser.set_defaults(func=_run)


def _ordered(model: RobotModel, names, arrays: dict, source: str) -> dict:
    """Reorder columns by joint name to the model's joint order."""
    names = [str(n) for n in names]
    missing = [j for j in model.joint_names if j not in names]
    if missing:
        raise ValueError(f'{source}: joints {missing} of robot {model.name!r} are not in the '
                         f'data (data joints: {names})')
    index = [names.index(j) for j in model.joint_names]
    return {key: value[:, index] for key, value in arrays.items()}


def load_samples(path: Path, model: RobotModel, joint_topic: str = '/joint_states',
                 window_s: float = 0.05) -> Tuple[np.ndarray, ...]:
    """Return (q, qd, qdd, tau) arrays (N, n) in the model's joint order from npz or a bag."""
    if not path.exists():
        raise FileNotFoundError(f'no such file or folder: {path}')
    if path.is_file():
        with np.load(path, allow_pickle=False) as data:
            if 'position' in data.files and 'q' not in data.files:   # `rdl bag export`
                if 'effort' not in data.files:
                    raise ValueError(f'{path}: the exported joint states have no effort: '
                                     'torques are needed')
                velocity = data['velocity'] if 'velocity' in data.files else None
                return _differentiated(model, data['joint_names'], data['stamp_ns'],
                                       data['position'], velocity, data['effort'], window_s,
                                       str(path))
            missing = [k for k in ('q', 'qd', 'qdd', 'tau') if k not in data.files]
            if missing:
                raise ValueError(f'{path}: missing arrays {missing} (has {data.files})')
            arrays = {k: np.asarray(data[k], dtype=np.float64) for k in ('q', 'qd', 'qdd', 'tau')}
            names = data['joint_names'] if 'joint_names' in data.files else None
        if names is not None:
            arrays = _ordered(model, names, arrays, str(path))
        return arrays['q'], arrays['qd'], arrays['qdd'], arrays['tau']
    from robot_dynamics_learning.data.bag_io import read_topic
    joints = read_topic(path, joint_topic)
    if 'effort' not in joints.fields:
        raise ValueError(f'{path}:{joint_topic} has no effort field: torques are needed')
    return _differentiated(model, joints.joint_names, joints.stamp_ns,
                           joints.fields['position'], joints.fields.get('velocity'),
                           joints.fields['effort'], window_s, f'{path}:{joint_topic}')


def _differentiated(model: RobotModel, names, stamp_ns: np.ndarray, q: np.ndarray,
                    qd, tau: np.ndarray, window_s: float, source: str
                    ) -> Tuple[np.ndarray, ...]:
    """Return (q, qd, qdd, tau) from joint states: zero-phase Savitzky-Golay derivatives."""
    from robot_dynamics_learning.signals.offline import savgol_derivative
    dt = float(np.median(np.diff(np.asarray(stamp_ns, np.int64)))) * 1e-9
    qd = qd if qd is not None else savgol_derivative(q, dt, window_s, deriv=1)
    qdd = savgol_derivative(q, dt, window_s, deriv=2)
    arrays = _ordered(model, names, {'q': q, 'qd': qd, 'qdd': qdd, 'tau': tau}, source)
    return arrays['q'], arrays['qd'], arrays['qdd'], arrays['tau']


def _run(args: argparse.Namespace) -> int:
    urdf = args.urdf or resource('urdf/panda.urdf')
    model = load_urdf(urdf)
    q, qd, qdd, tau = load_samples(args.data, model, args.joint_topic, args.window)
    result = identify(model, q, qd, qdd, tau, learn_inertia=args.links or True,
                      learn_damping=args.damping, learn_friction=args.friction,
                      max_iter=args.max_iter, progress=True)
    summary = result.summary()
    summary.update({'urdf': str(urdf), 'data': str(args.data), 'samples': int(len(q))})
    try:   # NaN/inf are not JSON: refuse them instead of writing an unreadable file
        text = json.dumps(summary, indent=2, allow_nan=False)
    except ValueError:
        raise ValueError(f'{args.out}: identification gave non-finite values; nothing '
                         'written') from None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f'identified {model.name} from {len(q)} samples: mean torque nMSE '
          f'{summary["nmse_mean"]:.3g} ({result.iterations} L-BFGS iterations) -> {args.out}')
    return 0
