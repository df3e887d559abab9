"""dynamics_learner with config/learner.yaml: every model type starts; mismatches say why."""
import time

import numpy as np
import pytest
from robot_dynamics_learning.nodes.conversions import joint_state_msg
from ros_util import ROOT, start_node, stop_node, subscribed, TestNode, wait_for
from sensor_msgs.msg import JointState

pytestmark = pytest.mark.ros

PARAMS = ROOT / 'config' / 'learner.yaml'
KINOVA_JOINTS = [f'joint_{i}' for i in range(1, 8)]
PANDA_JOINTS = [f'panda_joint{i}' for i in range(1, 8)]


@pytest.mark.parametrize('model', ['lstm', 'ac_rkn_inverse', 'rigid_body'])
def test_learner_yaml_runs_every_model(model, tmp_path):
    """The README's params file with any model: it starts and predicts (Panda joints)."""
    log = tmp_path / 'learner.log'
    node = start_node('dynamics_learner', params_file=PARAMS,
                      params={'model': model, 'trainer_process': False},
                      log_path=log)
    try:
        with TestNode(f'arm_{model}') as arm:
            predictions = []
            arm.node.create_subscription(JointState, '/dynamics_learner/predicted_torques',
                                         predictions.append, 100)
            publisher = arm.node.create_publisher(JointState, '/joint_states', 10)
            assert subscribed(publisher, timeout=60), \
                log.read_text()
            sent = [0]

            def stream() -> bool:
                """Publish one more state, as a robot streams; true once one was predicted."""
                k = sent[0]
                q = 0.1 * np.sin(k * 0.01 + np.arange(7))
                publisher.publish(joint_state_msg(10**9 + k * 10**6, PANDA_JOINTS, q,
                                                  np.cos(q), np.ones(7)))
                sent[0] += 1
                time.sleep(0.005)
                return len(predictions) > 0
            # The subscription matches before the managed node is active (it configures the
            # model first, slower with a URDF); states sent until then are dropped, counted.
            assert wait_for(stream, 60, period=0.0), log.read_text()
        assert node.poll() is None, log.read_text()
    finally:
        assert stop_node(node) == 0, log.read_text()


def test_model_config_that_does_not_fit_the_model_fails_at_start(tmp_path):
    log = tmp_path / 'learner.log'
    node = start_node('dynamics_learner', params={
        'model': 'ac_rkn_inverse', 'model_config': "'{\"hidden_size\": 32}'"}, log_path=log)
    assert node.wait(timeout=60) != 0
    text = log.read_text()
    assert "model_config does not fit model 'ac_rkn_inverse'" in text
    assert "unknown key(s) ['hidden_size']" in text


def test_a_model_setting_the_model_lacks_fails_at_start_naming_its_settings(tmp_path):
    log = tmp_path / 'learner.log'
    node = start_node('dynamics_learner', params={
        'model': 'ac_rkn_inverse', 'model_config.hidden_size': 32}, log_path=log)
    assert node.wait(timeout=60) == 2
    text = log.read_text()
    assert 'model_config.hidden_size is not a setting of' in text and 'its settings:' in text


def test_joints_not_in_the_urdf_are_refused_in_one_line_naming_both(tmp_path):
    """The default hybrid (Panda URDF) hearing a Kinova arm says why, once."""
    log = tmp_path / 'learner.log'
    node = start_node('dynamics_learner', params_file=PARAMS,
                      params={'trainer_process': False}, log_path=log)
    try:
        with TestNode('kinova_arm') as arm:
            publisher = arm.node.create_publisher(JointState, '/joint_states', 10)
            assert subscribed(publisher, timeout=60), \
                log.read_text()
            sent = [0]

            def refused() -> bool:
                """Publish one more Kinova state; true once the learner has said why."""
                publisher.publish(joint_state_msg(10**9 + sent[0] * 10**6, KINOVA_JOINTS,
                                                  np.zeros(7), np.zeros(7), np.zeros(7)))
                sent[0] += 1
                time.sleep(0.01)
                return 'do not match the URDF joints' in log.read_text()
            assert wait_for(refused, 20, period=0.0), log.read_text()
            for _ in range(20):   # more of the same: the reason is not said again
                refused()
    finally:
        stop_node(node)
    lines = [line for line in log.read_text().splitlines()
             if 'do not match the URDF joints' in line]
    assert len(lines) == 1
    assert 'joint_1' in lines[0] and 'panda_joint1' in lines[0] and "'hybrid'" in lines[0]
