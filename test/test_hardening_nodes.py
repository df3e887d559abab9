"""
Issue 17 regressions over real DDS.

car_mpc's clock, the estimator's future stamps, the learner's bad checkpoints and messages.
"""
import math
import time

from geometry_msgs.msg import PoseStamped, Twist
import numpy as np
import pytest
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.msg import ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters
from rclpy.qos import qos_profile_sensor_data
from robot_dynamics_learning.control.car_training import build_car_model, save_car_model
from robot_dynamics_learning.learning.checkpoint import CheckpointDirectory, tensor_checksum
from robot_dynamics_learning.models.registry import build_model
from robot_dynamics_learning.nodes.conversions import planar_pose_msg
from ros_util import (Arrivals, estimator_probe, ROOT, start_node, stop_node, subscribed, TestNode,
                      wait_for, watch_diagnostics)
import torch

pytestmark = pytest.mark.ros
OVAL = str(ROOT / 'config' / 'tracks' / 'oval.yaml')


def _set_bool(probe: TestNode, node: str, name: str, value: bool):
    """Call <node>/set_parameters over DDS; return the one SetParametersResult."""
    client = probe.node.create_client(SetParameters, f'{node}/set_parameters')
    assert client.wait_for_service(timeout_sec=30.0)
    request = SetParameters.Request(parameters=[ParameterMsg(
        name=name, value=ParameterValue(type=ParameterType.PARAMETER_BOOL, bool_value=value))])
    future = client.call_async(request)
    assert wait_for(future.done, 10.0)
    return future.result().results[0]


def test_f03_mpc_refuses_use_sim_time_at_run_time_and_keeps_braking(tmp_path):
    checkpoint = save_car_model(tmp_path / 'bicycle.pt', build_car_model('car_bicycle'), {})
    log = tmp_path / 'mpc.log'
    process = start_node('car_mpc', params={'checkpoint': str(checkpoint), 'track_file': OVAL,
                                            'iterations': 1, 'candidates': 32,
                                            'brake_throttle': -0.25}, log_path=log)
    try:
        with TestNode('mpc_clock_probe') as probe:
            commands = Arrivals(probe.node, Twist, 'command')
            assert wait_for(lambda: len(commands) > 0, 60.0), log.read_text()
            result = _set_bool(probe, '/car_mpc', 'use_sim_time', True)
            assert not result.successful
            assert 'use_sim_time' in result.reason
            changed = time.monotonic()
            time.sleep(2.0)   # the issue saw no command at all for 2 s
            after = commands.since(changed)
            # 20 Hz would give 40; half of that leaves room for a loaded machine's late ticks.
            assert len(after) >= 20, f'{len(after)} brake commands in 2 s (20 Hz expected)'
    finally:
        assert stop_node(process) == 0, log.read_text()


def test_f04_estimator_is_not_blinded_by_one_future_pose(tmp_path):
    log = tmp_path / 'estimator.log'
    process = start_node('car_state_estimator', log_path=log)
    try:
        with TestNode('estimator_future_probe') as probe:
            twists, counters, publisher = estimator_probe(probe.node)
            assert subscribed(publisher, timeout=20.0)
            assert wait_for(lambda: 'parser_accepted' in counters, 30.0), log.read_text()
            rate, future_index = 200.0, 100
            stamps: list = []

            def estimates_after_future() -> int:
                return sum(m.header.stamp.sec * 10**9 + m.header.stamp.nanosec
                           > stamps[future_index + 1] for m in twists)

            # Poses go on after the future one until 50 estimates follow it (a blinded estimator
            # publishes none) or 15 s pass: a stall in either process cannot shrink the window.
            deadline = time.monotonic() + 15.0
            i = 0
            while i <= future_index + 100 or (
                    estimates_after_future() <= 50 and time.monotonic() < deadline):
                stamp = time.time_ns()
                if i == future_index:
                    stamp += 30 * 1_000_000_000   # one pose 30 s ahead
                stamps.append(stamp)
                angle = 0.5 * i / rate
                publisher.publish(planar_pose_msg(stamp, math.sin(angle), 0.0, angle))
                time.sleep(1.0 / rate)
                i += 1
            assert wait_for(lambda: counters.get('parser_future_stamp') == '1', 5.0), counters
            assert 'parser_stamp_backwards' not in counters, counters
            assert estimates_after_future() > 50, \
                f'{estimates_after_future()} estimates after the future pose, {i} poses sent'
    finally:
        assert stop_node(process) == 0, log.read_text()


