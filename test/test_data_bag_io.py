"""rosbag2 I/O: exact round trips, both storages, typestores, validation while reading."""
import logging
import sqlite3

import numpy as np
import pytest

from robot_dynamics_learning.data import bag_io, datasets
from robot_dynamics_learning.data.messages import (choose_joint_set, CommandMapping, FieldNeed,
                                                   JOY, TWIST, TWIST_STAMPED)
from robot_dynamics_learning.data.trajectory import Trajectory

NAMES = ['joint_1', 'joint_2', 'joint_3']


def _trajectory(n: int = 50, seed: int = 0) -> Trajectory:
    rng = np.random.default_rng(seed)
    time = np.cumsum(rng.uniform(0.5e-3, 1.5e-3, n))  # non-uniform, sub-ms jitter
    return Trajectory(time=time, joint_names=list(NAMES), q=rng.normal(size=(n, 3)),
                      qd=rng.normal(size=(n, 3)), tau=rng.normal(size=(n, 3)) * 1e3,
                      actions=rng.normal(size=(n, 3)))


def _raw_messages(bag):
    with bag_io.open_bag(bag) as reader:
        return [(c.topic, c.msgtype, t, bytes(raw)) for c, t, raw in reader.messages()]


@pytest.mark.parametrize('storage', ['sqlite3', 'mcap'])
def test_write_read_exact_and_rewrite_identical_bytes(tmp_path, storage):
    trajectory = _trajectory()
    count = bag_io.write_joint_trajectories(tmp_path / 'a', [trajectory], storage,
                                            command_topic='/cmd', epoch_ns=10**18)
    assert count == 2 * len(trajectory)
    joints = bag_io.read_topic(tmp_path / 'a', '/joint_states')
    assert joints.joint_names == NAMES and joints.rejections == {'accepted': 50}
    np.testing.assert_array_equal(joints.fields['position'], trajectory.q)
    np.testing.assert_array_equal(joints.fields['velocity'], trajectory.qd)
    np.testing.assert_array_equal(joints.fields['effort'], trajectory.tau)
    relative_ns = np.round((trajectory.time - trajectory.time[0]) * 1e9).astype(np.int64)
    np.testing.assert_array_equal(joints.stamp_ns, 10**18 + relative_ns)
    np.testing.assert_array_equal(joints.receive_ns, joints.stamp_ns)
    commands = bag_io.read_topic(tmp_path / 'a', '/cmd')
    assert commands.stamp_source == 'receive'
    np.testing.assert_array_equal(commands.fields['data'], trajectory.actions)
    # Arrays written back give byte-identical messages at identical times.
    bag_io.write_topic_arrays(tmp_path / 'b', [joints, commands], storage)
    assert _raw_messages(tmp_path / 'a') == _raw_messages(tmp_path / 'b')


def test_same_arrays_from_both_storages(tmp_path):
    trajectory = _trajectory(80, seed=1)
    arrays = {}
    for storage in ('sqlite3', 'mcap'):
        bag_io.write_joint_trajectories(tmp_path / storage, [trajectory], storage)
        arrays[storage] = bag_io.read_topic(tmp_path / storage, '/joint_states')
        assert bag_io.storage_of(tmp_path / storage) == storage
    a, b = arrays['sqlite3'], arrays['mcap']
    np.testing.assert_array_equal(a.stamp_ns, b.stamp_ns)
    for name in ('position', 'velocity', 'effort'):
        np.testing.assert_array_equal(a.fields[name], b.fields[name])
    assert _raw_messages(tmp_path / 'sqlite3') == _raw_messages(tmp_path / 'mcap')


