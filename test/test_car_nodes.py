"""
The car nodes over real DDS on localhost.

Estimator validation counters, the stale-state brake, and the closed loop car_sim ->
car_state_estimator -> car_mpc as separate processes.
"""
import json
import math
from pathlib import Path
import time

from geometry_msgs.msg import PoseStamped, Twist, TwistStamped
import numpy as np
import pytest
from rclpy.qos import qos_profile_sensor_data

from robot_dynamics_learning.control.car_training import (build_car_model, load_car_model,
                                                          save_car_model)
from robot_dynamics_learning.control.track import LapCounter, load_track_spec, Track
from robot_dynamics_learning.nodes.conversions import planar_pose_msg, time_msg
from ros_util import (Arrivals, estimator_probe, ROOT, start_node, stop_node, subscribed, TestNode,
                      wait_for, watch_diagnostics)

pytestmark = pytest.mark.ros
OVAL = str(ROOT / 'config' / 'tracks' / 'oval.yaml')
SIM_MODEL = str(ROOT / 'config' / 'models' / 'car_mlp_sim.pt')


@pytest.fixture(scope='module')
def bicycle_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp('car') / 'bicycle.pt'
    return str(save_car_model(path, build_car_model('car_bicycle'), {}))


def test_estimator_smooths_and_rejects_bad_poses_over_dds(tmp_path):
    process = start_node('car_state_estimator', log_path=tmp_path / 'estimator.log')
    try:
        with TestNode('estimator_probe') as probe:
            twists, counters, publisher = estimator_probe(probe.node)
            assert subscribed(publisher, timeout=20.0)
            # Diagnostics come from the node's timer: once they arrive it is spinning, so no
            # pose is lost to a node still starting up (best-effort QoS, depth 5).
            assert wait_for(lambda: 'accepted' in counters, 30.0)
            start_ns = time.time_ns()
            rate, speed, radius = 240.0, 1.5, 1.0
            for i in range(int(1.5 * rate)):
                t = i / rate
                angle = speed / radius * t
                stamp = start_ns + int(t * 1e9)
                x, y = radius * math.sin(angle), radius * (1 - math.cos(angle))
                if i in (150, 200, 250):
                    time.sleep(0.05)   # the node's best-effort queue (depth 5) drains first
                if i == 150:
                    x = float('nan')
                elif i == 200:
                    stamp -= int(0.5e9)  # out of order
                elif i == 250:
                    x += 2.0  # jump
                publisher.publish(planar_pose_msg(stamp, x, y, angle))
                time.sleep(1.0 / rate)
            assert wait_for(lambda: counters.get('rejected_jump') == '1', 5.0), counters
            assert counters.get('parser_non_finite') == '1'
            assert counters.get('parser_stamp_backwards') == '1'
            assert len(twists) > 100  # publish_rate_hz 100 over 1.5 s of poses
            late = [m.twist for m in twists[-50:]]
            assert np.median([t.linear.x for t in late]) == pytest.approx(speed, abs=0.1)
            yaw_rate = np.median([t.angular.z for t in late])
            assert yaw_rate == pytest.approx(speed / radius, abs=0.15)
            assert all(math.isfinite(m.twist.linear.x) for m in twists)
    finally:
        assert stop_node(process) == 0, (tmp_path / 'estimator.log').read_text()


