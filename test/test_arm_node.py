"""arm_sim over real DDS: evenly stamped joint states of every joint, payload by topic."""
import time

import numpy as np
import pytest
from ros_util import start_node, stop_node, subscribed, TestNode, wait_for
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64

pytestmark = pytest.mark.ros


def test_arm_sim_publishes_stamped_states_and_takes_payload_changes(tmp_path):
    log = tmp_path / 'arm_sim.log'
    with TestNode() as probe:
        states = []
        probe.node.create_subscription(JointState, '/joint_states', states.append, 10000)
        payload = probe.node.create_publisher(Float64, '/arm_sim/payload_mass', 10)
        process = start_node('arm_sim', {'rate_hz': 500.0, 'duration_s': 6.0,
                                         'real_time_factor': 1.0}, log_path=log)
        try:
            assert wait_for(lambda: len(states) > 200, 60), log.read_text()
            assert subscribed(payload, timeout=10)
            payload.publish(Float64(data=2.0))
            payload.publish(Float64(data=float('nan')))
            assert wait_for(lambda: 'payload 2.0 kg' in log.read_text(), 20), log.read_text()
            time.sleep(0.5)
        finally:
            stop_node(process)
        text = log.read_text()
        assert 'ignored payload mass nan' in text
    message = states[-1]
    assert list(message.name) == [f'panda_joint{i}' for i in range(1, 8)]
    assert len(message.position) == len(message.velocity) == len(message.effort) == 7
    stamps = np.array([m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for m in states])
    steps = np.diff(stamps)
    assert np.all(steps > 0)
    # Stamps are the simulated sample times: multiples of the 2 ms period (lost messages
    # skip a multiple, never shift the grid).
    assert np.all(np.abs(steps / 2e6 - np.round(steps / 2e6)) < 1e-3)
    assert np.all(np.isfinite([m.effort for m in states]))
