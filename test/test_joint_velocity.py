"""Drivers that publish positions only: velocities differentiated from them, offline and live."""
import dataclasses
import json
import time

import numpy as np
import pytest
from robot_dynamics_learning.cli import main as rdl
from robot_dynamics_learning.data import bag_io
from robot_dynamics_learning.data.joint_velocity import VelocitySource
from robot_dynamics_learning.learning import replay
from robot_dynamics_learning.learning.learner_params import DynamicsLearnerConfig
from robot_dynamics_learning.models.registry import build_model
from robot_dynamics_learning.nodes.conversions import joint_state_msg
from robot_dynamics_learning.resources import resource
from ros_util import (learner_and_arm, LEARNER_PACE_S, start_node, stop_node, TestNode,
                      wait_for, watch_diagnostics, watch_predictions)
from test_velocity_check import _arm, URDF
import torch

WINDOW = 15


def _quadratic(t: float) -> np.ndarray:
    return np.array([1.0 + 2.0 * t - 3.0 * t ** 2, -0.5 * t ** 2])


def _velocity(t: float) -> np.ndarray:
    return np.array([2.0 - 6.0 * t, -t])


def test_auto_passes_measured_velocities_through_and_derives_where_a_message_has_none():
    source = VelocitySource(2, 'auto', WINDOW)
    measured = np.array([0.3, 0.4])
    assert source.velocity(0.0, _quadratic(0.0), measured) is measured
    assert not source.deriving
    times = 0.01 * np.arange(1, 40)
    got = [source.velocity(t, _quadratic(t), None) for t in times]
    assert got[:WINDOW - 1] == [None] * (WINDOW - 1)   # the fit warms up
    np.testing.assert_allclose(np.stack(got[WINDOW - 1:]),
                               np.stack([_velocity(t) for t in times[WINDOW - 1:]]), atol=1e-9)
    # Once deriving, a message that carries velocity still uses its own.
    assert source.velocity(0.40, _quadratic(0.40), measured) is measured
    assert source.diagnostics() == {'velocity_derived': len(times) - WINDOW + 1,
                                    'velocity_warming': WINDOW - 1}


def test_positions_ignores_the_measured_velocity_and_a_reset_warms_up_again():
    source = VelocitySource(2, 'positions', WINDOW)
    zeros = np.zeros(2)   # a driver that fills velocity with zeros
    times = 0.01 * np.arange(30)
    last = [source.velocity(t, _quadratic(t), zeros) for t in times][-1]
    np.testing.assert_allclose(last, _velocity(times[-1]), atol=1e-9)
    source.reset()   # a time reset: the positions before it must not enter the fit
    assert source.velocity(0.0, _quadratic(0.0), zeros) is None


def test_measured_keeps_the_old_contract_and_bad_sources_are_refused():
    source = VelocitySource(2, 'measured')
    assert source.velocity(0.0, _quadratic(0.0), None) is None and not source.deriving
    with pytest.raises(ValueError, match=r"velocity_source must be one of .*'auto'.*got 'pos'"):
        DynamicsLearnerConfig(velocity_source='pos')


@pytest.fixture(scope='module')
def kinova_bags(tmp_path_factory):
    """Write the Kinova recording (real, 1 kHz) as a bag with velocities and one without."""
    trajectory = bag_io.load_dataset('kinova', 'RunTrajectory1.csv')[0]
    folder = tmp_path_factory.mktemp('velocity')
    bag_io.write_joint_trajectories(folder / 'full', [trajectory], 'sqlite3')
    bag_io.write_joint_trajectories(folder / 'positions',
                                    [dataclasses.replace(trajectory, qd=None, qdd=None)],
                                    'sqlite3')
    return folder / 'full', folder / 'positions', trajectory