@pytest.mark.parametrize('writer_store', ['humble', 'jazzy'])
@pytest.mark.parametrize('fallback', ['humble', 'jazzy'])
def test_typestores_and_bags_without_definitions(tmp_path, writer_store, fallback):
    trajectory = _trajectory(20)
    bag = tmp_path / 'bag'
    bag_io.write_joint_trajectories(bag, [trajectory], 'sqlite3', typestore=writer_store)
    np.testing.assert_array_equal(
        bag_io.read_topic(bag, '/joint_states', typestore=fallback).fields['position'],
        trajectory.q)
    # Humble's `ros2 bag` stores no message definitions: reading falls back to the typestore.
    with sqlite3.connect(next(bag.glob('*.db3'))) as db:
        db.execute('DELETE FROM message_definitions')
    with bag_io.open_bag(bag, fallback) as reader:
        assert reader.connections[0].msgdef.data == ''
    np.testing.assert_array_equal(
        bag_io.read_topic(bag, '/joint_states', typestore=fallback).fields['effort'],
        trajectory.tau)


def test_invalid_messages_skipped_and_counted(tmp_path):
    bag = tmp_path / 'bad'
    good = np.array([1.0, 2.0, 3.0])
    with bag_io.BagWriter(bag, 'mcap') as writer:
        def put(t, names=NAMES, position=good, stamp=None):
            writer.write('/joint_states', 'sensor_msgs/msg/JointState', t,
                         writer.joint_state(t if stamp is None else stamp, names, position))
        put(10)
        put(20, position=np.array([1.0, np.nan, 3.0]))
        put(30, position=good[:2])
        put(40, names=['joint_1', 'joint_2'], position=good[:2])
        put(50, stamp=5)
        put(60, stamp=0)
        writer.write_raw('/joint_states', 'sensor_msgs/msg/JointState', 70, b'\x00\x01\x00')
        put(80)
        writer.write('/other', 'std_msgs/msg/Float64MultiArray', 90, writer.float64_array(good))
    arrays = bag_io.read_topic(bag, '/joint_states')
    assert arrays.rejections == {'accepted': 2, 'malformed': 1, 'non_finite': 1,
                                 'array_length': 1, 'missing_joint': 1,
                                 'stamp_backwards': 1, 'zero_stamp': 1}
    np.testing.assert_array_equal(arrays.stamp_ns, [10, 80])
    np.testing.assert_array_equal(arrays.fields['position'], [good, good])
    info = bag_io.bag_info(bag)
    assert info.message_count == 9 and info.storage == 'mcap'
    assert [(t.topic, t.count) for t in info.topics] == [('/joint_states', 8), ('/other', 1)]
    assert info.topics[0].rate_hz == pytest.approx(7 / 70e-9)


def test_optional_fields_in_some_messages_skip_the_others(tmp_path):
    bag = tmp_path / 'mixed'
    with bag_io.BagWriter(bag, 'sqlite3') as writer:
        for k in range(1, 5):
            velocity = np.ones(3) * k if k % 2 else None
            writer.write('/joint_states', 'sensor_msgs/msg/JointState', k,
                         writer.joint_state(k, NAMES, np.zeros(3), velocity))
    for need in (FieldNeed.OPTIONAL, FieldNeed.REQUIRED):
        read = bag_io.read_topic(bag, '/joint_states', velocity=need)
        np.testing.assert_array_equal(read.stamp_ns, [1, 3])
        np.testing.assert_array_equal(read.fields['velocity'][:, 0], [1, 3])
        assert read.rejections == {'accepted': 2, 'missing_field': 2}
    ignored = bag_io.read_topic(bag, '/joint_states', velocity=FieldNeed.IGNORE,
                                joint_names=['joint_3', 'joint_1'])
    assert len(ignored) == 4 and 'velocity' not in ignored.fields
    assert ignored.joint_names == ['joint_3', 'joint_1']


def test_read_errors(tmp_path):
    bag_io.write_joint_trajectories(tmp_path / 'b', [_trajectory(5)], 'mcap')
    with pytest.raises(ValueError, match="'/nope' is not in"):
        bag_io.read_topic(tmp_path / 'b', '/nope')
    with pytest.raises(FileNotFoundError):
        bag_io.read_topic(tmp_path / 'missing', '/joint_states')
    with pytest.raises(FileExistsError):
        bag_io.write_joint_trajectories(tmp_path / 'b', [_trajectory(5)], 'mcap')
    with pytest.raises(ValueError, match='unknown storage'):
        bag_io.BagWriter(tmp_path / 'c', 'rosbag1')
    with pytest.raises(ValueError, match='unknown typestore'):
        bag_io.read_topic(tmp_path / 'b', '/joint_states', typestore='noetic')


