"""Helpers for node tests over real rclpy and Fast DDS on localhost (no mocks)."""
from contextlib import contextmanager
from pathlib import Path
import subprocess
import threading
import time
from typing import Callable, Dict, Iterator, List, Optional

import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from robot_dynamics_learning.processes import ros_args, start_node_process, stop_process

ROOT = Path(__file__).resolve().parents[1]


def start_node(executable: str, params: Optional[Dict[str, object]] = None,
               remaps: Optional[Dict[str, str]] = None, params_file: Optional[Path] = None,
               extra_args: Optional[List[str]] = None, log_path: Optional[Path] = None
               ) -> subprocess.Popen:
    """
    Start `robot_dynamics_learning.nodes.<executable>` in its own process.

    Parameters go on the command line as `-p name:=value`; stdout and stderr go to log_path
    when given (read them on failure).
    """
    args = list(extra_args or []) + ros_args(params, remaps, params_file)
    output = open(log_path, 'w') if log_path else subprocess.DEVNULL
    return start_node_process(executable, args, stdout=output, cwd=ROOT)


def stop_node(process: subprocess.Popen, timeout: float = 10.0) -> int:
    """Stop a node process as Ctrl-C would (killed after `timeout` seconds)."""
    return stop_process(process, timeout)


class TestNode:
    """
    An rclpy node of the test process, spun in a background thread with its own context.

    Use as a context manager; `node` is the rclpy node for creating subscriptions and
    publishers.
    """

    __test__ = False  # a helper, not a test class

    def __init__(self, name: str = 'test_probe') -> None:
        self.context = Context()
        rclpy.init(context=self.context)
        self.node = Node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while self.context.ok():
            try:
                self.executor.spin_once(timeout_sec=0.05)
            except Exception:  # noqa: B902 - shutdown races end the spin thread
                return

    def close(self) -> None:
        """Destroy the node and shut down its context."""
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)
        self._thread.join(timeout=5)

    def __enter__(self) -> 'TestNode':
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def matched_publishers(node: Node, subscription) -> int:
    """
    Return how many publishers are matched with `subscription`.

    rclpy has `Subscription.get_publisher_count` from Iron on; on Humble the graph's count of
    publishers on the topic stands in for it.
    """
    if hasattr(subscription, 'get_publisher_count'):
        return subscription.get_publisher_count()
    return node.count_publishers(subscription.topic_name)


def wait_for(condition: Callable[[], bool], timeout: float, period: float = 0.05) -> bool:
    """Poll `condition` until it is true or `timeout` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(period)
    return bool(condition())


MATCH_SETTLE_S = 1.0


def subscribed(*publishers, timeout: float = 60.0,
               also: Callable[[], bool] = lambda: True) -> bool:
    """
    Wait until every publisher counts a subscription (and `also()`), then MATCH_SETTLE_S more.

    DDS matches a writer and a reader on each side separately: a test's new publisher counts
    the node's subscription at once, from discovery data it already holds, while the node
    matches the publisher only when the announcement reaches it, 1 ms to a heartbeat later on
    a loaded machine. A best-effort burst sent in between is lost whole; the settle covers it.
    """
    matched = wait_for(lambda: all(p.get_subscription_count() > 0 for p in publishers)
                       and also(), timeout)
    if matched:
        time.sleep(MATCH_SETTLE_S)
    return matched


class Arrivals:
    """Messages of one topic as (arrival time, value), recorded by a probe node's callback."""

    def __init__(self, node: Node, msg_type: type, topic: str,
                 value: Callable[[object], object] = lambda msg: msg, qos=10) -> None:
        self._lock = threading.Lock()
        self._items: List[tuple] = []
        self._value = value
        node.create_subscription(msg_type, topic, self._on_message, qos)

    def _on_message(self, msg) -> None:
        with self._lock:
            self._items.append((time.monotonic(), self._value(msg)))

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def since(self, start: float = float('-inf')) -> List[tuple]:
        """Return (time, value) of the messages that arrived after `start` (monotonic s)."""
        with self._lock:
            return [item for item in self._items if item[0] > start]


def watch_diagnostics(node: Node, node_name: str) -> Dict[str, str]:
    """
    Subscribe /diagnostics; return a dict kept at the latest key/values of `node_name`.

    A status names its node as '/car_mpc' or 'dynamics_learner: ...': matched by substring.
    """
    from diagnostic_msgs.msg import DiagnosticArray
    latest: Dict[str, str] = {}

    def on_diagnostics(msg: DiagnosticArray) -> None:
        for status in msg.status:
            if node_name in status.name:
                latest.update({kv.key: kv.value for kv in status.values})
    node.create_subscription(DiagnosticArray, '/diagnostics', on_diagnostics, 10)
    return latest


# Seconds between the messages of a test that needs a learner to see (nearly) every one: its
# best-effort queue holds 20, and a URDF model took 2 ms a message in a loaded CI run, which
# dropped 35 % of a 1 kHz stream and never finished the 2000-sample audit.
LEARNER_PACE_S = 0.003


@contextmanager
def learner_and_arm(log: Path, params: Dict[str, object], probe: str) -> Iterator[tuple]:
    """
    Run dynamics_learner (trainer thread, no checkpoints, diagnostics every 0.5 s, `params`).

    Yield (probe node, its /joint_states publisher) once the learner listens; stop it after.
    """
    from sensor_msgs.msg import JointState
    process = start_node('dynamics_learner', params={
        'trainer_process': False, 'checkpoint_dir': '', 'diagnostics_period_s': 0.5, **params},
        log_path=log)
    try:
        with TestNode(probe) as arm:
            publisher = arm.node.create_publisher(JointState, '/joint_states', 100)
            assert subscribed(publisher, timeout=60), \
                log.read_text()
            yield arm.node, publisher
    finally:
        stop_node(process)


def watch_predictions(node: Node, topic: str = '/dynamics_learner/predicted_torques'
                      ) -> List[tuple]:
    """Subscribe a learner's predicted torques; return a list kept at (stamp_ns, effort)."""
    from sensor_msgs.msg import JointState
    predictions: List[tuple] = []
    node.create_subscription(
        JointState, topic, lambda m: predictions.append(
            (m.header.stamp.sec * 10**9 + m.header.stamp.nanosec, list(m.effort))), 1000)
    return predictions


@contextmanager
def estimator_running(log: Path, params: Optional[Dict[str, object]] = None
                      ) -> Iterator[tuple]:
    """Run car_state_estimator; yield `estimator_probe`'s (twists, counters, pose publisher)."""
    process = start_node('car_state_estimator', params, log_path=log)
    try:
        with TestNode('estimator_probe') as probe:
            twists, counters, publisher = estimator_probe(probe.node)
            assert subscribed(publisher, timeout=20.0)
            yield twists, counters, publisher
    finally:
        code = stop_node(process)   # -9: still running 10 s after SIGINT, killed
        assert code == 0, f'exit code {code}\n' + log.read_text()


def estimator_probe(node: Node) -> tuple:
    """Return car_state_estimator's twists (filled as they come), diagnostics, pose publisher."""
    from geometry_msgs.msg import PoseStamped, TwistStamped
    from rclpy.qos import qos_profile_sensor_data
    twists: list = []
    counters = watch_diagnostics(node, 'car_state_estimator')
    node.create_subscription(TwistStamped, 'car/twist', twists.append, qos_profile_sensor_data)
    return twists, counters, node.create_publisher(PoseStamped, 'mocap_pose',
                                                   qos_profile_sensor_data)
