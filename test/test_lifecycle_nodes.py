"""
The lifecycle nodes over real DDS: transitions through the lifecycle services change output.

car_mpc brakes on deactivate and drives again after activate; dynamics_learner predicts
nothing while inactive and learns again after cleanup and configure; torque_predictor with
autostart false waits unconfigured until a manager configures and activates it.
"""
import threading
import time

from geometry_msgs.msg import PoseStamped, Twist, TwistStamped
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState, GetState
import numpy as np
import pytest
from rclpy.qos import qos_profile_sensor_data
from robot_dynamics_learning.control.car_training import build_car_model, save_car_model
from robot_dynamics_learning.control.track import load_track_spec, Track
from robot_dynamics_learning.learning.checkpoint import CheckpointDirectory
from robot_dynamics_learning.models.registry import build_model
from robot_dynamics_learning.nodes.conversions import joint_state_msg
from ros_util import ROOT, start_node, stop_node, subscribed, TestNode, wait_for
from sensor_msgs.msg import JointState
from test_car_nodes import publish_state

pytestmark = pytest.mark.ros
OVAL = str(ROOT / 'config' / 'tracks' / 'oval.yaml')
JOINTS = [f'panda_joint{i}' for i in range(1, 8)]


def call(probe: TestNode, node: str, service: str, request) -> object:
    """Call `/<node>/<service>` of a lifecycle node and return the response."""
    kind = ChangeState if service == 'change_state' else GetState
    client = probe.node.create_client(kind, f'/{node}/{service}')
    assert client.wait_for_service(timeout_sec=60.0), f'no {node}/{service}'
    future = client.call_async(request)
    assert wait_for(future.done, 30.0), f'{node}/{service} did not answer'
    probe.node.destroy_client(client)
    return future.result()


def transition(probe: TestNode, node: str, transition_id: int) -> None:
    """Drive `node` through one transition; it must succeed."""
    request = ChangeState.Request()
    request.transition.id = transition_id
    assert call(probe, node, 'change_state', request).success


def state(probe: TestNode, node: str) -> str:
    """Return the label of `node`'s lifecycle state."""
    return call(probe, node, 'get_state', GetState.Request()).current_state.label


def test_car_mpc_brakes_on_deactivate_and_drives_after_activate(tmp_path):
    brake = -0.25
    checkpoint = str(save_car_model(tmp_path / 'bicycle.pt', build_car_model('car_bicycle'),
                                    {}))
    process = start_node('car_mpc', params={
        'checkpoint': checkpoint, 'track_file': OVAL, 'iterations': 1, 'candidates': 32,
        'budget_s': 1.0, 'stale_timeout_s': 0.5, 'brake_throttle': brake},
        log_path=tmp_path / 'mpc.log')
    pose = Track(load_track_spec(OVAL)).pose_at(0.0)
    stop = threading.Event()
    commands = []
    try:
        with TestNode('mpc_manager') as probe:
            probe.node.create_subscription(Twist, 'command', lambda msg: commands.append(
                (time.monotonic(), msg.linear.x, msg.angular.z)), 10)   # list.append: atomic
            pub_pose, pub_twist = (probe.node.create_publisher(kind, topic,
                                                               qos_profile_sensor_data)
                                   for kind, topic in ((PoseStamped, 'car/pose'),
                                                       (TwistStamped, 'car/twist')))

            def publish_states() -> None:   # fresh state all along: no stale brake
                while not stop.is_set():
                    publish_state(pub_pose, pub_twist, time.time_ns(), pose)
                    time.sleep(0.01)
            publisher = threading.Thread(target=publish_states, daemon=True)
            publisher.start()

            def driving_since(start: float) -> int:
                return sum(1 for t, throttle, _ in list(commands) if t > start
                           and throttle != brake)
            assert wait_for(lambda: driving_since(0.0) > 5, 90.0), \
                (tmp_path / 'mpc.log').read_text()
            assert state(probe, 'car_mpc') == 'active'
            before = time.monotonic()
            transition(probe, 'car_mpc', Transition.TRANSITION_DEACTIVATE)
            time.sleep(1.0)          # ticks would run at 20 Hz: 20 commands if still driving
            after = [c for c in list(commands) if c[0] > before]
            assert state(probe, 'car_mpc') == 'inactive'
            braked = [i for i, c in enumerate(after) if c[1:] == (brake, 0.0)]
            # The deactivate's brake, soon after the request (ticks already running when the
            # service call was on its way may publish before it); after it only brakes.
            # (1 s, not the tick's 50 ms: the service call itself may wait on a loaded machine.)
            assert braked and after[braked[0]][0] - before < 1.0, after
            assert all(c[1:] == (brake, 0.0) for c in after[braked[0]:]), after
            resumed = time.monotonic()
            transition(probe, 'car_mpc', Transition.TRANSITION_ACTIVATE)
            assert wait_for(lambda: driving_since(resumed) > 5, 30.0), \
                (tmp_path / 'mpc.log').read_text()
            stop.set()
            publisher.join(timeout=2.0)
    finally:
        stop.set()
        assert stop_node(process) == 0, (tmp_path / 'mpc.log').read_text()


