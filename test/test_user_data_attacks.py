"""Hostile user files for `rdl train` / `rdl evaluate`: one-line errors, skipped rows, no leaks."""
import json
import logging

import numpy as np
import pytest
from robot_dynamics_learning import cli
from robot_dynamics_learning.data import bag_io
from robot_dynamics_learning.data.loading import (load_trajectories, load_trajectory,
                                                  read_table, trajectories_from_table)
from robot_dynamics_learning.data.splits import split_files
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.data.windows import inverse_dynamics_windows
from robot_dynamics_learning.learning import cli as learning_cli
from robot_dynamics_learning.learning.checkpoint import load_checkpoint
from robot_dynamics_learning.learning.training import train_model, TrainConfig
from robot_dynamics_learning.models.registry import build_model
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
    with pytest.raises(ValueError, match=r'data row 300 at .* follows'):
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
    with pytest.raises(ValueError, match=r"q 1 from \['q_0'\]; tau 2 from \['tau_0', 'tau_1'\]"):
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


def _joint_bag(path, names=('a', 'b'), rows: int = 500, no_effort=(), reversed_from=None,
               stamps=None):
    """Write a JointState bag; `no_effort` rows lack effort, names flip from `reversed_from`."""
    time = np.arange(rows) * 0.004
    q = np.stack([np.sin((j + 1) * time) for j in range(len(names))], 1)
    stamps = 10**12 + np.round(time * 1e9).astype(np.int64) if stamps is None else stamps
    with bag_io.BagWriter(path, storage='sqlite3') as writer:
        for i in range(rows):
            order = slice(None, None, -1 if reversed_from is not None and i >= reversed_from
                          else 1)
            effort = None if i in no_effort else (2 * q[i] + 0.1)[order].copy()
            msg = writer.joint_state(int(stamps[i]), list(names)[order], q[i][order].copy(),
                                     np.cos(time[i]) * np.ones(len(names)), effort)
            writer.write('/joint_states', bag_io.JOINT_STATE, 10**12 + i * 4_000_000, msg)
    return path


def test_bad_time_after_skipped_rows_names_the_data_row():
    time = np.arange(400) * 0.002
    q = np.sin(time)
    q[10:20] = np.nan   # skipped rows: the sample index no longer is the data row
    time[300] = time[299]
    with pytest.raises(ValueError, match=r'data row 300 at .* follows'):
        trajectories_from_table({'time': time, 'q': q, 'tau': np.cos(time)})


def test_a_bag_with_some_messages_without_effort_is_read_skipping_them(tmp_path, caplog):
    bag = _joint_bag(tmp_path / 'bag', no_effort={100, 101, 250})
    arrays = bag_io.read_topic(bag, '/joint_states')
    assert len(arrays) == 497 and arrays.fields['effort'].shape == (497, 2)
    assert arrays.rejections == {'accepted': 497, 'missing_field': 3}
    assert np.isfinite(arrays.fields['effort']).all()
    assert 100 * 4_000_000 + 10**12 not in arrays.receive_ns
    with caplog.at_level(logging.WARNING):
        train, test = learning_cli.load_data([str(bag)], {})
    assert '3 missing_field' in caplog.text
    assert sum(len(t) for t in train + test) == 497


def test_evaluate_reads_a_bag_in_the_checkpoints_joint_order(tmp_path, capsys):
    bag = _joint_bag(tmp_path / 'bag', rows=600)
    assert _train(tmp_path, '--data', str(bag)) == 0
    flipped = _joint_bag(tmp_path / 'flipped', rows=600, reversed_from=0)   # same data, (b, a)
    scores = []
    for data in (bag, flipped):
        capsys.readouterr()
        assert cli.main(['evaluate', '--checkpoint', str(tmp_path / 'run' / 'model.pt'),
                         '--data', str(data)]) == 0
        scores.append(capsys.readouterr().out)
    assert scores[0] == scores[1].replace(str(flipped), str(bag))


