"""`rdl bag ...` and `rdl data ...`: inspect and export rosbag2 files, turn datasets into bags."""
import argparse
import csv
import json
from pathlib import Path

import numpy as np

from robot_dynamics_learning.data import bag_io
from robot_dynamics_learning.data.messages import CommandMapping, FieldNeed, TWIST, TWIST_STAMPED

FIELD_NEEDS = [need.value for need in FieldNeed]
EXPORT_FORMATS = ('npz', 'csv')


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `bag` and `data` command groups to `rdl`."""
    bag = subparsers.add_parser(
        'bag', help='inspect and export rosbag2 recordings (sqlite3 or MCAP, no ROS needed)')
    bag_commands = bag.add_subparsers(dest='bag_command', metavar='BAG_COMMAND', required=True)

    info = bag_commands.add_parser(
        'info', help='topics, types, counts, duration and rates of a bag',
        description='Summarise a rosbag2 folder: per topic its type, message count, '
                    'duration and mean rate (from receive times).')
    info.add_argument('bag', metavar='BAG', type=Path, help='rosbag2 folder')
    _typestore_option(info)
    info.set_defaults(func=_bag_info)

    export = bag_commands.add_parser(
        'export', help='one topic to .npz or .csv arrays',
        description='Read one topic (JointState, PoseStamped, Twist, TwistStamped, Joy or '
                    'Float64MultiArray) into arrays, skipping invalid messages (counted by '
                    'reason), and write them as .npz or .csv. Columns: stamp_ns (header stamp, '
                    'or receive time for types without a header), receive_ns, then the '
                    'fields (see docs/data.md).')
    export.add_argument('bag', metavar='BAG', type=Path, help='rosbag2 folder')
    export.add_argument('--topic', required=True, help='topic to export, e.g. /joint_states')
    export.add_argument('--format', choices=EXPORT_FORMATS, default=None,
                        help='output format (default: csv for an --out ending .csv, else npz)')
    export.add_argument('--out', required=True, type=Path,
                        help='output file (npz: .npz is appended unless it ends so)')
    export.add_argument('--force', action='store_true',
                        help='overwrite an existing output file (default: refuse)')
    export.add_argument('--joints', nargs='+', metavar='NAME',
                        help='JointState: joints to keep, in this order (default: the first '
                             "message's names)")
    for name, default in (('position', 'required'), ('velocity', 'optional'),
                          ('effort', 'optional')):
        export.add_argument(f'--{name}', choices=FIELD_NEEDS, default=default,
                            help=f'JointState {name}: ignore, optional (used when the '
                                 f'messages carry it; those without it are then skipped) or '
                                 f'required (messages without it are skipped); default '
                                 f'{default}')
    export.add_argument('--throttle-axis', type=int, default=1, help='Joy throttle axis (1)')
    export.add_argument('--steering-axis', type=int, default=3, help='Joy steering axis (3)')
    export.add_argument('--throttle-scale', type=float, default=1.0,
                        help='throttle = scale * Twist linear.x or Joy axis (1.0)')
    export.add_argument('--steering-scale', type=float, default=1.0,
                        help='steering = scale * Twist angular.z or Joy axis (1.0)')
    _typestore_option(export)
    export.set_defaults(func=_bag_export)

    recover = bag_commands.add_parser(
        'recover', help='rescue the intact messages of a crashed recording into a new bag',
        description='Read the storage files of a bag that a recorder killed hard left '
                    'behind (no metadata.yaml, or an MCAP file cut short) record by record, up '
                    'to the first damaged record, and write every intact message, its bytes '
                    'unchanged, into a new version-8 bag. Offered QoS profiles are not '
                    'carried over.')
    recover.add_argument('bag', metavar='BAG', type=Path,
                         help='bag folder, or one .mcap / .db3 storage file')
    recover.add_argument('--out', required=True, type=Path, help='new bag folder to write')
    recover.add_argument('--storage', choices=sorted(bag_io.STORAGES), default='mcap',
                         help='storage plugin of the new bag (default mcap)')
    _typestore_option(recover, help_text='types of messages whose definition the file lacks '
                                         '(default jazzy)')
    recover.set_defaults(func=_bag_recover)

    data = subparsers.add_parser('data', help='convert the shared datasets')
    data_commands = data.add_subparsers(dest='data_command', metavar='DATA_COMMAND',
                                        required=True)
    to_bag = data_commands.add_parser(
        'to-bag', help='write a shared dataset as a rosbag2',
        description='Convert a shared dataset (../shared/data or $RDL_DATA_DIR) into a '
                    'version-8 rosbag2 with real ROS topics, stamps from the data time base '
                    'starting at 2023-11-14T22:13:20Z; several files/episodes follow each '
                    'other 1 s apart. kinova: /joint_states (position, velocity, effort = '
                    'Torque). pneumatic: /joint_states (position) + cumulative pressure '
                    'actions (Float64MultiArray) on /pressure_controller/commands. schunk: '
                    '/joint_states (position, velocity) + motor torques on '
                    '/effort_controller/commands. rc_car: PoseStamped on '
                    '/vrpn_mocap/rc_car/pose + commands on /cmd (linear.x = throttle, '
                    'angular.z = steering).')
    to_bag.add_argument('dataset', metavar='DATASET', choices=bag_io.DATASETS,
                        help=f'one of {", ".join(bag_io.DATASETS)}')
    to_bag.add_argument('--item', help='kinova: a CSV file name, train (default) or test; '
                                       'pneumatic, schunk, rc_car: all (default), an index '
                                       'k or a slice a:b (rc_car also a CSV file name)')
    to_bag.add_argument('--out', required=True, type=Path, help='bag folder to create')
    to_bag.add_argument('--storage', choices=sorted(bag_io.STORAGES), default='mcap',
                        help='storage plugin (default mcap)')
    to_bag.add_argument('--twist-unstamped', action='store_true',
                        help='rc_car: geometry_msgs/Twist instead of TwistStamped on /cmd')
    _typestore_option(to_bag, help_text='message definitions to embed (default jazzy)')
    to_bag.set_defaults(func=_data_to_bag)


def _typestore_option(parser: argparse.ArgumentParser,
                      help_text: str = 'types for bags without embedded definitions '
                                       '(default jazzy)') -> None:
    parser.add_argument('--typestore', choices=sorted(bag_io.TYPESTORES), default='jazzy',
                        help=help_text)


def _bag_info(args: argparse.Namespace) -> int:
    info = bag_io.bag_info(args.bag, args.typestore)
    print(f'bag:      {info.path} ({info.storage})')
    print(f'messages: {info.message_count}')
    print(f'duration: {info.duration_s:.3f} s (start {info.start_ns} ns)')
    width = max([len(t.topic) for t in info.topics] + [5])
    type_width = max([len(t.msgtype) for t in info.topics] + [4])
    print(f'{"topic":<{width}}  {"type":<{type_width}}  {"count":>8}  {"duration_s":>10}  '
          f'{"rate_hz":>9}')
    for t in info.topics:
        print(f'{t.topic:<{width}}  {t.msgtype:<{type_width}}  {t.count:>8}  '
              f'{t.duration_s:>10.3f}  {t.rate_hz:>9.2f}')
    return 0


def _bag_recover(args: argparse.Namespace) -> int:
    from robot_dynamics_learning.data.bag_recover import recover_bag
    report = recover_bag(args.bag, args.out, args.storage, args.typestore, progress=True)
    for path, ended in report.ended.items():
        print(f'{path}: {ended}')
    for topic, why in report.skipped_topics.items():
        print(f'skipped {topic}: {why}')
    if not report.messages:
        raise ValueError(f'{args.bag}: no intact message to recover; {args.out} holds none')
    for topic, count in report.messages.items():
        print(f'{topic}: {count} messages')
    print(f'recovered {sum(report.messages.values())} messages -> {args.out}')
    return 0


def _columns(arrays: bag_io.TopicArrays):
    """Yield (column name, (T,) values) for the CSV export."""
    for name, values in arrays.fields.items():
        if values.ndim == 1:
            yield name, values
        elif name in ('position', 'velocity', 'effort') and arrays.joint_names:
            for k, joint in enumerate(arrays.joint_names):
                yield f'{name}_{joint}', values[:, k]
        else:
            labels = {'position': 'xyz', 'quaternion': 'xyzw'}.get(name)
            for k in range(values.shape[1]):
                suffix = labels[k] if labels else str(k)
                yield f'{name}_{suffix}', values[:, k]


def _bag_export(args: argparse.Namespace) -> int:
    file_format = args.format or ('csv' if args.out.suffix.lower() == '.csv' else 'npz')
    out = _export_path(args.out, file_format, args.force)   # before a long read
    mapping = CommandMapping(args.throttle_axis, args.steering_axis, args.throttle_scale,
                             args.steering_scale)
    arrays = bag_io.read_topic(args.bag, args.topic, joint_names=args.joints,
                               position=FieldNeed(args.position),
                               velocity=FieldNeed(args.velocity),
                               effort=FieldNeed(args.effort), mapping=mapping,
                               typestore=args.typestore, progress=True)
    if len(arrays) == 0:   # an empty npz failed later, in training, on a reshape
        raise ValueError(f'{args.bag}: no valid message on {args.topic} to export (read: '
                         f'{arrays.rejections}); nothing written')
    out.parent.mkdir(parents=True, exist_ok=True)
    if file_format == 'npz':
        meta = {'topic': arrays.topic, 'msgtype': arrays.msgtype,
                'stamp_source': arrays.stamp_source, 'frame_id': arrays.frame_id,
                'rejections': arrays.rejections}
        np.savez(out, stamp_ns=arrays.stamp_ns, receive_ns=arrays.receive_ns,
                 joint_names=np.array(arrays.joint_names, dtype=str), meta=json.dumps(meta),
                 **arrays.fields)
    else:
        columns = list(_columns(arrays))
        with open(out, 'w', newline='') as handle:
            writer = csv.writer(handle)
            writer.writerow(['stamp_ns', 'receive_ns'] + [name for name, _ in columns])
            for i in range(len(arrays)):
                writer.writerow([int(arrays.stamp_ns[i]), int(arrays.receive_ns[i])]
                                + [repr(float(values[i])) for _, values in columns])
    print(f'{args.topic} ({arrays.msgtype}): {len(arrays)} messages -> {out}; '
          f'{arrays.rejections}')
    return 0


def _export_path(out: Path, file_format: str, force: bool) -> Path:
    """
    Return the file the export writes (np.savez appends .npz), refusing to overwrite one.

    Why: an export over an existing file (a bag's metadata.yaml) lost it without a word.
    """
    if file_format == 'npz' and out.suffix != '.npz':
        out = out.with_name(out.name + '.npz')
    if out.is_dir():
        raise ValueError(f'{out} is a folder; --out names the file to write')
    if out.exists() and not force:
        raise ValueError(f'{out} exists already; pass --force to overwrite it')
    return out


def _data_to_bag(args: argparse.Namespace) -> int:
    if args.out.exists():
        raise ValueError(f'{args.out} exists already; bags are never overwritten')
    count = bag_io.dataset_to_bag(
        args.dataset, args.out, item=args.item, storage=args.storage,
        command_type=TWIST if args.twist_unstamped else TWIST_STAMPED,
        typestore=args.typestore, progress=True)
    print(f'{args.dataset}: wrote {count} messages to {args.out} ({args.storage})')
    return 0
