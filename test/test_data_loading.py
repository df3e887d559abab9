"""The public training API: Trajectory from arrays / CSV / npz, leak-free splits, `rdl train`."""
import json

import numpy as np
import pytest
from robot_dynamics_learning import cli
from robot_dynamics_learning.data import datasets
from robot_dynamics_learning.data.loading import (load_trajectory, parse_columns, read_table,
                                                  trajectory_from_arrays)
from robot_dynamics_learning.data.splits import (first_samples, parse_split, split_blocks,
                                                 split_files, split_time, split_validation)
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.data.windows import inverse_dynamics_windows
from robot_dynamics_learning.learning.training import holdout_windows

KINOVA_COLUMNS = ['q=Position[0-9]', 'qd=Velocity[0-9]', 'tau=Torque[0-9]']


def _kinova_csv(name: str = 'RunTrajectory1.csv'):
    return datasets.shared_data_dir() / 'kinova_gen3' / name


def _rows(trajectories):
    """(source file, time) of every row: what a split must never put on both sides."""
    return {(t.source.split('[')[0], round(float(s), 9)) for t in trajectories for s in t.time}


@pytest.mark.parametrize('lost', [0.0, 0.35])
def test_arrays_derive_velocity_and_acceleration_with_the_package_filter(lost):
    """Also on rows lost at random (a logger behind under load): steps of 1-3 ms."""
    time = np.arange(2000) * 1e-3
    time = time[np.random.default_rng(0).random(time.size) >= lost]
    q = np.stack([np.sin(2 * time), np.cos(3 * time)], 1)
    trajectory = trajectory_from_arrays(time, q=q, tau=q.copy(), joint_names=['a', 'b'])
    inner = slice(60, -60)
    expected_qd = np.stack([2 * np.cos(2 * time), -3 * np.sin(3 * time)], 1)
    expected_qdd = np.stack([-4 * np.sin(2 * time), -9 * np.cos(3 * time)], 1)
    assert np.allclose(trajectory.qd[inner], expected_qd[inner], atol=1e-3)
    assert np.allclose(trajectory.qdd[inner], expected_qdd[inner], atol=1e-2)
    assert trajectory.joint_names == ['a', 'b']


def test_csv_with_named_columns_matches_the_kinova_loader():
    path = _kinova_csv()
    ours = load_trajectory(path, parse_columns(KINOVA_COLUMNS), dt=datasets.KINOVA_DT,
                           derivative_window_s=datasets.KINOVA_ACC_WINDOW_S)
    reference = datasets.load_kinova(path)
    for name in ('q', 'qd', 'qdd', 'tau'):
        assert np.allclose(getattr(ours, name), getattr(reference, name)), name
    assert np.allclose(ours.time, reference.time)


def test_npz_round_trip_and_default_column_names(tmp_path):
    reference = datasets.load_kinova(_kinova_csv())
    path = tmp_path / 'run.npz'
    np.savez(path, time=reference.time, q=reference.q, qd=reference.qd, tau=reference.tau)
    loaded = load_trajectory(path, derivative_window_s=datasets.KINOVA_ACC_WINDOW_S)
    assert np.allclose(loaded.q, reference.q) and np.allclose(loaded.tau, reference.tau)
    assert np.allclose(loaded.qdd, reference.qdd)
    csv_path = tmp_path / 'run.csv'
    header = ['t'] + [f'q_{i}' for i in range(7)] + [f'tau_{i}' for i in range(7)]
    table = np.column_stack([reference.time, reference.q, reference.tau])
    np.savetxt(csv_path, table, delimiter=',', header=','.join(header), comments='')
    from_csv = load_trajectory(csv_path)
    assert from_csv.q.shape == reference.q.shape and np.allclose(from_csv.tau, reference.tau)
    assert from_csv.qdd is not None and from_csv.qdd.shape == reference.q.shape


