"""
bag_player: play a rosbag2 onto ROS topics without a ROS install (rosbags + rclpy).

Messages are published as the bag's raw CDR bytes (no deserialisation), at the bag's receive
timing scaled by `rate`, optionally looping and publishing /clock. A message whose header
stamp is 0 (a driver that never stamps) goes out stamped with its bag log time
(`stamp_unstamped`), the time `rdl replay` gives it offline, so the learners and
replay_evaluator agree on each sample's time. Reading runs in its own
thread, so the executor stays free. Publishers are reliable with keep-all history: a
subscriber that falls behind at a high `rate` slows the player down instead of losing
messages (keep-last dropped the oldest unacknowledged ones). When a non-looping bag is done,
`~/end_of_bag` (std_msgs/Empty, transient local) says so, then the node exits
(`exit_at_end`). A bag that cannot be read, or stops being readable mid-way (truncated),
ends with one logged line, never a traceback; with every topic played, a topic of a type
not installed for rclpy is skipped and counted. Also here: `JointStateCollector`, the
matching receiver that the demo and the tests use to record what arrives.
"""
import os
from pathlib import Path
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
import rclpy
from rclpy.context import Context
from rclpy.duration import Duration
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from robot_dynamics_learning.data.bag_io import open_bag, TopicArrays
from robot_dynamics_learning.data.bag_player_params import BagPlayerConfig
from robot_dynamics_learning.data.header_stamp import stamp_zero_header
from robot_dynamics_learning.data.messages import JOINT_STATE, JointStateParser
from robot_dynamics_learning.nodes.conversions import clock_msg, message_class
from robot_dynamics_learning.nodes.parameters import declare_config
from robot_dynamics_learning.nodes.runtime import spin_node
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Empty


