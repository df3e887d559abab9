"""mujoco_arm over real DDS: the effort-controller contract, refusals counted, sim time."""
import numpy as np
import pytest
from ros_util import start_node, stop_node, subscribed, TestNode, wait_for
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64, Float64MultiArray

pytestmark = pytest.mark.ros

JOINTS = [f'panda_joint{i}' for i in range(1, 8)]


def stamp_ns(msg) -> int:
    return msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec


def diagnostics_values(messages) -> dict:
    return {kv.key: kv.value for kv in messages[-1].status[0].values}


def test_publishes_applied_torque_and_counts_clipped_and_refused_commands(tmp_path):
    from diagnostic_msgs.msg import DiagnosticArray
    log = tmp_path / 'mujoco_arm.log'
    with TestNode() as probe:
        states, diagnostics = [], []
        probe.node.create_subscription(JointState, '/joint_states', states.append, 10000)
        probe.node.create_subscription(DiagnosticArray, '/diagnostics', diagnostics.append, 10)
        commands = probe.node.create_publisher(Float64MultiArray, '/effort_controller/commands',
                                               10)
        payload = probe.node.create_publisher(Float64, '/mujoco_arm/payload_mass', 10)
        process = start_node('mujoco_arm', {'command_timeout_s': 0.5,
                                            'timeout_action': 'zero'}, log_path=log)
        try:
            assert wait_for(lambda: len(states) > 100, 60), log.read_text()
            assert subscribed(commands, timeout=10)
            commands.publish(Float64MultiArray(data=[100.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]))
            commands.publish(Float64MultiArray(data=[float('nan')] * 7))
            commands.publish(Float64MultiArray(data=[1.0] * 3))
            assert wait_for(lambda: any(m.effort[0] == 87.0 for m in states[-50:]), 10)
            assert wait_for(lambda: diagnostics and diagnostics_values(diagnostics).get(
                'rejected_size') == '1', 10), log.read_text()
            assert wait_for(lambda: states[-1].effort[0] == 0.0, 10)   # the command expired
            payload.publish(Float64(data=float('nan')))
            payload.publish(Float64(data=2.0))
            assert wait_for(lambda: diagnostics_values(diagnostics).get('payload_kg') == '2.0',
                            10), log.read_text()
        finally:
            stop_node(process)
    values = diagnostics_values(diagnostics)
    assert (values['commands'], values['clipped'], values['rejected_non_finite']) == \
        ('1', '1', '1')
    assert float(values['publish_late_ms_p99']) >= 0.0
    assert 'ignored payload mass nan' in log.read_text()
    held = [m for m in states if m.effort[0] == 87.0]
    assert list(held[0].effort) == [87.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    # Held for command_timeout_s (0.5 s at 1 kHz: about 500 states), then zero torque again.
    assert 300 < len(held) <= 501 and list(states[-1].effort) == [0.0] * 7
    message = states[-1]
    assert list(message.name) == JOINTS
    steps = np.diff([stamp_ns(m) for m in states])
    assert np.all(steps > 0) and np.all(steps % 1_000_000 == 0)   # the 1 ms simulation grid


def test_sim_time_publishes_clock_matching_the_stamps(tmp_path):
    log = tmp_path / 'mujoco_arm.log'
    with TestNode() as probe:
        states, clocks = [], []
        probe.node.create_subscription(JointState, '/joint_states', states.append, 10000)
        probe.node.create_subscription(Clock, '/clock', clocks.append, 10000)
        process = start_node('mujoco_arm', {'publish_clock': True, 'real_time_factor': 1.0,
                                            'duration_s': 4.0}, log_path=log)
        try:
            assert wait_for(lambda: 'stopping' in log.read_text(), 60), log.read_text()
            assert wait_for(lambda: clocks and clocks[-1].clock.sec == 4, 5)
        finally:
            stop_node(process)
    assert states, 'no joint states received'
    stamps = [stamp_ns(m) for m in states]
    assert 0 < stamps[0] and stamps[-1] <= 4_000_000_000   # simulated time, not wall time
    assert all(stamp % 1_000_000 == 0 for stamp in stamps)
    clock_ns = {c.clock.sec * 10**9 + c.clock.nanosec for c in clocks}
    # Each state goes out with its /clock tick (a few may be lost from the publisher's
    # 10-deep history on a loaded machine: /clock subscribers need only the newest).
    assert len(set(stamps) & clock_ns) >= 0.9 * len(stamps)
    assert max(clock_ns) == 4_000_000_000
