"""Recorded joint velocities that do not belong to the positions: deg/s, sign, swapped."""
import dataclasses
import json
import logging
from pathlib import Path

import numpy as np
import pytest
from robot_dynamics_learning import cli
from robot_dynamics_learning.data import datasets
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.data.velocity_check import check_velocities, velocity_report
from robot_dynamics_learning.dynamics import load_urdf, rnea
from robot_dynamics_learning.learning.identify_cli import load_samples
from robot_dynamics_learning.resources import resource
import torch

FIXTURES = Path(__file__).parent / 'fixtures' / 'data'
URDF = str(resource('urdf/planar_2link.urdf'))
WINDOW_S = 0.031
TRAINING = 'training: {max_epochs: 2, progress: false}\ndata: {window: 1}\n'
CONFIGS = {'rigid_body': f'model_type: rigid_body\nmodel: {{urdf: {URDF}}}\n{TRAINING}',
           'ffnn': f'model_type: ffnn\nmodel: {{hidden: [8]}}\n{TRAINING}'}


@pytest.fixture(scope='module')
def kinova():
    train, test = datasets.load_kinova_split(root=FIXTURES)
    return train + test


def _arm(rows: int = 1200, dt: float = 0.005) -> Trajectory:
    """Return a smooth 2-link motion with its measured-like qd and exact RNEA torques."""
    time = np.arange(rows) * dt
    speed = np.array([1.3, 2.1])
    phase = speed * time[:, None] + np.array([0.0, 0.7])
    q, qd, qdd = 0.8 * np.sin(phase), 0.8 * speed * np.cos(phase), -speed ** 2 * np.sin(phase)
    tau = rnea(load_urdf(URDF), *(torch.as_tensor(a) for a in (q, qd, 0.8 * qdd))).numpy()
    return Trajectory(time=time, joint_names=['joint1', 'joint2'], q=q, qd=qd, tau=tau)


def _csv(path: Path, arm: Trajectory, qd_scale: float) -> str:
    """Write time, q_*, qd_* (times `qd_scale` on joint2) and tau_* as CSV; return the path."""
    qd = arm.qd * np.array([1.0, qd_scale])
    names = ['time', 'q_joint1', 'q_joint2', 'qd_joint1', 'qd_joint2', 'tau_joint1',
             'tau_joint2']
    rows = np.column_stack([arm.time, arm.q, qd, arm.tau])
    path.write_text('\n'.join([','.join(names)] + [','.join(repr(float(v)) for v in row)
                                                   for row in rows]) + '\n')
    return str(path)


def test_real_recordings_pass_and_their_velocities_in_deg_s_do_not(kinova):
    report = velocity_report(kinova, WINDOW_S)
    assert len(report) == 7 and all(j.problem() is None for j in report)
    assert all(0.98 < j.factor < 1.02 and j.correlation > 0.99 for j in report)
    in_degrees = [dataclasses.replace(t, qd=np.degrees(t.qd)) for t in kinova]
    with pytest.raises(ValueError, match=r'joint_1: qd = 5\d\.\d x dq/dt .*deg/s beside q in rad'):
        check_velocities(in_degrees, WINDOW_S, 'kinova', refuse_certain=True)


def test_other_sign_and_other_joints_are_named(kinova, caplog):
    flipped = [dataclasses.replace(t, qd=-t.qd) for t in kinova]
    with pytest.raises(ValueError, match='other sign convention'):
        check_velocities(flipped, WINDOW_S, 'kinova', refuse_certain=True)
    rotated = [dataclasses.replace(t, qd=np.roll(t.qd, 1, axis=1)) for t in kinova]
    with caplog.at_level(logging.WARNING):   # the joints move together: own fits reach 0.99
        problems = check_velocities(rotated, WINDOW_S, 'kinova', refuse_certain=False)
    assert [p.split(' (')[0] for p in problems] == [
        f'joint_{j}: qd follows the dq/dt of joint_{(j - 2) % 7 + 1}, not its own'
        for j in range(1, 8)]
    assert 'swapped columns?' in caplog.text
    with pytest.raises(ValueError, match='joint_3: qd follows the dq/dt of joint_2'):
        check_velocities(rotated, WINDOW_S, 'kinova', refuse_certain=True)
    noise = np.random.default_rng(0)
    unrelated = [dataclasses.replace(t, qd=noise.normal(size=t.qd.shape)) for t in kinova]
    assert 'does not follow dq/dt' in check_velocities(unrelated, WINDOW_S, 'kinova',
                                                       refuse_certain=True)[0]
    still = [dataclasses.replace(t, q=np.zeros_like(t.q), qd=np.degrees(t.qd)) for t in kinova]
    assert velocity_report(still, WINDOW_S) == []   # no motion: nothing to judge


@pytest.mark.parametrize('model, code', [('rigid_body', 2), ('ffnn', 0)])
def test_rdl_train_refuses_deg_s_for_a_urdf_model_warns_otherwise(tmp_path, capsys, model,
                                                                  code):
    data = _csv(tmp_path / 'arm.csv', _arm(), np.degrees(1.0))
    config = tmp_path / 'model.yaml'
    config.write_text(CONFIGS[model])
    assert cli.main(['train', '--config', str(config), '--out', str(tmp_path / 'run'),
                     '--data', data]) == code
    if code:
        assert 'joint2: qd = 57.3 x dq/dt' in capsys.readouterr().err
    else:
        summary = json.loads((tmp_path / 'run' / 'train_summary.json').read_text())
        assert summary['velocity_problems'][0].startswith('joint2: qd = 57.3 x dq/dt')


def test_identify_refuses_a_velocity_in_another_unit(tmp_path):
    data = _csv(tmp_path / 'arm.csv', _arm(), -np.degrees(1.0))
    with pytest.raises(ValueError, match='deg/s beside q in rad, with the other sign'):
        load_samples([data], load_urdf(URDF))
    good = _csv(tmp_path / 'good.csv', _arm(), 1.0)
    assert load_samples([good], load_urdf(URDF))[0][1].shape[1] == 2


def test_a_velocity_filled_with_zeros_while_q_moves_is_named(kinova):
    zeros = [dataclasses.replace(t, qd=np.zeros_like(t.qd)) for t in kinova]
    with pytest.raises(ValueError, match=r'joint_1: qd is 0 in every sample while q moves'):
        check_velocities(zeros, WINDOW_S, 'kinova', refuse_certain=True)
    still = [dataclasses.replace(t, q=np.zeros_like(t.q), qd=np.zeros_like(t.qd))
             for t in kinova]
    assert velocity_report(still, WINDOW_S) == []   # a robot at rest: nothing to judge
