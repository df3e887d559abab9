"""Recorded torques of the other sign or unit than the URDF's: refused for URDF models."""
import dataclasses
from pathlib import Path

import numpy as np
import pytest
from robot_dynamics_learning import cli
from robot_dynamics_learning.data import datasets
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.dynamics import load_urdf
from robot_dynamics_learning.learning.identify_cli import load_samples
from robot_dynamics_learning.learning.urdf_torques import check_torques, torque_report
from robot_dynamics_learning.resources import resource
from test_velocity_check import _arm, _csv, CONFIGS, URDF

FIXTURES = Path(__file__).parent / 'fixtures' / 'data'


@pytest.fixture(scope='module')
def kinova():
    train, test = datasets.load_kinova_split(root=FIXTURES)
    return load_urdf(resource('urdf/kinova_gen3.urdf')), train + test


def test_real_torques_pass_and_flipped_or_milli_newton_metres_do_not(kinova):
    robot, recordings = kinova
    report = torque_report(robot, recordings)
    assert all(j.problem() is None for j in report)
    judged = [j for j in report if abs(j.correlation) > 0.8]
    assert len(judged) >= 3 and all(0.5 < j.factor < 5 for j in judged)
    check_torques(robot, recordings, 'kinova')
    for scale, cause in ((-1.0, 'other sign convention'), (1000.0, r'another unit \(mN m')):
        scaled = [dataclasses.replace(t, tau=scale * t.tau) for t in recordings]
        with pytest.raises(ValueError, match=f'joint_2: tau = .* x the URDF torque .*{cause}'):
            check_torques(robot, scaled, 'kinova')
    one = np.where(np.arange(7) == 3, -1.0, 1.0)   # joint_4 alone wired the other way
    with pytest.raises(ValueError, match=r'kinova: .* joint_4: tau = .* other sign') as error:
        check_torques(robot, [dataclasses.replace(t, tau=one * t.tau) for t in recordings],
                      'kinova')
    assert 'joint_2' not in str(error.value)


def test_rdl_train_and_identify_refuse_flipped_torques(tmp_path, capsys):
    flipped = _arm()
    flipped.tau = -flipped.tau
    data = _csv(tmp_path / 'arm.csv', flipped, 1.0)
    config = tmp_path / 'rigid_body.yaml'
    config.write_text(CONFIGS['rigid_body'])
    assert cli.main(['train', '--config', str(config), '--out', str(tmp_path / 'run'),
                     '--data', data]) == 2
    assert 'other sign convention than the URDF' in capsys.readouterr().err
    with pytest.raises(ValueError, match='recorded torques do not match the URDF'):
        load_samples([data], load_urdf(URDF))
    config.write_text(CONFIGS['ffnn'])   # a learned model takes any sign
    assert cli.main(['train', '--config', str(config), '--out', str(tmp_path / 'ffnn'),
                     '--data', data]) == 0


TURNTABLE = """<robot name="turntable"><link name="base"/>
<link name="disc"><inertial><origin xyz="0 0 0"/><mass value="2"/>
<inertia ixx="0.01" iyy="0.01" izz="0.02" ixy="0" ixz="0" iyz="0"/></inertial></link>
<joint name="spin" type="revolute"><parent link="base"/><child link="disc"/><axis xyz="0 0 1"/>
<limit lower="-3" upper="3" effort="10" velocity="5"/></joint></robot>"""


def test_rotor_inertia_and_friction_the_urdf_leaves_out_are_no_unit_error():
    """
    A geared joint's rotor inertia and friction, which a URDF leaves out, are no unit error.

    A turntable whose motor's rotor inertia is 15 times the disc's read tau = 16 x the URDF
    torque (correlation 0.99: "another unit"; the MuJoCo Panda's wrist, armature 0.03, read
    6-7). Beside its own terms nothing of the URDF torque is left to judge. On the 2-link
    arm with a geared first joint, flipped or x1000 torques are still refused, and so are
    the flipped turntable and the geared joint flipped alone, where the rotor inertia
    dominates: inertia and friction never have a negative sign.
    """
    arm = _arm(1200, 0.002)
    qdd = np.gradient(arm.qd, arm.time, axis=0)[:, :1]
    turntable = Trajectory(time=arm.time, joint_names=['spin'], q=arm.q[:, :1],
                           qd=arm.qd[:, :1], qdd=qdd,
                           tau=0.32 * qdd + 0.01 * arm.qd[:, :1] + 0.02 * np.sign(arm.qd[:, :1]))
    spin = torque_report(load_urdf(TURNTABLE), [turntable])[0]
    assert spin.factor > 10 and spin.correlation > 0.8 and spin.problem() is None
    check_torques(load_urdf(TURNTABLE), [turntable], 'turntable')
    with pytest.raises(ValueError, match='spin: tau = .* other sign convention'):
        check_torques(load_urdf(TURNTABLE), [dataclasses.replace(turntable, tau=-turntable.tau)],
                      'turntable')
    robot = load_urdf(URDF)
    qdd = np.gradient(arm.qd, arm.time, axis=0)
    geared = dataclasses.replace(arm, qdd=qdd, tau=arm.tau + np.array([1.0, 0.0]) * (
        10.0 * qdd + 0.3 * arm.qd + 0.5 * np.sign(arm.qd)))
    joint = torque_report(robot, [geared])[0]
    assert 0.95 < joint.own_factor < 1.05 and joint.problem() is None
    check_torques(robot, [geared], 'geared')
    for scale, cause in ((-1.0, 'other sign convention'), (1000.0, 'another unit')):
        with pytest.raises(ValueError, match=f'joint2: tau = .*{cause}'):
            check_torques(robot, [dataclasses.replace(geared, tau=scale * geared.tau)],
                          'geared')
    with pytest.raises(ValueError, match='joint1: tau = .* other sign convention') as error:
        check_torques(robot, [dataclasses.replace(geared, tau=np.array([-1.0, 1.0]) * geared.tau)],
                      'geared')
    assert 'joint2' not in str(error.value)
