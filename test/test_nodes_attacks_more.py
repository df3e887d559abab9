"""
More attacks on the learner nodes over real DDS (no mocks): ambiguous or bad user input.

A controller whose `joints` order differs from /joint_states; two joint_state broadcasters on
one topic; a garbage message of 10k joints; car_model_learner with an empty checkpoint_dir;
car states beyond float32; parameters that once ended a node with a traceback or ran it
uselessly (an invalid topic name, a model too large to build, a checkpoint_dir that is a
file, a status_path that is a folder, a record_path that cannot be written).
"""
import contextlib
import math
import re
import time

from geometry_msgs.msg import PoseStamped, Twist, TwistStamped
import numpy as np
import pytest
from rclpy.qos import qos_profile_sensor_data
from robot_dynamics_learning.learning.learner_params import DynamicsLearnerConfig
from robot_dynamics_learning.nodes.conversions import joint_state_msg, planar_pose_msg, time_msg
from robot_dynamics_learning.processes import ros_args, start_node_process
from ros_util import (Arrivals, start_node, stop_node, subscribed, TestNode, wait_for,
                      watch_diagnostics)
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

pytestmark = pytest.mark.ros
ARM = ['j1', 'j2', 'j3']
GRIPPER = ['finger_left', 'finger_right']
SMALL = {'accel_window': 5, 'model_config.hidden_size': 8, 'trainer_process': False,
         'diagnostics_period_s': 0.3}


def _joint_state(stamp_ns: int, names, k: int) -> JointState:
    """One smooth joint state of `names` at step k (effort = 2 q)."""
    q = np.sin(1e-2 * k + np.arange(len(names)))
    return joint_state_msg(stamp_ns, names, q, np.cos(q), 2.0 * q)


def _refused_at_start(executable: str, params: dict, tmp_path) -> str:
    """Start `executable`; assert it ends with code 2 and no traceback; return its log."""
    log = tmp_path / f'{executable}.log'
    process = start_node(executable, params, log_path=log)
    try:
        code = process.wait(timeout=90)
    finally:
        stop_node(process)
    text = log.read_text()
    assert code == 2 and 'Traceback' not in text, text
    return text


def _command_probe(probe, log) -> tuple:
    """Return the learner's diagnostics and publishers of commands and joint states, matched."""
    counters = watch_diagnostics(probe.node, 'dynamics_learner')
    commands = probe.node.create_publisher(Float64MultiArray, '/effort_controller/commands', 10)
    states = probe.node.create_publisher(JointState, '/joint_states', 100)
    assert subscribed(commands, states, timeout=60.0, also=lambda: bool(counters)), \
        log.read_text()
    return counters, commands, states


def test_learner_maps_the_command_array_by_the_controllers_joint_names(tmp_path):
    """An effort controller listing j3, j1, j2: by index the learner swapped three torques."""
    log = tmp_path / 'learner.log'
    record = tmp_path / 'record.npz'
    process = start_node('dynamics_learner', {
        **SMALL, 'joint_names': ARM, 'torque_source': 'command',
        'command_joint_names': ['j3', 'j1', 'j2'], 'record_path': str(record)}, log_path=log)
    try:
        with TestNode('learner_command_order_probe') as probe:
            counters, commands, states = _command_probe(probe, log)
            answers = Arrivals(probe.node, JointState, '/dynamics_learner/predicted_torques')
            commands.publish(Float64MultiArray(data=[1.0, 2.0]))          # wrong length
            commands.publish(Float64MultiArray(data=[3.0, 1.0, 2.0]))     # j3, j1, j2
            assert wait_for(lambda: counters.get('commands_accepted') == '1', 10.0), \
                (counters, log.read_text())
            assert counters['commands_wrong_size'] == '1', counters
            assert 'torque command rejected (wrong_size' in log.read_text()
            stamp = time.time_ns()
            for k in range(30):
                stamp += 10_000_000
                states.publish(_joint_state(stamp, ARM, k))
                time.sleep(0.01)
            assert wait_for(lambda: len(answers) >= 20, 20.0), log.read_text()
    finally:
        assert stop_node(process) == 0, log.read_text()
    targets = np.load(record)['target']
    assert len(targets) >= 10, log.read_text()
    np.testing.assert_array_equal(targets, np.tile([1.0, 2.0, 3.0], (len(targets), 1)))


