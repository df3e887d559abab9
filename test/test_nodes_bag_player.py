"""bag_player over real DDS: every message of a real Kinova slice arrives intact and in order."""
import re
import shutil
import time

import numpy as np
import pytest
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from robot_dynamics_learning.data import bag_io, datasets
from robot_dynamics_learning.data.messages import JOINT_STATE, JointStateParser
from robot_dynamics_learning.nodes.bag_player import JointStateCollector, play_and_collect
import ros_util
from ros_util import start_node, stop_node, wait_for
from rosbags.typesys import get_typestore, Stores
from rosgraph_msgs.msg import Clock
from std_msgs.msg import Empty, Float64MultiArray

N = 300
FIELDS = JointStateParser.FIELDS


@pytest.fixture(scope='module')
def kinova_bag(tmp_path_factory):
    """300 real samples (0.3 s at 1 kHz) of RunTrajectory1.csv, plus a command topic."""
    path = datasets.shared_data_dir() / 'kinova_gen3' / 'RunTrajectory1.csv'
    trajectory = datasets.load_kinova(path).segment(500, 500 + N)
    trajectory.actions = trajectory.tau * 2.0
    bag = tmp_path_factory.mktemp('player') / 'kinova'
    bag_io.write_joint_trajectories(bag, [trajectory], 'sqlite3', command_topic='/commands')
    return bag


def test_every_message_arrives_intact_in_order(kinova_bag, tmp_path):
    reference = bag_io.read_topic(kinova_bag, '/joint_states')
    arrived, elapsed, code = play_and_collect(kinova_bag, N, rate=2.0, timeout=30.0,
                                              log_path=tmp_path / 'player.log')
    log = (tmp_path / 'player.log').read_text()
    assert code == 0, log
    assert len(arrived) == N, log
    np.testing.assert_array_equal(arrived.stamp_ns, reference.stamp_ns)
    for name in ('position', 'velocity', 'effort'):
        np.testing.assert_array_equal(arrived.fields[name], reference.fields[name])
    assert arrived.joint_names == reference.joint_names
    assert arrived.rejections == {'accepted': N}
    assert 'end of bag: published 300 messages' in log
    # Pacing: the player sleeps until each message's time / rate, so 0.299 s of bag time at
    # rate 2 cannot take less than 0.1495 s (an upper bound would only measure machine load).
    bag_s, wall_s = map(float, re.search(r'pass done: ([\d.]+) s of bag time in ([\d.]+) s',
                                         log).groups())
    assert bag_s == pytest.approx((N - 1) * 1e-3, abs=1e-3)
    assert wall_s >= bag_s / 2.0


def test_topic_filter_offset_clock_and_idle(kinova_bag, tmp_path):
    """Only the chosen topic plays, from the offset, with /clock; exit_at_end false idles."""
    with ros_util.TestNode('probe') as probe:
        collector = JointStateCollector(probe.node)
        clocks = []
        probe.node.create_subscription(
            Clock, '/clock', lambda m: clocks.append(m.clock.sec * 10**9 + m.clock.nanosec),
            QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE))
        commands = []
        probe.node.create_subscription(Float64MultiArray, '/commands', commands.append, 10)
        player = start_node('bag_player', params={
            'bag': str(kinova_bag), 'rate': 4.0, 'topics': ['/joint_states'],
            'start_offset': 0.1, 'publish_clock': True, 'clock_frequency': 100.0,
            'exit_at_end': False, 'wait_for_subscribers': 1},
            log_path=tmp_path / 'player.log')
        try:
            assert wait_for(lambda: len(collector) >= 200, 20), \
                (tmp_path / 'player.log').read_text()
            time.sleep(0.5)
            assert player.poll() is None  # idles at the end instead of exiting
        finally:
            assert stop_node(player) == 0
        arrived = collector.arrays()
    assert len(arrived) == 200 and not commands
    reference = bag_io.read_topic(kinova_bag, '/joint_states')
    np.testing.assert_array_equal(arrived.stamp_ns, reference.stamp_ns[100:])
    assert clocks and clocks == sorted(clocks)
    assert clocks[0] == reference.stamp_ns[100]
    assert len(clocks) == pytest.approx(20, abs=2)  # 0.2 s of bag time at 100 Hz


def test_bad_parameters_fail_with_clear_message(tmp_path):
    player = start_node('bag_player', params={'bag': str(tmp_path / 'missing')},
                        log_path=tmp_path / 'player.log')
    assert player.wait(timeout=20) != 0
    assert 'no bag at' in (tmp_path / 'player.log').read_text()


def test_loop_replays_from_the_start(kinova_bag, tmp_path):
    with ros_util.TestNode('loop_probe') as probe:
        collector = JointStateCollector(probe.node)
        player = start_node('bag_player', params={
            'bag': str(kinova_bag), 'rate': 10.0, 'loop': True, 'wait_for_subscribers': 1,
            'topics': ['/joint_states']}, log_path=tmp_path / 'player.log')
        try:
            assert wait_for(lambda: len(collector) >= N + 100, 20), \
                (tmp_path / 'player.log').read_text()
        finally:
            assert stop_node(player) == 0
        arrived = collector.arrays()
    np.testing.assert_array_equal(arrived.stamp_ns[N:N + 100], arrived.stamp_ns[:100])
    assert 'end of bag: looping' in (tmp_path / 'player.log').read_text()