def test_mpc_brakes_within_150_ms_when_the_state_goes_stale(tmp_path, bicycle_checkpoint):
    brake = -0.25
    process = start_node('car_mpc', params={
        'checkpoint': bicycle_checkpoint, 'track_file': OVAL, 'iterations': 1,
        'candidates': 32, 'budget_s': 1.0, 'brake_throttle': brake},
        log_path=tmp_path / 'mpc.log')
    track = Track(load_track_spec(OVAL))
    try:
        with TestNode('mpc_probe') as probe:
            commands = Arrivals(probe.node, Twist, 'command',
                                lambda msg: (msg.linear.x, msg.angular.z))
            pub_pose, pub_twist = state_publishers(probe.node)
            # Before any state the node brakes (stale from the start).
            assert wait_for(lambda: len(commands) > 0, 60.0), (tmp_path / 'mpc.log').read_text()
            x, y, yaw = track.pose_at(0.0)

            def stale_trial() -> str:
                """Stream 2 s of fresh state, stop; return '' or what went wrong."""
                streamed = time.monotonic()
                for _ in range(200):  # 2 s of state at 100 Hz
                    stamp = time.time_ns()
                    pub_pose.publish(planar_pose_msg(stamp, x, y, yaw))
                    twist = TwistStamped()
                    twist.header.stamp = time_msg(stamp)
                    twist.twist.linear.x = 1.0
                    pub_twist.publish(twist)
                    last_publish = time.monotonic()
                    time.sleep(0.01)
                time.sleep(0.5)
                driving = [t for t, (throttle, _) in commands.since(streamed) if throttle != brake]
                assert len([t for t in driving if t < last_publish]) > 10, \
                    'the MPC did not drive while the state was fresh'
                # A stall may make the state stale while it streams, and the node rightly
                # brakes, then drives on the next fresh state. What must hold: after the final
                # state, the brake follows the final driving command within 150 ms and nothing
                # but the brake comes after it.
                final_drive = max(driving)
                after = commands.since(max(final_drive, last_publish))
                assert after and all(command == (brake, 0.0) for _, command in after), \
                    f'no brake, or driving, after the state went stale: {after}'
                late = after[0][0] - last_publish
                return '' if late < 0.15 else (
                    f'braked {late:.3f} s after the final state; final driving command at '
                    f'{final_drive - last_publish:+.3f} s')
            # Timed by arrival in this process: a loaded machine can delay one brake past
            # 150 ms, so a trial may be repeated; a node that is late every time fails.
            failures = []
            while len(failures) < 3 and (failure := stale_trial()):
                failures.append(failure)
            assert len(failures) < 3, failures
    finally:
        assert stop_node(process) == 0, (tmp_path / 'mpc.log').read_text()


def state_publishers(node) -> tuple:
    """Return publishers of the car's pose and body twist, as the estimator publishes them."""
    return (node.create_publisher(PoseStamped, 'car/pose', qos_profile_sensor_data),
            node.create_publisher(TwistStamped, 'car/twist', qos_profile_sensor_data))


def publish_state(pub_pose, pub_twist, stamp_ns, pose, speed=1.0):
    """Publish one complete state (pose and body twist with the same stamp)."""
    pub_pose.publish(planar_pose_msg(stamp_ns, *pose))
    twist = TwistStamped()
    twist.header.stamp = time_msg(stamp_ns)
    twist.twist.linear.x = speed
    pub_twist.publish(twist)


def test_mpc_stays_braked_on_late_stale_and_out_of_order_states(tmp_path, bicycle_checkpoint):
    """
    After a stale brake, states stamped too long ago or out of order never make it drive.

    The staleness is judged by the header stamp, not by when a message arrives: a
    late-delivered old state must not produce a driving command. Fresh states afterwards
    make it drive again (so the node is alive and the test can fail).
    """
    brake = -0.25
    process = start_node('car_mpc', params={
        'checkpoint': bicycle_checkpoint, 'track_file': OVAL, 'iterations': 1,
        'candidates': 32, 'budget_s': 1.0, 'brake_throttle': brake},
        log_path=tmp_path / 'mpc.log')
    pose = Track(load_track_spec(OVAL)).pose_at(0.0)
    try:
        with TestNode('mpc_late_probe') as probe:
            commands = Arrivals(probe.node, Twist, 'command', lambda msg: msg.linear.x)
            counters = watch_diagnostics(probe.node, 'car_mpc')
            pub_pose, pub_twist = state_publishers(probe.node)
            assert wait_for(lambda: len(commands) > 0 and 'commands' in counters, 60.0), \
                (tmp_path / 'mpc.log').read_text()

            def drive(seconds):
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    stamp = time.time_ns()
                    publish_state(pub_pose, pub_twist, stamp, pose)
                    time.sleep(0.01)
                return stamp

            def driving_since(start):
                return [t for t, throttle in commands.since(start) if throttle != brake]
            last_stamp = drive(1.0)
            assert wait_for(lambda: driving_since(0.0), 5.0), 'no driving with fresh states'
            # The watchdog brakes once the last state is 150 ms old (waited for: a loaded
            # machine may delay the node's tick).
            assert wait_for(lambda: commands.since()[-1][1] == brake, 2.0), \
                'no brake after the state went stale'
            braked = time.monotonic()
            # Late deliveries: newer than the last state but stamped 300 ms ago, and one
            # older than the last state (out of order), each repeated at 100 Hz.
            for i in range(20):
                publish_state(pub_pose, pub_twist, last_stamp + (i + 1) * 1000, pose)
                publish_state(pub_pose, pub_twist, last_stamp - int(0.05e9), pose)
                time.sleep(0.01)
            time.sleep(0.5)
            assert not driving_since(braked), 'drove on a stale or out-of-order state'
            assert wait_for(lambda: int(counters.get('rejected_out_of_order', 0)) >= 2, 5.0), \
                counters
            resumed = time.monotonic()
            drive(1.0)
            assert wait_for(lambda: driving_since(resumed), 5.0), 'no driving after fresh states'
    finally:
        assert stop_node(process) == 0, (tmp_path / 'mpc.log').read_text()