class BagPlayer(Node):
    """Publishes a bag's messages with their original spacing divided by `rate`."""

    def __init__(self) -> None:
        super().__init__('bag_player')
        self.config = config = declare_config(self, BagPlayerConfig)
        if not config.bag:
            raise ValueError("parameter 'bag' is required: the rosbag2 folder to play")
        self.bag = config.bag
        self.rate = config.rate
        self.loop = config.loop
        self.exit_at_end = config.exit_at_end
        self.start_offset_ns = int(round(config.start_offset * 1e9))
        self.clock_period_ns = int(round(1e9 / config.clock_frequency))
        self.wait_for_subscribers = config.wait_for_subscribers
        self.progress_period = config.progress_period
        self.typestore = config.typestore
        wanted = [t for t in config.topics if t]
        qos = QoSProfile(depth=config.queue_depth, history=HistoryPolicy.KEEP_ALL,
                         reliability=ReliabilityPolicy.RELIABLE)
        self._topic_publishers: Dict[str, object] = {}
        try:
            with open_bag(self.bag, self.typestore) as reader:
                available = {c.topic: c.msgtype for c in reader.connections}
                self.duration_s = reader.duration * 1e-9
        except (ValueError, FileNotFoundError) as error:   # spin_node: one line, exit 2
            text = str(error)   # open_bag's errors name the bag and what to do
            raise ValueError(text if str(self.bag) in text else f'{self.bag}: {text}') from None
        missing = [t for t in wanted if t not in available]
        if missing:
            raise ValueError(f'topics {missing} are not in {self.bag}: {sorted(available)}')
        self.skipped_topics: Dict[str, str] = {}
        self._headed: Set[str] = set()   # topics whose zero header stamps get the log time
        self.stamped_from_log: Dict[str, int] = {}
        for topic in wanted or sorted(available):
            try:
                msg_class = message_class(available[topic])
            except ValueError as error:
                if wanted:
                    raise
                self.skipped_topics[topic] = str(error)   # playing all: skip, count, go on
                self.get_logger().warning(f'skipping {topic}: {error}')
                continue
            self._topic_publishers[topic] = self.create_publisher(msg_class, topic, qos)
            if config.stamp_unstamped and _leads_with_header(msg_class):
                self._headed.add(topic)
        if not self._topic_publishers:
            raise ValueError(f'no playable topic in {self.bag}: {self.skipped_topics}')
        self._end_pub = self.create_publisher(Empty, '~/end_of_bag', QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL))
        self.read_errors = 0
        self._clock_pub = self.create_publisher(Clock, '/clock', 10) \
            if config.publish_clock else None
        self.published = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._play, name='bag_player', daemon=True)
        self.get_logger().info(
            f'playing {self.bag} ({self.duration_s:.2f} s) at rate {self.rate}: '
            f'{sorted(self._topic_publishers)}; loop={self.loop}, clock={config.publish_clock}')
        self._thread.start()

    def _wait_for_subscribers(self) -> bool:
        last_log = time.monotonic()
        while not self._stop.is_set():
            counts = {t: pub.get_subscription_count() for t, pub in self._topic_publishers.items()}
            if min(counts.values()) >= self.wait_for_subscribers:
                return True
            if time.monotonic() - last_log > self.progress_period:
                self.get_logger().info(f'waiting for subscribers: {counts}')
                last_log = time.monotonic()
            self._stop.wait(0.05)
        return False

    def _play_once(self) -> bool:
        """Play the bag once; return False when stopped early."""
        with open_bag(self.bag, self.typestore) as reader:
            connections = [c for c in reader.connections if c.topic in self._topic_publishers]
            start_ns = reader.start_time + self.start_offset_ns
            wall_start = time.monotonic()
            bag_start: Optional[int] = None
            bag_last: Optional[int] = None
            last_clock: Optional[int] = None
            next_log = wall_start + self.progress_period
            for connection, stamp_ns, raw in self._readable(reader.messages(connections,
                                                                            start=start_ns)):
                if bag_start is None:
                    bag_start = stamp_ns
                delay = wall_start + (stamp_ns - bag_start) * 1e-9 / self.rate \
                    - time.monotonic()
                if delay > 0 and self._stop.wait(delay):
                    return False
                if self._stop.is_set():
                    return False
                if self._clock_pub is not None and (
                        last_clock is None or stamp_ns - last_clock >= self.clock_period_ns):
                    self._clock_pub.publish(clock_msg(stamp_ns))
                    last_clock = stamp_ns
                if connection.topic in self._headed:
                    raw = self._stamped(connection.topic, raw, stamp_ns)
                self._topic_publishers[connection.topic].publish(bytes(raw))
                self.published += 1
                bag_last = stamp_ns
                now = time.monotonic()
                if now >= next_log:
                    self.get_logger().info(
                        f'{(stamp_ns - reader.start_time) * 1e-9:.1f} / '
                        f'{self.duration_s:.1f} s of bag time, {self.published} messages')
                    next_log = now + self.progress_period
        if bag_start is not None:
            self.get_logger().info(
                f'pass done: {(bag_last - bag_start) * 1e-9:.3f} s of bag time in '
                f'{time.monotonic() - wall_start:.3f} s wall time')
        return True

    def _stamped(self, topic: str, raw, log_ns: int):
        """Return `raw` with its log time as header stamp if that stamp is 0; count it."""
        stamped = stamp_zero_header(raw, log_ns)
        if stamped is None:
            return raw
        if topic not in self.stamped_from_log:
            self.stamped_from_log[topic] = 0
            self.get_logger().info(f'{topic}: header stamps are 0; publishing them stamped '
                                   'with the bag log times (stamp_unstamped)')
        self.stamped_from_log[topic] += 1
        return stamped

    def _readable(self, messages):
        """Yield messages until the storage stops being readable (a truncated bag)."""
        while True:
            try:
                yield next(messages)
            except StopIteration:
                return
            except Exception as error:  # noqa: B902 - any storage error ends this pass
                self.read_errors += 1
                self.get_logger().error(f'{self.bag} is unreadable after {self.published} '
                                        f'messages, ending the pass ({type(error).__name__}: '
                                        f'{error}); read errors: {self.read_errors}')
                return

    def _play(self) -> None:
        try:
            if self.wait_for_subscribers and not self._wait_for_subscribers():
                return
            while self._play_once() and self.loop and not self.read_errors:
                self.get_logger().info('end of bag: looping')
            if self._stop.is_set():
                return
            self._end_pub.publish(Empty())
            self.get_logger().info(
                f'end of bag: published {self.published} messages'
                + (f'; skipped topics {sorted(self.skipped_topics)}' if self.skipped_topics
                   else '') + (f'; read errors {self.read_errors}' if self.read_errors else '')
                + (f'; stamped with log times {self.stamped_from_log}' if self.stamped_from_log
                   else ''))
            if self.exit_at_end:
                # Reliable delivery needs the writers alive until readers acknowledge.
                for topic, publisher in [*self._topic_publishers.items(),
                                         ('~/end_of_bag', self._end_pub)]:
                    if not publisher.wait_for_all_acked(Duration(seconds=5.0)):
                        self.get_logger().warning(f'{topic}: not all messages acknowledged')
                self.context.try_shutdown()
        except Exception as error:  # noqa: B902 - report, then end the node instead of hanging
            self.get_logger().error(f'playback failed: {error}')
            self.context.try_shutdown()

    def destroy_node(self) -> None:
        """Stop the playback thread before the publishers go away."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        super().destroy_node()


def _leads_with_header(msg_class) -> bool:
    """Whether a message type's first field is a std_msgs/Header (stamp at a fixed offset)."""
    fields = iter(msg_class.get_fields_and_field_types().items())
    return next(fields, None) == ('header', 'std_msgs/Header')