def test_a_re_split_dataset_derives_qdd_on_each_side(monkeypatch):
    # The datasets' qdd is a zero-phase derivative of the whole recording: re-split by blocks,
    # the training rows next to a test block would carry derivatives of its samples.
    time = np.arange(600) * 0.001

    def recording(qd: np.ndarray) -> Trajectory:
        qdd = np.gradient(qd, time, axis=0)   # any whole-recording derivative
        return Trajectory(time=time, joint_names=['a'], q=np.sin(time)[:, None], qd=qd,
                          qdd=qdd, tau=np.cos(time)[:, None], source='kinova.csv')

    qd = np.cos(3 * time)[:, None]
    changed = qd.copy()
    changed[300:400] += 1.0   # the second block of 100 rows is tested (blocks:100:2)
    sides = []
    for values in (qd, changed):
        monkeypatch.setattr(learning_cli, 'load_split',
                            lambda data, split, v=values: [recording(v)] if split == 'train'
                            else [])
        sides.append(learning_cli.load_data(['kinova'], {}, 'blocks:100:2'))
    (train, test), (train_changed, _) = sides
    assert [t.time[0] for t in test] == [0.1, 0.3, 0.5]
    for before, after in zip(train, train_changed):
        np.testing.assert_array_equal(before.qdd, after.qdd)


def test_replay_skips_messages_without_effort_and_keeps_time_resets(tmp_path):
    from robot_dynamics_learning.learning import replay
    stamps = 10**12 + np.arange(500) * 4_000_000
    stamps[300:] -= 2 * 10**9   # a time reset at row 300, whose message lacks effort
    bag = _joint_bag(tmp_path / 'bag', no_effort={7, 300}, stamps=stamps)
    stream = replay.read_joint_stream(bag)
    assert len(stream) == 498 and stream.torque_source == 'effort'
    assert stream.counts == {'accepted': 498, 'missing_field': 2}
    assert [reason for _, reason in stream.rejections] == ['missing_field'] * 2
    assert np.flatnonzero(stream.reset_before).tolist() == [299]   # row 301


def test_files_with_the_same_columns_in_another_order_are_matched_by_name(tmp_path):
    time = np.arange(400) * 0.002
    columns = {'time': time, 'q_a': np.sin(time), 'q_b[1]': np.cos(time), 'tau_a': 3 * time,
               'tau_b[1]': -time}
    for name, order in (('first.csv', list(columns)),
                        ('second.csv', ['tau_b[1]', 'q_b[1]', 'time', 'tau_a', 'q_a'])):
        np.savetxt(tmp_path / name, np.column_stack([columns[k] for k in order]),
                   delimiter=',', header=','.join(order), comments='')
    train, test = learning_cli.load_data([str(tmp_path / 'first.csv'),
                                          str(tmp_path / 'second.csv')], {}, 'time:0.5')
    for first, second in ((train[0], train[1]), (test[0], test[1])):
        np.testing.assert_array_equal(first.q, second.q)
        np.testing.assert_array_equal(first.tau, second.tau)


def test_train_and_evaluate_write_strict_json_for_a_joint_that_never_moves(tmp_path, capsys):
    time = np.arange(600) * 0.002
    table = {'time': time, 'q_0': np.sin(3 * time), 'q_1': np.full(600, 0.3),
             'tau_0': np.cos(3 * time), 'tau_1': np.full(600, 1.5)}   # nMSE of joint 1: NaN
    path = tmp_path / 'still.npz'
    np.savez(path, **table)
    assert _train(tmp_path, '--data', str(path)) == 0

    def strict(text: str) -> dict:
        return json.loads(text, parse_constant=lambda name: pytest.fail(f'{name} in JSON'))

    summary = strict((tmp_path / 'run' / 'train_summary.json').read_text())
    assert summary['test']['model']['nmse'][1] is None
    capsys.readouterr()
    assert cli.main(['evaluate', '--checkpoint', str(tmp_path / 'run' / 'model.pt'),
                     '--data', str(path)]) == 0
    assert strict(capsys.readouterr().out)['nmse_per_joint'][1] is None


def test_empty_csv_cells_are_missing_values_skipped_like_nan(tmp_path, caplog):
    # pandas writes NaN as an empty cell; some loggers end every line with a comma.
    path = _csv(tmp_path / 'run.csv',
                edit=lambda lines: [line + ',' for line in _set_cell(200, 1, '')(lines)])
    with caplog.at_level(logging.WARNING):
        pieces = load_trajectories(path)
    assert 'skipped 1 of 400 rows' in caplog.text and "'q': 1" in caplog.text
    assert [p.source for p in pieces] == [f'{path}[0:199]', f'{path}[200:400]']