def test_model_learner_learns_from_driving_and_writes_checkpoints(tmp_path):
    folder = tmp_path / 'models'
    process = start_node('car_model_learner', params={
        'checkpoint_dir': str(folder), 'min_transitions': 20, 'batch_size': 16,
        'save_period_s': 0.5, 'model': 'car_bicycle'},
        log_path=tmp_path / 'learner.log')
    try:
        with TestNode('learner_probe') as probe:
            pub_pose, pub_twist = state_publishers(probe.node)
            pub_command = probe.node.create_publisher(Twist, 'command', 10)
            assert subscribed(pub_command, timeout=30.0)
            start = time.monotonic()
            while time.monotonic() - start < 6.0 and not list(folder.glob('car_model_*.pt')):
                t = time.monotonic() - start
                stamp = time.time_ns()
                angle = 1.0 * t
                pub_pose.publish(planar_pose_msg(stamp, math.sin(angle), 1 - math.cos(angle),
                                                 angle))
                twist = TwistStamped()
                twist.header.stamp = time_msg(stamp)
                twist.twist.linear.x, twist.twist.angular.z = 1.0, 1.0
                pub_twist.publish(twist)
                command = Twist()
                command.linear.x, command.angular.z = 0.3, 0.5
                pub_command.publish(command)
                time.sleep(0.02)
            assert wait_for(lambda: list(folder.glob('car_model_*.pt')), 10.0), \
                (tmp_path / 'learner.log').read_text()
    finally:
        assert stop_node(process) == 0, (tmp_path / 'learner.log').read_text()
    model = load_car_model(sorted(folder.glob('car_model_*.pt'))[-1])
    assert model.kind == 'forward' and model.h == pytest.approx(0.05)


def run_closed_loop(tmp_path, seconds, mpc_params, record=None, mocap_rate_hz=240.0):
    """Run sim, estimator and MPC as processes; return laps, lap times, max |lateral|."""
    track = Track(load_track_spec(OVAL))
    sim = start_node('car_sim', params={'track_file': OVAL, 'dropout': 0.02,
                                        'position_std': 0.002, 'yaw_std': 0.005,
                                        'mocap_rate_hz': mocap_rate_hz},
                     log_path=tmp_path / 'sim.log')
    estimator = start_node('car_state_estimator', params={'publish_rate_hz': 50.0},
                           log_path=tmp_path / 'estimator.log')
    mpc = start_node('car_mpc', params={'track_file': OVAL, 'checkpoint': SIM_MODEL,
                                        **mpc_params}, log_path=tmp_path / 'mpc.log')
    processes = [sim, estimator, mpc]
    poses = []
    try:
        with TestNode('closed_loop_probe') as probe:
            commands, counters = [], None
            counters = watch_diagnostics(probe.node, 'car_mpc')
            probe.node.create_subscription(
                PoseStamped, 'car_sim/true_pose',
                lambda m: poses.append((time.monotonic(), m.pose.position.x,
                                        m.pose.position.y)), 10)
            probe.node.create_subscription(Twist, 'command', commands.append, 10)
            # Wait until the MPC sends driving commands, then measure.
            assert wait_for(lambda: any(c.linear.x > 0.05 for c in commands), 300.0), \
                (tmp_path / 'mpc.log').read_text()
            start = time.monotonic()
            time.sleep(seconds)
            samples = [p for p in poses if p[0] >= start]
    finally:
        codes = [stop_node(p) for p in processes]
    assert codes == [0, 0, 0], (tmp_path / 'mpc.log').read_text()
    laps = LapCounter(track, np.array(samples[0][1:]))
    for stamp, x, y in samples[1:]:
        laps.update(stamp - samples[0][0], np.array([x, y]))
    result = {'seconds': seconds, 'progress_m': laps.travelled, 'laps': laps.laps,
              'lap_times_s': laps.lap_times(), 'max_lateral_m': max(laps.max_lateral),
              'half_width_m': track.half_width, 'mpc_counters': dict(counters)}
    if record is not None:
        Path(record).parent.mkdir(parents=True, exist_ok=True)
        Path(record).write_text(json.dumps(result, indent=2))
    return result


