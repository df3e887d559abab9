"""
One launch_testing run of an installed launch file, described by $RDL_LAUNCH_CASE (JSON).

Run by test/test_launch_real.py as `python -m launch_testing.launch_test test/launch_case.py`
against a colcon install of the package (launch_support.py builds it). The case names the
launch file and its arguments, extra nodes that feed it data (e.g. arm_sim for the learner),
and what must be seen: node names, topics with a message count (`driving`: only commands
that are not the brake count), and parameter values the nodes report over their parameter
services (a value, {'startswith': prefix}, or `same` across two nodes). After shutdown
(launch sends SIGINT to every process) every process must have exited with code 0 and
printed no traceback.
"""
import importlib
import json
import os
import time
from typing import Any, Dict, List
import unittest

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch_ros.actions import Node
import launch_testing
import launch_testing.actions
import launch_testing.asserts
import pytest
from rcl_interfaces.srv import GetParameters
import rclpy
from rclpy.parameter import parameter_value_to_python
from rclpy.qos import qos_profile_sensor_data

PACKAGE = 'robot_dynamics_learning'
CASE: Dict[str, Any] = json.loads(os.environ.get('RDL_LAUNCH_CASE', '{}'))
DRIVE_THRESHOLD = 0.05   # Twist linear.x above this is a drive command, not the brake


@pytest.mark.launch_test
def generate_test_description():
    """Include the launch file under test with the case's arguments, plus its data sources."""
    share = get_package_share_directory(PACKAGE)
    actions: List[Any] = [IncludeLaunchDescription(
        PythonLaunchDescriptionSource(os.path.join(share, 'launch', CASE['launch'])),
        launch_arguments=CASE.get('args', {}).items())]
    for extra in CASE.get('extra_nodes', []):
        parameters = [os.path.join(share, 'config', extra['params_file'])] \
            if extra.get('params_file') else []
        actions.append(Node(package=PACKAGE, executable=extra['executable'],
                            name=extra['executable'], namespace=extra.get('namespace', ''),
                            output='screen',
                            parameters=parameters + [extra.get('parameters', {})],
                            remappings=list(extra.get('remappings', {}).items())))
    return LaunchDescription(actions + [launch_testing.actions.ReadyToTest()]), {}


def _message_type(name: str) -> type:
    """'sensor_msgs/msg/JointState' -> the message class."""
    package, kind, message = name.split('/')
    return getattr(importlib.import_module(f'{package}.{kind}'), message)


class TestRunningGraph(unittest.TestCase):
    """While the launch runs: nodes up, topics flowing, parameters as configured."""

    @classmethod
    def setUpClass(cls) -> None:
        rclpy.init()
        cls.node = rclpy.create_node('launch_case_probe')
        cls.deadline = time.monotonic() + float(CASE.get('timeout', 90.0))

    @classmethod
    def tearDownClass(cls) -> None:
        cls.node.destroy_node()
        rclpy.shutdown()

    def _spin_until(self, done) -> bool:
        while time.monotonic() < self.deadline:
            if done():
                return True
            rclpy.spin_once(self.node, timeout_sec=0.1)
        return done()

    def test_1_nodes_start(self) -> None:
        expected = set(CASE.get('nodes', []))

        def running() -> set:
            return {(ns.rstrip('/') + '/' + name) for name, ns
                    in self.node.get_node_names_and_namespaces()}
        self._spin_until(lambda: expected <= running())
        self.assertLessEqual(expected, running(), 'nodes missing')

    def test_2_topics_flow(self) -> None:
        counts: Dict[str, int] = {}
        subscriptions = []
        driving = CASE.get('driving')
        for topic, type_name, _ in CASE.get('topics', []):
            counts[topic] = 0

            def count(msg, topic=topic) -> None:
                # a drive command (not the brake) counts where the case asks for driving
                if topic != driving or msg.linear.x > DRIVE_THRESHOLD:
                    counts[topic] += 1
            subscriptions.append(self.node.create_subscription(
                _message_type(type_name), topic, count, qos_profile_sensor_data))
        wanted = {topic: n for topic, _, n in CASE.get('topics', [])}
        self._spin_until(lambda: all(counts[t] >= n for t, n in wanted.items()))
        for topic, n in wanted.items():
            self.assertGreaterEqual(counts[topic], n, f'too few messages on {topic}')

    def _parameters(self, node_name: str, names: List[str]) -> Dict[str, Any]:
        """Return the values `node_name` reports for `names` over its parameter service."""
        client = self.node.create_client(GetParameters, f'{node_name}/get_parameters')
        self._spin_until(client.service_is_ready)
        self.assertTrue(client.service_is_ready(), f'{node_name} has no parameter service')
        future = client.call_async(GetParameters.Request(names=names))
        self._spin_until(future.done)
        self.assertTrue(future.done(), f'{node_name}/get_parameters did not answer')
        return dict(zip(names, (parameter_value_to_python(v) for v in future.result().values)))

    def test_3_parameters_are_the_configured_values(self) -> None:
        by_node: Dict[str, Dict[str, Any]] = {}
        for node_name, name, value in CASE.get('parameters', []):
            by_node.setdefault(node_name, {})[name] = value
        for node_name, expected in by_node.items():
            reported = self._parameters(node_name, list(expected))
            for name, value in expected.items():
                if isinstance(value, dict):   # {'startswith': prefix}: a generated path
                    self.assertTrue(str(reported[name]).startswith(value['startswith']),
                                    f'{node_name} {name} = {reported[name]!r}')
                else:
                    self.assertEqual(reported[name], value, f'{node_name} {name}')
        for first, second, name in CASE.get('same', []):
            self.assertEqual(self._parameters(first, [name]), self._parameters(second, [name]))


@launch_testing.post_shutdown_test()
class TestShutdown(unittest.TestCase):
    """After launch's SIGINT: every process ended by itself with 0 and no traceback."""

    def test_exit_codes(self, proc_info) -> None:
        launch_testing.asserts.assertExitCodes(proc_info)

    def test_no_traceback(self, proc_output) -> None:
        for event in proc_output:
            text = event.text.decode(errors='replace')
            for marker in ('Traceback', 'exception was never retrieved', 'terminate called'):
                self.assertNotIn(marker, text, f'{event.process_name}: {text}')
