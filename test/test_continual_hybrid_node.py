"""dynamics_learner with the hybrid over real DDS: URDF joint order, physics from the start."""
import numpy as np
import pytest
from robot_dynamics_learning.dynamics import load_urdf
from robot_dynamics_learning.models.hybrid import FastRegressor
from robot_dynamics_learning.nodes.conversions import joint_state_msg
from robot_dynamics_learning.resources import resource
from ros_util import start_node, stop_node, TestNode, wait_for
from test_continual_nodes import Probe

pytestmark = pytest.mark.ros

PANDA = resource('urdf/panda.urdf')
LEARNER = {'model': 'hybrid', 'window': 8, 'batch_size': 16, 'warmup_samples': 100,
           'updates_per_sample': 0.1, 'accel_window': 5, 'diagnostics_period_s': 0.3,
           'recent_capacity': 2000, 'reservoir_windows': 50,
           'model_config.hidden_size': 8, 'model_config.payload_start_after': 50}


def test_hybrid_learner_reorders_joints_to_the_urdf_and_predicts_with_physics(tmp_path):
    robot = load_urdf(PANDA)
    names = list(robot.joint_names)
    fast = FastRegressor(robot, PANDA)
    shuffled = names[::-1]                      # messages in another joint order
    learner = start_node('dynamics_learner', LEARNER, log_path=tmp_path / 'learner.log')
    try:
        with TestNode('hybrid_probe') as node:
            probe = Probe(node, 'dynamics_learner')
            assert probe.wait_ready(), (tmp_path / 'learner.log').read_text()
            truth, predicted = [], []
            for k in range(300):
                t = k * 1e-3
                q = 0.3 * np.sin(t + np.arange(7))
                qd = 0.3 * np.cos(t + np.arange(7))
                qdd = -q
                tau = fast(q, qd, qdd) @ fast.phi
                order = [names.index(n) for n in shuffled]
                probe.send(joint_state_msg(10**9 + k * 10**6, shuffled, q[order], qd[order],
                                           tau[order]), expect_prediction=k >= 4)
                truth.append(tau)
            bad = joint_state_msg(10**9 + 400 * 10**6, ['j1', 'j2'], [0.0, 0.0], [0.0, 0.0],
                                  [0.0, 0.0])
            probe.send(bad, expect_prediction=False)
            assert wait_for(lambda: probe.diag('messages_missing_joint') >= 1, 5)
            assert probe.diag('messages_accepted') == 300
            assert 'payload_mass_change_kg' in probe.diagnostics
        assert len(probe.predictions) == 296
        assert all(list(msg.name) == names for msg in probe.predictions)
        predicted = np.array([msg.effort for msg in probe.predictions])
        error = np.abs(predicted - np.array(truth[4:])).mean()
        # The rigid body alone explains these torques: the hybrid is right from the first
        # message (an untrained network alone would be off by the torque itself).
        assert error < 0.1 * np.abs(np.array(truth)).mean()
    finally:
        stop_node(learner)
