"""A user's own car data: bags (Joy + deadman), CSV trees, 20 Hz, small data; the report."""
import json
import shutil

import numpy as np
import pytest
from robot_dynamics_learning.cli import main
from robot_dynamics_learning.control.car_evaluation import evaluate_car_model
from robot_dynamics_learning.control.car_report import BASELINE, write_car_report
from robot_dynamics_learning.control.car_training import (build_car_model, car_data,
                                                          fit_until_converged, hold_out_blocks,
                                                          load_car_model, save_car_model,
                                                          StopRule, train_car, validation_score)
from robot_dynamics_learning.data import bag_io, datasets
from robot_dynamics_learning.data.car_datasets import car_dataset, CarDataset
from robot_dynamics_learning.data.car_sources import BagOptions, car_csv_files
from robot_dynamics_learning.data.messages import CommandMapping, JOY
from robot_dynamics_learning.data.trajectory import Trajectory
import torch

FIXTURES = datasets.source_root() / datasets.FIXTURE_DATA
MAPPING = CommandMapping(throttle_axis=4, steering_axis=0, throttle_scale=0.5)
QUICK = StopRule(max_epochs=40, patience=8)


def fixture_drives():
    """Load the trimmed DART recordings of the repository (3 files, about 45 s, 100 Hz)."""
    return [datasets.load_rc_car(f) for f in datasets.rc_car_files(FIXTURES)]


def write_joy_bag(path, drives, released=()):
    """Poses + Joy commands (user axes, deadman button 5 held except at `released` rows)."""
    with bag_io.BagWriter(path, 'sqlite3') as bag:
        row, start_ns = 0, bag_io.EPOCH_NS
        for drive in drives:   # one after the other, 1 s apart
            stamp_ns = start_ns + np.round((drive.time - drive.time[0]) * 1e9).astype(np.int64)
            start_ns = int(stamp_ns[-1]) + 1_000_000_000
            quaternions = bag_io.quaternion_from_yaw(drive.observations[:, 2])
            for i, t_ns in enumerate(stamp_ns.tolist()):
                x, y = drive.observations[i, :2]
                bag.write('/car/pose', bag_io.POSE_STAMPED, t_ns,
                          bag.pose_stamped(t_ns, (x, y, 0.0), quaternions[i]))
                buttons = [0] * 6 if row in released else [0, 0, 0, 0, 0, 1]
                bag.write('/joy', JOY, t_ns, bag.joy(t_ns, *drive.actions[i], MAPPING, buttons))
                row += 1
    return path


@pytest.fixture(scope='module')
def joy_bag(tmp_path_factory):
    return write_joy_bag(tmp_path_factory.mktemp('bag') / 'drive', fixture_drives())


OPTIONS = BagOptions('/car/pose', '/joy', MAPPING, safety_button=5)


def test_bag_reader_applies_user_axes_scale_and_deadman(tmp_path):
    drive = fixture_drives()[0].segment(0, 400)
    moving = np.flatnonzero(drive.actions[:, 0] > 0)
    assert moving.size > 20
    released = set(moving[:10].tolist())
    bag = write_joy_bag(tmp_path / 'bag', [drive], released)
    loaded = bag_io.read_car_trajectory(bag, '/car/pose', '/joy', MAPPING, safety_button=5)
    expected = drive.actions.copy()
    expected[sorted(released), 0] = 0.0
    np.testing.assert_allclose(loaded.actions, expected, atol=1e-6)
    with pytest.raises(ValueError, match='safety button needs Joy'):
        bag_io.read_topic(bag, '/car/pose', safety_button=5)


def test_bag_source_trains_to_convergence_and_holds_back_blocks(joy_bag):
    train, test = car_data('bag', 0.05, paths=[joy_bag], options=OPTIONS)
    assert train.info['rate_hz'] == pytest.approx(100.0, rel=0.02)
    # held-out test blocks are disjoint from the training data (no sample trained on)
    rows = {tuple(np.round(o, 9)) for o in train.observations}
    assert not any(tuple(np.round(o, 9)) in rows for o in test.observations)
    model, metrics = train_car('car_bicycle', train, test, rule=QUICK,
                               settings={'wheelbase': 0.2, 'rear_to_cg': 0.09})
    assert model.wheelbase == 0.2 and model.rear_to_cg == 0.09
    assert 1 <= metrics['best_epoch'] <= metrics['epochs_run'] <= QUICK.max_epochs
    assert np.isfinite(metrics['position_error_m']) and metrics['windows'] > 0