def test_replay_of_a_position_only_bag_differentiates_the_positions(kinova_bags, tmp_path):
    full, positions, trajectory = kinova_bags
    measured = replay.read_joint_stream(full)
    derived = replay.read_joint_stream(positions)
    assert (measured.velocity_source, derived.velocity_source) == ('measured', 'positions')
    assert len(derived) == len(measured) - (WINDOW - 1)   # the warm-up, as the node skips it
    np.testing.assert_array_equal(derived.q, measured.q[WINDOW - 1:])
    # The recorded qd against the causal fit of the recorded q, relative to its spread:
    # 0.14-0.17 here (joint_1, which hardly moves in these 1.9 s: 0.26). The encoders'
    # quantisation is most of it: the recorded qd is 0.06-0.14 from a zero-phase fit.
    error = derived.qd - measured.qd[WINDOW - 1:]
    relative = np.sqrt((error ** 2).mean(0) / measured.qd.var(0))
    assert np.all(relative[1:] < 0.2) and relative[0] < 0.35, relative
    with pytest.raises(ValueError, match='velocity is empty .*velocity_source auto or positions'):
        replay.read_joint_stream(positions, velocity_source='measured')
    out = tmp_path / 'report'
    assert rdl(['replay', str(positions), '--models', 'ffnn', '--out', str(out)]) == 0
    assert json.loads((out / 'metrics.json').read_text())['velocity_source'] == 'positions'
    assert 'velocity differentiated from the positions' in (out / 'report.md').read_text()


@pytest.mark.ros
def test_dynamics_learner_learns_from_a_driver_that_publishes_positions_only(tmp_path):
    log = tmp_path / 'learner.log'
    arm = _arm(2300, dt=0.002)
    torques = {}
    with learner_and_arm(log, {'model': 'rigid_body', 'urdf': URDF},
                         'position_only_arm') as (probe, publisher):
        values = watch_diagnostics(probe, 'dynamics_learner')
        predictions = watch_predictions(probe)
        for t, q, tau in zip(arm.time, arm.q, arm.tau):
            stamp = 10**9 + int(round(t * 1e9))
            torques[stamp] = tau
            publisher.publish(joint_state_msg(stamp, ['joint1', 'joint2'], q, None, tau))
            time.sleep(LEARNER_PACE_S)
        assert wait_for(lambda: values.get('data_audit') == 'passed', 20), \
            (values, log.read_text())
        assert wait_for(lambda: int(values.get('velocity_derived', 0)) > 2000, 10), values
    assert 'missing_field' not in values and 'carries no velocity' in log.read_text()
    # The node's predictions from differentiated velocities against the same model given the
    # exact velocities and accelerations (the URDF's damping and friction included).
    model = build_model('rigid_body', {'urdf': URDF}, 6, 2, 2)
    qdd = np.gradient(arm.qd, arm.time, axis=0)
    exact = model.step(None, torch.as_tensor(np.hstack([arm.q, arm.qd, qdd]),
                                             dtype=torch.float32))[0].numpy()
    index = {stamp: i for i, stamp in enumerate(torques)}
    late = [(np.array(p), exact[index[s]]) for s, p in predictions if s in index][-500:]
    assert len(late) == 500
    error = np.array([p - e for p, e in late])
    spread = np.array([e for _, e in late]).std(0)
    assert np.all(np.sqrt((error ** 2).mean(0)) < 0.02 * spread), (error.std(0), spread)


@pytest.mark.ros
def test_arm_controller_tracks_with_velocities_differentiated_from_positions(tmp_path):
    logs = {name: tmp_path / f'{name}.log' for name in ('sim', 'controller')}
    with TestNode() as probe:
        values = watch_diagnostics(probe.node, 'arm_controller')
        sim = start_node('mujoco_arm', {}, log_path=logs['sim'])
        controller = start_node('arm_controller', {
            'feedforward': 'urdf', 'approach_s': 1.0, 'velocity_source': 'positions',
            'urdf': str(resource('urdf/panda.urdf'))}, log_path=logs['controller'])
        try:
            assert wait_for(lambda: int(values.get('commands', 0)) > 2000
                            and float(values['tracking_rmse_rad']) < 0.02, 60), \
                (values, logs['controller'].read_text())
            assert int(values['velocity_derived']) > 2000
        finally:
            stop_node(controller)
            stop_node(sim)
