"""Joint positions in degrees or beyond the URDF's limits, caught before a URDF model uses them."""
import json
import logging
from pathlib import Path

import numpy as np
import pytest
from robot_dynamics_learning import cli
from robot_dynamics_learning.data import bag_io, datasets
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.dynamics import load_urdf, rnea
from robot_dynamics_learning.learning.identify_cli import load_samples
from robot_dynamics_learning.learning.urdf_range import (check_urdf_range, DEGREES_PER_RADIAN,
                                                         joint_ranges)
from robot_dynamics_learning.resources import resource
from robot_dynamics_learning.sim.trajectories import JointReference, ReferenceConfig
import torch

FIXTURES = Path(__file__).parent / 'fixtures' / 'data'
URDF = str(resource('urdf/planar_2link.urdf'))   # both joints revolute, limits +-pi
JOINTS = ['joint1', 'joint2']
TRAINING = 'training: {max_epochs: 2, progress: false}\ndata: {window: 20}\n'
RIGID_BODY = f'model_type: rigid_body\nmodel: {{urdf: {URDF}}}\n{TRAINING}'
LSTM = f'model_type: lstm\nmodel: {{hidden_size: 8}}\n{TRAINING}'


@pytest.fixture(scope='module')
def kinova():
    """Return the Kinova Gen3 URDF and the fixture recordings' q (rad), in its joint order."""
    train, test = datasets.load_kinova_split(root=FIXTURES)
    robot = load_urdf(resource('urdf/kinova_gen3.urdf'))
    assert [t.joint_names for t in train + test][0] == list(robot.joint_names)
    return robot, np.concatenate([t.q for t in train + test])


def _arm(rows: int = 1000, dt: float = 0.005, offset: float = 0.0) -> Trajectory:
    """Return a smooth motion of the 2-link arm (joint2 shifted by `offset`) with its torques."""
    time = np.arange(rows) * dt
    speed = np.array([1.3, 2.1])
    phase = speed * time[:, None] + np.array([0.0, 0.7])
    q = 0.8 * np.sin(phase) + np.array([0.0, offset])
    qd, qdd = 0.8 * speed * np.cos(phase), -0.8 * speed ** 2 * np.sin(phase)
    tau = rnea(load_urdf(URDF), *(torch.as_tensor(a) for a in (q, qd, qdd))).numpy()
    return Trajectory(time=time, joint_names=list(JOINTS), q=q, qd=qd, qdd=qdd, tau=tau)


def _csv(path: Path, arm: Trajectory, scale: float = 1.0) -> str:
    """Write time, q_<joint> (times `scale`) and tau_<joint> as a CSV file; return its path."""
    header = ['time'] + [f'q_{j}' for j in JOINTS] + [f'tau_{j}' for j in JOINTS]
    rows = np.column_stack([arm.time, arm.q * scale, arm.tau])
    path.write_text('\n'.join([','.join(header)] + [','.join(repr(float(v)) for v in row)
                                                    for row in rows]) + '\n')
    return str(path)


def _train(tmp_path: Path, config: str, name: str, data: str) -> int:
    path = tmp_path / f'{name}.yaml'
    path.write_text(config)
    return cli.main(['train', '--config', str(path), '--out', str(tmp_path / name),
                     '--data', data])


def test_kinova_recordings_pass_and_the_same_in_degrees_are_refused(kinova, caplog):
    robot, q = kinova
    with caplog.at_level(logging.WARNING):
        report = check_urdf_range(robot, q, 'kinova')
    assert not caplog.text and not report.outside()
    # Only joint_2, joint_4, joint_6 are bounded (the others continuous); widest: 67 %.
    assert [j.joint for j in report.joints] == ['joint_2', 'joint_4', 'joint_6']
    assert max(j.span_share for j in report.joints) < 0.7
    with pytest.raises(ValueError, match='look like degrees') as error:
        check_urdf_range(robot, q * DEGREES_PER_RADIAN, 'kinova')
    message = str(error.value)
    assert all(j in message for j in ('joint_2', 'joint_4', 'joint_6', '[-2.41, 2.41]'))
    assert 'radians' in message and '\n' not in message and 'joint_1' not in message


@pytest.mark.parametrize('mode', ['excitation', 'reaching', 'mixed'])
def test_panda_motions_over_the_whole_range_pass_and_in_degrees_fail(mode):
    robot = load_urdf(resource('urdf/panda.urdf'))
    lower, upper = robot.joint_limits.lower.numpy(), robot.joint_limits.upper.numpy()
    q = JointReference(lower, upper, ReferenceConfig(mode=mode, limit_fraction=1.0))(
        np.arange(0.0, 60.0, 0.005))[0]
    report = joint_ranges(robot, q)
    assert not report.degrees() and not report.outside()
    assert max(j.span_share for j in report.joints) > 0.7   # near the limits
    degrees = joint_ranges(robot, q * DEGREES_PER_RADIAN).degrees()
    assert [j.joint for j in degrees] == list(robot.joint_names)