class JointStateCollector:
    """
    Records every JointState on a topic of `node` (reliable, keep-all) as arrays.

    Messages are validated by `JointStateParser` without the stamp-order check, so the
    arrival order stays visible; receive_ns is the local wall-clock arrival time.
    """

    def __init__(self, node: Node, topic: str = '/joint_states',
                 joint_names: Optional[Sequence[str]] = None, depth: int = 1000) -> None:
        self.topic = topic
        self.parser = JointStateParser(joint_names, check_stamps=False)
        self._lock = threading.Lock()
        self._samples: List[tuple] = []
        # Keep-all and reliable, as the player's publishers: a reader that falls behind slows
        # the player down (keep-last dropped the oldest unread samples of a fast loop).
        qos = QoSProfile(depth=depth, history=HistoryPolicy.KEEP_ALL,
                         reliability=ReliabilityPolicy.RELIABLE)
        self.subscription = node.create_subscription(JointState, topic, self._on_message, qos)

    def _on_message(self, msg: JointState) -> None:
        received = time.time_ns()
        result = self.parser.parse(msg)
        with self._lock:
            if result.ok:
                self._samples.append((result.value, received))

    def __len__(self) -> int:
        """Return the number of accepted messages so far."""
        with self._lock:
            return len(self._samples)

    def arrays(self) -> TopicArrays:
        """Return what arrived so far as `TopicArrays` (fields present in every message)."""
        with self._lock:
            samples = list(self._samples)
            rejections = self.parser.counter.as_dict()
        fields = {}
        for name in JointStateParser.FIELDS:
            values = [getattr(s, name) for s, _ in samples]
            if values and all(v is not None for v in values):
                fields[name] = np.stack(values)
        return TopicArrays(
            topic=self.topic, msgtype=JOINT_STATE,
            stamp_ns=np.array([s.stamp_ns for s, _ in samples], dtype=np.int64),
            receive_ns=np.array([r for _, r in samples], dtype=np.int64),
            stamp_source='header', fields=fields,
            joint_names=list(self.parser.joint_names or []), rejections=rejections)


def play_and_collect(bag: Path, expected: int, topic: str = '/joint_states', rate: float = 1.0,
                     timeout: float = 60.0, log_path: Optional[Path] = None
                     ) -> Tuple[TopicArrays, float, int]:
    """
    Play `bag` with the bag_player node in a child process and record `topic` here.

    A collector node of this process (own context) subscribes first; the player waits for it
    (wait_for_subscribers=1), so reliable delivery covers the first message. Returns (what
    arrived, wall seconds from start to the last expected message or the timeout, player
    exit code).
    """
    context = Context()
    rclpy.init(context=context)
    node = Node('playback_collector', context=context)
    collector = JointStateCollector(node, topic)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    command = [sys.executable, '-m', 'robot_dynamics_learning.nodes.bag_player', '--ros-args',
               '-p', f'bag:={bag}', '-p', f'rate:={float(rate)}',
               '-p', 'wait_for_subscribers:=1', '-p', f'topics:=[{topic}]']
    output = open(log_path, 'w') if log_path else subprocess.DEVNULL
    start = time.monotonic()
    player = subprocess.Popen(command, env=dict(os.environ), stdout=output,
                              stderr=subprocess.STDOUT)
    try:
        while len(collector) < expected and time.monotonic() - start < timeout \
                and (player.poll() is None or time.monotonic() - start < 1.0):
            time.sleep(0.02)
        if len(collector) < expected:
            time.sleep(0.5)  # the player may have exited with messages still in flight
        elapsed = time.monotonic() - start
        try:
            code = player.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            player.kill()
            code = player.wait()
    finally:
        if player.poll() is None:
            player.kill()
            player.wait()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=context)
        spinner.join(timeout=5.0)
        if log_path:
            output.close()
    return collector.arrays(), elapsed, code


def main(args: Optional[List[str]] = None) -> None:
    """Run the bag_player node until the bag ends (exit_at_end) or Ctrl-C."""
    spin_node(BagPlayer, args)


if __name__ == '__main__':
    main()
