"""Hostile user files for `rdl train` / `rdl evaluate`: one-line errors, skipped rows, no leaks."""
import logging

import numpy as np
import pytest
from robot_dynamics_learning import cli
from robot_dynamics_learning.data import bag_io
from robot_dynamics_learning.data.loading import (load_trajectories, load_trajectory,
                                                  read_table, trajectories_from_table)
from robot_dynamics_learning.data.splits import split_files
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.learning import cli as learning_cli
from robot_dynamics_learning.learning.checkpoint import load_checkpoint
import torch

CONFIG = ('model_type: ffnn\nmodel: {hidden: [8]}\ntraining: {max_epochs: 1, progress: false}\n'
          'data: {problem: inverse, window: 10, stride: 10}\n')


def _csv(path, rows: int = 400, joints: int = 2, dt: float = 0.002, edit=None):
    """Write a smooth arm recording (time, q_*, tau_*); `edit` changes its text lines."""
    time = np.arange(rows) * dt
    q = np.stack([np.sin((j + 1) * 3 * time) for j in range(joints)], 1)
    header = ['time'] + [f'q_{j}' for j in range(joints)] + [f'tau_{j}' for j in range(joints)]
    lines = [','.join(header)] + [','.join(repr(float(v)) for v in row)
                                  for row in np.column_stack([time, q, 2 * q + 0.1])]
    path.write_text('\n'.join(edit(lines) if edit else lines) + '\n')
    return path


def _set_cell(line: int, column: int, value: str):
    def edit(lines):
        cells = lines[line].split(',')
        cells[column] = value
        lines[line] = ','.join(cells)
        return lines
    return edit


def _train(tmp_path, *args) -> int:
    config = tmp_path / 'ffnn.yaml'
    config.write_text(CONFIG)
    return cli.main(['train', '--config', str(config), '--out', str(tmp_path / 'run'), *args])


def test_non_finite_rows_are_skipped_counted_and_cut_the_recording(tmp_path, caplog):
    path = _csv(tmp_path / 'run.csv', edit=lambda lines: _set_cell(101, 3, 'inf')(
        _set_cell(100, 1, 'nan')(lines)))
    with caplog.at_level(logging.WARNING):
        pieces = load_trajectories(path)
    assert 'skipped 2 of 400 rows' in caplog.text and "'q': 1, 'tau': 1" in caplog.text
    assert [p.source for p in pieces] == [f'{path}[0:99]', f'{path}[101:400]']
    assert all(np.isfinite(p.tau).all() and np.isfinite(p.qdd).all() for p in pieces)
    with pytest.raises(ValueError, match='2 pieces'):
        load_trajectory(path)   # one trajectory would differentiate across the hole
    table = {'time': np.arange(300) * 0.01, 'q': np.full(300, 1e39), 'tau': np.zeros(300)}
    with pytest.raises(ValueError, match=r'300 rows, 300 skipped'):   # inf in float32
        trajectories_from_table(table)


def test_time_gaps_cut_the_recording_and_bad_time_names_the_sample(tmp_path):
    time = np.arange(400) * 0.002
    time[200:] += 5.0   # a paused logger: no derivative or window may bridge it
    pieces = trajectories_from_table({'time': time, 'q': np.sin(time), 'tau': np.cos(time)})
    assert [len(p) for p in pieces] == [200, 200]
    assert max(float(np.abs(p.qd).max()) for p in pieces) < 1.5
    time[300] = time[299]
    with pytest.raises(ValueError, match=r'sample 300 at .* follows'):
        trajectories_from_table({'time': time, 'q': np.sin(time), 'tau': np.cos(time)})


@pytest.mark.parametrize('text, words', [
    ('', 'empty file'),
    ('time,q_0,tau_0\n', 'no data rows'),
    ('time,q_0,tau_0\n0,1,2\n', 'no usable stretch'),
    ('time,q_0,q_0\n0,1,2\n', "header names ['q_0'] more than once"),
    ('time,q_0,tau_0\n0,1,2\n0.1,x,2\n', "line 3, column 'q_0': non-numeric cell 'x'"),
])
def test_degenerate_csv_files_give_one_clear_line(tmp_path, text, words):
    path = tmp_path / 'bad.csv'
    path.write_text(text)
    with pytest.raises(ValueError) as error:
        load_trajectory(path, derivative_window_s=0.01)
    assert words in str(error.value) and str(path) in str(error.value)


def test_npz_and_encodings_give_clear_errors(tmp_path):
    (tmp_path / 'bad.npz').write_bytes(b'not a zip')
    with pytest.raises(ValueError, match='not a readable npz file'):
        read_table(tmp_path / 'bad.npz')
    for name, value in (('scalar', np.float64(1.0)), ('complex', np.zeros((300, 2), complex)),
                        ('cube', np.zeros((300, 2, 2)))):
        np.savez(tmp_path / f'{name}.npz', time=np.arange(300) * 0.01, q=value,
                 tau=np.zeros((300, 2)))
        with pytest.raises(ValueError, match="column 'q' for q must hold real numbers"):
            load_trajectory(tmp_path / f'{name}.npz')
    bom = tmp_path / 'bom.csv'
    bom.write_text(_csv(tmp_path / 'plain.csv').read_text(), encoding='utf-8-sig')
    assert len(load_trajectory(bom)) == 400   # Excel's BOM must not hide the time column


