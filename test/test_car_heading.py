"""A mocap rigid body whose x axis is not the car's forward: refused offline, warned live."""
import dataclasses
import math
from pathlib import Path
import time

import numpy as np
import pytest
from robot_dynamics_learning import cli
from robot_dynamics_learning.data import bag_io
from robot_dynamics_learning.data.car_heading import (judge_drives, judge_travel, tilt_deg,
                                                      TravelMonitor)
from robot_dynamics_learning.data.car_sources import (BagOptions, car_csv_files, load_car_bags,
                                                      load_car_csvs)
from robot_dynamics_learning.nodes.conversions import planar_pose_msg
from ros_util import estimator_running, wait_for

DART = Path(__file__).parent / 'fixtures' / 'data' / 'rc_car_dart'


@pytest.fixture(scope='module')
def drives():
    return load_car_csvs(car_csv_files(DART))


def _turned(drives, degrees: float):
    """Return the drives as a rigid body turned by `degrees` about z would record them."""
    offset = np.array([0.0, 0.0, math.radians(degrees)])
    return [dataclasses.replace(d, observations=d.observations + offset) for d in drives]


def test_real_drives_travel_along_their_heading(drives):
    verdict = judge_drives(drives)
    assert verdict.moving > 1000 and verdict.sideways < 0.01 and verdict.backward < 0.01
    assert abs(verdict.offset_deg) < 5 and verdict.problem() is None
    assert judge_drives(_turned(drives, 30)).problem() is None   # within the axis: a slide


@pytest.mark.parametrize('turn, words, fix', [
    (90, 'sideways', -90), (-90, 'sideways', 90), (180, 'backward', -180)])
def test_a_turned_rigid_body_is_refused_naming_the_offset(tmp_path, drives, turn, words, fix):
    bag = tmp_path / 'drive'
    bag_io.write_car_trajectories(bag, _turned(drives, turn))
    with pytest.raises(ValueError, match=f'{words}.*--yaw-offset-deg {fix:g}'):
        load_car_bags([bag])
    fixed = load_car_bags([bag], BagOptions(yaw_offset_deg=fix))
    yaw = np.concatenate([d.observations[:, 2] for d in fixed])
    original = np.concatenate([d.observations[:, 2] for d in drives])
    assert np.allclose(np.angle(np.exp(1j * (yaw - original[:yaw.size]))), 0, atol=1e-6)
    assert len(load_car_bags([bag], BagOptions(heading_check=False))) == 1   # kept as it is


@pytest.mark.parametrize('signs, words', [
    ((-1.0, 1.0), 'drives forward under a negative throttle'),
    ((1.0, -1.0), 'yaw rate turns against steering'), ((-1.0, -1.0), 'negative throttle')])
def test_a_throttle_or_steering_of_the_other_sign_is_named(drives, signs, words):
    verdict = judge_drives(drives)
    assert verdict.steering > 0.9 and verdict.pulled == 0.0   # DART: left is positive
    flipped = [dataclasses.replace(d, actions=d.actions * np.array(signs)) for d in drives]
    assert words in judge_drives(flipped).problem()
    turned = judge_drives(_turned(drives, 180))   # a reversed heading flips the turns too
    assert 'pose x axis' in turned.problem() and turned.steering < -0.9


def test_rdl_car_train_refuses_then_takes_the_offset(tmp_path, drives, capsys):
    bag = tmp_path / 'drive'
    bag_io.write_car_trajectories(bag, _turned(drives, 90))
    args = ['car', 'train', '--source', 'bag', '--data', str(bag), '--model', 'car_bicycle',
            '--max-epochs', '2', '--out', str(tmp_path / 'car.pt')]
    assert cli.main(args) == 2
    assert '--yaw-offset-deg -90' in capsys.readouterr().err
    assert cli.main(args + ['--yaw-offset-deg', '-90']) == 0
    assert (tmp_path / 'car.pt').is_file()


