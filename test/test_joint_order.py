"""Joints in another order than the URDF's: matched by name wherever a URDF model reads data."""
import json
import logging

import numpy as np
import pytest
from robot_dynamics_learning import cli
from robot_dynamics_learning.data import bag_io
from robot_dynamics_learning.data.loading import load_trajectory, trajectories_from_table
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.dynamics import load_urdf, rnea
from robot_dynamics_learning.learning import replay
from robot_dynamics_learning.learning.identify_cli import load_samples
from robot_dynamics_learning.learning.replay_cli import _in_urdf_order
from robot_dynamics_learning.models.registry import urdf_robot
from robot_dynamics_learning.resources import resource
import torch

URDF = str(resource('urdf/planar_2link.urdf'))
JOINTS = ['joint1', 'joint2']
RIGID_BODY = f'model_type: rigid_body\nmodel: {{urdf: {URDF}}}\ndata: {{window: 20}}\n'


def _arm(rows: int = 1200, dt: float = 0.005) -> Trajectory:
    """Return a smooth motion of the 2-link arm with its exact RNEA torques (URDF order)."""
    time = np.arange(rows) * dt
    phase = np.array([[1.3, 2.1]]) * time[:, None] + np.array([[0.0, 0.7]])
    q, qd, qdd = 0.8 * np.sin(phase), 0.8 * np.array([1.3, 2.1]) * np.cos(phase), \
        -0.8 * np.array([1.3, 2.1]) ** 2 * np.sin(phase)
    tau = rnea(load_urdf(URDF), *(torch.as_tensor(a) for a in (q, qd, qdd))).numpy()
    return Trajectory(time=time, joint_names=list(JOINTS), q=q, qd=qd, qdd=qdd, tau=tau)


def _flipped(arm: Trajectory, extra: bool = False) -> Trajectory:
    """Return the recording with the joints listed the other way round (and a gripper)."""
    order = [1, 0]
    names = [JOINTS[i] for i in order]
    fields = {f: getattr(arm, f)[:, order] for f in ('q', 'qd', 'tau')}   # not contiguous
    if extra:   # a gripper joint listed between them, as a shared /joint_states has it
        names.insert(1, 'gripper')
        fields = {f: np.insert(v, 1, 0.01, axis=1) for f, v in fields.items()}
    return Trajectory(time=arm.time, joint_names=names, **fields)


def _train_nmse(tmp_path, name: str, *data: str) -> float:
    config = tmp_path / 'rigid_body.yaml'
    config.write_text(RIGID_BODY)
    out = tmp_path / name
    assert cli.main(['train', '--config', str(config), '--out', str(out), '--data', *data]) == 0
    return json.loads((out / 'train_summary.json').read_text())['test']['model']['mean_nmse']


def test_rdl_train_reads_a_bag_in_the_urdf_joint_order(tmp_path):
    arm = _arm()
    bags = {}
    for name, trajectory in (('ordered', arm), ('flipped', _flipped(arm)),
                             ('gripper', _flipped(arm, extra=True))):
        bags[name] = tmp_path / name
        bag_io.write_joint_trajectories(bags[name], [trajectory])
    scores = {name: _train_nmse(tmp_path, f'run_{name}', str(bag)) for name, bag in bags.items()}
    # Before, the flipped bag fed joint2's state to the URDF's joint1 (nMSE over 100).
    assert scores['ordered'] < 0.5   # qdd differentiated from the bag's qd
    assert scores['flipped'] == pytest.approx(scores['ordered'], abs=1e-6)
    assert scores['gripper'] == pytest.approx(scores['ordered'], abs=1e-6)


@pytest.mark.parametrize('file_format', ['csv', 'npz'])
def test_an_export_of_a_flipped_bag_trains_in_the_urdf_order(tmp_path, file_format):
    arm = _arm()
    bag_io.write_joint_trajectories(tmp_path / 'ordered', [arm])
    bag = tmp_path / 'flipped'
    bag_io.write_joint_trajectories(bag, [_flipped(arm)])
    exported = tmp_path / f'js.{file_format}'
    assert cli.main(['bag', 'export', str(bag), '--topic', '/joint_states', '--format',
                     file_format, '--out', str(exported)]) == 0
    loaded = load_trajectory(exported)
    assert loaded.joint_names == ['joint2', 'joint1']
    # Epoch stamps (1.7e18 ns) read as integers: as float64 they resolve 256 ns only.
    np.testing.assert_allclose(loaded.time, arm.time, rtol=0, atol=1e-12)
    assert _train_nmse(tmp_path, 'run', str(exported)) == pytest.approx(
        _train_nmse(tmp_path, 'run_bag', str(tmp_path / 'ordered')), rel=1e-6)