def test_learner_refuses_commands_lacking_an_adopted_joint_without_ending(tmp_path):
    """command_joint_names without a joint of /joint_states: each command counted, named."""
    log = tmp_path / 'learner.log'
    process = start_node('dynamics_learner', {
        **SMALL, 'joint_settle_s': 0.0, 'torque_source': 'command',
        'command_joint_names': ['j1', 'j2', 'elbow']}, log_path=log)
    try:
        with TestNode('learner_command_missing_probe') as probe:
            counters, commands, states = _command_probe(probe, log)
            stamp = time.time_ns()
            for k in range(20):
                stamp += 10_000_000
                states.publish(_joint_state(stamp, ARM, k))
                if k >= 10:
                    commands.publish(Float64MultiArray(data=[1.0, 2.0, 3.0]))
                time.sleep(0.01)
            assert wait_for(lambda: int(counters.get('commands_missing_joint', 0)) >= 5,
                            10.0), (counters, log.read_text())
            assert counters['commands_accepted'] == '0'
            assert "lack the joints ['j3']" in log.read_text()
        assert process.poll() is None, log.read_text()
    finally:
        assert stop_node(process) == 0, log.read_text()


@pytest.mark.parametrize('values, why', [
    ({'joint_names': ['j1', 'j2'], 'torque_source': 'command',
      'command_joint_names': ['j2', 'j3']}, "lack the learned joints ['j1']"),
    ({'command_joint_names': ['j1', 'j1']}, "repeated: ['j1']"),
    ({'joint_names': ['j1', '']}, 'non-empty name'),
    ({'torque_source': 'command', 'command_topic': ''}, 'needs a command_topic'),
])
def test_learner_settings_that_cannot_work_are_refused_naming_them(values, why):
    """Refused where the node and `rdl` read them, instead of rejecting every message later."""
    with pytest.raises(ValueError, match=re.escape(why)):
        DynamicsLearnerConfig(**{key: tuple(value) if isinstance(value, list) else value
                                 for key, value in values.items()})


@contextlib.contextmanager
def _learner_probe(name: str, log):
    """Yield (diagnostics, a /joint_states publisher, the predictions' joint names)."""
    with TestNode(name) as probe:
        counters = watch_diagnostics(probe.node, 'dynamics_learner')
        states = probe.node.create_publisher(JointState, '/joint_states', 100)
        answers = Arrivals(probe.node, JointState, '/dynamics_learner/predicted_torques',
                           lambda msg: list(msg.name))
        assert subscribed(states, timeout=60.0, also=lambda: bool(counters)), \
            log.read_text()
        yield counters, states, answers


def test_learner_adopts_the_arm_not_the_gripper_that_published_first(tmp_path):
    """joint_names unset: a gripper's broadcaster heard first decided the joints for good."""
    log = tmp_path / 'learner.log'
    process = start_node('dynamics_learner', SMALL, log_path=log)
    try:
        with _learner_probe('learner_two_broadcasters_probe', log) as (counters, states, answers):
            arm_stamp = gripper_stamp = time.time_ns()
            deadline, k = time.monotonic() + 60.0, 0
            # The gripper starts 0.2 s before the arm; both go on until 100 answers (at least
            # 3 s): a loaded machine answered 72 of a fixed 280 arm states.
            while (k < 300 or len(answers) < 100) and time.monotonic() < deadline:
                gripper_stamp += 10_000_000
                states.publish(_joint_state(gripper_stamp, GRIPPER, k))
                if k >= 20:
                    arm_stamp += 10_000_000
                    states.publish(_joint_state(arm_stamp, ARM, k))
                k += 1
                time.sleep(0.01)
            assert wait_for(lambda: len(answers) >= 100, 5.0), (counters, log.read_text())
            assert all(names == ARM for _, names in answers.since()), log.read_text()
            assert wait_for(lambda: counters.get('other_joint_sets') == '1', 5.0), counters
            assert int(counters['messages_missing_joint']) > 100, counters
            text = log.read_text()
            assert "learning ['j1', 'j2', 'j3'], the one with the most joints" in text, text
            assert "['finger_left', 'finger_right']" in text and 'Set joint_names' in text
        assert process.poll() is None, log.read_text()
    finally:
        assert stop_node(process) == 0, log.read_text()


