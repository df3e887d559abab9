"""The arm simulated in a child process: blocks in order, payload changes, clean end."""
import numpy as np
from robot_dynamics_learning.sim.arm import ArmConfig
from robot_dynamics_learning.sim.arm_stream import ArmStream, SimBlock, SimEnd, SimEvent


def test_blocks_arrive_in_order_take_payload_changes_and_end():
    stream = ArmStream(ArmConfig(), block=50, duration=0.3, schedule=[(0.2, 1.0)])
    stream.start()
    try:
        assert len(stream.joint_names) == 7
        blocks, logs, ended = [], [], False
        stream.request_payload(0.5)    # applies from the next block the child simulates
        while not ended:
            message = stream.next_message(timeout=30.0)
            assert message is not None
            if isinstance(message, SimBlock):
                blocks.append((message.samples, message.payload_kg))
            elif isinstance(message, SimEvent):
                assert not message.error
                logs.append(message.text)
            else:
                ended = isinstance(message, SimEnd)
    finally:
        stream.stop()
    times = np.concatenate([samples.time for samples, _ in blocks])
    assert times.size == 300 and np.allclose(np.diff(times), 1e-3)
    masses = [mass for _, mass in blocks]
    assert masses[-1] == 1.0 and 0.5 in masses    # the request, then the scripted change
    assert any('scripted payload change to 1.0 kg' in text for text in logs)
    for samples, _ in blocks:
        assert np.isfinite(samples.position).all() and np.isfinite(samples.effort).all()
