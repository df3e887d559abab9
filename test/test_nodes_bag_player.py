"""bag_player over real DDS: every message of a real Kinova slice arrives intact and in order."""
import re
import time

import numpy as np
import pytest
from rclpy.qos import QoSProfile, ReliabilityPolicy
from robot_dynamics_learning.data import bag_io, datasets
from robot_dynamics_learning.nodes.bag_player import JointStateCollector, play_and_collect
import ros_util
from ros_util import start_node, stop_node, wait_for
from rosgraph_msgs.msg import Clock
from std_msgs.msg import Float64MultiArray

N = 300


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
