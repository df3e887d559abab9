"""
Attacks on the nodes over real DDS on localhost (no mocks): each once stopped a node or a feature.

car_mpc and car_model_learner's checkpoints; a checkpoint copied in place while a node polls;
joint states stamped nanoseconds apart, or with values beyond float32; commands before the
joints are known; a status file that cannot be written; a replay without efforts; use_sim_time
set on the arm controller; a payload message beyond the parameter's range; a looping bag.
"""
import contextlib
import time
from types import SimpleNamespace
from typing import Iterator

import numpy as np
import pytest
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.msg import ParameterType, ParameterValue
from rcl_interfaces.srv import GetParameters, SetParameters
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from robot_dynamics_learning.control.car_training import build_car_model
from robot_dynamics_learning.learning.checkpoint import CheckpointDirectory
from robot_dynamics_learning.models.registry import build_model
from robot_dynamics_learning.nodes.car_model_learner import CAR_CHECKPOINT_PREFIX
from robot_dynamics_learning.nodes.conversions import joint_state_msg, planar_pose_msg
from ros_util import (Arrivals, estimator_probe, ROOT, start_node, stop_node, subscribed, TestNode,
                      wait_for, watch_diagnostics)
from sensor_msgs.msg import JointState
from std_msgs.msg import Empty, Float64, Float64MultiArray

pytestmark = pytest.mark.ros
OVAL = str(ROOT / 'config' / 'tracks' / 'oval.yaml')


