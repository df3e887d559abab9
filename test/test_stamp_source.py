"""Drivers and mocap bridges that leave header stamps at 0: arrival times stand in."""
from pathlib import Path
import time

import numpy as np
import pytest
from robot_dynamics_learning.data import bag_io
from robot_dynamics_learning.data.header_stamp import stamp_zero_header
from robot_dynamics_learning.data.messages import JointStateParser, Reason, StampSource
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.learning import replay
from robot_dynamics_learning.nodes.conversions import joint_state_msg, planar_pose_msg
from ros_util import (estimator_running, learner_and_arm, wait_for, watch_diagnostics,
                      watch_predictions)
from rosbags.typesys import get_typestore, Stores
from sensor_msgs.msg import JointState
from test_velocity_check import _arm

NAMES = ['joint1', 'joint2']


def write_unstamped(bag: Path, trajectory: Trajectory, log_ns: np.ndarray,
                    storage: str = 'sqlite3') -> Path:
    """Write `trajectory` as a driver that never stamps records it: stamps 0, log times given."""
    with bag_io.BagWriter(bag, storage) as writer:
        for i, t_ns in enumerate(log_ns.tolist()):
            writer.write('/joint_states', bag_io.JOINT_STATE, t_ns, writer.joint_state(
                0, trajectory.joint_names, trajectory.q[i], trajectory.qd[i],
                trajectory.tau[i]))
    return bag


def _msg(stamp_ns: int) -> JointState:
    return joint_state_msg(stamp_ns, NAMES, [0.1, 0.2], [0.0, 0.0], [1.0, 2.0])


def test_auto_decides_on_the_first_message_for_good():
    unstamped = JointStateParser(NAMES, stamp_source='auto')
    first = unstamped.parse(_msg(0), 5_000)
    assert first.ok and first.value.stamp_ns == 5_000 and unstamped.times.news()
    assert not unstamped.times.news()   # said once
    assert unstamped.parse(_msg(0), 6_000).value.stamp_ns == 6_000
    stamped = JointStateParser(NAMES, stamp_source='auto')
    assert stamped.parse(_msg(10**9), 5_000).value.stamp_ns == 10**9
    assert not stamped.times.wants_arrival   # no clock read per message from now on
    glitch = stamped.parse(_msg(0), 6_000)   # a stamping driver's 0: refused, not mixed in
    assert glitch.reason == Reason.ZERO_STAMP and 'stamp_source: receipt' in glitch.detail
    receipt = JointStateParser(NAMES, stamp_source='receipt')
    assert receipt.parse(_msg(10**9), 7_000).value.stamp_ns == 7_000
    with pytest.raises(ValueError, match="stamp_source must be one of .*got 'clock'"):
        StampSource('clock')


def test_replay_of_an_unstamped_bag_runs_on_its_log_times(tmp_path):
    trajectory = bag_io.load_dataset('kinova', 'RunTrajectory1.csv')[0]
    log_ns = 10**18 + np.round(trajectory.time * 1e9).astype(np.int64)
    log_ns += np.random.default_rng(0).integers(0, 200_000, log_ns.size)   # arrival jitter
    bag = write_unstamped(tmp_path / 'unstamped', trajectory, log_ns)
    stream = replay.read_joint_stream(bag)
    assert stream.times == 'arrival' and len(stream) == len(trajectory)
    np.testing.assert_allclose(stream.stamp_s, (log_ns - log_ns[0]) * 1e-9)
    with pytest.raises(ValueError, match='zero_stamp.*stamp_source: receipt'):
        replay.read_joint_stream(bag, stamp_source='header')


@pytest.mark.parametrize('little_endian', [True, False])
def test_a_zero_header_stamp_is_filled_in_the_serialised_bytes(little_endian):
    """What bag_player publishes for an unstamped message: the log time, nothing else moved."""
    store = get_typestore(Stores.ROS2_JAZZY)
    types = store.types
    stamp = types['builtin_interfaces/msg/Time'](sec=0, nanosec=0)
    message = types[bag_io.JOINT_STATE](
        header=types['std_msgs/msg/Header'](stamp=stamp, frame_id='base'), name=NAMES,
        position=np.array([0.1, 0.2]), velocity=np.zeros(0), effort=np.array([1.0, -2.0]))
    raw = store.serialize_cdr(message, bag_io.JOINT_STATE, little_endian=little_endian)
    log_ns = 1_700_000_123 * 10**9 + 456_789_012
    filled = store.deserialize_cdr(stamp_zero_header(raw, log_ns), bag_io.JOINT_STATE)
    assert (filled.header.stamp.sec, filled.header.stamp.nanosec) == (1_700_000_123, 456_789_012)
    assert filled.header.frame_id == 'base' and filled.name == NAMES
    np.testing.assert_array_equal(filled.effort, message.effort)
    stamped = stamp_zero_header(raw, 5)   # now stamped: left as it is
    assert stamp_zero_header(stamped, log_ns) is None
    assert stamp_zero_header(b'\x00\x01\x00\x00', log_ns) is None   # too short for a stamp
    assert stamp_zero_header(b'\x00\x03' + bytes(raw[2:]), log_ns) is None   # unknown encoding


@pytest.mark.ros
def test_dynamics_learner_learns_from_a_driver_that_never_stamps(tmp_path):
    log = tmp_path / 'learner.log'
    arm = _arm(3000, dt=0.005)
    with learner_and_arm(log, {'model': 'ffnn', 'joint_names': NAMES},
                         'unstamped_arm') as (probe, publisher):
        values = watch_diagnostics(probe, 'dynamics_learner')
        predictions = watch_predictions(probe)
        for q, qd, tau in zip(arm.q, arm.qd, arm.tau):   # until heard: a loaded CI lost half
            publisher.publish(joint_state_msg(0, NAMES, q, qd, tau))
            time.sleep(0.005)
            if int(values.get('messages_accepted', 0)) > 300:
                break
        assert wait_for(lambda: int(values.get('messages_accepted', 0)) > 300, 10), \
            (values, log.read_text())
    assert 'messages_zero_stamp' not in values and 'header stamps are 0' in log.read_text()
    # Predictions carry the arrival times used: now, not 1970.
    stamps = np.array([stamp for stamp, _ in predictions]) * 1e-9
    assert len(stamps) > 250 and abs(stamps[-1] - time.time()) < 60
    assert np.all(np.diff(stamps) > 0)


@pytest.mark.ros
def test_car_state_estimator_runs_on_arrival_times_for_an_unstamped_mocap_bridge(tmp_path):
    log = tmp_path / 'estimator.log'
    with estimator_running(log) as (twists, counters, publisher):
        speed, rate = 1.5, 200.0
        start = time.monotonic()
        for _ in range(int(2.0 * rate)):
            # The pose follows the clock, not the loop count: a loaded machine's sleeps
            # overshoot, and a pose per count would drive the car slower than `speed`.
            publisher.publish(planar_pose_msg(0, speed * (time.monotonic() - start), 0.0, 0.0))
            time.sleep(1.0 / rate)
        assert wait_for(lambda: len(twists) > 100, 5.0), log.read_text()
        vx = np.median([m.twist.linear.x for m in twists[-50:]])
        assert wait_for(lambda: 'parser_accepted' in counters, 5.0)
    assert 'parser_zero_stamp' not in counters and 'header stamps are 0' in log.read_text()
    # Arrival times carry the delivery's jitter: the speed is right on average, not exactly.
    assert vx == pytest.approx(speed, rel=0.15)
