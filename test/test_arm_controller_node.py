"""arm_controller over real DDS with mujoco_arm: tracks, hot-reloads, brakes when states stop."""
from diagnostic_msgs.msg import DiagnosticArray
import pytest
from robot_dynamics_learning.learning.checkpoint import CheckpointDirectory
from robot_dynamics_learning.models.registry import build_model
from robot_dynamics_learning.nodes.conversions import joint_state_msg
from robot_dynamics_learning.resources import resource
from ros_util import start_node, stop_node, TestNode, wait_for
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

pytestmark = pytest.mark.ros

JOINTS = [f'panda_joint{i}' for i in range(1, 8)]


def controller_values(diagnostics: list) -> dict:
    for array in reversed(diagnostics):
        status = array.status[0]
        if status.name.endswith('arm_controller'):
            return {kv.key: kv.value for kv in status.values}
    return {}


def test_controller_tracks_mujoco_reloads_checkpoints_and_brakes(tmp_path):
    folder = tmp_path / 'checkpoints'
    logs = {name: tmp_path / f'{name}.log' for name in ('sim', 'controller')}
    with TestNode() as probe:
        diagnostics, commands = [], []
        probe.node.create_subscription(DiagnosticArray, '/diagnostics', diagnostics.append, 100)
        probe.node.create_subscription(Float64MultiArray, '/effort_controller/commands',
                                       commands.append, 10000)
        states = probe.node.create_publisher(JointState, '/joint_states', 10)
        sim = start_node('mujoco_arm', {'timeout_action': 'zero'}, log_path=logs['sim'])
        controller = start_node('arm_controller', {
            'feedforward': 'learned', 'checkpoint_dir': str(folder), 'poll_period_s': 0.2,
            'approach_s': 1.0}, log_path=logs['controller'])
        try:
            def tracking() -> bool:
                values = controller_values(diagnostics)
                return int(values.get('commands', 0)) > 2000 and \
                    float(values['tracking_rmse_rad']) < 0.02
            assert wait_for(tracking, 60), logs['controller'].read_text() + str(
                controller_values(diagnostics))
            before = int(controller_values(diagnostics)['urdf_fallback_calls'])
            assert before > 1000   # no checkpoint yet: the URDF model stands in
            model = build_model('rigid_body', {'urdf': str(resource('urdf/panda.urdf'))},
                                21, 7, 7)
            CheckpointDirectory(folder).save(model, JOINTS)
            assert wait_for(lambda: controller_values(diagnostics).get('loads') == '1', 20)
            assert wait_for(lambda: float(controller_values(diagnostics)['tracking_rmse_rad'])
                            < 0.02, 10)
            values = controller_values(diagnostics)
            assert int(values['urdf_fallback_calls']) < before + 1500
            # On a loaded machine a stall can brake now and then; stopping the sim must too.
            stop_node(sim)
            assert wait_for(lambda: diagnostics[-1].status[0].message == 'braking'
                            and int(controller_values(diagnostics)['brake_stale'])
                            > int(values['brake_stale']), 10), logs['controller'].read_text()
            assert wait_for(lambda: list(commands[-1].data) == [0.0] * 7, 5)
            bad = joint_state_msg(1, JOINTS, [float('nan')] * 7, [0.0] * 7)
            states.publish(bad)
            assert wait_for(lambda: controller_values(diagnostics).get(
                'messages_non_finite') == '1', 10), controller_values(diagnostics)
        finally:
            stop_node(sim)
            stop_node(controller)


def test_controller_on_sim_time_follows_the_simulators_clock(tmp_path):
    """The launch file's graph: mujoco_arm is the clock source, the controller uses_sim_time."""
    logs = {name: tmp_path / f'{name}.log' for name in ('sim', 'controller')}
    with TestNode() as probe:
        diagnostics = []
        probe.node.create_subscription(DiagnosticArray, '/diagnostics', diagnostics.append, 100)
        sim = start_node('mujoco_arm', {'publish_clock': True}, log_path=logs['sim'])
        controller = start_node('arm_controller', {'feedforward': 'urdf', 'approach_s': 1.0,
                                                   'use_sim_time': True},
                                log_path=logs['controller'])
        try:
            def tracking() -> bool:
                values = controller_values(diagnostics)
                return int(values.get('commands', 0)) > 2000 and \
                    float(values['tracking_rmse_rad']) < 0.02
            assert wait_for(tracking, 60), logs['controller'].read_text()
            # Diagnostics are stamped on the node clock: simulated seconds, not 1.8e9.
            stamps = [d.header.stamp.sec for d in diagnostics
                      if d.status[0].name.endswith('arm_controller')]
            assert 0 < stamps[-1] < 1000
        finally:
            stop_node(controller)
            stop_node(sim)