def test_car_mpc_follows_the_learners_checkpoints_and_refuses_another_model(tmp_path):
    """The MPC found none of the learner's files; a car_mlp among them ended the node."""
    folder = CheckpointDirectory(tmp_path / 'models', keep_last=10,
                                 prefix=CAR_CHECKPOINT_PREFIX)
    (tmp_path / 'models').mkdir()
    save = folder.save   # as car_model_learner saves
    save(build_car_model('car_bicycle'), metadata={})
    log = tmp_path / 'mpc.log'
    process = start_node('car_mpc', params={'checkpoint_dir': str(folder.folder),
                                            'track_file': OVAL, 'iterations': 1,
                                            'candidates': 32, 'reload_period_s': 0.5},
                         log_path=log)
    try:
        with TestNode('mpc_reload_probe') as probe:
            counters = watch_diagnostics(probe.node, 'car_mpc')
            assert wait_for(lambda: 'model_reloads' in counters, 120.0), log.read_text()
            assert f'{CAR_CHECKPOINT_PREFIX}_000000.pt' in log.read_text()
            for other in (build_car_model('car_mlp'), build_car_model('car_bicycle', h=0.1)):
                refused = int(counters['model_refused'])
                save(other, metadata={})
                assert wait_for(lambda: int(counters['model_refused']) == refused + 1, 20.0), \
                    log.read_text()
                assert process.poll() is None, log.read_text()
            time.sleep(1.5)   # three more checks: a refused file is refused once
            assert counters['model_refused'] == '2' and counters['model_reloads'] == '0'
            # A good one, copied in place: refused while half there, loaded once complete.
            whole = CheckpointDirectory(tmp_path, prefix=CAR_CHECKPOINT_PREFIX).save(
                build_car_model('car_bicycle'), metadata={}).read_bytes()
            newest = folder.folder / f'{CAR_CHECKPOINT_PREFIX}_000003.pt'
            newest.write_bytes(whole[:len(whole) // 2])
            assert wait_for(lambda: counters['model_refused'] == '3', 20.0), log.read_text()
            newest.write_bytes(whole)
            assert wait_for(lambda: counters['model_reloads'] == '1', 20.0), log.read_text()
        assert process.poll() is None, log.read_text()
    finally:
        assert stop_node(process) == 0, log.read_text()


PANDA = [f'panda_joint{i}' for i in range(1, 8)]
# Stamps on a multiple of 256 ns, the spacing of float64 near 1.8e18: one more ns is the same
# float, and so the same time in float seconds.
STEP_NS = 256 * 7813   # 2 ms


def _node_params(executable: str, tmp_path) -> tuple:
    """Return (parameters, joint names, topic answered per message) for `executable`."""
    if executable == 'arm_controller':   # efforts feed the checkpoint gate's differentiator
        return ({'feedforward': 'learned', 'checkpoint_dir': str(tmp_path)}, PANDA,
                ('/effort_controller/commands', Float64MultiArray))
    names = ['j1', 'j2', 'j3']
    answer = (f'/{executable}/predicted_torques', JointState)
    if executable == 'dynamics_learner':
        return {'joint_names': names, 'accel_window': 5, 'model_config.hidden_size': 8,
                'diagnostics_period_s': 0.3}, names, answer
    CheckpointDirectory(tmp_path).save(build_model('lstm', {'hidden_size': 8}, 9, 3, 3), names)
    return ({'checkpoint_dir': str(tmp_path), 'accel_window': 5, 'diagnostics_period_s': 0.3},
            names, answer)


@contextlib.contextmanager
def _arm_node_probe(executable: str, tmp_path) -> Iterator[SimpleNamespace]:
    """
    Run `executable` while the block runs; fail if it ends.

    Yields names, counters (its diagnostics), answers (its per-message output), pub (a
    /joint_states publisher it listens to) and log.
    """
    params, names, (topic, msg_type) = _node_params(executable, tmp_path)
    log = tmp_path / 'node.log'
    process = start_node(executable, params, log_path=log)
    try:
        with TestNode(f'probe_{executable}') as probe:
            counters = watch_diagnostics(probe.node, executable)
            answers = Arrivals(probe.node, msg_type, topic)
            pub = probe.node.create_publisher(JointState, '/joint_states', 100)
            assert subscribed(pub, timeout=60.0, also=lambda: bool(counters)), \
                log.read_text()
            yield SimpleNamespace(names=names, counters=counters, answers=answers, pub=pub,
                                  log=log)
        assert process.poll() is None, log.read_text()
    finally:
        assert stop_node(process) == 0, log.read_text()


@pytest.mark.parametrize('executable', ['dynamics_learner', 'torque_predictor',
                                        'arm_controller'])
def test_a_stamp_one_ns_after_the_last_is_refused_not_fatal(executable, tmp_path):
    """Two stamps 1 ns apart were one time in float seconds: the differentiator ended the node."""
    with _arm_node_probe(executable, tmp_path) as node:
        stamp = time.time_ns() // 256 * 256
        n = len(node.names)

        def send(k: int, stamp_ns: int) -> None:
            q = np.sin(1e-3 * k + np.arange(n))
            node.pub.publish(joint_state_msg(stamp_ns, node.names, q,
                                             np.cos(1e-3 * k + np.arange(n)), 2.0 * q))
            time.sleep(0.01)

        for k in range(10):
            stamp += STEP_NS
            send(k, stamp)
        assert wait_for(lambda: len(node.answers) > 0, 20.0), node.log.read_text()
        # Idle first (at most 5 s; the controller's watchdog answers on its own): a slow first
        # prediction (loading, warm-up) must not make the best-effort queue drop the next.
        for _ in range(10):
            count = len(node.answers)
            time.sleep(0.5)
            if len(node.answers) == count:
                break
        before = len(node.answers)   # the first messages may come before a model is loaded
        send(10, stamp + 1)
        for k in range(11, 16):
            stamp += STEP_NS
            send(k, stamp)
        assert wait_for(lambda: node.counters.get('messages_stamp_repeated') == '1', 10.0), \
            (node.counters, node.log.read_text())
        assert wait_for(lambda: len(node.answers) >= before + 5, 10.0), node.log.read_text()


def test_predictor_loads_a_checkpoint_once_its_copy_is_complete(tmp_path):
    """A file refused while half-copied (scp, cp) was never tried again."""
    names = ['j1', 'j2', 'j3']
    model = build_model('lstm', {'hidden_size': 8}, 9, 3, 3)
    CheckpointDirectory(tmp_path).save(model, names)
    whole = CheckpointDirectory(tmp_path / 'elsewhere').save(model, names).read_bytes()
    log = tmp_path / 'predictor.log'
    process = start_node('torque_predictor', {'checkpoint_dir': str(tmp_path),
                                              'poll_period_s': 0.2,
                                              'diagnostics_period_s': 0.3}, log_path=log)
    try:
        with TestNode('predictor_copy_probe') as probe:
            counters = watch_diagnostics(probe.node, 'torque_predictor')
            assert wait_for(lambda: counters.get('loads') == '1', 60.0), log.read_text()
            newest = tmp_path / 'model_000001.pt'
            newest.write_bytes(whole[:len(whole) // 2])
            assert wait_for(lambda: any(k.startswith('checkpoints_skipped_') for k in counters),
                            20.0), (counters, log.read_text())
            newest.write_bytes(whole)
            assert wait_for(lambda: counters.get('loads') == '2', 20.0), (counters,
                                                                          log.read_text())
            assert counters['checkpoint'].endswith('model_000001.pt')
    finally:
        assert stop_node(process) == 0, log.read_text()


def test_learner_drops_a_command_taken_before_it_knew_the_joints(tmp_path):
    """torque_source command, joint_names unset: a 5-value command before 3 joints was used."""
    names = ['j1', 'j2', 'j3']
    log = tmp_path / 'learner.log'
    process = start_node('dynamics_learner', {'torque_source': 'command', 'accel_window': 5,
                                              'model_config.hidden_size': 8}, log_path=log)
    try:
        with TestNode('learner_command_probe') as probe:
            commands = probe.node.create_publisher(Float64MultiArray,
                                                   '/effort_controller/commands', 10)
            states = probe.node.create_publisher(JointState, '/joint_states', 100)
            answers = Arrivals(probe.node, JointState, '/dynamics_learner/predicted_torques')
            assert subscribed(commands, states, timeout=60.0), log.read_text()
            commands.publish(Float64MultiArray(data=[1.0] * 5))
            time.sleep(0.5)
            stamp = time.time_ns()
            for k in range(20):
                stamp += 2_000_000
                q = np.sin(1e-3 * k + np.arange(3))
                states.publish(joint_state_msg(stamp, names, q, np.cos(q)))
                if k == 10:
                    commands.publish(Float64MultiArray(data=[0.5] * 3))
                time.sleep(0.01)
            assert wait_for(lambda: len(answers) >= 10, 20.0), log.read_text()
            time.sleep(0.5)
        assert process.poll() is None, log.read_text()
    finally:
        assert stop_node(process) == 0, log.read_text()


def test_learner_keeps_learning_when_its_status_file_cannot_be_written(tmp_path):
    """A status_path in a missing folder (or a full disk) ended the node at its first report."""
    log = tmp_path / 'learner.log'
    process = start_node('dynamics_learner', {
        'joint_names': ['j1', 'j2', 'j3'], 'model_config.hidden_size': 8,
        'diagnostics_period_s': 0.2, 'status_path': str(tmp_path / 'missing' / 'status.json')},
        log_path=log)
    try:
        with TestNode('learner_status_probe') as probe:
            counters = watch_diagnostics(probe.node, 'dynamics_learner')
            assert wait_for(lambda: int(counters.get('status_write_errors', 0)) >= 3, 60.0), \
                (counters, log.read_text())
            assert 'status not written' in log.read_text()
        assert process.poll() is None, log.read_text()
    finally:
        assert stop_node(process) == 0, log.read_text()


def test_evaluator_without_efforts_ends_with_one_line_and_code_1(tmp_path):
    """A bag whose joint states carry no effort ended the evaluator with a traceback."""
    log = tmp_path / 'evaluator.log'
    process = start_node('replay_evaluator', {'out': str(tmp_path / 'report'),
                                              'learners': ['/fake_learner'], 'settle_s': 0.5},
                         log_path=log)
    try:
        with TestNode('evaluator_probe') as probe:
            probe.node.create_publisher(JointState, '/fake_learner/predicted_torques', 10)
            reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
            states = probe.node.create_publisher(JointState, '/joint_states', reliable)
            assert subscribed(states, timeout=60.0), log.read_text()
            stamp = time.time_ns()
            for k in range(20):
                stamp += 2_000_000
                states.publish(joint_state_msg(stamp, ['j1', 'j2'], np.full(2, 0.1 * k),
                                               np.ones(2)))
            end = probe.node.create_publisher(Empty, '/bag_player/end_of_bag', QoSProfile(
                depth=1, reliability=ReliabilityPolicy.RELIABLE,
                durability=DurabilityPolicy.TRANSIENT_LOCAL))
            end.publish(Empty())
            assert process.wait(timeout=60) == 1, log.read_text()
    finally:
        stop_node(process)
    text = log.read_text()
    assert 'no report' in text and 'carry no effort' in text and 'Traceback' not in text, text


def test_arm_controller_refuses_use_sim_time_at_run_time_and_still_brakes(tmp_path):
    """Switched to sim time without /clock, its watchdog stopped: the last torque stayed on."""
    log = tmp_path / 'controller.log'
    process = start_node('arm_controller', {'feedforward': 'none'}, log_path=log)
    try:
        with TestNode('controller_clock_probe') as probe:
            commands = Arrivals(probe.node, Float64MultiArray, '/effort_controller/commands',
                                lambda msg: list(msg.data))
            states = probe.node.create_publisher(JointState, '/joint_states', 10)
            assert subscribed(states, timeout=60.0), log.read_text()
            client = probe.node.create_client(SetParameters, '/arm_controller/set_parameters')
            assert client.wait_for_service(timeout_sec=30.0)
            future = client.call_async(SetParameters.Request(parameters=[ParameterMsg(
                name='use_sim_time', value=ParameterValue(type=ParameterType.PARAMETER_BOOL,
                                                          bool_value=True))]))
            assert wait_for(future.done, 10.0)
            result = future.result().results[0]
            assert not result.successful and 'use_sim_time' in result.reason
            for k in range(50):   # states, then none: the watchdog must send zero torque
                states.publish(joint_state_msg(time.time_ns(), PANDA, np.zeros(7), np.zeros(7)))
                time.sleep(0.01)
            sent = time.monotonic()
            assert wait_for(lambda: any(value == [0.0] * 7 for _, value in commands.since(sent)),
                            5.0), log.read_text()
        assert process.poll() is None, log.read_text()
    finally:
        assert stop_node(process) == 0, log.read_text()


@pytest.mark.parametrize('executable', ['dynamics_learner', 'torque_predictor'])
def test_a_velocity_beyond_float32_is_skipped_not_fatal(executable, tmp_path):
    """
    A finite 1e39 rad/s became inf in the float32 model; its input check ended the node.

    Float32's largest value (a driver's "unknown") passed that check, and a model fed it
    published inf: values beyond 1e9 are skipped now, and no prediction is ever non-finite.
    """
    with _arm_node_probe(executable, tmp_path) as node:
        stamp = time.time_ns()
        # 1e39 once (the crash), then 100 samples of float32's largest velocity: from the
        # differentiator's fifth on, their acceleration is 0 and every value fit in float32.
        bad = {10: 1e39, **dict.fromkeys(range(30, 130), 3.4e38)}
        for k in range(150):
            stamp += 2_000_000
            q = np.sin(1e-3 * k + np.arange(3))
            qd = np.full(3, bad[k]) if k in bad else np.cos(q)
            node.pub.publish(joint_state_msg(stamp, node.names, q, qd, 2.0 * q))
            time.sleep(0.01)
        # About 110 skipped (the 1e39 and the 3.4e38 run, with their derivatives' windows);
        # the float32 limit skipped about 16, the windows only. Best-effort QoS: a loaded
        # machine may drop some messages (in CI, a predictor counted under 90).
        assert wait_for(lambda: int(node.counters.get('samples_out_of_range', 0)) >= 60, 10.0), \
            (node.counters, node.log.read_text())
        done = len(node.answers)
        stamp += 2_000_000
        node.pub.publish(joint_state_msg(stamp, node.names, np.zeros(3), np.ones(3),
                                         np.ones(3)))
        assert wait_for(lambda: len(node.answers) > done, 10.0), node.log.read_text()
        assert all(np.isfinite(msg.effort).all() for _, msg in node.answers.since())
        assert node.counters.get('predictions_not_finite') == '0', node.counters


def test_a_payload_message_obeys_the_parameter_range_and_updates_it(tmp_path):
    """`ros2 param set` refused 1e9 kg, the topic took it; and the parameter never followed."""
    log = tmp_path / 'mujoco_arm.log'
    process = start_node('mujoco_arm', {'timeout_action': 'zero'}, log_path=log)
    try:
        with TestNode('payload_probe') as probe:
            counters = watch_diagnostics(probe.node, 'mujoco_arm')
            payload = probe.node.create_publisher(Float64, '/mujoco_arm/payload_mass', 10)
            assert subscribed(payload, timeout=60.0, also=lambda: bool(counters)), \
                log.read_text()
            payload.publish(Float64(data=1e9))
            assert wait_for(lambda: 'ignored payload mass 1000000000.0' in log.read_text(),
                            10.0), log.read_text()
            payload.publish(Float64(data=2.0))
            assert wait_for(lambda: counters.get('payload_kg') == '2.0', 10.0), log.read_text()
            client = probe.node.create_client(GetParameters, '/mujoco_arm/get_parameters')
            assert client.wait_for_service(timeout_sec=30.0)
            future = client.call_async(GetParameters.Request(names=['payload_mass']))
            assert wait_for(future.done, 10.0)
            assert future.result().values[0].double_value == 2.0
        assert process.poll() is None, log.read_text()
    finally:
        assert stop_node(process) == 0, log.read_text()


def test_car_estimator_follows_a_looping_bag(tmp_path):
    """A bag played with --loop: every pose after the first loop was refused as backwards."""
    log = tmp_path / 'estimator.log'
    process = start_node('car_state_estimator', {'max_future_stamp_s': 0.0}, log_path=log)
    try:
        with TestNode('estimator_loop_probe') as probe:
            twists, counters, publisher = estimator_probe(probe.node)
            assert subscribed(publisher, timeout=30.0, also=lambda: bool(counters))
            start_ns = time.time_ns()
            for _ in range(2):
                first = len(twists)
                for i in range(100):   # 1 s along a straight line at 1 m/s, 100 Hz
                    publisher.publish(planar_pose_msg(start_ns + i * 10_000_000, 0.01 * i, 0.0,
                                                      0.0))
                    time.sleep(0.01)
                assert wait_for(lambda: len(twists) > first + 50, 5.0), (counters, log.read_text())
            assert wait_for(lambda: counters.get('time_resets') == '1', 5.0), counters
            assert counters.get('parser_stamp_backwards', '0') == '0'
            assert twists[-1].twist.linear.x == pytest.approx(1.0, abs=0.1)
        assert process.poll() is None, log.read_text()
    finally:
        assert stop_node(process) == 0, log.read_text()


def test_car_estimator_says_which_window_slow_mocap_needs(tmp_path):
    """At 20 Hz the default 0.08 s window holds 2 poses of the 4 needed: silence, no reason."""
    log = tmp_path / 'estimator.log'
    process = start_node('car_state_estimator', log_path=log)
    try:
        with TestNode('estimator_rate_probe') as probe:
            twists, counters, publisher = estimator_probe(probe.node)
            assert subscribed(publisher, timeout=30.0, also=lambda: bool(counters))
            start_ns = time.time_ns()
            for i in range(20):   # 1 s at 20 Hz
                publisher.publish(planar_pose_msg(start_ns + i * 50_000_000, 0.05 * i, 0.0, 0.0))
                time.sleep(0.05)
            assert wait_for(lambda: 'at least 0.175 s' in log.read_text(), 10.0), \
                log.read_text()
            assert not twists
        assert process.poll() is None, log.read_text()
    finally:
        assert stop_node(process) == 0, log.read_text()


def test_car_mpc_starts_on_an_older_checkpoint_when_the_newest_is_corrupt(tmp_path):
    """Only the newest file was tried at start: one truncated save kept the MPC from starting."""
    folder = CheckpointDirectory(tmp_path / 'models', prefix=CAR_CHECKPOINT_PREFIX)
    good = folder.save(build_car_model('car_bicycle'), metadata={})
    newest = folder.save(build_car_model('car_bicycle'), metadata={})
    newest.write_bytes(newest.read_bytes()[:100])
    log = tmp_path / 'mpc.log'
    process = start_node('car_mpc', params={'checkpoint_dir': str(folder.folder),
                                            'track_file': OVAL, 'iterations': 1,
                                            'candidates': 32}, log_path=log)
    try:
        assert wait_for(lambda: 'MPC ready' in log.read_text(), 120.0), log.read_text()
        assert f'model {good}' in log.read_text()
        assert process.poll() is None, log.read_text()
    finally:
        assert stop_node(process) == 0, log.read_text()


def test_learner_leaves_another_robots_checkpoints_alone(tmp_path):
    """It started fresh in a folder of another joint set's run, and pruning deleted that run."""
    folder = CheckpointDirectory(tmp_path / 'models')
    (tmp_path / 'models').mkdir()
    other = [folder.save(build_model('lstm', {'hidden_size': 8}, 6, 2, 2), ['x', 'y'])
             for _ in range(3)]
    log = tmp_path / 'learner.log'
    names = ['j1', 'j2', 'j3']
    process = start_node('dynamics_learner', {
        'joint_names': names, 'model_config.hidden_size': 8, 'keep_checkpoints': 1,
        'warmup_samples': 100,
        'checkpoint_dir': str(folder.folder), 'checkpoint_period_s': 0.5,
        'diagnostics_period_s': 0.2}, log_path=log)
    try:
        with TestNode('learner_folder_probe') as probe:
            counters = watch_diagnostics(probe.node, 'dynamics_learner')
            pub = probe.node.create_publisher(JointState, '/joint_states', 100)
            assert subscribed(pub, timeout=60.0, also=lambda: bool(counters)), \
                log.read_text()
            assert counters['checkpoint_dir_refused'] == '1'
            stamp = time.time_ns()
            for k in range(300):   # 3 s of learning, checkpoints due every 0.5 s
                stamp += 10_000_000
                q = np.sin(1e-2 * k + np.arange(3))
                pub.publish(joint_state_msg(stamp, names, q, np.cos(q), 2.0 * q))
                time.sleep(0.01)
        assert process.poll() is None, log.read_text()
    finally:
        assert stop_node(process) == 0, log.read_text()   # a last checkpoint would go here
    assert folder.paths() == other, log.read_text()