def test_loop_loses_no_message_at_high_rates(kinova_bag, tmp_path):
    """Two full passes arrive complete and in order at 10x and at 100x."""
    reference = bag_io.read_topic(kinova_bag, '/joint_states').stamp_ns
    for rate in (10.0, 100.0):
        log = tmp_path / f'player_{rate:g}.log'
        with ros_util.TestNode(f'loop_probe_{rate:g}'.replace('.', '_')) as probe:
            collector = JointStateCollector(probe.node)
            player = start_node('bag_player', params={
                'bag': str(kinova_bag), 'rate': rate, 'loop': True, 'wait_for_subscribers': 1,
                'topics': ['/joint_states']}, log_path=log)
            try:
                assert wait_for(lambda: len(collector) >= 2 * N, 30), log.read_text()
            finally:
                assert stop_node(player) == 0
            arrived = collector.arrays()
        got = (arrived.stamp_ns - reference[0]) // 10**6
        bad = np.flatnonzero(got[:2 * N] != np.tile(np.arange(N), 2)[:got[:2 * N].size])
        assert not bad.size, f'{rate} {len(got)} {bad[:3]} {got[bad[0] - 3:bad[0] + 30]}'
        assert got.size >= 2 * N


def test_end_of_bag_is_signalled_before_exit(kinova_bag, tmp_path):
    with ros_util.TestNode('end_probe') as probe:
        ends = []
        probe.node.create_subscription(
            Empty, '/bag_player/end_of_bag', ends.append,
            QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                       durability=DurabilityPolicy.TRANSIENT_LOCAL))
        collector = JointStateCollector(probe.node)   # the player waits for it: discovered
        player = start_node('bag_player', params={
            'bag': str(kinova_bag), 'rate': 5.0, 'topics': ['/joint_states'],
            'wait_for_subscribers': 1}, log_path=tmp_path / 'player.log')
        assert player.wait(timeout=30) == 0, (tmp_path / 'player.log').read_text()
        assert wait_for(lambda: len(ends) == 1, 5)
        assert len(collector) == N


def test_unreadable_bags_and_unknown_types_end_in_one_line(kinova_bag, tmp_path):
    broken = {}
    for name, storage in (('db3', 'sqlite3'), ('mcap', 'mcap')):
        bag = tmp_path / f'truncated_{name}'
        bag_io.write_topic_arrays(bag, [bag_io.read_topic(kinova_bag, '/joint_states')],
                                  storage)
        (data,) = bag.glob(f'*.{name}')
        data.write_bytes(data.read_bytes()[:data.stat().st_size // 2])
        broken[f'truncated {name}'] = bag
    no_metadata = tmp_path / 'no_metadata'
    shutil.copytree(kinova_bag, no_metadata)
    (no_metadata / 'metadata.yaml').unlink()
    broken['no metadata.yaml'] = no_metadata
    for what, bag in broken.items():
        log = tmp_path / f"{what.replace(' ', '_')}.log"
        player = start_node('bag_player', params={'bag': str(bag)}, log_path=log)
        assert player.wait(timeout=20) == 2, what   # nodes' exit code for a refused start
        text = log.read_text()
        assert 'Traceback' not in text and str(bag) in text, (what, text)
        assert len([line for line in text.splitlines() if 'not started' in line]) == 1, text
    # One topic of a type rclpy does not have: skipped and counted, the rest plays.
    mixed = tmp_path / 'mixed'
    store = get_typestore(Stores.ROS2_JAZZY)
    with bag_io.BagWriter(mixed, 'mcap') as writer:
        arrays = bag_io.read_topic(kinova_bag, '/joint_states')
        for i, stamp in enumerate(arrays.stamp_ns.tolist()):
            writer.write('/joint_states', JOINT_STATE, stamp, writer.joint_state(
                stamp, arrays.joint_names, *(arrays.fields[k][i] for k in FIELDS)))
        odometry = store.types['nav_msgs/msg/Odometry']
        header = store.types['std_msgs/msg/Header'](
            stamp=store.types['builtin_interfaces/msg/Time'](sec=1, nanosec=0), frame_id='o')
        pose = store.types['geometry_msgs/msg/PoseWithCovariance'](
            pose=store.types['geometry_msgs/msg/Pose'](
                position=store.types['geometry_msgs/msg/Point'](x=0.0, y=0.0, z=0.0),
                orientation=store.types['geometry_msgs/msg/Quaternion'](
                    x=0.0, y=0.0, z=0.0, w=1.0)),
            covariance=np.zeros(36))
        vector = store.types['geometry_msgs/msg/Vector3']
        twist = store.types['geometry_msgs/msg/TwistWithCovariance'](
            twist=store.types['geometry_msgs/msg/Twist'](
                linear=vector(x=0.0, y=0.0, z=0.0), angular=vector(x=0.0, y=0.0, z=0.0)),
            covariance=np.zeros(36))
        message = odometry(header=header, child_frame_id='b', pose=pose, twist=twist)
        writer.write_raw('/odom', 'nav_msgs/msg/Odometry', int(arrays.stamp_ns[0]),
                         store.serialize_cdr(message, 'nav_msgs/msg/Odometry'))
    log = tmp_path / 'mixed.log'
    with ros_util.TestNode('mixed_probe') as probe:
        collector = JointStateCollector(probe.node)
        player = start_node('bag_player', params={
            'bag': str(mixed), 'rate': 5.0, 'wait_for_subscribers': 1}, log_path=log)
        assert player.wait(timeout=30) == 0, log.read_text()
    text = log.read_text()
    assert 'Traceback' not in text
    assert "skipped topics ['/odom']" in text and 'nav_msgs/msg/Odometry' in text
    assert len(collector) > 0