def test_f01_f05_f08_learner_skips_bad_checkpoints_and_bad_messages_never_reset(tmp_path):
    from test_continual_nodes import good_sample, LEARNER, NAMES, Probe
    folder = CheckpointDirectory(tmp_path)
    model = build_model('lstm', {'hidden_size': 8}, 9, 3, 3)
    folder.save(model, NAMES, {'steps': 7})
    for edit in ('nan', 'shape'):   # two newer checkpoints, each bad in its own way
        path = folder.save(model, NAMES, {'steps': 8})
        payload = torch.load(path, weights_only=True)
        key = next(k for k, v in payload['state_dict'].items() if v.dim() == 2)
        payload['state_dict'][key] = (torch.full_like(payload['state_dict'][key], math.nan)
                                      if edit == 'nan' else torch.zeros(2, 2))
        payload['checksum'] = tensor_checksum(payload['state_dict'])
        torch.save(payload, path)
    log = tmp_path / 'learner.log'
    process = start_node('dynamics_learner', {**LEARNER, 'checkpoint_dir': str(tmp_path)},
                         log_path=log)
    try:
        with TestNode('learner_hardening_probe') as test_node:
            probe = Probe(test_node, 'dynamics_learner')
            assert probe.wait_ready(), log.read_text()
            assert 'model_000000.pt (step 7)' in log.read_text(), log.read_text()
            stamp = 100 * 10 ** 9
            for k in range(40):
                stamp += 2_000_000
                probe.send(good_sample(k, stamp), expect_prediction=k >= 4)
            zero = good_sample(40, 0)
            old_nan = good_sample(41, 10 ** 9)   # 99 s back: a reset, were it valid
            old_nan.position[0] = math.nan
            negative = good_sample(42, 10 ** 9)
            negative.header.stamp.sec = -5
            for msg in (zero, old_nan, negative):
                probe.send(msg, expect_prediction=False)
            stamp += 2_000_000
            probe.send(good_sample(43, stamp), expect_prediction=True)   # state kept warm
            assert wait_for(lambda: probe.diag('messages_negative_stamp') == 1, 10), \
                probe.diagnostics
            assert probe.diag('messages_zero_stamp') == 1
            assert probe.diag('messages_non_finite') == 1
            assert probe.diag('time_resets') == 0
            assert probe.diag('checkpoints_skipped_non_finite') == 1
            assert probe.diag('checkpoints_skipped_size') == 1
            assert all(np.isfinite(p.effort).all() for p in probe.predictions)
        assert process.poll() is None, 'the node stopped'
    finally:
        assert stop_node(process) == 0, log.read_text()


@pytest.mark.parametrize('params, words', [
    ({'throttle_scale': 1e-300}, ['throttle_scale', '1e-300']),
    ({'steering_scale': float('nan')}, ['steering_scale', 'finite']),
])
def test_f11_car_mpc_refuses_absurd_scales_at_start(tmp_path, params, words):
    log = tmp_path / 'mpc.log'
    process = start_node('car_mpc', params={'track_file': OVAL, **params}, log_path=log)
    try:
        assert process.wait(timeout=120) != 0
    finally:
        stop_node(process)
    text = log.read_text()
    assert all(word in text for word in words), text


