"""car_state_estimator's command path over real DDS: stamped commands drive the yaw filter."""
import math
import time

from geometry_msgs.msg import TwistStamped
import pytest
from robot_dynamics_learning.nodes.conversions import planar_pose_msg, time_msg
from ros_util import estimator_probe, start_node, stop_node, subscribed, TestNode, wait_for

pytestmark = pytest.mark.ros


def test_estimator_uses_stamped_commands_and_rejects_bad_ones_over_dds(tmp_path):
    log = tmp_path / 'estimator.log'
    process = start_node('car_state_estimator', params={'command_type': 'twist_stamped'},
                         log_path=log)
    try:
        with TestNode('estimator_command_probe') as probe:
            twists, counters, poses = estimator_probe(probe.node)
            commands = probe.node.create_publisher(TwistStamped, 'command', 10)
            assert subscribed(poses, commands, timeout=20.0)
            assert wait_for(lambda: 'command_accepted' in counters, 30.0), log.read_text()

            def command(stamp_ns: int, steering: float) -> None:
                msg = TwistStamped()
                msg.header.stamp = time_msg(stamp_ns)
                msg.twist.linear.x, msg.twist.angular.z = 0.3, steering
                commands.publish(msg)
            rate, speed, radius = 100.0, 1.5, 1.0
            start_ns = time.time_ns()
            for i in range(int(1.5 * rate)):
                t = i / rate
                stamp = start_ns + int(t * 1e9)
                if i == 50:
                    command(stamp, float('nan'))              # refused by the parser
                elif i == 60:
                    command(stamp - int(0.2e9), 0.2)          # older than the last: late
                else:
                    command(stamp, 0.2)
                angle = speed / radius * t
                poses.publish(planar_pose_msg(stamp, radius * math.sin(angle),
                                              radius * (1 - math.cos(angle)), angle))
                time.sleep(1.0 / rate)
            assert wait_for(lambda: counters.get('command_rejected_late') == '1', 5.0), counters
            assert counters.get('command_parser_non_finite') == '1', counters
            assert int(counters['command_accepted']) > 100, counters
            # Every pose after the first command had one: the filter, never the fit, answered.
            assert int(counters['fit_fallback']) < 10, counters
            late = [m.twist.angular.z for m in twists[-30:]]
            assert sum(late) / len(late) == pytest.approx(speed / radius, abs=0.15)
            assert all(math.isfinite(m.twist.angular.z) for m in twists)
    finally:
        assert stop_node(process) == 0, log.read_text()