def test_csv_tree_finds_both_dart_layouts_and_skips_imu_only_files(tmp_path):
    files = datasets.rc_car_files(FIXTURES)
    (tmp_path / 'set_a' / 'csv').mkdir(parents=True)
    (tmp_path / 'set_b').mkdir()
    shutil.copy(files[0], tmp_path / 'set_a' / 'csv' / 'one.csv')
    shutil.copy(files[1], tmp_path / 'set_b' / 'two.csv')
    (tmp_path / 'set_b' / 'imu_only.csv').write_text('elapsed time sensors,throttle\n0,0\n')
    found = car_csv_files(tmp_path)
    assert [p.name for p in found] == ['one.csv', 'two.csv']
    train, test = car_data('csv', 0.05, paths=[tmp_path])
    assert len(train.segments) >= 1 and len(test.segments) >= 1
    with pytest.raises(FileNotFoundError, match='vicon time'):
        car_csv_files(tmp_path / 'set_b' / 'imu_only.csv')


def subsample(drive: Trajectory, every: int) -> Trajectory:
    return Trajectory(time=drive.time[::every], observations=drive.observations[::every],
                      actions=drive.actions[::every], source=drive.source)


def test_20_hz_recordings_make_the_same_transitions():
    drives = fixture_drives()
    full = car_dataset(drives, 0.05)
    slow = car_dataset([subsample(d, 5) for d in drives], 0.05)
    assert slow.info['rate_hz'] == pytest.approx(20.0, rel=0.02)
    assert slow.info['max_gap_s'] == pytest.approx(0.25, rel=0.02)
    # the fixed 0.05 s gap threshold of 100 Hz data cut 20 Hz data at every sample
    with pytest.raises(ValueError, match='no drive is long enough'):
        car_dataset([subsample(d, 5) for d in drives], 0.05, max_gap_s=0.05)
    assert abs(slow.duration_s - full.duration_s) < 0.1 * full.duration_s
    speed = np.hypot(slow.observations[:, 3], slow.observations[:, 4])
    assert np.median(np.abs(np.sort(speed) - np.quantile(
        np.hypot(full.observations[:, 3], full.observations[:, 4]),
        np.linspace(0, 1, speed.size)))) < 0.05


def test_small_data_mlp_learns_velocity_changes_not_no_change():
    drives = fixture_drives()
    data = car_dataset(drives, 0.05)
    torch.manual_seed(0)
    fit, val = hold_out_blocks(data, 2)
    model = build_car_model('car_mlp')
    model.fit_normalization(fit.transitions())
    history = fit_until_converged(model, fit, val, 2e-3, StopRule(max_epochs=60, patience=10))
    batch = data.transitions()
    with torch.no_grad():
        change = model(batch).mean[:, 0, 3:] - batch.observations[:, 0, 3:]
    true_change = batch.targets[:, 0, 3:] - batch.observations[:, 0, 3:]
    assert float(change.std()) > 0.3 * float(true_change.std())
    # the best epoch's weights are the ones kept
    assert validation_score(model, val) == pytest.approx(history['best_val'], rel=1e-6)