def test_the_monitor_flags_sideways_travel_once_and_rearms():
    monitor = TravelMonitor(size=200, every=50)
    assert [monitor.add(1.0, 0.05, 0.3) for _ in range(300)] == [None] * 300
    said = [monitor.add(0.1, -1.0, 0.3) for _ in range(300)]
    assert sum(s is not None for s in said) == 1 and 'sideways' in next(filter(None, said))
    assert monitor.add(0.0, 0.1, None) is None   # standing still is never judged
    [monitor.add(1.0, 0.0, 0.3) for _ in range(300)]
    assert not monitor.flagged
    assert judge_travel(np.full(10, 1.0), np.full(10, 1.0)).problem() is None   # too few


def _tilted_bag(path, quaternion):
    """Write 3 s of a car driving along x at 1 m/s with every pose's quaternion `quaternion`."""
    with bag_io.BagWriter(path) as bag:
        for i in range(300):
            stamp = 10**18 + i * 10_000_000
            bag.write('/vrpn_mocap/rc_car/pose', bag_io.POSE_STAMPED, stamp,
                      bag.pose_stamped(stamp, [0.01 * i, 0.0, 0.05], quaternion))
            bag.write('/cmd', bag_io.TWIST, stamp, bag.twist(0.3, 0.0))
    return path


def test_a_y_up_mocap_frame_is_refused_a_small_tilt_is_not(tmp_path):
    half = math.sqrt(0.5)
    y_up = [half, 0.0, 0.0, half]   # body z along the world's y: Motive's default frame
    assert tilt_deg(np.array(y_up)) == pytest.approx(90.0)
    with pytest.raises(ValueError, match=r"z axis is 90 deg from the world's z axis.*Y-up"):
        load_car_bags([_tilted_bag(tmp_path / 'y_up', y_up)])
    ten = math.radians(10) / 2   # a car on a 10 degree ramp
    flat = load_car_bags([_tilted_bag(tmp_path / 'ramp', [math.sin(ten), 0, 0, math.cos(ten)])])
    assert len(flat[0]) > 250


@pytest.mark.ros
def test_the_estimator_warns_and_takes_yaw_offset_deg(tmp_path):
    """A car driving along x whose mocap yaw says +90 deg: warned; yaw_offset_deg -90 fixes it."""
    for offset in (0.0, -90.0):
        log = tmp_path / f'estimator_{offset:g}.log'
        with estimator_running(log, {'yaw_offset_deg': offset}) as (twists, _, publisher):
            start_ns, speed, rate = time.time_ns(), 1.5, 240.0
            for i in range(int(2.0 * rate)):
                t = i / rate
                publisher.publish(planar_pose_msg(start_ns + int(t * 1e9), speed * t, 0.0,
                                                  math.pi / 2))
                time.sleep(1.0 / rate)
            assert wait_for(lambda: len(twists) > 100, 5.0), log.read_text()
            vx = np.median([m.twist.linear.x for m in twists[-20:]])
            vy = np.median([m.twist.linear.y for m in twists[-20:]])
        text = log.read_text()
        if offset == 0.0:
            assert vy == pytest.approx(-speed, abs=0.1) and abs(vx) < 0.1
            assert 'travels sideways' in text and 'yaw_offset_deg -90' in text
        else:
            assert vx == pytest.approx(speed, abs=0.1) and abs(vy) < 0.1
            assert 'travels sideways' not in text


@pytest.mark.ros
def test_the_estimator_rejects_poses_without_a_vertical_z_axis(tmp_path):
    log = tmp_path / 'estimator.log'
    with estimator_running(log) as (twists, _, publisher):
        start_ns = time.time_ns()
        for i in range(120):
            msg = planar_pose_msg(start_ns + i * 10_000_000, 0.01 * i, 0.0, 0.0)
            msg.pose.orientation.x = msg.pose.orientation.w = math.sqrt(0.5)
            publisher.publish(msg)
            time.sleep(0.01)
        assert wait_for(lambda: 'pose rejected: the mocap body' in log.read_text(), 5.0)
        assert not twists   # no state for the MPC from poses without a yaw
