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
    assert '/vrpn_mocap/rc_car/pose' in out and '--format {npz,csv}' in out
