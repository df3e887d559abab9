"""Bag reading: a few messages stamped out of order cost only themselves, time resets do not."""
import logging

import numpy as np
import pytest
from robot_dynamics_learning.data import bag_io
from robot_dynamics_learning.data.messages import (JOINT_STATE, JOY, POSE_STAMPED,
                                                   TWIST_STAMPED)

NAMES = ['joint_1', 'joint_2']
START_NS = bag_io.EPOCH_NS
PERIOD_NS = 4_000_000
AHEAD_NS = 100 * 10**9   # a clock glitch: one message stamped 100 s ahead


def _stamps(rows: int, glitches=(), repeats=()) -> np.ndarray:
    """Return stamps PERIOD_NS apart: `glitches` far ahead, `repeats` as the row before."""
    stamps = START_NS + np.arange(rows, dtype=np.int64) * PERIOD_NS
    stamps[list(glitches)] += AHEAD_NS
    for row in repeats:
        stamps[row] = stamps[row - 1]
    return stamps


def _write(path, topic: str, msgtype: str, stamps: np.ndarray):
    """Write one message per stamp (received PERIOD_NS apart) of a stamped type."""
    receive_ns = START_NS + np.arange(len(stamps)) * PERIOD_NS
    with bag_io.BagWriter(path, 'sqlite3') as bag:
        for i, (stamp, log_ns) in enumerate(zip(stamps.tolist(), receive_ns.tolist())):
            bag.write(topic, msgtype, log_ns, _message(bag, msgtype, stamp, i))
    return path


def _message(bag: bag_io.BagWriter, msgtype: str, stamp: int, i: int) -> object:
    """Return message i of msgtype: its values are i, so a test can tell which ones were kept."""
    if msgtype == JOINT_STATE:
        return bag.joint_state(stamp, NAMES, np.full(2, float(i)), np.zeros(2), np.ones(2))
    if msgtype == POSE_STAMPED:
        return bag.pose_stamped(stamp, (float(i), 0.0, 0.0), (0.0, 0.0, 0.0, 1.0))
    if msgtype == TWIST_STAMPED:
        return bag.twist_stamped(stamp, 0.5, i * 1e-3)
    return bag.joy(stamp, 0.5, i * 1e-3)


def _value(arrays: bag_io.TopicArrays) -> np.ndarray:
    """Return the message index each kept row carries (see `_message`)."""
    if 'position' in arrays.fields:
        return arrays.fields['position'][:, 0]
    return np.round(arrays.fields['steering'] * 1e3)


def _check_counts(arrays: bag_io.TopicArrays, rows: int) -> None:
    """Check that accepted plus rejected are the messages read, the accepted ones kept."""
    assert sum(arrays.rejections.values()) == rows
    assert arrays.rejections['accepted'] == len(arrays)
    assert np.all(np.diff(arrays.stamp_ns) > 0)


@pytest.mark.parametrize('msgtype', [JOINT_STATE, POSE_STAMPED, TWIST_STAMPED, JOY])
@pytest.mark.parametrize('glitches', [(50,), (0,), (50, 51, 52)])
def test_stamps_far_ahead_cost_only_those_messages(tmp_path, msgtype, glitches):
    bag = _write(tmp_path / 'bag', '/topic', msgtype, _stamps(200, glitches))
    arrays = bag_io.read_topic(bag, '/topic')
    kept = [i for i in range(200) if i not in glitches]
    np.testing.assert_array_equal(_value(arrays), kept)
    np.testing.assert_array_equal(arrays.stamp_ns, _stamps(200)[kept])
    np.testing.assert_array_equal(arrays.receive_ns, START_NS + np.array(kept) * PERIOD_NS)
    assert arrays.rejections == {'accepted': 200 - len(glitches),
                                 'stamp_backwards': len(glitches)}
    _check_counts(arrays, 200)


def test_repeated_stamps_are_counted_as_repeated_beside_a_stamp_far_ahead(tmp_path):
    bag = _write(tmp_path / 'bag', '/joint_states', JOINT_STATE,
                 _stamps(100, glitches=(20,), repeats=(30, 31, 60)))
    arrays = bag_io.read_topic(bag, '/joint_states')
    assert arrays.rejections == {'accepted': 96, 'stamp_backwards': 1, 'stamp_repeated': 3}
    np.testing.assert_array_equal(_value(arrays), [i for i in range(100)
                                                   if i not in (20, 30, 31, 60)])
    _check_counts(arrays, 100)


def test_a_car_bag_with_a_pose_and_a_command_far_ahead_loses_two_messages(tmp_path, caplog):
    stamps = _stamps(300)
    with bag_io.BagWriter(tmp_path / 'car', 'mcap') as bag:
        for i, stamp in enumerate(stamps.tolist()):
            pose_stamp = stamp + AHEAD_NS * (i == 100)
            command_stamp = stamp + AHEAD_NS * (i == 200)
            bag.write('/pose', POSE_STAMPED, stamp, _message(bag, POSE_STAMPED, pose_stamp, i))
            bag.write('/cmd', JOY, stamp, _message(bag, JOY, command_stamp, i))
    with caplog.at_level(logging.WARNING):
        drive = bag_io.read_car_trajectory(tmp_path / 'car', '/pose', '/cmd')
    assert len(drive) == 299 and drive.time[-1] == pytest.approx(299 * PERIOD_NS * 1e-9)
    # Pose 100 is dropped; so is command 200: pose 200 (row 199) holds command 199.
    np.testing.assert_allclose(drive.actions[198:201, 1], [0.199, 0.199, 0.201], atol=1e-7)
    assert caplog.text.count('skipped messages: 1 stamp_backwards') == 2


def _reset_stamps() -> np.ndarray:
    """Return 300 stamps 4 ms apart, then time going back by about 1 s and 500 2 ms apart."""
    before = START_NS + np.arange(300, dtype=np.int64) * PERIOD_NS
    after = before[-1] - 10**9 + 1_000_000 + np.arange(1, 501, dtype=np.int64) * 2_000_000
    return np.concatenate([before, after])


def test_a_time_reset_keeps_the_recording_before_it(tmp_path):
    # A looping bag or restarted simulation: dropping the fewest messages would splice the
    # first 50 rows onto the run after the reset, so that run counts only past the last stamp.
    stamps = _reset_stamps()
    stamps[100] += AHEAD_NS   # and a glitch before the reset costs only itself
    bag = _write(tmp_path / 'bag', '/joint_states', JOINT_STATE, stamps)
    arrays = bag_io.read_topic(bag, '/joint_states')
    kept = [i for i in range(300) if i != 100] + list(range(300 + 499, 800))
    np.testing.assert_array_equal(_value(arrays), kept)
    assert arrays.rejections == {'accepted': 300, 'stamp_backwards': 500}
    _check_counts(arrays, 800)


@pytest.mark.parametrize('rows', [50, 200])   # loops of 0.2 s (no time reset) and 0.8 s
def test_a_looping_bag_keeps_its_first_loop_counted_as_before(tmp_path, rows):
    bag = _write(tmp_path / 'bag', '/pose', POSE_STAMPED, np.tile(_stamps(rows), 3))
    arrays = bag_io.read_topic(bag, '/pose')
    np.testing.assert_array_equal(_value(arrays), range(rows))
    # Each later loop: its stamps lie behind the last one kept, but one that equals it.
    assert arrays.rejections == {'accepted': rows, 'stamp_backwards': 2 * (rows - 1),
                                 'stamp_repeated': 2}
    _check_counts(arrays, 3 * rows)