def test_f05_predictor_stays_up_on_bad_newer_checkpoints(tmp_path):
    from test_continual_nodes import good_sample, NAMES, Probe
    folder = CheckpointDirectory(tmp_path, keep_last=10)
    model = build_model('lstm', {'hidden_size': 8}, 9, 3, 3)
    folder.save(model, NAMES, {'steps': 7})
    log = tmp_path / 'predictor.log'
    process = start_node('torque_predictor', {'checkpoint_dir': str(tmp_path),
                                              'poll_period_s': 0.2, 'accel_window': 5,
                                              'diagnostics_period_s': 0.3}, log_path=log)
    try:
        with TestNode('predictor_hardening_probe') as test_node:
            probe = Probe(test_node, 'torque_predictor')
            assert probe.wait_ready(), log.read_text()
            edits = {'size': lambda p: p['state_dict'].update(
                         {next(iter(p['state_dict'])): torch.zeros(2, 2)}),
                     'malformed': lambda p: p.pop('dims'),
                     'non_finite': lambda p: [v.fill_(math.nan)
                                              for v in p['state_dict'].values()
                                              if v.is_floating_point()]}
            for reason, edit in edits.items():   # the three cases that killed the predictor
                path = folder.save(model, NAMES, {'steps': 8})
                payload = torch.load(path, weights_only=True)
                edit(payload)
                payload['checksum'] = tensor_checksum(payload['state_dict'])
                torch.save(payload, path)
                assert wait_for(lambda: probe.diag(f'checkpoints_skipped_{reason}') >= 1, 20), \
                    (probe.diagnostics, log.read_text())
            time.sleep(1.0)   # five more polls: each bad file is refused once, not per poll
            assert [probe.diag(f'checkpoints_skipped_{r}') for r in edits] == [3, 2, 1]
            loop = tmp_path / 'model_000099.pt'   # os.stat raised ELOOP in the poll timer
            loop.symlink_to(loop.name)
            assert wait_for(lambda: probe.diag('checkpoints_skipped_unreadable') >= 1, 20), \
                (probe.diagnostics, log.read_text())
            stamp = 100 * 10 ** 9
            for k in range(20):
                stamp += 2_000_000
                probe.send(good_sample(k, stamp), expect_prediction=k >= 4)
            assert probe.diagnostics['checkpoint'].endswith('model_000000.pt')
            assert all(np.isfinite(p.effort).all() for p in probe.predictions)
        assert process.poll() is None, 'the predictor stopped'
    finally:
        assert stop_node(process) == 0, log.read_text()


def test_mpc_refuses_garbage_poses_by_reason(tmp_path):
    checkpoint = save_car_model(tmp_path / 'bicycle.pt', build_car_model('car_bicycle'), {})
    log = tmp_path / 'mpc.log'
    process = start_node('car_mpc', params={'checkpoint': str(checkpoint), 'track_file': OVAL,
                                            'iterations': 1, 'candidates': 32}, log_path=log)
    try:
        with TestNode('mpc_pose_probe') as probe:
            counters = watch_diagnostics(probe.node, 'car_mpc')
            pub_pose = probe.node.create_publisher(PoseStamped, 'car/pose',
                                                   qos_profile_sensor_data)
            assert subscribed(pub_pose, timeout=60.0, also=lambda: 'commands' in counters), \
                log.read_text()
            zero = planar_pose_msg(time.time_ns(), 0.0, 0.0, 0.0)
            zero.pose.orientation.w = 0.0   # was read as yaw 0
            nan = planar_pose_msg(time.time_ns() + 1000, math.nan, 0.0, 0.0)
            for msg in (zero, nan):
                pub_pose.publish(msg)
            assert wait_for(lambda: counters.get('rejected_pose_bad_quaternion') == '1'
                            and counters.get('rejected_pose_non_finite') == '1', 10.0), counters
        assert process.poll() is None
    finally:
        assert stop_node(process) == 0, log.read_text()


def test_mpc_brake_during_a_solve_leaves_the_plan_to_the_solving_tick(tmp_path):
    # The watchdog reset TrackMPC while a tick was inside solve(): solve then read a None
    # plan and the node died (AttributeError), seen once in test_car_nodes under load.
    import rclpy
    from robot_dynamics_learning.control.track import load_track_spec, Track
    from robot_dynamics_learning.nodes.car_mpc import CarMPCNode
    checkpoint = save_car_model(tmp_path / 'bicycle.pt', build_car_model('car_bicycle'), {})
    rclpy.init(args=['--ros-args', '-p', f'checkpoint:={checkpoint}', '-p',
                     f'track_file:={OVAL}', '-p', 'iterations:=1', '-p', 'candidates:=32',
                     '-p', 'budget_s:=1.0'])
    try:
        node = CarMPCNode()
        x, y, yaw = Track(load_track_spec(OVAL)).pose_at(0.0)
        assert node.mpc.solve(np.array([x, y, yaw, 1.0, 0.0, 0.0])).ok
        plan = node.mpc._plan
        assert plan is not None
        with node._solve_lock:          # a tick is solving
            with node._lock:
                node._publish_brake('stale')
            assert node.mpc._plan is plan, 'reset under a running solve'
        with node._lock:                # no solve running: the brake resets at once
            node._publish_brake('stale')
        assert node.mpc._plan is None
        node.destroy_node()
    finally:
        rclpy.try_shutdown()