def test_learner_does_not_adopt_a_message_of_ten_thousand_joints(tmp_path):
    """A garbage first message of 10k names became a 30k-input model; the arm was refused."""
    log = tmp_path / 'learner.log'
    process = start_node('dynamics_learner', {**SMALL, 'joint_settle_s': 0.5}, log_path=log)
    try:
        with _learner_probe('learner_huge_message_probe', log) as (counters, states, answers):
            stamp = time.time_ns()
            huge = [f'x{i}' for i in range(10_000)]
            states.publish(joint_state_msg(stamp, huge, np.zeros(10_000), np.zeros(10_000)))
            deadline, k = time.monotonic() + 60.0, 0
            # Until 50 answers: a loaded machine builds the model for seconds, while a
            # queue of 10 drops the arm's states it sends meanwhile.
            while len(answers) < 50 and time.monotonic() < deadline:
                stamp += 10_000_000
                states.publish(_joint_state(stamp, ARM, k))
                k += 1
                time.sleep(0.01)
            assert len(answers) >= 50, (counters, log.read_text())
            assert all(names == ARM for _, names in answers.since())
            assert 'more than 128 are not adopted' in log.read_text()
        assert process.poll() is None, log.read_text()
    finally:
        assert stop_node(process) == 0, log.read_text()