def test_hold_last_and_trajectory_with_commands(tmp_path):
    values, valid = bag_io.hold_last(np.array([10, 20]), np.array([[1.0], [2.0]]),
                                     np.array([5, 10, 15, 20, 25]))
    np.testing.assert_array_equal(valid, [False, True, True, True, True])
    np.testing.assert_array_equal(values[1:, 0], [1, 1, 2, 2])
    trajectory = _trajectory(30)
    bag_io.write_joint_trajectories(tmp_path / 'b', [trajectory], 'mcap', command_topic='/u')
    loaded = bag_io.read_trajectory(tmp_path / 'b', command_topic='/u')
    np.testing.assert_array_equal(loaded.actions, trajectory.actions)
    np.testing.assert_array_equal(loaded.q, trajectory.q)
    np.testing.assert_allclose(loaded.time, trajectory.time - trajectory.time[0], atol=1e-9)


@pytest.mark.parametrize('command_type', [TWIST_STAMPED, TWIST, JOY])
def test_car_roundtrip(tmp_path, command_type):
    rng = np.random.default_rng(3)
    n = 40
    car = Trajectory(time=np.arange(n) * 0.01,
                     observations=np.column_stack([rng.normal(size=(n, 2)),
                                                   np.linspace(0, 9, n)]),
                     actions=np.column_stack([rng.uniform(0, 1, n), rng.uniform(-1, 1, n)]))
    mapping = CommandMapping(throttle_scale=2.0, steering_scale=0.5)
    bag_io.write_car_trajectories(tmp_path / 'car', [car], 'sqlite3', command_type=command_type,
                                  mapping=mapping)
    loaded = bag_io.read_car_trajectory(tmp_path / 'car', mapping=mapping)
    np.testing.assert_allclose(loaded.observations, car.observations, atol=1e-12)
    tolerance = 1e-7 if command_type == JOY else 0  # Joy axes are float32
    np.testing.assert_allclose(loaded.actions, car.actions, atol=tolerance, rtol=0)
    assert loaded.units['actions'] == 'throttle, steering'


@pytest.mark.parametrize('name, item', [('kinova', 'RunTrajectory1.csv'), ('pneumatic', '0:2'),
                                        ('schunk', '3'), ('rc_car', '2')])
def test_dataset_to_bag_matches_loaders(tmp_path, name, item):
    bag = tmp_path / name
    count = bag_io.dataset_to_bag(name, bag, item=item, storage='sqlite3')
    reference = bag_io.load_dataset(name, item)
    info = bag_io.bag_info(bag)
    assert info.start_ns == bag_io.EPOCH_NS and info.message_count == count
    if name == 'rc_car':
        loaded = bag_io.read_car_trajectory(bag)
        np.testing.assert_array_equal(loaded.actions, reference[0].actions)
        np.testing.assert_allclose(loaded.observations, reference[0].observations, atol=1e-9)
        return
    command_topic = {'kinova': None, 'pneumatic': bag_io.PNEUMATIC_COMMAND_TOPIC,
                     'schunk': bag_io.SCHUNK_COMMAND_TOPIC}[name]
    loaded = bag_io.read_trajectory(bag, command_topic=command_topic)
    q = np.concatenate([t.q for t in reference])
    np.testing.assert_array_equal(loaded.q, q)
    assert loaded.joint_names == reference[0].joint_names
    if name == 'kinova':
        np.testing.assert_array_equal(loaded.qd, reference[0].qd)
        np.testing.assert_array_equal(loaded.tau, reference[0].tau)
    else:
        assert loaded.tau is None
        np.testing.assert_array_equal(loaded.actions, np.concatenate(
            [t.actions for t in reference]))
    if name == 'pneumatic':  # two episodes, 1 s apart
        gap = np.diff(loaded.time).max()
        assert gap == pytest.approx(1.0, abs=1e-9)


