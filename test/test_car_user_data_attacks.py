"""A user's damaged car recordings: each is read as far as it is usable, or named in one line."""
import json
import logging
from pathlib import Path

import numpy as np
import pytest
from robot_dynamics_learning.cli import build_parser, main
from robot_dynamics_learning.control.car_report import verdict_line, write_car_report
from robot_dynamics_learning.control.car_training import (build_car_model, car_data,
                                                          fit_car_model, HOLD_EVERY,
                                                          hold_out_blocks, save_car_model,
                                                          StopRule, train_car)
from robot_dynamics_learning.data import bag_io
from robot_dynamics_learning.data.car_datasets import car_dataset, CarDataset
from robot_dynamics_learning.data.car_sources import (BagOptions, car_csv_files, load_car_csvs,
                                                      load_car_drives, oriented)
from robot_dynamics_learning.data.messages import CommandMapping, JOY, POSE_STAMPED
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.signals.estimator_check import window_for_rate
from robot_dynamics_learning.signals.mocap import MocapEstimatorConfig
import torch

HEADER = ('elapsed time sensors,current,voltage,acc x (IMU),acc y (IMU),W (IMU),vel encoder,'
          'safety_value,throttle,steering,vicon time,vicon x,vicon y,vicon yaw')
BAG_ARGS = ['--source', 'bag', '--pose-topic', '/pose', '--command-topic', '/joy',
            '--throttle-axis', '1', '--steering-axis', '0']


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


def circle(seconds: float, rate_hz: float, phase: float = 0.0) -> Trajectory:
    """Drive a 2 m circle at 1 m/s, sampled at rate_hz (wrapped yaw, as mocap sends it)."""
    t = np.arange(0.0, seconds, 1.0 / rate_hz)
    angle = 0.5 * t + phase
    poses = np.stack([2 * np.cos(angle), 2 * np.sin(angle),
                      np.angle(np.exp(1j * (angle + np.pi / 2)))], 1)
    actions = np.stack([0.3 + 0.1 * np.sin(t), 0.2 + 0.1 * np.cos(0.7 * t)], 1)
    return Trajectory(time=t, observations=poses, actions=actions)


def rows_of(drive: Trajectory) -> np.ndarray:
    """Return the (n, 14) rows of a DART CSV of `drive` (damage them before `write_csv`)."""
    rows = np.zeros((len(drive), 14))
    rows[:, 7] = 1.0
    rows[:, 8:10] = drive.actions
    rows[:, 10] = drive.time + 1.7e9
    rows[:, 11:14] = drive.observations
    return rows


def write_csv(path, rows: np.ndarray):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('\n'.join([HEADER] + [','.join(repr(float(v)) for v in r) for r in rows])
                    + '\n')
    return path


def write_bag(path, drive: Trajectory, command_type: str = JOY, pressed: bool = True,
              broken=lambda i, position, quaternion: (position, quaternion),
              joy_stamp=lambda t_ns: t_ns):
    """Poses on /pose, commands on /joy (Joy: axis 1 throttle, axis 0 steering, button 2)."""
    quaternions = bag_io.quaternion_from_yaw(drive.observations[:, 2])
    with bag_io.BagWriter(path, 'sqlite3') as bag:
        for i, t in enumerate(drive.time):
            t_ns = bag_io.EPOCH_NS + int(round(t * 1e9))
            position, quaternion = broken(i, (*drive.observations[i, :2], 0.0), quaternions[i])
            bag.write('/pose', POSE_STAMPED, t_ns, bag.pose_stamped(t_ns, position, quaternion))
            if command_type == JOY:
                axes = np.array([drive.actions[i, 1], drive.actions[i, 0]], np.float32)
                bag.write('/joy', JOY, t_ns, bag._types[JOY](
                    header=bag.header(joy_stamp(t_ns)), axes=axes,
                    buttons=np.array([0, 0, int(pressed)], np.int32)))
            else:
                bag.write('/joy', POSE_STAMPED, t_ns, bag.pose_stamped(t_ns, position,
                                                                       quaternion))
    return path