def _drive(pose, twist, command, k: int, speed: float = 1.0) -> None:
    """Publish one 50 Hz car state and a command changing every third state."""
    t = 0.02 * k
    stamp = time.time_ns()
    pose.publish(planar_pose_msg(stamp, t, 0.0, 0.0))
    body = TwistStamped()
    body.header.stamp = time_msg(stamp)
    body.twist.linear.x = speed + 0.1 * math.sin(t)
    twist.publish(body)
    steer = Twist()
    steer.linear.x, steer.angular.z = 0.3, 0.1 * math.sin(0.06 * (k // 3))
    command.publish(steer)
    time.sleep(0.02)


def _drive_until_training(probe_name: str, log, timeout: float,
                          speed=lambda k: 1.0, more: int = 0) -> None:
    """Drive car_model_learner (50 Hz states) until its log shows training, then `more`."""
    with TestNode(probe_name) as probe:
        pose = probe.node.create_publisher(PoseStamped, 'car/pose', qos_profile_sensor_data)
        twist = probe.node.create_publisher(TwistStamped, 'car/twist', qos_profile_sensor_data)
        command = probe.node.create_publisher(Twist, 'command', 10)
        assert subscribed(command, timeout=60.0), log.read_text()
        sent = [0]

        def training() -> bool:
            _drive(pose, twist, command, sent[0], speed(sent[0]))
            sent[0] += 1
            return re.search(r'steps [1-9]', log.read_text()) is not None
        assert wait_for(training, timeout, period=0.0), log.read_text()
        for k in range(sent[0], sent[0] + more):
            _drive(pose, twist, command, k, speed(k))


def test_car_learner_with_an_empty_checkpoint_dir_writes_no_checkpoints(tmp_path):
    """checkpoint_dir '' wrote car_model_*.pt into the working directory of the process."""
    log = tmp_path / 'car_model_learner.log'
    with open(log, 'w') as output:
        process = start_node_process('car_model_learner', ros_args({
            'checkpoint_dir': "''", 'min_transitions': 5, 'batch_size': 8,
            'save_period_s': 0.5, 'model': 'car_bicycle'}), stdout=output, cwd=tmp_path)
    try:
        _drive_until_training('car_learner_no_dir_probe', log, 60.0,
                              more=100)   # 2 s more: four checkpoint periods
        assert process.poll() is None, log.read_text()
    finally:
        assert stop_node(process) == 0, log.read_text()
    assert not list(tmp_path.rglob('*.pt')), log.read_text()
    assert 'checkpoint_dir is empty: no checkpoints are written' in log.read_text()


def test_car_learner_skips_states_beyond_float32_and_keeps_learning(tmp_path):
    """Every 7th state at 1e200 m/s: inf in the float32 model; every update was refused."""
    log = tmp_path / 'car_model_learner.log'
    process = start_node('car_model_learner', {
        'checkpoint_dir': str(tmp_path / 'models'), 'min_transitions': 5, 'batch_size': 8,
        'model': 'car_mlp'}, log_path=log)
    try:
        _drive_until_training('car_learner_huge_probe', log, 30.0,
                              speed=lambda k: 1e200 if k % 7 == 3 else 1.0)
        assert re.search(r'out_of_range [1-9]', log.read_text()), log.read_text()
        assert 'skipped a state beyond float32' in log.read_text()
        assert process.poll() is None, log.read_text()
    finally:
        assert stop_node(process) == 0, log.read_text()


@pytest.mark.parametrize('executable, params, why', [
    ('dynamics_learner', {'torque_source': 'command', 'command_topic': 'bad topic!'},
     "command_topic 'bad topic!' is not a valid topic name"),
    ('dynamics_learner', {'joint_names': ARM, 'model_config.hidden_size': 10**9},
     "cannot build model 'lstm'"),
    ('dynamics_learner', {'joint_names': ARM, 'checkpoint_dir': '{file}'},
     'is a file, not a folder'),
    ('car_model_learner', {'checkpoint_dir': '{file}'}, 'is a file, not a folder'),
    ('dynamics_learner', {'joint_names': ARM, 'status_path': '{folder}'},
     'status_path {folder} is a folder'),
])
def test_a_parameter_that_cannot_work_ends_the_node_in_one_line(executable, params, why,
                                                                tmp_path):
    """Each of these once ran silently or ended the node with a traceback (exit code 1)."""
    file = tmp_path / 'not_a_folder'
    file.write_text('')
    paths = {'{file}': str(file), '{folder}': str(tmp_path)}
    params = {key: paths.get(value, value) if isinstance(value, str) else value
              for key, value in params.items()}
    text = _refused_at_start(executable, params, tmp_path)
    assert why.format(folder=tmp_path) in text, text


def test_learner_ends_cleanly_when_its_record_cannot_be_written(tmp_path):
    """A record_path in a missing folder: a traceback and exit code 1 at Ctrl-C."""
    log = tmp_path / 'learner.log'
    process = start_node('dynamics_learner', {
        **SMALL, 'joint_names': ARM, 'record_path': str(tmp_path / 'missing' / 'r.npz')},
        log_path=log)
    try:
        with TestNode('learner_record_probe') as probe:
            states = probe.node.create_publisher(JointState, '/joint_states', 100)
            answers = Arrivals(probe.node, JointState, '/dynamics_learner/predicted_torques')
            assert subscribed(states, timeout=60.0), log.read_text()
            stamp = time.time_ns()

            def stream() -> bool:
                nonlocal stamp
                stamp += 10_000_000
                states.publish(_joint_state(stamp, ARM, len(answers)))
                time.sleep(0.01)
                return len(answers) >= 10
            assert wait_for(stream, 60.0, period=0.0), log.read_text()
    finally:
        code = stop_node(process)
    text = log.read_text()
    assert code == 0 and 'Traceback' not in text, text
    assert 'record not written' in text, text