def test_evaluate_scores_the_side_that_training_held_out(tmp_path, capsys):
    # Evaluated with the default time split, a blocks-trained model is scored on rows it
    # was trained on; the training's split, columns and dt are the defaults.
    path = _csv(tmp_path / 'run.csv', rows=800)
    assert _train(tmp_path, '--data', str(path), '--split', 'blocks:100:4') == 0
    held = json.loads((tmp_path / 'run' / 'train_summary.json').read_text())['test']
    capsys.readouterr()
    assert cli.main(['evaluate', '--checkpoint', str(tmp_path / 'run' / 'model.pt'),
                     '--data', str(path)]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored['split'] == 'blocks:100:4'
    assert scored['test_samples'] == held['test_samples'] == 2 * 99
    assert scored['nmse_per_joint'] == held['model']['nmse']


@pytest.mark.parametrize('file_format', ['csv', 'npz'])
def test_a_bag_export_trains_as_it_is_with_its_nanosecond_stamps(tmp_path, file_format):
    bag = _joint_bag(tmp_path / 'bag')
    exported = tmp_path / f'js.{file_format}'
    assert cli.main(['bag', 'export', str(bag), '--topic', '/joint_states', '--format',
                     file_format, '--out', str(exported)]) == 0
    from_file = load_trajectory(exported)
    from_bag = bag_io.read_trajectory(bag)
    # Seconds since the first stamp (10**12 ns), exact: epoch stamps as float64 resolve 256 ns.
    np.testing.assert_allclose(from_file.time, from_bag.time, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(from_file.tau, from_bag.tau)
    assert from_file.qdd is not None and 0.5 < np.abs(from_file.qdd).max() < 5.0


def test_a_sample_index_as_time_is_refused_or_warned_about(caplog):
    index = np.arange(400.0)   # the Kinova CSVs' Time column: qdd would be per sample squared
    table = {'Time': index, 'q': np.sin(index / 50), 'tau': index}
    with pytest.raises(ValueError, match=r"'Time' counts samples .*--dt"):
        trajectories_from_table(table)   # found by name: never taken as seconds
    with caplog.at_level(logging.WARNING):   # named by the user: used, with a warning
        trajectories_from_table(table, {'time': 'Time', 'q': 'q', 'tau': 'tau'})
    assert 'is time in seconds' in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        trajectories_from_table({'time': index * 0.001, 'q': np.sin(index / 50), 'tau': index})
    assert 'is time in seconds' not in caplog.text


def test_values_too_large_for_float32_statistics_never_reach_a_checkpoint(tmp_path, capsys):
    # 1e37 fits float32 but its sums do not: NaN normalisation. A file's joint values beyond
    # 1e9 are skipped where they are read; through the Python API they reach the model, whose
    # statistics are checked before any step.
    path = _csv(tmp_path / 'run.csv', rows=600, edit=lambda lines: [lines[0]] + [
        ','.join(cells[:-1] + [repr(float(cells[-1]) * 1e37)])
        for cells in (line.split(',') for line in lines[1:])])
    assert _train(tmp_path, '--data', str(path)) == 2
    assert 'no usable stretch of rows (600 rows, 600 skipped)' in capsys.readouterr().err
    assert not (tmp_path / 'run' / 'model.pt').exists()
    trajectory = load_trajectories(_csv(tmp_path / 'plain.csv', rows=600))[0]
    trajectory.tau = trajectory.tau * 1e37
    model = build_model('ffnn', {'hidden': [8]}, 6, 0, 2)
    with pytest.raises(ValueError, match="'target_norm.mean' is NaN or inf"):
        train_model(model, inverse_dynamics_windows([trajectory], 50), None,
                    TrainConfig(max_epochs=1))


def test_a_bag_without_the_expected_joints_names_them(tmp_path):
    from robot_dynamics_learning.learning import replay
    bag = _joint_bag(tmp_path / 'bag')
    with pytest.raises(ValueError, match=r"missing_joint': 500\}\); joints expected: \['c'\]"):
        bag_io.read_trajectory(bag, joint_names=['c'])
    with pytest.raises(ValueError, match=r"last reasons: missing joints \['c'\]"):
        replay.read_joint_stream(bag, joint_names=['a', 'c'])


def test_evaluate_reads_a_file_in_the_trainings_column_order(tmp_path, capsys):
    # Columns matched by a pattern come in the file's order: a file whose joints are
    # written in another order was scored with its joints swapped.
    path = _csv(tmp_path / 'run.csv', rows=800, joints=3)
    table = read_table(path)
    order = ['tau_2', 'time', 'q_1', 'tau_0', 'q_2', 'q_0', 'tau_1']
    shuffled = tmp_path / 'shuffled.csv'
    np.savetxt(shuffled, np.column_stack([table[name] for name in order]), delimiter=',',
               header=','.join(order), comments='')
    assert _train(tmp_path, '--data', str(path)) == 0
    scores = []
    for data in (path, shuffled):
        capsys.readouterr()
        assert cli.main(['evaluate', '--checkpoint', str(tmp_path / 'run' / 'model.pt'),
                         '--data', str(data)]) == 0
        scores.append(json.loads(capsys.readouterr().out)['nmse_per_joint'])
    assert scores[0] == scores[1]


@pytest.mark.parametrize('name', ['Time', 'TIMESTAMP', 'time_s', 'Time (s)', 'Time [s]'])
def test_a_time_column_is_found_in_any_case_and_common_spellings(name):
    time = np.arange(300) * 0.004
    table = {'T': np.full(300, 21.5), name: time, 'q': np.sin(time), 'tau': np.cos(time)}
    pieces = trajectories_from_table(table)
    np.testing.assert_allclose(pieces[0].time, time)   # not the temperature 'T'


def test_a_table_without_a_time_column_names_both_remedies():
    table = {'T': np.full(300, 21.5), 'q': np.zeros(300), 'tau': np.zeros(300)}
    with pytest.raises(ValueError, match=r"no time column .*'T'.*--columns time=NAME.*--dt"):
        trajectories_from_table(table)


def test_a_foreign_or_pickled_checkpoint_is_refused_without_unsafe_advice(tmp_path, capsys):
    path = _csv(tmp_path / 'run.csv')
    pickled = tmp_path / 'pickled.pt'
    torch.save(torch.nn.Linear(2, 2), pickled)   # a whole model: code on load
    for checkpoint in (pickled, tmp_path / 'run.csv'):
        assert cli.main(['evaluate', '--checkpoint', str(checkpoint), '--data', str(path)]) == 2
        error = capsys.readouterr().err
        assert 'not a' in error and 'checkpoint' in error and str(checkpoint) in error
        assert 'weights_only` set to `False' not in error and 'will likely succeed' not in error


def test_a_joint_still_in_the_test_data_is_named_and_the_others_averaged(tmp_path, capsys):
    time = np.arange(1000) * 0.002
    moving = np.sin(3 * time)
    held = np.where(time < 1.6, np.sin(2 * time), np.sin(3.2) + 1e-4 * np.sin(40 * time))
    table = {'time': time, 'q_0': moving, 'q_1': held, 'tau_0': 2 * moving, 'tau_1': held}
    path = tmp_path / 'still_at_the_end.npz'
    np.savez(path, **table)
    assert _train(tmp_path, '--data', str(path)) == 0
    out = capsys.readouterr().out
    report = json.loads((tmp_path / 'run' / 'train_summary.json').read_text())['test']
    assert report['quiet_targets'] == ['joint_2']
    assert report['model']['mean_nmse_varying'] == report['model']['nmse'][0]
    assert 'the torque of joint_2 hardly varies' in out and 'judge it by RMSE' in out


@pytest.mark.parametrize('name, scale', [('time_ms', 1e3), ('Time [us]', 1e6), ('t', 1.0)])
def test_time_columns_in_milli_or_microseconds_are_read_in_seconds(name, scale):
    seconds = np.arange(400) * 0.01   # 100 Hz: in ms, 10 s per sample if read as seconds
    pieces = trajectories_from_table({name: seconds * scale, 'q': np.sin(seconds),
                                      'tau': np.cos(seconds)})
    np.testing.assert_allclose(pieces[0].time, seconds, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(pieces[0].qd[50:-50, 0], np.cos(seconds[50:-50]), rtol=1e-3)
    index = np.arange(400.0)   # a 1 kHz logger's time_ms counts 0, 1, 2: milliseconds
    assert trajectories_from_table({'time_ms': index, 'q': np.sin(index / 100),
                                    'tau': index})[0].dt == pytest.approx(1e-3)


def test_a_continuous_joint_wrapped_at_pi_is_differentiated_without_spikes():
    time = np.arange(2000) * 0.002
    angle = 3.0 * time   # 12 rad: the reported angle wraps to (-pi, pi] twice
    wrapped = np.angle(np.exp(1j * angle))
    piece = trajectories_from_table({'time': time, 'q': wrapped, 'tau': np.sin(angle)})[0]
    np.testing.assert_allclose(piece.qd[:, 0], 3.0, atol=1e-6)   # before: spikes of -3000
    np.testing.assert_allclose(piece.qdd[:, 0], 0.0, atol=1e-3)
    np.testing.assert_array_equal(piece.q[:, 0], wrapped)   # positions are kept as given


def test_joint_columns_are_paired_by_name_across_fields(tmp_path, caplog):
    # q_a, q_b beside tau_b, tau_a trained joint a on joint b's torque, without a word.
    path = _csv(tmp_path / 'run.csv', rows=300)
    table = read_table(path)
    swapped = tmp_path / 'swapped.csv'
    order = ['time', 'q_0', 'q_1', 'tau_1', 'tau_0']
    np.savetxt(swapped, np.column_stack([table[name] for name in order]), delimiter=',',
               header=','.join(order), comments='')
    with caplog.at_level(logging.WARNING):
        plain, paired = load_trajectory(path), load_trajectory(swapped)
    np.testing.assert_array_equal(paired.tau, plain.tau)
    assert 'the tau columns list the joints in another order than the q columns' in caplog.text
    # Fields named differently (q_0 beside effort_shoulder) keep their order: nothing to pair.
    other = tmp_path / 'other.csv'
    np.savetxt(other, np.column_stack([table[name] for name in order]), delimiter=',',
               header='time,q_0,q_1,tau_shoulder,tau_elbow', comments='')
    np.testing.assert_array_equal(load_trajectory(other).tau, plain.tau[:, ::-1])


def test_a_few_bad_rows_do_not_end_training_under_the_default_split(tmp_path, caplog):
    # The NaN cut a 100-row piece whose 20-row test tail was too short to differentiate.
    path = _csv(tmp_path / 'run.csv', rows=1500, dt=0.001,
                edit=_set_cell(101, 1, 'nan'))
    with caplog.at_level(logging.WARNING):
        assert _train(tmp_path, '--data', str(path)) == 0
    assert 'test data: dropped 1 pieces (20 rows) too short to derive' in caplog.text


@pytest.mark.parametrize('name, text', [
    ('semicolon.csv', lambda lines: [line.replace(',', ';') for line in lines]),
    ('tab.txt', lambda lines: [line.replace(',', '\t') for line in lines]),
    ('comment.csv', lambda lines: ['# logged by a test rig', '#'] + lines),
    ('cut_short.csv', lambda lines: lines + [lines[-1][:5]]),   # a logger stopped mid-line
    ('missing.csv', lambda lines: lines[:50] + [lines[50].rsplit(',', 1)[0] + ',NA']
     + lines[51:]),
])
def test_csv_as_loggers_and_spreadsheets_write_it(tmp_path, name, text):
    plain = load_trajectory(_csv(tmp_path / 'plain.csv'))
    pieces = load_trajectories(_csv(tmp_path / name, edit=text))
    rows = sum(len(p) for p in pieces)
    assert rows == len(plain) - (name == 'missing.csv')
    np.testing.assert_array_equal(pieces[0].q[:10], plain.q[:10])


def test_compressed_csv_reads_and_a_decimal_comma_is_named(tmp_path):
    import gzip
    plain = _csv(tmp_path / 'plain.csv')
    packed = tmp_path / 'plain.csv.gz'
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    np.testing.assert_array_equal(load_trajectory(packed).q, load_trajectory(plain).q)
    euro = _csv(tmp_path / 'euro.csv', edit=lambda lines: [
        line.replace(',', ';').replace('.', ',') for line in lines])
    with pytest.raises(ValueError, match='decimal comma'):
        load_trajectory(euro)


def test_a_time_column_in_another_unit_than_seconds_is_refused(tmp_path):
    epoch_ns = _csv(tmp_path / 'ns.csv', edit=lambda lines: [lines[0]] + [
        ','.join([str(1_700_000_000_000_000_000 + int(float(cells[0]) * 1e9))] + cells[1:])
        for cells in (line.split(',') for line in lines[1:])])
    with pytest.raises(ValueError, match=r'samples 2e\+06 s apart .*rename the column'):
        load_trajectory(epoch_ns)


def test_a_header_written_as_a_comment_by_numpy_is_the_header(tmp_path):
    plain = _csv(tmp_path / 'plain.csv')
    table = read_table(plain)
    saved = tmp_path / 'savetxt.csv'   # np.savetxt's default: '# time,q_0,...'
    np.savetxt(saved, np.column_stack(list(table.values())), delimiter=',',
               header=','.join(table))
    assert saved.read_text().startswith('# time,q_0')
    np.testing.assert_array_equal(load_trajectory(saved).q, load_trajectory(plain).q)