def test_a_joint_slightly_beyond_its_limit_is_named_in_a_warning(caplog):
    robot = load_urdf(resource('urdf/panda.urdf'))
    lower, upper = robot.joint_limits.lower.numpy(), robot.joint_limits.upper.numpy()
    q = JointReference(lower, upper, ReferenceConfig(limit_fraction=0.9))(
        np.arange(0.0, 20.0, 0.005))[0]
    q[:100, 3] = upper[3] + 0.02   # an encoder a little past a soft limit: no warning
    with caplog.at_level(logging.WARNING):
        check_urdf_range(robot, q, 'arm.csv')
    assert not caplog.text
    q[:400, 3] = upper[3] + 0.4   # 10 % of the samples 0.4 rad past joint4's upper limit
    with caplog.at_level(logging.WARNING):
        report = check_urdf_range(robot, q, 'arm.csv')
    assert [j.joint for j in report.outside()] == ['panda_joint4']
    assert 'arm.csv: joint positions beyond the URDF limits' in caplog.text
    assert 'panda_joint4' in caplog.text and '[-3.072, -0.0698]' in caplog.text
    assert 'panda_joint1' not in caplog.text and '10 % of samples' in caplog.text


def test_continuous_joints_take_any_angle(kinova, caplog):
    robot, q = kinova
    turned = q.copy()
    turned[:, [0, 2, 4, 6]] = turned[:, [0, 2, 4, 6]] * 40 + 20.0   # multi-turn, large values
    with caplog.at_level(logging.WARNING):
        report = check_urdf_range(robot, turned, 'kinova')
    assert not caplog.text and not report.outside() and not report.degrees()


def test_rdl_train_and_evaluate_refuse_degrees_for_a_urdf_model_not_for_an_lstm(
        tmp_path, capsys):
    arm = _arm()
    radians = _csv(tmp_path / 'rad.csv', arm)
    degrees = _csv(tmp_path / 'deg.csv', arm, DEGREES_PER_RADIAN)
    assert _train(tmp_path, RIGID_BODY, 'rigid_rad', radians) == 0
    summary = json.loads((tmp_path / 'rigid_rad' / 'train_summary.json').read_text())
    assert summary['urdf_range']['outside'] == []
    assert summary['urdf_range']['joints']['joint2']['span_share'] < 0.3
    capsys.readouterr()
    assert _train(tmp_path, RIGID_BODY, 'rigid_deg', degrees) == 2
    error = capsys.readouterr().err
    assert error.startswith('rdl: error: ') and error.count('\n') == 1
    assert 'look like degrees' in error and 'joint1 data' in error and 'joint2 data' in error
    assert '[-3.142, 3.142] rad' in error and 'to radians' in error
    assert not (tmp_path / 'rigid_deg' / 'model.pt').exists()
    assert cli.main(['evaluate', '--checkpoint', str(tmp_path / 'rigid_rad' / 'model.pt'),
                     '--data', degrees]) == 2
    assert 'look like degrees' in capsys.readouterr().err
    # A model without a URDF learns from any unit: not checked.
    assert _train(tmp_path, LSTM, 'lstm_deg', degrees) == 0
    summary = json.loads((tmp_path / 'lstm_deg' / 'train_summary.json').read_text())
    assert 'urdf_range' not in summary


def test_rdl_train_warns_of_a_joint_beyond_its_limit_and_records_it(tmp_path, caplog):
    arm = _arm(offset=2.9)   # joint2 up to 3.7 rad, the URDF's limit is pi
    with caplog.at_level(logging.WARNING):
        assert _train(tmp_path, RIGID_BODY, 'beyond', _csv(tmp_path / 'beyond.csv', arm)) == 0
    assert 'joint2 data' in caplog.text and 'joint1 data' not in caplog.text
    summary = json.loads((tmp_path / 'beyond' / 'train_summary.json').read_text())
    assert summary['urdf_range']['outside'] == ['joint2']
    assert summary['urdf_range']['joints']['joint2']['max'] == pytest.approx(3.7, abs=1e-3)


def test_identify_refuses_degrees(tmp_path, capsys):
    degrees = _csv(tmp_path / 'deg.csv', _arm(), DEGREES_PER_RADIAN)
    with pytest.raises(ValueError, match=r'deg\.csv: joint positions look like degrees'):
        load_samples([degrees], load_urdf(URDF))
    npz = tmp_path / 'arrays.npz'   # the timeless q, qd, qdd, tau arrays are checked too
    arm = _arm()
    np.savez(npz, q=arm.q * DEGREES_PER_RADIAN, qd=arm.qd, qdd=arm.qdd, tau=arm.tau)
    assert cli.main(['identify', str(npz), '--urdf', URDF, '--out',
                     str(tmp_path / 'id.json')]) == 2
    assert 'look like degrees' in capsys.readouterr().err
    assert not (tmp_path / 'id.json').exists()


def test_replay_skips_the_urdf_models_on_degrees_and_runs_the_others(tmp_path, capsys):
    arm = _arm(600)
    bag = tmp_path / 'deg'
    bag_io.write_joint_trajectories(bag, [Trajectory(
        time=arm.time, joint_names=list(JOINTS), q=arm.q * DEGREES_PER_RADIAN,
        qd=arm.qd * DEGREES_PER_RADIAN, tau=arm.tau)])
    out = tmp_path / 'report'
    assert cli.main(['replay', str(bag), '--models', 'ffnn,hybrid', '--urdf', URDF,
                     '--out', str(out)]) == 0
    metrics = json.loads((out / 'metrics.json').read_text())
    assert set(metrics['skipped']) == {'hybrid', 'rigid_body'}
    assert all('look like degrees' in reason for reason in metrics['skipped'].values())
    assert 'ffnn' in metrics['models']
    assert 'skipped hybrid: ' in capsys.readouterr().out
