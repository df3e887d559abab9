"""
`rdl replay BAG`: which model predicts this robot's torques best, from one recorded bag.

Imports stay inside the handler so that `rdl --help` does not load torch.
"""
import argparse
from pathlib import Path
from typing import List, Optional, Tuple, TYPE_CHECKING

if TYPE_CHECKING:   # no torch or rosbags at `rdl --help`
    from robot_dynamics_learning.dynamics.model import RobotModel
    from robot_dynamics_learning.learning.replay import JointStream

REPLAY_AUDIT_SAMPLES = 20000   # the bag's first samples judged before the URDF models run
MODEL_CHOICES = ('lstm', 'ac_rkn_inverse', 'ffnn', 'hybrid', 'rigid_body', 'gp')


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `rdl replay`."""
    replay = subparsers.add_parser(
        'replay', help='evaluate models on a JointState bag: predict-then-train, report',
        description='Replay a rosbag2 (sqlite3 or MCAP) JointState topic through the '
                    "dynamics_learner node's own streaming learner (predict each sample, then "
                    'train on it, at the settings of config/learner.yaml or --params), '
                    'faster than real time and deterministic for a seed. Blocks held back '
                    '(--holdout) are predicted but never trained on. Baselines always run: '
                    'previous torque, linear regression and, with --urdf, the rigid-body '
                    'model. Writes report.md, metrics.json and PNG plots to --out.')
    replay.add_argument('bag', metavar='BAG', type=Path, help='rosbag2 folder')
    replay.add_argument('--models', default='lstm',
                        help=f'comma-separated models from {", ".join(MODEL_CHOICES)} '
                             '(default lstm); hybrid and rigid_body need --urdf')
    replay.add_argument('--urdf', default=None,
                        help='robot URDF (its moving joints must be the bag joints)')
    replay.add_argument('--topic', default=None,
                        help='JointState topic (default /joint_states or the only one)')
    replay.add_argument('--command-topic', default=None,
                        help='Float64MultiArray torque commands, when the joint states carry '
                             'no effort (default /effort_controller/commands if present)')
    replay.add_argument('--joints', nargs='+', metavar='NAME',
                        help='joints to learn, in this order (default: the first message)')
    replay.add_argument('--holdout', default='every:5',
                        help="blocks never trained on: 'every:K' (every K-th block), "
                             "'after:F' (the blocks after fraction F) or 'none' "
                             '(default every:5)')
    replay.add_argument('--block-s', type=float, default=None,
                        help='block length in seconds of bag time (default: a twentieth of '
                             'the bag)')
    replay.add_argument('--params', type=Path, default=None,
                        help='learner params YAML (default config/learner.yaml), as the node '
                             'takes with --params-file')
    replay.add_argument('--seed', type=int, default=None,
                        help='random seed (default: the params file seed)')
    replay.add_argument('--typestore', default='jazzy', choices=('humble', 'jazzy', 'kilted'),
                        help='types for bags without definitions (default jazzy)')
    replay.add_argument('--out', type=Path, default=Path('replay_report'),
                        help='report folder (default replay_report)')
    replay.set_defaults(func=run_replay)


def run_replay(args: argparse.Namespace) -> int:
    """Read the bag, replay the models, write the report and print the verdict."""
    from robot_dynamics_learning.learning import replay, report

    if args.block_s is not None and not args.block_s > 0:   # NaN too
        raise ValueError(f'--block-s must be > 0 seconds, got {args.block_s:g}')
    params = replay.load_learner_params(args.params)
    if args.seed is not None:
        params['seed'] = args.seed
    stream = replay.read_joint_stream(
        args.bag, args.topic, args.command_topic, args.joints,
        float(params.get('time_reset_s', 0.5)), args.typestore, progress=True,
        joint_settle_s=float(params.get('joint_settle_s', 1.0)),
        command_joint_names=params.get('command_joint_names') or None,
        velocity_source=params['velocity_source'], velocity_window=params['velocity_window'],
        stamp_source=params['stamp_source'])
    robot = _urdf_robot(args.urdf) if args.urdf else None
    if robot is not None and not args.joints:
        stream = _in_urdf_order(stream, robot)
    print(f'{stream.topic}: {len(stream)} samples, {stream.duration_s:.1f} s at '
          f'{stream.rate_hz:.1f} Hz, joints {stream.joint_names}, torque from '
          f'{stream.torque_source}, '
          + ', '.join(replay.input_words(stream.velocity_source, stream.times)), flush=True)
    models = [m.strip() for m in args.models.split(',') if m.strip()]
    refused, warnings = _audit(stream, None)   # what every model's node would refuse
    if refused:
        raise ValueError(f'dynamics_learner would not learn from this bag: {refused}')
    if robot is not None:
        refused, urdf_warnings = _urdf_data_reason(stream, robot)
        warnings += [w for w in urdf_warnings if w not in warnings]
    for warning in warnings:
        print(f'warning: {warning}', flush=True)
    skipped = {}
    if refused:   # the URDF models would learn from garbage torques; the others still run
        skipped = {m: refused for m in dict.fromkeys(models + ['rigid_body'])
                   if m in replay.URDF_MODELS}
        models = [m for m in models if m not in skipped]
    block_s = args.block_s if args.block_s is not None else max(stream.duration_s / 20, 1e-3)
    result = replay.replay(stream, models, None if refused else args.urdf,
                           params, replay.Holdout.parse(args.holdout, block_s),
                           int(params.get('seed', 0)), progress=True)
    result.skipped.update(skipped)
    result.bag = str(args.bag)
    for name, reason in result.skipped.items():
        print(f'skipped {name}: {reason}')
    metrics = report.write_report(result, args.out)
    print(report.verdict_line(metrics))
    print(f'report: {args.out / "report.md"}')
    return 0


def _urdf_robot(urdf: str) -> Optional['RobotModel']:
    """Return the --urdf robot; None (said) where it does not load: its models are skipped."""
    from robot_dynamics_learning.models.registry import urdf_robot
    try:
        return urdf_robot('rigid_body', {'urdf': urdf})
    except ValueError as error:
        print(f'{error}: the URDF models are skipped', flush=True)
        return None


def _in_urdf_order(stream: 'JointStream', robot: 'RobotModel') -> 'JointStream':
    """
    Return the stream in the URDF's joint order, as dynamics_learner reads it for such models.

    A bag lacking the URDF's joints keeps its own: its URDF models are then skipped, saying why.
    """
    try:
        return stream.in_joint_order(robot.joint_names)
    except ValueError as error:
        print(f'{error}: the URDF models are skipped', flush=True)
        return stream


def _urdf_data_reason(stream: 'JointStream', robot: 'RobotModel'
                      ) -> Tuple[Optional[str], List[str]]:
    """
    Return (why the URDF models must skip the stream, or None; warnings): `rdl train`'s checks.

    q in degrees, qd of another scale, sign or joint, tau of another sign or unit (warnings:
    joints beyond the limits). A stream that lacks the URDF's joints is left to
    `replay.replay`, which skips its models saying why.
    """
    if list(robot.joint_names) != list(stream.joint_names):
        return None, []
    return _audit(stream, robot)


def _audit(stream: 'JointStream', robot: Optional['RobotModel']
           ) -> Tuple[Optional[str], List[str]]:
    """
    Return (why dynamics_learner would refuse the stream, or None; its warnings).

    Judged as the node judges its samples (`stream_audit.StreamAudit`), here on the first
    `REPLAY_AUDIT_SAMPLES` of the bag, then the velocities of joints that stood still there
    on the following windows of that size. robot None: the checks of every model (torques
    never measured; velocity warnings), else those of the URDF's models too.
    """
    from robot_dynamics_learning.learning.stream_audit import StreamAudit
    audit = StreamAudit(robot, stream.joint_names, size=min(len(stream), REPLAY_AUDIT_SAMPLES),
                        measured=stream.torque_source == 'effort')
    for k in range(len(stream)):
        if not audit.watching:
            break
        audit.add(float(stream.stamp_s[k]), stream.q[k], stream.qd[k], stream.tau[k])
    audit.finish()
    return audit.problem, audit.warnings
