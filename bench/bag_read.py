"""
Bag reading throughput: a 1 kHz, 100k-message, 7-joint JointState bag to numpy arrays.

Target (issue 2): under 10 s per storage. Baselines measured in the same run: raw
iteration over the bag (no deserialisation) and the plain rosbags loop (AnyReader.deserialize
per message, arrays appended to lists, no validation). Single-threaded numpy work; torch is
not used. Writes bench/results/bag_read.json.
"""
import json
from pathlib import Path
import platform
import tempfile
import time

import numpy as np

from robot_dynamics_learning.data import bag_io
from robot_dynamics_learning.data.trajectory import Trajectory

N_MESSAGES = 100_000
N_JOINTS = 7
RESULTS = Path(__file__).resolve().parent / 'results' / 'bag_read.json'


def _trajectory() -> Trajectory:
    time_s = np.arange(N_MESSAGES) * 1e-3
    phase = np.arange(1, N_JOINTS + 1) * 0.3
    q = np.sin(time_s[:, None] + phase)
    return Trajectory(time=time_s, joint_names=[f'joint_{i}' for i in range(1, N_JOINTS + 1)],
                      q=q, qd=np.cos(time_s[:, None] + phase), tau=0.5 * q)


def _raw_iteration(bag: Path) -> int:
    with bag_io.open_bag(bag) as reader:
        return sum(1 for _ in reader.messages())


def _plain_rosbags(bag: Path) -> int:
    positions = []
    with bag_io.open_bag(bag) as reader:
        for connection, _, raw in reader.messages():
            msg = reader.deserialize(raw, connection.msgtype)
            positions.append(msg.position)
    return len(np.stack(positions))


def main() -> None:
    """Write both bags, time the readers, save the JSON and print a summary."""
    trajectory = _trajectory()
    results = {'messages': N_MESSAGES, 'joints': N_JOINTS, 'target_s': 10.0,
               'machine': platform.processor() or platform.machine(), 'storages': {}}
    with tempfile.TemporaryDirectory() as folder:
        for storage in ('sqlite3', 'mcap'):
            bag = Path(folder) / storage
            start = time.perf_counter()
            bag_io.write_joint_trajectories(bag, [trajectory], storage)
            write_s = time.perf_counter() - start
            timings = {}
            for name, run in (('raw_iteration', _raw_iteration),
                              ('plain_rosbags_loop', _plain_rosbags),
                              ('read_topic', lambda b: len(bag_io.read_topic(
                                  b, bag_io.JOINT_TOPIC)))):
                start = time.perf_counter()
                count = run(bag)
                timings[name] = time.perf_counter() - start
                if count != N_MESSAGES:
                    raise RuntimeError(f'{name} read {count} of {N_MESSAGES} messages')
            arrays = bag_io.read_topic(bag, bag_io.JOINT_TOPIC)
            if not np.array_equal(arrays.fields['position'], trajectory.q):
                raise RuntimeError('read_topic did not return the written positions')
            results['storages'][storage] = {
                'write_s': write_s, 'read_s': timings['read_topic'],
                'read_msgs_per_s': N_MESSAGES / timings['read_topic'],
                'raw_iteration_s': timings['raw_iteration'],
                'plain_rosbags_loop_s': timings['plain_rosbags_loop'],
                'read_vs_plain_loop': timings['read_topic'] / timings['plain_rosbags_loop'],
                'meets_target': timings['read_topic'] < 10.0}
            r = results['storages'][storage]
            print(f'{storage:>7}: read_topic {r["read_s"]:.2f} s ({r["read_msgs_per_s"]:.0f} '
                  f'msg/s; target < 10 s), plain rosbags loop {r["plain_rosbags_loop_s"]:.2f} '
                  f's, raw iteration {r["raw_iteration_s"]:.2f} s, write {write_s:.2f} s')
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + '\n')
    print(f'wrote {RESULTS}')


if __name__ == '__main__':
    main()