def test_columns_numbered_without_a_separator_are_found_and_kept_in_joint_order(tmp_path):
    """q1 ... q12 (a common logger layout), beside q1_desired ..., which must not be taken."""
    reference = datasets.load_kinova(_kinova_csv())
    joints = 12
    q = np.tile(reference.q[:400], (1, 2))[:, :joints] + np.arange(joints)   # joint k: + k
    qd, tau = np.tile(reference.qd[:400], (1, 2))[:, :joints], -q
    numbers = range(1, joints + 1)
    header = (['t'] + [f'q{i}' for i in numbers] + [f'q{i}_desired' for i in numbers]
              + [f'qd{i}' for i in numbers] + [f'tau{i}' for i in numbers])
    table = np.column_stack([reference.time[:400], q, q + 5, qd, tau])
    path = tmp_path / 'logger.csv'
    np.savetxt(path, table, delimiter=',', header=','.join(header), comments='')
    loaded = load_trajectory(path)
    assert loaded.q.shape == (400, joints)
    assert np.allclose(loaded.q, q) and np.allclose(loaded.qd, qd) and np.allclose(loaded.tau, tau)


def test_bad_files_and_columns_give_clear_errors(tmp_path):
    path = tmp_path / 'bad.csv'
    path.write_text('t,q_1,tau_1\n0,1,2\n0.1,nan,2\n0.2,1,2\n')
    with pytest.raises(ValueError, match=r'no usable stretch of rows \(3 rows, 1 skipped\)'):
        load_trajectory(path)
    with pytest.raises(ValueError, match='no column matches'):
        load_trajectory(_kinova_csv(), {'q': ['Angle*']}, dt=1e-3)
    with pytest.raises(ValueError, match='field=pattern'):
        parse_columns(['speed=Velocity*'])
    with pytest.raises(ValueError, match="'Time' counts samples"):
        load_trajectory(_kinova_csv(), parse_columns(KINOVA_COLUMNS))
    (tmp_path / 'text.csv').write_text('a,b\n1,x\n')
    with pytest.raises(ValueError, match='non-numeric'):
        read_table(tmp_path / 'text.csv')


def test_splits_never_put_a_row_on_both_sides():
    recordings = [datasets.load_kinova(_kinova_csv(name)) for name in
                  datasets.KINOVA_TRAIN_FILES + datasets.KINOVA_TEST_FILES]
    for train, test in (split_blocks(recordings, 100, 4, shuffle_seed=0),
                        split_time(recordings, 0.7),
                        split_files(recordings, ['opti_traj_*'])):
        assert train and test
        assert _rows(train).isdisjoint(_rows(test))
        assert len(_rows(train)) + len(_rows(test)) <= sum(len(r) for r in recordings)
    train, test = split_blocks(recordings, 100, 4)
    assert len(test) * 3 <= len(train) <= len(test) * 3 + 3
    with pytest.raises(ValueError, match='both sides'):
        split_files(recordings, ['*.csv'])


def test_parse_split_reads_the_cli_forms():
    recordings = [Trajectory(time=np.arange(1000) * 0.01, q=np.zeros((1000, 1)),
                             source=f'run{i}.csv') for i in range(3)]
    train, test = parse_split('blocks:100:5')(recordings)
    assert len(test) == 6 and len(train) == 24
    train, test = parse_split('time:0.8')(recordings)
    assert [len(t) for t in train] == [800] * 3 and [len(t) for t in test] == [200] * 3
    train, test = parse_split('files:run2.csv')(recordings)
    assert len(train) == 2 and test[0].source == 'run2.csv'
    for bad in ('time:1.5', 'blocks:1', 'weekly', 'files:'):
        with pytest.raises(ValueError, match='bad split'):
            parse_split(bad)
    assert sum(len(t) - 1 for t in first_samples(recordings, 1500)) == 1500


def _ramp(rows: int, source: str = 'run.csv') -> Trajectory:
    time = np.arange(rows) * 0.01
    return Trajectory(time=time, q=time[:, None], qd=np.ones((rows, 1)), qdd=np.zeros((rows, 1)),
                      tau=time[:, None], source=source)


def test_validation_blocks_are_spread_over_a_single_recording():
    recording = _ramp(4000)
    fit, held = split_validation([recording], window=50, val_fraction=0.2)
    assert _rows(fit).isdisjoint(_rows(held))
    assert len(_rows(fit)) + len(_rows(held)) == 4000   # nothing lost at the joins
    assert len(held) == 4 and all(len(block) == 200 for block in held)
    starts = sorted(float(block.time[0]) for block in held)
    assert starts[0] < 10.0 and starts[-1] > 30.0   # spread, not the last fifth
    assert len(fit) == 4 and min(len(piece) for piece in fit) >= 52
    # little data: smaller blocks, still at least two, never shorter than a window
    fit, held = split_validation([_ramp(1000)], window=50)
    assert len(held) == 2 and all(len(block) == 100 for block in held)