def test_one_nan_yaw_in_a_csv_costs_one_row_not_the_rest_of_the_file(tmp_path):
    rows = rows_of(circle(40, 100))
    rows[1000, 13] = np.nan
    drives = load_car_drives('csv', [write_csv(tmp_path / 'a.csv', rows)])
    data = car_dataset(drives, 0.05)
    # unwrapping the yaw before dropping the NaN turned every later yaw into NaN
    assert data.info['dropped_non_finite'] == 1
    assert data.duration_s > 35


def test_damaged_files_among_good_ones_are_skipped_with_their_reason(tmp_path, caplog):
    write_csv(tmp_path / 'set' / 'csv' / 'good.csv', rows_of(circle(30, 100)))
    truncated = write_csv(tmp_path / 'set' / 'csv' / 'truncated.csv',
                          rows_of(circle(30, 100, 1.0)))
    truncated.write_text(truncated.read_text()[:-25])   # recording cut off mid-line
    (tmp_path / 'set' / 'text.csv').write_text(HEADER + '\n1,2,3\nabc,def\n')
    (tmp_path / 'set' / 'header_only.csv').write_text(HEADER + '\n')
    (tmp_path / 'set' / 'binary.csv').write_bytes(bytes(range(256)) * 8)
    with caplog.at_level(logging.WARNING):
        drives = load_car_drives('csv', [tmp_path])
    assert sorted(len(d) for d in drives) == [2999, 3000]
    assert 'text.csv' in caplog.text and 'header_only.csv' in caplog.text
    assert '1 malformed rows' in caplog.text
    (tmp_path / 'set' / 'csv' / 'good.csv').unlink()
    truncated.unlink()
    with pytest.raises(ValueError, match='none of the 2 CSV files'):
        load_car_drives('csv', [tmp_path])


def test_csv_time_going_backwards_or_repeating_drops_those_rows(tmp_path, caplog):
    rows = rows_of(circle(30, 100))
    rows[1500:1510, 10] -= 0.5
    rows[2000, 10] = rows[1999, 10]
    with caplog.at_level(logging.WARNING):
        drives = load_car_drives('csv', [write_csv(tmp_path / 'a.csv', rows)])
    assert len(drives[0]) == 3000 - 11
    assert '11 rows with a repeated or backwards time' in caplog.text


def test_each_drive_gets_the_gap_threshold_of_its_own_sample_rate():
    fast, slow = circle(30, 240), circle(30, 20, 1.0)
    data = car_dataset([fast, slow], 0.05)
    # the 240 Hz drives' 0.05 s threshold cut the 20 Hz drive at every sample
    assert data.duration_s > 55
    assert data.info['rate_hz_min'] == pytest.approx(20, rel=0.01)
    assert data.info['rate_hz_max'] == pytest.approx(240, rel=0.01)


def test_blocks_of_training_data_never_join_two_drives():
    observations = np.zeros((200, 6))
    observations[100:, 0] = 50.0   # the second drive starts 50 m away
    data = CarDataset(observations, np.zeros((200, 2)), 0.05, [(0, 100), (100, 200)])
    rest, held = data.split_blocks(1.0, 5, 2)
    batch = rest.transitions()
    jumps = (batch.targets[:, 0, 0] - batch.observations[:, 0, 0]).abs() > 1
    assert not bool(jumps.any())
    assert len(rest.observations) + len(held.observations) == 200