def test_non_finite_batches_are_skipped_and_counted():
    data = car_dataset(fixture_drives(), 0.05)
    observations = data.observations.copy()
    observations[5, 3] = np.nan
    broken = CarDataset(observations, data.actions, data.h, data.segments)
    fit, val = hold_out_blocks(data, 2)
    model = build_car_model('car_bicycle')
    history = fit_until_converged(model, broken.subset(fit.segments), val, 1e-2,
                                  StopRule(max_epochs=3, patience=3), batch_size=len(observations))
    assert history['skipped_non_finite'] == 3
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_report_numbers_match_a_direct_computation(tmp_path):
    data = car_dataset(fixture_drives(), 0.05)
    _, test = hold_out_blocks(data, 4)
    model = build_car_model('car_bicycle')
    metrics = write_car_report(tmp_path, {'bicycle': model}, test, 'fixture')
    direct = evaluate_car_model(model, test, 20)
    stored = json.loads((tmp_path / 'metrics.json').read_text())
    assert stored['models']['bicycle']['position_error_m'] == pytest.approx(
        direct['position_error_m'], rel=1e-6)
    assert stored['models'][BASELINE]['horizon']['position_m'][-1] == pytest.approx(
        metrics['models'][BASELINE]['position_error_m'], rel=1e-5)
    for name in ('report.md', 'error_vs_horizon.png', 'rollouts.png'):
        assert (tmp_path / name).stat().st_size > 0


def test_replay_command_writes_the_estimator_and_model_report(tmp_path, joy_bag, capsys):
    model = build_car_model('car_bicycle')
    checkpoint = save_car_model(tmp_path / 'bicycle.pt', model, {})
    out = tmp_path / 'replay'
    assert main(['car', 'replay', str(joy_bag), '--pose-topic', '/car/pose', '--command-topic',
                 '/joy', '--throttle-axis', '4', '--steering-axis', '0', '--throttle-scale',
                 '0.5', '--safety-button', '5', '--checkpoint', str(checkpoint),
                 '--out', str(out)]) == 0
    metrics = json.loads((out / 'metrics.json').read_text())
    errors = metrics['estimator']['errors']
    assert errors['vy']['rmse'] < 0.05 and errors['vy']['samples'] > 1000
    assert (out / 'estimator.png').exists()
    assert 'State estimator' in (out / 'report.md').read_text()
    assert 'estimator RMSE at zero lag' in capsys.readouterr().out


def test_train_then_evaluate_commands_on_a_csv_tree(tmp_path, capsys):
    tree = tmp_path / 'DART' / 'set' / 'csv'
    tree.mkdir(parents=True)
    for path in datasets.rc_car_files(FIXTURES):
        shutil.copy(path, tree / path.name)
    data = ['--source', 'csv', '--data', str(tmp_path / 'DART')]
    checkpoint = tmp_path / 'bicycle.pt'
    assert main(['car', 'train', *data, '--model', 'car_bicycle', '--wheelbase', '0.2',
                 '--max-epochs', '15', '--patience', '3', '--out', str(checkpoint)]) == 0
    assert '"position_error_m"' in capsys.readouterr().out
    assert load_car_model(checkpoint).wheelbase == 0.2
    out = tmp_path / 'report'
    assert main(['car', 'evaluate', *data, '--checkpoint', str(checkpoint),
                 '--out', str(out)]) == 0
    metrics = json.loads((out / 'metrics.json').read_text())
    assert set(metrics['models']) == {'KinematicBicycle (bicycle.pt)', BASELINE}
    assert metrics['models']['KinematicBicycle (bicycle.pt)']['windows'] > 0


def test_non_finite_samples_are_dropped_counted_and_split_the_drive():
    drive = fixture_drives()[0]
    observations = drive.observations.copy()
    observations[700:705, 0] = np.nan
    broken = Trajectory(time=drive.time, observations=observations, actions=drive.actions)
    data = car_dataset([broken], 0.05)
    assert data.info['dropped_non_finite'] == 5
    assert np.all(np.isfinite(data.observations)) and len(data.segments) >= 2


def test_dart_scan_finds_the_csv_subfolder_layout(tmp_path):
    files = datasets.rc_car_files(FIXTURES)
    (tmp_path / 'rc_car_dart' / 'set_a' / 'csv').mkdir(parents=True)
    (tmp_path / 'rc_car_dart' / 'set_b').mkdir()
    shutil.copy(files[0], tmp_path / 'rc_car_dart' / 'set_a' / 'csv' / 'one.csv')
    shutil.copy(files[1], tmp_path / 'rc_car_dart' / 'set_b' / 'two.csv')
    assert [p.name for p in datasets.rc_car_files(tmp_path)] == ['one.csv', 'two.csv']
