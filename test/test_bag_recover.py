"""`rdl bag recover`: the intact messages of a crashed recording land in a readable bag."""
from pathlib import Path

import numpy as np
import pytest
from robot_dynamics_learning import cli
from robot_dynamics_learning.data import bag_io
from robot_dynamics_learning.data.bag_recover import recover_bag
from robot_dynamics_learning.data.trajectory import Trajectory
from rosbags.highlevel import AnyReader
from rosbags.rosbag2 import Writer
from rosbags.typesys import get_types_from_msg, get_typestore, Stores


def _recording(folder: Path, storage: str, rows: int = 3000) -> Path:
    """Write a real JointState bag of `rows` messages at 1 kHz."""
    time = np.arange(rows) * 1e-3
    q = np.stack([np.sin(time), np.cos(2 * time)], 1)
    trajectory = Trajectory(time=time, joint_names=['a', 'b'], q=q, qd=q, tau=3 * q)
    bag_io.write_joint_trajectories(folder, [trajectory], storage)
    return folder


def _storage_file(bag: Path) -> Path:
    (path,) = [p for p in bag.iterdir() if p.suffix in ('.mcap', '.db3')]
    return path


def test_an_mcap_cut_short_gives_back_every_message_before_the_cut(tmp_path):
    bag = _recording(tmp_path / 'crashed', 'mcap', rows=20000)   # several 1 MB chunks
    original = bag_io.read_topic(bag, '/joint_states')
    data = _storage_file(bag)
    data.write_bytes(data.read_bytes()[:int(data.stat().st_size * 0.6)])   # power lost
    (bag / 'metadata.yaml').unlink()
    with pytest.raises(ValueError, match='rdl bag recover'):
        bag_io.read_topic(bag, '/joint_states')
    report = recover_bag(bag, tmp_path / 'fixed')
    assert report.ended[str(data)].startswith('damaged near byte')
    kept = bag_io.read_topic(tmp_path / 'fixed', '/joint_states')
    assert len(kept) == report.messages['/joint_states']   # the chunk being cut is lost
    assert 0.3 * len(original) < len(kept) <= 0.6 * len(original)
    np.testing.assert_array_equal(kept.stamp_ns, original.stamp_ns[:len(kept)])
    np.testing.assert_array_equal(kept.fields['effort'], original.fields['effort'][:len(kept)])


def test_a_sqlite3_recording_without_metadata_is_recovered_whole(tmp_path):
    bag = _recording(tmp_path / 'killed', 'sqlite3')
    original = bag_io.read_topic(bag, '/joint_states')
    (bag / 'metadata.yaml').unlink()   # what a recorder killed hard leaves behind
    report = recover_bag(bag, tmp_path / 'fixed', storage='sqlite3')
    assert report.ended == {str(_storage_file(bag)): 'complete'}
    kept = bag_io.read_topic(tmp_path / 'fixed', '/joint_states')
    np.testing.assert_array_equal(kept.receive_ns, original.receive_ns)
    np.testing.assert_array_equal(kept.fields['position'], original.fields['position'])


def test_a_type_the_typestore_lacks_is_rebuilt_from_its_recorded_definition(tmp_path):
    store = get_typestore(Stores.ROS2_JAZZY)
    store.register(get_types_from_msg('float64 pressure\nstring valve', 'my_pkg/msg/Valve'))
    bag = tmp_path / 'custom'
    with Writer(bag, version=8, storage_plugin=bag_io.STORAGES['mcap']) as writer:
        connection = writer.add_connection('/valve', 'my_pkg/msg/Valve', typestore=store)
        valve = store.types['my_pkg/msg/Valve']
        for k in range(50):
            writer.write(connection, 10 ** 9 + k, store.serialize_cdr(
                valve(pressure=0.5 * k, valve='v1'), 'my_pkg/msg/Valve'))
    (bag / 'metadata.yaml').unlink()
    assert recover_bag(bag, tmp_path / 'fixed').messages == {'/valve': 50}
    with AnyReader([tmp_path / 'fixed']) as reader:   # definitions embedded, none needed
        pressures = [reader.deserialize(raw, c.msgtype).pressure
                     for c, _, raw in reader.messages()]
    assert pressures == [0.5 * k for k in range(50)]


def test_the_cli_reports_counts_and_refuses_to_overwrite(tmp_path, capsys):
    bag = _recording(tmp_path / 'crashed', 'mcap', rows=500)
    (bag / 'metadata.yaml').unlink()
    with pytest.raises(ValueError, match=r'no metadata.yaml .*rdl bag recover'):
        bag_io.read_topic(bag, '/joint_states')
    assert cli.main(['bag', 'recover', str(bag), '--out', str(tmp_path / 'fixed')]) == 0
    assert '/joint_states: 500 messages' in capsys.readouterr().out
    assert cli.main(['bag', 'recover', str(bag), '--out', str(tmp_path / 'fixed')]) == 2
    assert 'exists' in capsys.readouterr().err
    (tmp_path / 'empty').mkdir()
    assert cli.main(['bag', 'recover', str(tmp_path / 'empty'), '--out',
                     str(tmp_path / 'x')]) == 2
    assert 'no .mcap or .db3 storage file' in capsys.readouterr().err


LATCHED = ('- history: 1\n  depth: 1\n  reliability: 1\n  durability: 1\n'
           '  deadline: {sec: 2147483647, nsec: 4294967295}\n'
           '  lifespan: {sec: 2147483647, nsec: 4294967295}\n  liveliness: 1\n'
           '  liveliness_lease_duration: {sec: 2147483647, nsec: 4294967295}\n'
           '  avoid_ros_namespace_conventions: false\n')


@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
def test_the_offered_qos_of_each_topic_is_carried_over(tmp_path, storage):
    from rosbags.rosbag2.metadata import parse_qos
    store = get_typestore(Stores.ROS2_JAZZY)
    bag = tmp_path / 'latched'
    writer = Writer(bag, version=8, storage_plugin=bag_io.STORAGES[storage])
    writer.open()
    connection = writer.add_connection('/robot_description', 'std_msgs/msg/String',
                                       typestore=store, offered_qos_profiles=parse_qos(LATCHED))
    message = store.types['std_msgs/msg/String'](data='<robot name="arm"/>')
    writer.write(connection, 10**9, store.serialize_cdr(message, 'std_msgs/msg/String'))
    writer.close()
    (bag / 'metadata.yaml').unlink()
    recover_bag(bag, tmp_path / 'fixed', storage=storage)
    with AnyReader([tmp_path / 'fixed']) as reader:
        (recovered,) = reader.connections
        # Before: none, so a player offered /robot_description volatile and late
        # subscribers (robot_state_publisher's listeners) never got it.
        assert recovered.ext.offered_qos_profiles == parse_qos(LATCHED)