@pytest.mark.parametrize('rate_hz', [100, 20])
def test_training_states_never_carry_a_held_out_pose(rate_hz):
    # States are smoothed (zero phase) before blocks are held out: the training states next
    # to a held block must not change when the poses inside that block do.
    drive = circle(60, rate_hz)
    data = car_dataset([drive], 0.05)
    assert data.segments == [(0, len(data.observations))]   # state i is at t0 + 0.05 i
    rest, held = hold_out_blocks(data, HOLD_EVERY - 1)
    steps = held.segments[0][1] - held.segments[0][0]    # 3 s blocks: every 5th held
    moved = Trajectory(time=drive.time, observations=drive.observations.copy(),
                       actions=drive.actions)
    for k in range(HOLD_EVERY - 1, len(data.observations) // steps, HOLD_EVERY):
        first, last = drive.time[0] + 0.05 * np.array([k * steps, (k + 1) * steps - 1])
        moved.observations[(drive.time >= first) & (drive.time <= last), 0] += 0.01
    moved_rest, moved_held = hold_out_blocks(car_dataset([moved], 0.05), HOLD_EVERY - 1)
    assert not np.array_equal(moved_held.observations, held.observations)
    assert moved_rest.segments == rest.segments
    np.testing.assert_array_equal(moved_rest.observations, rest.observations)


def test_test_files_inside_the_training_tree_are_never_trained_on(tmp_path, caplog):
    write_csv(tmp_path / 'tree' / 'a.csv', rows_of(circle(30, 100)))
    test_file = write_csv(tmp_path / 'tree' / 'b.csv', rows_of(circle(30, 100, 2.0)))
    with caplog.at_level(logging.WARNING):
        train, test = car_data('csv', 0.05, paths=[tmp_path / 'tree'], test_paths=[test_file])
    rows = {tuple(np.round(o, 9)) for o in train.observations}
    assert not any(tuple(np.round(o, 9)) in rows for o in test.observations)
    assert 'not training on 1 test recording' in caplog.text
    with pytest.raises(ValueError, match='also a test recording'):
        car_data('csv', 0.05, paths=[test_file], test_paths=[test_file])


def test_a_20_s_recording_trains_and_scores_and_5_s_is_refused_up_front(tmp_path):
    recording = write_csv(tmp_path / 'a.csv', rows_of(circle(20, 100)))
    train, test = car_data('csv', 0.05, paths=[recording])
    # held blocks of 1 s had no 1 s window: the scores crashed after training
    _, metrics = train_car('car_bicycle', train, test, epochs=1)
    assert metrics['windows'] > 0
    with pytest.raises(ValueError, match='too little to hold back'):
        car_data('csv', 0.05, paths=[write_csv(tmp_path / 'b.csv', rows_of(circle(5, 100)))])
    short_test = car_dataset([circle(1.0, 100)], 0.05)
    with pytest.raises(ValueError, match='no unbroken 1 s of driving'):
        train_car('car_bicycle', train, short_test, rule=StopRule(max_epochs=1))


@pytest.mark.parametrize('command_type, pose_topic, expected', [
    (POSE_STAMPED, '/pose', "command topic '/joy' is geometry_msgs/msg/PoseStamped"),
    (JOY, '/joy', "pose topic '/joy' is sensor_msgs/msg/Joy")])
def test_a_topic_of_the_wrong_type_is_a_one_line_error(tmp_path, capsys, command_type,
                                                       pose_topic, expected):
    bag = write_bag(tmp_path / 'bag', circle(4, 100), command_type)
    args = [a if a != '/pose' else pose_topic for a in BAG_ARGS]
    assert main(['car', 'train', *args, '--data', str(bag), '--epochs', '1',
                 '--out', str(tmp_path / 'm.pt')]) == 2
    assert expected in capsys.readouterr().err
    assert not (tmp_path / 'm.pt').exists()


def test_a_safety_button_never_held_is_named_not_trained_as_coasting(tmp_path, capsys):
    bag = write_bag(tmp_path / 'bag', circle(4, 100), pressed=False)
    assert main(['car', 'train', *BAG_ARGS, '--safety-button', '2', '--data', str(bag),
                 '--epochs', '1', '--out', str(tmp_path / 'm.pt')]) == 2
    assert 'safety button 2 is never held' in capsys.readouterr().err


def test_rejected_poses_are_logged_with_their_counts(tmp_path, caplog):
    def broken(i, position, quaternion):
        if i % 10 == 3:
            return (np.nan, 0.0, 0.0), quaternion
        return position, np.zeros(4) if i % 10 == 7 else quaternion

    bag = write_bag(tmp_path / 'bag', circle(4, 100), broken=broken)
    with caplog.at_level(logging.WARNING):
        drives = load_car_drives('bag', [bag],
                                 BagOptions('/pose', '/joy', CommandMapping(1, 0)))
    assert len(drives[0]) == 320
    assert '40 non_finite' in caplog.text and '40 bad_quaternion' in caplog.text


def test_a_file_given_as_a_bag_is_a_one_line_error(tmp_path, capsys):
    not_a_bag = write_csv(tmp_path / 'a.csv', rows_of(circle(4, 100)))
    assert main(['car', 'train', *BAG_ARGS, '--data', str(not_a_bag), '--epochs', '1',
                 '--out', str(tmp_path / 'm.pt')]) == 2
    assert 'cannot read bag' in capsys.readouterr().err


@pytest.mark.parametrize('option, value', [
    ('--threads', '0'), ('--epochs', '0'), ('--epochs', '-1'), ('--safety-button', '-1'),
    ('--wheelbase', '0'), ('--wheelbase', '-0.2'), ('--h', 'nan'), ('--max-speed', '0')])
def test_settings_that_could_only_fail_late_or_silently_are_refused_at_once(option, value):
    with pytest.raises(SystemExit):
        build_parser('car').parse_args(['car', 'train', '--out', 'm.pt', option, value])


def test_data_paths_without_a_user_source_are_refused_not_ignored(tmp_path):
    recording = write_csv(tmp_path / 'a.csv', rows_of(circle(20, 100)))
    # the default source is sim: the user's file was ignored and a simulator model trained
    for source in ('sim', 'dart'):
        with pytest.raises(ValueError, match='add --source bag or --source csv'):
            car_data(source, 0.05, minutes=0.1, paths=[recording])
    with pytest.raises(ValueError, match='add --source bag'):
        car_data('sim', 0.05, minutes=0.1, test_paths=[recording])


def test_a_recording_cut_into_short_pieces_still_holds_blocks_back():
    # 20 drives of 1.8 s (a recording cut by mocap glitches): blocks were counted per drive,
    # so no drive reached its fifth block and 36 s of driving was 'too little'
    segments = [(36 * i, 36 * (i + 1)) for i in range(20)]
    data = CarDataset(np.zeros((720, 6)), np.zeros((720, 2)), 0.05, segments)
    rest, held = hold_out_blocks(data, HOLD_EVERY - 1)
    assert len(held.segments) == 4 and held.duration_s == pytest.approx(4 * 34 * 0.05)
    assert len(rest.segments) == 16 and all(b - a <= 36 for a, b in rest.segments)


@pytest.mark.parametrize('options, expected', [
    (['--h', '5'], 'model step h must be in (0, 1] s'),
    (['--model', 'car_mlp', '--wheelbase', '0.3'], "unknown key(s) ['rear_to_cg', 'wheelbase']"),
    (['--report', 'REPORT_FILE'], 'report.md exists and is not a folder'),
    (['--out', 'FOLDER'], 'exists and is not a file')])
def test_settings_are_refused_before_the_data_is_read(tmp_path, capsys, options, expected):
    report_file = tmp_path / 'report.md'
    report_file.write_text('an earlier report')
    paths = {'REPORT_FILE': str(report_file), 'FOLDER': str(tmp_path)}
    assert main(['car', 'train', *BAG_ARGS, '--data', str(tmp_path / 'missing_bag'),
                 '--out', str(tmp_path / 'm.pt'), *[paths.get(o, o) for o in options]]) == 2
    err = capsys.readouterr().err
    assert expected in err and 'missing_bag' not in err


def untrained_checkpoint(path, h: float):
    """Write an untrained bicycle model with model step h (s)."""
    return save_car_model(path, build_car_model('car_bicycle', h), {})


def test_evaluate_builds_the_data_at_the_checkpoints_model_step(tmp_path, capsys):
    recording = write_csv(tmp_path / 'a.csv', rows_of(circle(40, 100)))
    slow = untrained_checkpoint(tmp_path / 'slow.pt', 0.1)
    args = ['car', 'evaluate', '--source', 'csv', '--data', str(recording), '--out',
            str(tmp_path / 'report'), '--horizon', '0.01']
    # without --h the data was built at 0.05 s and a 0.1 s checkpoint was refused
    assert main([*args, '--checkpoint', str(slow)]) == 0
    metrics = json.loads((tmp_path / 'report' / 'metrics.json').read_text())
    assert metrics['h'] == pytest.approx(0.1)
    assert metrics['horizon_s'] == pytest.approx(0.1)   # one step: not the 0.01 asked for
    fast = untrained_checkpoint(tmp_path / 'fast.pt', 0.05)
    capsys.readouterr()
    assert main([*args, '--checkpoint', str(slow), '--checkpoint', str(fast)]) == 2
    assert 'different model steps [0.05, 0.1] s' in capsys.readouterr().err


def test_replay_of_20_hz_mocap_gets_estimates_from_a_wider_window(tmp_path, capsys):
    bag = write_bag(tmp_path / 'bag', circle(20, 20))
    checkpoint = untrained_checkpoint(tmp_path / 'm.pt', 0.05)
    assert main(['car', 'replay', str(bag), *BAG_ARGS[2:], '--checkpoint', str(checkpoint),
                 '--out', str(tmp_path / 'replay')]) == 0
    assert 'estimator windows widened to 0.175 s' in capsys.readouterr().out
    metrics = json.loads((tmp_path / 'replay' / 'metrics.json').read_text())
    # a 0.12 s window holds 3 poses at 20 Hz: the estimator never answered, RMSE was NaN
    assert metrics['estimator']['errors']['vx']['rmse'] < 0.01
    assert window_for_rate(MocapEstimatorConfig(), 0.01) == MocapEstimatorConfig()


@pytest.mark.parametrize('argv', [
    ['lap', '--laps', '0'], ['lap', '--laps', 'nan'], ['lap', '--target-speed', '-1'],
    ['scenarios', '--starts', '0'], ['refine', '--rounds', '0', '--out', 'm.pt']])
def test_counts_and_lengths_of_zero_are_usage_errors(argv):
    # they ran and ended in 'zero-size array to reduction operation maximum'
    with pytest.raises(SystemExit):
        build_parser('car').parse_args(['car', *argv])


def test_a_diverging_fixed_recipe_is_refused_and_never_puts_nan_into_weights(caplog):
    train, test = hold_out_blocks(car_dataset([circle(30, 100)], 0.05), HOLD_EVERY - 1)
    model = build_car_model('car_mlp')
    model.fit_normalization(train.transitions())
    with caplog.at_level(logging.WARNING):
        fit_car_model(model, train, epochs=3, lr=1e9)
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    assert 'batches with a non-finite loss or gradient' in caplog.text
    # it saved a checkpoint of NaN weights that no command could load
    with pytest.raises(ValueError, match='training diverged at learning rate 1e.09'):
        train_car('car_mlp', train, test, lr=1e9, epochs=3)


def test_evaluate_on_test_recordings_alone_needs_no_training_data(tmp_path):
    recording = write_csv(tmp_path / 'test' / 'a.csv', rows_of(circle(20, 100)))
    checkpoint = untrained_checkpoint(tmp_path / 'm.pt', 0.05)
    # it asked for --data, then read all of it and threw it away
    assert main(['car', 'evaluate', '--source', 'csv', '--test-data', str(recording),
                 '--checkpoint', str(checkpoint), '--out', str(tmp_path / 'report')]) == 0
    metrics = json.loads((tmp_path / 'report' / 'metrics.json').read_text())
    assert metrics['data']['test_seconds'] > 18


def test_a_report_on_a_car_that_never_moves_has_a_verdict(tmp_path):
    t = np.arange(0.0, 20.0, 0.01)
    parked = Trajectory(time=t, observations=np.tile([1.0, 2.0, 0.3], (len(t), 1)),
                        actions=np.zeros((len(t), 2)))
    model = build_car_model('car_bicycle')
    # the constant-velocity baseline is exact there: the verdict divided by its 0 m error
    metrics = write_car_report(tmp_path / 'a', {'bicycle': model},
                               car_dataset([parked], 0.05), 'parked')
    assert metrics['verdict']['baseline_over_model'] == 1.0
    assert 'the same as the constant-velocity' in verdict_line(metrics)
    parked.actions[:, 0] = 0.5   # full throttle, no motion: the bicycle drives off
    metrics = write_car_report(tmp_path / 'b', {'bicycle': model},
                               car_dataset([parked], 0.05), 'parked')
    assert 'LARGER than the constant-velocity baseline' in verdict_line(metrics)


def test_too_few_simulated_minutes_name_the_option():
    # each of the simulator's cars drove 0.75 s: '0 drives and none has two samples'
    with pytest.raises(ValueError, match='give more --minutes'):
        car_data('sim', 0.05, minutes=0.1)


def test_a_single_unreadable_csv_names_its_reason_in_the_error(tmp_path):
    columns = HEADER.split(',')
    rows = rows_of(circle(20, 100))
    keep = [i for i, c in enumerate(columns) if c != 'safety_value']
    lines = [','.join(columns[i] for i in keep)]
    lines += [','.join(repr(float(r[i])) for i in keep) for r in rows]
    (tmp_path / 'a.csv').write_text('\n'.join(lines) + '\n')
    # the error said only '(see the warnings)', which a quiet logger never showed
    with pytest.raises(ValueError, match=r"a.csv: no column\(s\) \['safety_value'\]"):
        load_car_drives('csv', [tmp_path])


def test_a_crashed_bag_among_good_ones_is_skipped_with_its_reason(tmp_path, caplog):
    options = BagOptions('/pose', '/joy', CommandMapping(1, 0))
    good = write_bag(tmp_path / 'good', circle(4, 100))
    crashed = write_bag(tmp_path / 'crashed', circle(4, 100, 1.0))
    (crashed / 'metadata.yaml').unlink()   # what a recorder killed hard leaves behind
    with caplog.at_level(logging.WARNING):
        drives = load_car_drives('bag', [good, crashed], options)
    # one such bag ended the whole run
    assert len(drives) == 1 and 'skipping bag' in caplog.text and 'crashed' in caplog.text
    with pytest.raises(ValueError, match='none of the 2 bags could be read'):
        load_car_drives('bag', [crashed, tmp_path / 'missing'], options)


def test_a_max_speed_below_the_driving_names_itself_when_nothing_is_left():
    drive = circle(20, 100)   # 1 m/s
    assert car_dataset([drive], 0.05).info['cut_too_fast'] == 0
    # the error named only the rate and the gap threshold
    with pytest.raises(ValueError, match='states faster than 0.5 m/s or 15 rad/s were cut'):
        car_dataset([drive], 0.05, max_speed=0.5)


def test_joy_commands_whose_publisher_leaves_the_stamp_unset_use_receive_times(tmp_path,
                                                                               caplog):
    drive = circle(20, 50)
    options = BagOptions('/pose', '/joy', CommandMapping(1, 0))
    stamped = load_car_drives('bag', [write_bag(tmp_path / 'stamped', drive)], options)
    with caplog.at_level(logging.WARNING):
        unset = load_car_drives('bag', [write_bag(tmp_path / 'unset', drive,
                                                  joy_stamp=lambda t_ns: 0)], options)
    # every command was a zero_stamp rejection: no command, no drive
    assert 'every header stamp is 0' in caplog.text
    np.testing.assert_array_equal(unset[0].actions, stamped[0].actions)
    mixed = write_bag(tmp_path / 'mixed', circle(2, 50), joy_stamp=lambda t_ns: 0 if (
        t_ns // 20_000_000) % 2 else t_ns)   # some unset stamps among set ones stay refused
    commands = bag_io.read_topic(mixed, '/joy', mapping=CommandMapping(1, 0))
    assert commands.stamp_source == 'header'
    assert commands.rejections == {'accepted': 50, 'zero_stamp': 50}


@pytest.mark.parametrize('msgtype', ['geometry_msgs/msg/TransformStamped',
                                     'geometry_msgs/msg/PoseWithCovarianceStamped',
                                     'nav_msgs/msg/Odometry'])
def test_mocap_poses_of_other_common_types_read_as_posestamped_does(tmp_path, msgtype):
    """vicon_bridge publishes TransformStamped; estimators and odometry other pose types."""
    from rosbags.typesys import get_typestore, Stores
    drive = circle(10, 50)
    options = BagOptions('/pose', '/joy', CommandMapping(1, 0))
    reference = load_car_drives('bag', [write_bag(tmp_path / 'posestamped', drive)], options)
    store = get_typestore(Stores.ROS2_JAZZY)
    types = store.types
    quaternions = bag_io.quaternion_from_yaw(drive.observations[:, 2])
    with bag_io.BagWriter(tmp_path / 'other', 'sqlite3') as bag:
        for i, t in enumerate(drive.time):
            t_ns = bag_io.EPOCH_NS + int(round(t * 1e9))
            x, y = drive.observations[i, :2]
            q = types['geometry_msgs/msg/Quaternion'](*quaternions[i])
            point = types['geometry_msgs/msg/Point'](x=x, y=y, z=0.0)
            pose = types['geometry_msgs/msg/Pose'](position=point, orientation=q)
            covariant = types['geometry_msgs/msg/PoseWithCovariance'](pose=pose,
                                                                      covariance=np.zeros(36))
            header = bag.header(t_ns, 'world')
            if msgtype.endswith('TransformStamped'):
                msg = types[msgtype](header=header, child_frame_id='car', transform=types[
                    'geometry_msgs/msg/Transform'](translation=types[
                        'geometry_msgs/msg/Vector3'](x=x, y=y, z=0.0), rotation=q))
            elif msgtype.endswith('Odometry'):
                vector = types['geometry_msgs/msg/Vector3'](x=0.0, y=0.0, z=0.0)
                msg = types[msgtype](header=header, child_frame_id='car', pose=covariant,
                                     twist=types['geometry_msgs/msg/TwistWithCovariance'](
                                         twist=types['geometry_msgs/msg/Twist'](
                                             linear=vector, angular=vector),
                                         covariance=np.zeros(36)))
            else:
                msg = types[msgtype](header=header, pose=covariant)
            bag.write('/pose', msgtype, t_ns, msg)
            axes = np.array([drive.actions[i, 1], drive.actions[i, 0]], np.float32)
            joy = types[JOY](header=bag.header(t_ns), axes=axes,
                             buttons=np.array([0, 0, 1], np.int32))
            bag.write('/joy', JOY, t_ns, joy)
    drives = load_car_drives('bag', [tmp_path / 'other'], options)
    np.testing.assert_allclose(drives[0].observations, reference[0].observations, atol=1e-9)
    np.testing.assert_array_equal(drives[0].actions, reference[0].actions)


def _fixture_drives():
    return load_car_csvs(car_csv_files(Path(__file__).parent / 'fixtures' / 'data' /
                                       'rc_car_dart'))


def test_positions_in_millimetres_are_named_not_cut_into_standstills():
    drives = _fixture_drives()
    assert car_dataset(drives, 0.05).info['cut_too_fast'] < 10
    millimetres = [Trajectory(time=d.time, actions=d.actions,
                              observations=d.observations * np.array([1000.0, 1000.0, 1.0]))
                   for d in drives]
    # Before: the moving states were cut as glitches and the model learned the standstills.
    with pytest.raises(ValueError, match=r'states are faster than 80 m/s.*positions in mm'):
        car_dataset(millimetres, 0.05)


def test_yaw_in_degrees_is_named_not_cut_into_slow_driving():
    drives = _fixture_drives()
    degrees = [Trajectory(time=d.time, actions=d.actions,
                          observations=d.observations * np.array([1.0, 1.0, 180 / np.pi]))
               for d in drives]
    # Before: the turning states were cut as glitches (metrics.json: cut_too_fast) and the
    # model trained on the rest without a word.
    with pytest.raises(ValueError, match=r'turn faster than 15 rad/s.*yaw in degrees\?'):
        car_dataset(degrees, 0.05)


@pytest.mark.parametrize('column', [7, 8])   # safety_value never 1; throttle 0 throughout
def test_a_csv_without_throttle_is_refused_as_a_bag_whose_deadman_is_never_held(
        tmp_path, capsys, column):
    rows = rows_of(circle(20, 100))
    rows[:, column] = 0.0
    recording = write_csv(tmp_path / 'a.csv', rows)
    assert main(['car', 'train', '--source', 'csv', '--data', str(recording), '--epochs', '1',
                 '--out', str(tmp_path / 'm.pt')]) == 2
    err = capsys.readouterr().err
    assert 'safety_value is never 1 or the throttle is 0 in all 2000 rows' in err
    assert 'every throttle would count as 0' in err and not (tmp_path / 'm.pt').exists()


def test_a_time_column_in_milliseconds_is_named_not_read_as_hours_of_driving(tmp_path):
    rows = rows_of(circle(20, 100))
    rows[:, 10] *= 1000.0   # Vicon time x 1000
    recording = write_csv(tmp_path / 'ms.csv', rows)
    # Before: "39990.2 s of driving is too little to hold back blocks of 5 s".
    with pytest.raises(ValueError, match=r'a sample every 10 s \(0\.1 Hz\).*time in ms\?'):
        car_data('csv', 0.05, paths=[recording])


def test_yaw_in_degrees_is_named_before_the_heading_check_blames_the_rigid_body():
    drives = _fixture_drives()
    oriented(drives, BagOptions())   # radians: passes
    degrees = [Trajectory(time=d.time, actions=d.actions,
                          observations=d.observations * np.array([1.0, 1.0, 180 / np.pi]))
               for d in drives]
    # Before: "the car travels sideways ... Add -90 deg to the yaw (--yaw-offset-deg)".
    with pytest.raises(ValueError, match=r'turn faster than 15 rad/s: yaw in degrees\?') as err:
        oriented(degrees, BagOptions())
    assert 'yaw-offset' not in str(err.value)


def _straight(heading_deg: float, yaw: float) -> Trajectory:
    """Return 6 s of a car driving straight at 1.5 m/s along `heading_deg`, its yaw as given."""
    time = np.arange(600) * 0.01
    heading = np.radians(heading_deg)
    observations = np.column_stack([1.5 * time * np.cos(heading), 1.5 * time * np.sin(heading),
                                    np.full_like(time, yaw)])
    return Trajectory(time=time, observations=observations,
                      actions=np.tile([0.3, 0.0], (len(time), 1)))


def test_yaw_in_degrees_on_a_car_that_barely_turns_is_named_too():
    """
    Turning faster than 15 rad/s cannot name degrees on a straight drive; the yaw can.

    A yaw beyond +-2 pi that read as degrees points along the travel is named beside the
    rigid body's offset: a radian yaw that has turned can look the same on a straight drive.
    """
    oriented([_straight(40.0, np.radians(40.0))], BagOptions())   # radians: passes
    # Before: only "the car travels sideways ... Add -90 deg to the yaw".
    with pytest.raises(ValueError, match=r'pose x axis .* Or yaw in degrees\? It goes beyond '
                       r'\+-2 pi, and read as degrees the car travels along its heading'):
        oriented([_straight(40.0, 40.0)], BagOptions())
    # A rigid body defined with x to the side, in radians, is blamed alone.
    with pytest.raises(ValueError, match=r'Add -90 deg to the yaw') as err:
        oriented([_straight(40.0, np.radians(130.0))], BagOptions())
    assert 'degrees?' not in str(err.value)