def publish_joint_states(publisher, start: int, count: int) -> int:
    """Publish `count` joint states stamped 1 ms apart from sample `start`; return the next."""
    for k in range(start, start + count):
        q = 0.1 * np.sin(k * 0.01 + np.arange(7))
        publisher.publish(joint_state_msg(10**9 + k * 10**6, JOINTS, q, np.cos(q), np.ones(7)))
        time.sleep(0.004)
    return start + count


def arm_probe(probe: TestNode, node: str, log) -> tuple:
    """Return (predictions received from `node`, a joint_states publisher it has matched)."""
    predictions = []
    probe.node.create_subscription(JointState, f'/{node}/predicted_torques',
                                   predictions.append, 100)
    publisher = probe.node.create_publisher(JointState, '/joint_states', 10)
    assert subscribed(publisher, timeout=60), log.read_text()
    return predictions, publisher


def publish_until(publisher, start: int, condition, timeout: float = 60.0) -> int:
    """Publish joint states in blocks until `condition()` (best effort QoS may drop some)."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        start = publish_joint_states(publisher, start, 20)
    assert condition(), 'the condition did not come true while publishing'
    return start


def test_dynamics_learner_is_silent_while_inactive_and_rebuilds_after_cleanup(tmp_path):
    log = tmp_path / 'learner.log'
    process = start_node('dynamics_learner', params={
        'model': 'lstm', 'trainer_process': False, 'warmup_samples': 20, 'window': 8,
        'batch_size': 4, 'updates_per_sample': 0.0,   # train at once: cleanup checkpoints
        'checkpoint_dir': str(tmp_path / 'checkpoints')}, log_path=log)
    try:
        with TestNode('learner_manager') as probe:
            predictions, publisher = arm_probe(probe, 'dynamics_learner', log)
            sample = publish_until(publisher, 0, lambda: len(predictions) >= 60)
            time.sleep(1.0)   # a few training steps, so that cleanup has weights to save
            transition(probe, 'dynamics_learner', Transition.TRANSITION_DEACTIVATE)
            silent = len(predictions)
            for _ in range(20):   # predictions already in flight arrive first (at most 6 s)
                time.sleep(0.3)
                if len(predictions) == silent:
                    break
                silent = len(predictions)
            sample = publish_joint_states(publisher, sample, 60)
            time.sleep(1.0)
            assert len(predictions) == silent, 'predictions while inactive'
            transition(probe, 'dynamics_learner', Transition.TRANSITION_CLEANUP)
            assert state(probe, 'dynamics_learner') == 'unconfigured'
            assert list((tmp_path / 'checkpoints').glob('model_*.pt')), log.read_text()
            transition(probe, 'dynamics_learner', Transition.TRANSITION_CONFIGURE)
            transition(probe, 'dynamics_learner', Transition.TRANSITION_ACTIVATE)
            publish_until(publisher, sample, lambda: len(predictions) > silent)
            assert 'resumed from' in log.read_text()   # the rebuilt learner resumed
        assert process.poll() is None, log.read_text()
    finally:
        assert stop_node(process) == 0, log.read_text()


def test_torque_predictor_without_autostart_waits_for_a_manager(tmp_path):
    folder = tmp_path / 'checkpoints'
    model = build_model('lstm', {'hidden_size': 8}, 21, 7, 7)
    CheckpointDirectory(folder).save(model, JOINTS, {'steps': 0})
    log = tmp_path / 'predictor.log'
    process = start_node('torque_predictor', params={
        'checkpoint_dir': str(folder), 'autostart': False}, log_path=log)
    try:
        with TestNode('predictor_manager') as probe:
            predictions, publisher = arm_probe(probe, 'torque_predictor', log)
            assert state(probe, 'torque_predictor') == 'unconfigured'
            sample = publish_joint_states(publisher, 0, 60)
            time.sleep(1.0)
            assert not predictions and 'using checkpoint' not in log.read_text()
            transition(probe, 'torque_predictor', Transition.TRANSITION_CONFIGURE)
            transition(probe, 'torque_predictor', Transition.TRANSITION_ACTIVATE)
            assert state(probe, 'torque_predictor') == 'active'
            publish_until(publisher, sample, lambda: len(predictions) > 0)
    finally:
        assert stop_node(process) == 0, log.read_text()