def test_closed_loop_drives_along_the_track(tmp_path):
    """CI version: 12 s of driving, cheap solver settings for a loaded 2-core machine."""
    result = run_closed_loop(tmp_path, 12.0, {'iterations': 1, 'candidates': 64,
                                              'budget_s': 0.25, 'target_speed': 1.2},
                             mocap_rate_hz=120.0)
    assert result['progress_m'] > 5.0, result
    assert result['max_lateral_m'] < result['half_width_m'], result


@pytest.mark.slow
def test_closed_loop_three_laps_full_solver(tmp_path):
    """
    Acceptance: >= 3 laps at 1.5 m/s with the full solver (512 candidates, up to 3 iterations).

    The MPC fast path (no torch.compile), delay compensation on (the default). The budget is
    0.1 s rather than the default 0.05 s and mocap runs at 120 Hz: on our shared, loaded
    2-core machine three Python node processes compete for the cores (bench/results/mpc.json
    has the tick times); iterations that would end after 70 % of the budget are skipped. 50 s
    leave room for the slow start from rest.
    """
    result = run_closed_loop(tmp_path, 50.0, {'budget_s': 0.1, 'target_speed': 1.5},
                             record=ROOT / 'bench' / 'results' / 'car_closed_loop.json',
                             mocap_rate_hz=120.0)
    assert result['laps'] >= 3.0, result
    assert result['max_lateral_m'] < result['half_width_m'], result


def test_estimator_takes_vicon_bridge_transforms_with_pose_type(tmp_path):
    """vicon_bridge publishes TransformStamped: pose_type names it instead of a relay node."""
    from geometry_msgs.msg import TransformStamped
    log = tmp_path / 'estimator.log'
    process = start_node('car_state_estimator', {'pose_type': 'transform_stamped'},
                         log_path=log)
    try:
        with TestNode('estimator_transform_probe') as probe:
            twists = []
            probe.node.create_subscription(TwistStamped, 'car/twist', twists.append,
                                           qos_profile_sensor_data)
            publisher = probe.node.create_publisher(TransformStamped, 'mocap_pose',
                                                    qos_profile_sensor_data)
            assert subscribed(publisher, timeout=20.0), \
                log.read_text()
            start_ns, speed = time.time_ns(), 1.2
            for i in range(240):
                t = i / 240.0
                pose = planar_pose_msg(start_ns + int(t * 1e9), speed * t, 0.0, 0.0)
                msg = TransformStamped(header=pose.header, child_frame_id='car')
                msg.transform.translation.x = pose.pose.position.x
                msg.transform.rotation = pose.pose.orientation
                publisher.publish(msg)
                time.sleep(1.0 / 240.0)
            assert wait_for(lambda: len(twists) > 50, 5.0), log.read_text()
            assert np.median([m.twist.linear.x for m in twists[-20:]]) == pytest.approx(
                speed, abs=0.05)
    finally:
        assert stop_node(process) == 0, log.read_text()
    bad = start_node('car_state_estimator', {'pose_type': 'pose'},
                     log_path=tmp_path / 'bad.log')
    assert bad.wait(timeout=30) == 2
    assert "pose_type must be one of ['pose_stamped'" in (tmp_path / 'bad.log').read_text()
