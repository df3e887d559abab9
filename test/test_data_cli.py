"""`rdl bag info|export` and `rdl data to-bag` through the real `rdl` entry point."""
import csv
import json

import numpy as np
import pytest

from robot_dynamics_learning.cli import main
from robot_dynamics_learning.data import bag_io


@pytest.fixture(scope='module')
def schunk_bag(tmp_path_factory):
    bag = tmp_path_factory.mktemp('cli') / 'schunk'
    assert main(['data', 'to-bag', 'schunk', '--item', '0', '--out', str(bag),
                 '--storage', 'sqlite3']) == 0
    return bag


def test_to_bag_and_info(schunk_bag, capsys):
    assert main(['bag', 'info', str(schunk_bag)]) == 0
    out = capsys.readouterr().out
    run = bag_io.load_dataset('schunk', '0')[0]
    assert '(sqlite3)' in out and f'messages: {2 * len(run)}' in out
    line = next(row for row in out.splitlines() if row.startswith('/joint_states'))
    assert line.split()[1:3] == ['sensor_msgs/msg/JointState', str(len(run))]
    assert float(line.split()[-1]) == pytest.approx(250.0, rel=0.01)
    assert '/effort_controller/commands  std_msgs/msg/Float64MultiArray' in out


def test_export_npz_and_csv(schunk_bag, tmp_path):
    run = bag_io.load_dataset('schunk', '0')[0]
    npz = tmp_path / 'js.npz'
    assert main(['bag', 'export', str(schunk_bag), '--topic', '/joint_states',
                 '--out', str(npz), '--joints', 'arm_2_joint', 'arm_1_joint']) == 0
    data = np.load(npz)
    np.testing.assert_array_equal(data['position'], run.q[:, [1, 0]])
    np.testing.assert_array_equal(data['velocity'], run.qd[:, [1, 0]])
    assert list(data['joint_names']) == ['arm_2_joint', 'arm_1_joint']
    assert json.loads(str(data['meta']))['rejections'] == {'accepted': len(run)}
    table = tmp_path / 'u.csv'
    assert main(['bag', 'export', str(schunk_bag), '--topic', '/effort_controller/commands',
                 '--format', 'csv', '--out', str(table)]) == 0
    with open(table) as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ['stamp_ns', 'receive_ns'] + [f'data_{k}' for k in range(6)]
    np.testing.assert_array_equal(np.array(rows[1:], dtype=float)[:, 2:], run.actions)


def test_errors_are_clear(schunk_bag, tmp_path, capsys):
    assert main(['bag', 'export', str(schunk_bag), '--topic', '/nope',
                 '--out', str(tmp_path / 'x.npz')]) == 2
    assert "topic '/nope' is not in" in capsys.readouterr().err
    assert main(['data', 'to-bag', 'schunk', '--out', str(schunk_bag)]) == 2
    with pytest.raises(SystemExit):
        main(['data', 'to-bag', 'panda', '--out', str(tmp_path / 'p')])


def test_help_texts(capsys):
    for argv in (['bag', 'export', '--help'], ['data', 'to-bag', '--help']):
        with pytest.raises(SystemExit):
            main(argv)
    out = capsys.readouterr().out
    assert '/vrpn_mocap/rc_car/pose' in out and '--format {npz,csv}' in out and '--force' in out


def test_export_prints_the_file_written_and_never_overwrites_without_force(schunk_bag, capsys):
    metadata = schunk_bag / 'metadata.yaml'
    before = metadata.read_bytes()
    argv = ['bag', 'export', str(schunk_bag), '--topic', '/joint_states', '--out']
    assert main(argv + [str(metadata), '--format', 'csv']) == 2   # it overwrote metadata.yaml
    assert f'{metadata} exists already; pass --force' in capsys.readouterr().err
    assert metadata.read_bytes() == before
    table = schunk_bag.parent / 'x.csv'   # no --format: csv from the suffix
    assert main(argv + [str(table)]) == 0
    assert capsys.readouterr().out.strip().split('-> ')[1].startswith(f'{table};')
    assert table.read_text().startswith('stamp_ns,receive_ns,')
    assert main(argv + [str(table)]) == 2
    assert main(argv + [str(table), '--force']) == 0
    # --format npz with another suffix: np.savez appends .npz, and the output says so.
    capsys.readouterr()
    assert main(argv + [str(table), '--format', 'npz']) == 0
    assert capsys.readouterr().out.strip().split('-> ')[1].startswith(f'{table}.npz;')
    assert np.load(f'{table}.npz')['position'].shape[0] > 0
    plain = schunk_bag.parent / 'y'   # neither suffix: npz
    assert main(argv + [str(plain)]) == 0 and np.load(f'{plain}.npz')['position'].size


def test_export_of_a_topic_without_a_valid_message_is_an_error(tmp_path, capsys):
    bag = tmp_path / 'nan'
    with bag_io.BagWriter(bag, 'sqlite3') as writer:
        for k in range(3):
            stamp = 1_000_000_000 + k * 1_000_000
            values = np.array([np.nan])
            writer.write('/joint_states', 'sensor_msgs/msg/JointState', stamp,
                         writer.joint_state(stamp, ['a'], values, values, values))
    out = tmp_path / 'js.npz'
    assert main(['bag', 'export', str(bag), '--topic', '/joint_states', '--out', str(out)]) == 2
    assert 'no valid message on /joint_states to export' in capsys.readouterr().err
    assert not out.exists()
