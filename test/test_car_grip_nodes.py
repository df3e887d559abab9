"""The grip estimate over real DDS: car_model_learner publishes it, car_mpc takes it."""
import math
import time

from geometry_msgs.msg import PoseStamped, Twist, TwistStamped
import pytest
from rclpy.qos import qos_profile_sensor_data
from robot_dynamics_learning.control.track import load_track_spec, Track
from robot_dynamics_learning.nodes.conversions import planar_pose_msg, time_msg
from ros_util import (Arrivals, ROOT, start_node, stop_node, subscribed, TestNode, wait_for,
                      watch_diagnostics)
from std_msgs.msg import Float64

pytestmark = pytest.mark.ros
OVAL = str(ROOT / 'config' / 'tracks' / 'oval.yaml')
SIM_MODEL = str(ROOT / 'config' / 'models' / 'car_mlp_sim.pt')


def _publish_state(pub_pose, pub_twist, stamp: int, pose: tuple, speed: float,
                   yaw_rate: float) -> None:
    pub_pose.publish(planar_pose_msg(stamp, *pose))
    twist = TwistStamped()
    twist.header.stamp = time_msg(stamp)
    twist.twist.linear.x, twist.twist.angular.z = speed, yaw_rate
    pub_twist.publish(twist)


def test_model_learner_publishes_a_falling_grip_estimate_when_the_car_slides(tmp_path):
    """Full steering at 1 m/s asks for 2.8 rad/s; the car turns at 1 rad/s: it slides."""
    process = start_node('car_model_learner', params={
        'checkpoint_dir': str(tmp_path / 'models'), 'model': 'car_bicycle',
        'command_delay_s': 0.0, 'grip_gain': 0.2}, log_path=tmp_path / 'learner.log')
    try:
        with TestNode('grip_probe') as probe:
            grips = Arrivals(probe.node, Float64, 'car/grip', lambda msg: msg.data)
            pub_pose = probe.node.create_publisher(PoseStamped, 'car/pose',
                                                   qos_profile_sensor_data)
            pub_twist = probe.node.create_publisher(TwistStamped, 'car/twist',
                                                    qos_profile_sensor_data)
            pub_command = probe.node.create_publisher(Twist, 'command', 10)
            assert subscribed(pub_command, timeout=30.0)
            start = time.monotonic()
            while time.monotonic() - start < 8.0 and not (
                    len(grips) and grips.since()[-1][1] < 6.0):
                t = time.monotonic() - start
                pose = (math.sin(t), 1 - math.cos(t), t)
                _publish_state(pub_pose, pub_twist, time.time_ns(), pose, 1.0, 1.0)
                command = Twist()
                command.linear.x, command.angular.z = 0.3, 1.0
                pub_command.publish(command)
                time.sleep(0.02)
            values = [value for _, value in grips.since()]
            assert values, (tmp_path / 'learner.log').read_text()
            assert values[0] == pytest.approx(8.0, abs=0.1)   # the ceiling: no evidence yet
            assert min(values) < 6.0 and all(math.isfinite(v) for v in values)
    finally:
        assert stop_node(process) == 0, (tmp_path / 'learner.log').read_text()


def test_mpc_takes_the_grip_estimate_and_refuses_a_bad_one(tmp_path):
    process = start_node('car_mpc', params={
        'checkpoint': SIM_MODEL, 'track_file': OVAL, 'iterations': 1, 'candidates': 32,
        'budget_s': 1.0, 'grip_weight': 20.0}, log_path=tmp_path / 'mpc.log')
    pose = Track(load_track_spec(OVAL)).pose_at(0.0)
    try:
        with TestNode('mpc_grip_probe') as probe:
            counters = watch_diagnostics(probe.node, 'car_mpc')
            commands = Arrivals(probe.node, Twist, 'command', lambda msg: msg.linear.x)
            pub_grip = probe.node.create_publisher(Float64, 'car/grip', 10)
            pub_pose = probe.node.create_publisher(PoseStamped, 'car/pose',
                                                   qos_profile_sensor_data)
            pub_twist = probe.node.create_publisher(TwistStamped, 'car/twist',
                                                    qos_profile_sensor_data)
            assert subscribed(pub_grip, timeout=60.0, also=lambda: 'commands' in counters), \
                (tmp_path / 'mpc.log').read_text()
            for value in (math.nan, -1.0, 3.0):
                pub_grip.publish(Float64(data=value))
            end = time.monotonic() + 1.5
            while time.monotonic() < end:   # fresh states: the MPC solves with the bound
                _publish_state(pub_pose, pub_twist, time.time_ns(), pose, 1.0, 0.0)
                time.sleep(0.01)
            assert wait_for(lambda: counters.get('rejected_grip') == '2'
                            and counters.get('grip_updates') == '1', 5.0), counters
            assert any(throttle > 0.05 for _, throttle in commands.since()), 'no driving'
    finally:
        assert stop_node(process) == 0, (tmp_path / 'mpc.log').read_text()