def test_many_recordings_validate_whole_and_short_data_falls_back():
    runs = [_ramp(300, f'run{i}.csv') for i in range(10)]
    fit, held = split_validation(runs, window=50)
    assert [t.source for t in held] == ['run4.csv', 'run9.csv'] and len(fit) == 8
    with pytest.raises(ValueError, match='val_fraction'):
        split_validation(runs, window=50, val_fraction=0.0)
    short = [_ramp(120)]   # one block of 52 rows at most: no block can validate

    def windows(pieces):
        return inverse_dynamics_windows(pieces, 50, 10)

    assert split_validation(short, window=50)[1] == []
    train, val = holdout_windows(short, windows, 50)
    assert train.observations.shape[0] >= 1 and val.observations.shape[0] >= 1
    assert float(val.targets[0, 0, 0]) > float(train.targets[-1, 0, 0])   # the last windows
    train, val = holdout_windows([_ramp(4000)], windows, 50)
    assert val.observations.shape[0] == 4 * 15   # 4 held blocks: 199 samples, stride 10


def test_rdl_train_on_csv_files_reports_the_baseline_and_coverage(tmp_path, capsys):
    config = tmp_path / 'ffnn.yaml'
    config.write_text('model_type: ffnn\nmodel: {hidden: [16]}\n'
                      'training: {max_epochs: 2, progress: false}\n'
                      'data: {problem: inverse, window: 20, stride: 20, acc_window_s: 0.031}\n')
    out = tmp_path / 'run'
    files = [str(_kinova_csv(name)) for name in ('RunTrajectory1.csv', 'opti_traj_testing1.csv')]
    assert cli.main(['train', '--config', str(config), '--data', *files, '--columns',
                     *KINOVA_COLUMNS, '--dt', '0.001', '--split', 'files:opti*',
                     '--out', str(out)]) == 0
    summary = json.loads((out / 'train_summary.json').read_text())
    report = summary['test']
    assert report['test_samples'] == len(datasets.load_kinova(files[1])) - 1
    assert report['previous_value']['mean_change_nmse'] >= 1.0  # mean(change^2) / var(change)
    assert len(report['model']['change_nmse']) == 7
    assert report['coverage_warnings']   # the validation file leaves the training ranges
    text = capsys.readouterr().out
    assert 'previous value' in text and 'outside the training range' in text
    # `rdl evaluate` reads and splits the same files the same way: the same test scores.
    evaluation = tmp_path / 'eval.json'
    assert cli.main(['evaluate', '--checkpoint', str(out / 'model.pt'), '--data', *files,
                     '--columns', *KINOVA_COLUMNS, '--dt', '0.001', '--split', 'files:opti*',
                     '--out', str(evaluation)]) == 0
    metrics = json.loads(evaluation.read_text())
    assert metrics['test_samples'] == report['test_samples']
    np.testing.assert_allclose(metrics['nmse_per_joint'], report['model']['nmse'], rtol=1e-5)
    assert metrics['side'] == 'test' and metrics['split'] == 'files:opti*'


def test_the_fast_csv_reader_gives_what_the_careful_one_gives(tmp_path, monkeypatch):
    from robot_dynamics_learning.data import loading
    path = tmp_path / 'plain.csv'
    rows = np.random.default_rng(1).normal(size=(300, 4))
    rows[7, 2] = np.nan   # written as 'nan': a number to both readers
    path.write_text('\ufefftime, q_1,q_2 ,tau_1\n' + '\n'.join(
        ','.join(repr(float(v)) for v in row) for row in rows) + '\n\n', encoding='utf-8')
    fast = loading.read_table(path)
    assert list(fast) == ['time', 'q_1', 'q_2', 'tau_1']
    monkeypatch.setattr(loading, '_read_plain_csv', lambda *args: None)
    careful = loading.read_table(path)
    for name in careful:
        np.testing.assert_array_equal(fast[name], careful[name])
    monkeypatch.undo()
    (tmp_path / 'holes.csv').write_text('time,q\n0,1\n0.1,\n')   # an empty cell
    assert loading._read_plain_csv(tmp_path / 'holes.csv', 'time,q', ',') is None
