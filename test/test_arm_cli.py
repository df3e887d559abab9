"""`rdl simulate arm`: writes the stream as npz or a rosbag2, payload schedule applied."""
import numpy as np

from robot_dynamics_learning.cli import main
from robot_dynamics_learning.data import bag_io


def test_simulate_arm_to_npz_and_bag(tmp_path):
    out = tmp_path / 'arm.npz'
    assert main(['simulate', 'arm', '--seconds', '0.2', '--payload-schedule', '0.1:2.0',
                 '--out', str(out)]) == 0
    data = np.load(out)
    assert data['q'].shape == (200, 7) and list(data['names'])[0] == 'panda_joint1'
    assert np.all(np.diff(data['time']) > 0)
    np.testing.assert_array_equal(np.unique(data['payload']), [0.0, 2.0])
    bag = tmp_path / 'arm_bag'
    assert main(['simulate', 'arm', '--seconds', '0.1', '--out', str(bag)]) == 0
    assert bag_io.bag_info(bag).topics[0].count == 100


def test_bad_payload_schedule_is_a_clear_error(tmp_path, capsys):
    assert main(['simulate', 'arm', '--seconds', '0.1', '--payload-schedule', '1:x',
                 '--out', str(tmp_path / 'x.npz')]) == 2
    assert "'1:x' is not TIME:MASS" in capsys.readouterr().err