def test_dataset_selection_errors():
    with pytest.raises(ValueError, match='kinova item'):
        bag_io.load_dataset('kinova', 'nope.csv')
    with pytest.raises(ValueError, match='bad pneumatic episode selection'):
        bag_io.load_dataset('pneumatic', 'x')
    with pytest.raises(ValueError, match='unknown dataset'):
        bag_io.load_dataset('panda')
    assert len(datasets.rc_car_files()) > 2


def test_a_folder_that_is_not_a_bag_says_why_and_what_to_do(tmp_path):
    inner = tmp_path / 'session' / 'run_1'
    bag_io.write_joint_trajectories(inner, [_trajectory()], 'mcap')
    with pytest.raises(ValueError, match=r"not a rosbag2 folder .*\['run_1'\]: give one"):
        bag_io.read_topic(tmp_path / 'session', '/joint_states')
    (inner / 'metadata.yaml').unlink()   # a recorder killed before it finished
    with pytest.raises(ValueError, match=r'no metadata.yaml beside .*ros2 bag reindex'):
        bag_io.read_topic(inner, '/joint_states')


def test_a_topic_shared_by_an_arm_and_a_gripper_reads_the_arm(tmp_path, caplog):
    bag = tmp_path / 'shared'
    with bag_io.BagWriter(bag, 'mcap') as writer:
        for k in range(300):   # the gripper's message comes first, then they alternate
            stamp = 1_000_000_000 + k * 2_000_000
            gripper = k % 2 == 0
            names, values = (['finger'], np.array([0.01])) if gripper else (
                ['c', 'a', 'b'], np.sin(np.array([1.0, 2.0, 3.0]) * k / 100))
            writer.write('/joint_states', 'sensor_msgs/msg/JointState', stamp,
                         writer.joint_state(stamp + gripper, names, values, 0 * values,
                                            2 * values))
    with caplog.at_level(logging.WARNING):
        arrays = bag_io.read_topic(bag, '/joint_states')
    assert arrays.joint_names == ['c', 'a', 'b'] and len(arrays) == 150   # the message order
    assert arrays.rejections == {'accepted': 150, 'missing_joint': 150}
    assert "reading ['c', 'a', 'b'] (150 messages), the one with the most joints" in caplog.text
    assert "first message's ['finger']" in caplog.text
    assert bag_io.read_topic(bag, '/joint_states', joint_names=['finger']).joint_names == [
        'finger']   # named joints are read as named


def test_the_joint_set_chosen_is_the_largest_that_keeps_arriving():
    arm, base, garbled = ('j1', 'j2', 'j3', 'j4', 'j5', 'j6'), ('left', 'right'), tuple(
        f'x{i}' for i in range(40))
    assert choose_joint_set({base: 1000, arm: 100}) == arm   # a slower arm, a fast base
    assert choose_joint_set({arm: 1000, garbled: 1}) == arm   # one garbled message
    assert choose_joint_set({base: 5, ('grip',): 5}) == base
    assert choose_joint_set({('a',): 1}) == ('a',)


def test_joint_states_whose_publisher_leaves_every_stamp_unset_use_receive_times(
        tmp_path, caplog):
    bag = tmp_path / 'unstamped'
    with bag_io.BagWriter(bag, 'mcap') as writer:
        for k in range(200):   # a hand-written publisher: JointState() without a stamp
            q = np.sin(np.array([1.0, 2.0]) * k / 100)
            writer.write('/joint_states', 'sensor_msgs/msg/JointState',
                         1_000_000_000 + k * 2_000_000,
                         writer.joint_state(0, ['a', 'b'], q, 0 * q, 2 * q))
    with caplog.at_level(logging.WARNING):
        trajectory = bag_io.read_trajectory(bag)
    assert 'every header stamp is 0' in caplog.text
    assert len(trajectory) == 200
    np.testing.assert_allclose(np.diff(trajectory.time), 0.002)