def test_csv_joint_columns_name_their_joints_unless_numbered(tmp_path, caplog):
    arm = _arm(400)
    table = {'time': arm.time, 'q_joint2': arm.q[:, 1], 'q_joint1': arm.q[:, 0],
             'tau_joint2': arm.tau[:, 1], 'tau_joint1': arm.tau[:, 0]}
    named = trajectories_from_table(table)[0]
    assert named.joint_names == ['joint2', 'joint1']
    ordered = named.in_joint_order(JOINTS)
    np.testing.assert_array_equal(ordered.tau, arm.tau)
    numbered = trajectories_from_table({'time': arm.time, 'q_1': arm.q[:, 0],
                                        'q_2': arm.q[:, 1], 'tau_1': arm.tau[:, 0],
                                        'tau_2': arm.tau[:, 1]})[0]
    assert numbered.joint_names == ['joint_1', 'joint_2']
    with caplog.at_level(logging.INFO):   # nothing to match by: taken in order, said so
        np.testing.assert_array_equal(numbered.in_joint_order(JOINTS).tau, arm.tau)
    assert 'unnamed joint columns are taken in the order' in caplog.text
    with pytest.raises(ValueError, match=r"joints \['joint1'\] are not in the data"):
        Trajectory(time=arm.time, joint_names=['joint2', 'elbow'], q=arm.q,
                   tau=arm.tau).in_joint_order(JOINTS)


def test_actions_as_wide_as_the_joints_follow_them():
    arm = _arm(50)
    commands = arm.tau + 1.0
    flipped = Trajectory(time=arm.time, joint_names=['joint2', 'joint1'], q=arm.q[:, ::-1],
                         tau=arm.tau[:, ::-1], actions=commands[:, ::-1])
    ordered = flipped.in_joint_order(JOINTS)
    np.testing.assert_array_equal(ordered.actions, commands)
    wide = Trajectory(time=arm.time, joint_names=['joint2', 'joint1'], q=arm.q[:, ::-1],
                      actions=np.ones((50, 3)))
    assert wide.in_joint_order(JOINTS).actions.shape == (50, 3)


def test_identify_matches_a_flipped_bag_by_name(tmp_path):
    arm = _arm()
    bag = tmp_path / 'flipped'
    bag_io.write_joint_trajectories(bag, [_flipped(arm, extra=True)])
    fit, held = load_samples([str(bag)], load_urdf(URDF))
    assert fit[0].shape[1] == 2 and held is not None
    np.testing.assert_allclose(fit[3], arm.tau[:fit[3].shape[0]], atol=1e-9)


def test_replay_puts_the_stream_in_the_urdf_order(tmp_path, capsys):
    arm = _arm(600)
    bag = tmp_path / 'flipped'
    bag_io.write_joint_trajectories(bag, [_flipped(arm)])
    stream = replay.read_joint_stream(bag)
    assert stream.joint_names == ['joint2', 'joint1']
    ordered = _in_urdf_order(stream, load_urdf(URDF))
    assert ordered.joint_names == JOINTS
    np.testing.assert_allclose(ordered.tau, arm.tau, atol=1e-12)
    other = _in_urdf_order(stream, load_urdf(resource('urdf/panda.urdf')))   # another robot
    assert other is stream and 'URDF models are skipped' in capsys.readouterr().out


def test_every_model_with_a_urdf_names_its_joints():
    assert urdf_robot('lstm', {}) is None
    for model_type in ('rigid_body', 'ac_rkn_inverse', 'previous_value'):
        assert urdf_robot(model_type, {'urdf': URDF}).joint_names == tuple(JOINTS)


def test_bags_take_column_slices_and_a_failed_write_leaves_no_bag(tmp_path):
    arm = _arm(100)
    columns = Trajectory(time=arm.time, joint_names=['joint2', 'joint1'],
                         q=np.asfortranarray(arm.q), tau=arm.tau[:, [1, 0]])
    assert bag_io.write_joint_trajectories(tmp_path / 'ok', [columns]) == 100
    bad = Trajectory(time=arm.time, joint_names=list(JOINTS), q=arm.q)
    with pytest.raises(ValueError, match='no actions'):   # fails after the bag was created
        bag_io.write_joint_trajectories(tmp_path / 'bad', [columns, bad],
                                        command_topic='/commands')
    assert not (tmp_path / 'bad').exists()