def test_columns_that_match_twice_or_disagree_are_refused():
    time = np.arange(300) * 0.01
    table = {'time': time, 'q_0': np.sin(time), 'q_1': np.cos(time), 'tau_0': time,
             'tau_1': time}
    with pytest.raises(ValueError, match="'q_0' matches both q and tau"):
        trajectories_from_table(table, {'q': 'q_*', 'tau': '*_0'})
    with pytest.raises(ValueError, match='joint columns disagree'):
        trajectories_from_table(table, {'q': 'q_0', 'tau': 'tau_*'})
    with pytest.raises(ValueError, match='time column or dt, not both'):
        trajectories_from_table(table, {'time': 'time', 'q': 'q_*', 'tau': 'tau_*'}, dt=0.01)
    for dt in (0.0, float('nan'), float('inf')):
        with pytest.raises(ValueError, match='dt must be a positive number'):
            trajectories_from_table(table, dt=dt)
    # columns named without time: the table's time column still gives the time
    assert len(trajectories_from_table(table, {'q': 'q_*', 'tau': 'tau_*'})[0]) == 300


def test_split_files_reads_names_with_spaces_and_row_ranges():
    runs = [Trajectory(time=np.arange(10.0), q=np.zeros((10, 1)), source=source)
            for source in ('/d/my runs/a run.csv', '/d/my runs/b run.csv[0:10]',
                           '/d/c (1).csv', '/d/k.csv (torque=Torque)')]
    train, test = split_files(runs, ['b run.csv', 'k.csv'])
    assert [t.source for t in test] == ['/d/my runs/b run.csv[0:10]', '/d/k.csv (torque=Torque)']
    assert [t.source for t in split_files(runs, ['c (1).csv'])[1]] == ['/d/c (1).csv']


def test_cli_refuses_mixed_joint_counts_and_repeated_files(tmp_path, capsys):
    two, three = _csv(tmp_path / 'two.csv'), _csv(tmp_path / 'three.csv', joints=3)
    assert _train(tmp_path, '--data', str(two), str(three)) == 2
    assert 'q of width 3' in capsys.readouterr().err
    assert _train(tmp_path, '--data', str(two), str(two), '--split', 'blocks:100:2') == 2
    assert 'more than once' in capsys.readouterr().err


def test_cli_split_without_training_or_test_data(tmp_path, capsys):
    path = _csv(tmp_path / 'run.csv')
    assert _train(tmp_path, '--data', str(path), '--split', 'time:0.001') == 2
    assert 'leaves no training data' in capsys.readouterr().err
    assert _train(tmp_path, '--data', str(path), '--split', 'time:0.999') == 0
    assert 'leaves no test data' in capsys.readouterr().err


def test_cli_trains_on_a_file_with_nan_rows(tmp_path, caplog):
    path = _csv(tmp_path / 'run.csv', rows=600, edit=_set_cell(300, 3, 'nan'))
    with caplog.at_level(logging.WARNING):
        assert _train(tmp_path, '--data', str(path)) == 0
    assert 'skipped 1 of 600 rows' in caplog.text
    tensors = load_checkpoint(tmp_path / 'run' / 'model.pt').model.state_dict().values()
    assert all(torch.isfinite(v).all() for v in tensors if v.is_floating_point())


def test_a_bag_is_split_like_files_not_scored_on_its_training_rows(tmp_path):
    time = np.arange(500) * 0.002
    recording = Trajectory(time=time, joint_names=['a'], q=np.sin(time)[:, None],
                           qd=np.cos(time)[:, None], tau=np.sin(time)[:, None], source='run')
    bag_io.write_joint_trajectories(tmp_path / 'bag', [recording], storage='sqlite3')
    train, test = learning_cli.load_data([str(tmp_path / 'bag')], {})
    assert sum(len(t) for t in train) == 400 and sum(len(t) for t in test) == 100
    assert train[0].time[-1] < test[0].time[0]


@pytest.mark.parametrize('split', ['time:0.5', 'blocks:100:2'])
def test_derivatives_of_the_training_side_never_see_a_test_sample(tmp_path, split):
    # q is derived to qd / qdd (zero phase, 31 ms): taken before the split, the training rows
    # next to a test block would carry derivatives of the test block's samples.
    path = _csv(tmp_path / 'run.csv', rows=400, joints=1)
    changed = _csv(tmp_path / 'changed.csv', rows=400, joints=1)
    train, test = learning_cli.load_data([str(path)], {}, split)
    table = read_table(changed)
    tested = np.zeros(400, dtype=bool)
    for piece in test:
        tested[np.searchsorted(table['time'], piece.time)] = True
    table['q_0'][tested] += 1.0   # another motion on the test side only
    np.savetxt(changed, np.column_stack(list(table.values())), delimiter=',',
               header=','.join(table), comments='')
    train_changed, _ = learning_cli.load_data([str(changed)], {}, split)
    assert len(train) == len(train_changed)
    for before, after in zip(train, train_changed):
        np.testing.assert_array_equal(before.qd, after.qd)
        np.testing.assert_array_equal(before.qdd, after.qdd)
