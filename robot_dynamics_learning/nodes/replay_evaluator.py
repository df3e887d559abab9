"""
replay_evaluator: records a bag replay through live learner nodes and writes the report.

The ROS route of `rdl replay` (launch/bag_replay.launch.py): bag_player -> dynamics_learner
node(s) -> this node. It records every `joint_states` message the way the learner takes it
(`learning.replay.StreamRecorder`) and each learner's `~/predicted_torques` (and `_std`) by
header stamp. When the player signals `end_of_bag` it waits until every learner has
predicted the last recorded message (learners in lockstep may lag the bag while they train),
or until no prediction came for `settle_s`, then writes the same report as `rdl replay`
(report.md, PNGs, metrics.json; the baselines computed on the recorded samples) to `out`,
and exits, which ends the launch. Recorded messages that allow no report (none valid, none
with an effort) end it with one logged line and exit code 1.
Torques come from the JointState effort.
"""
import sys
import time
from typing import Dict, List, Optional, Tuple

import numpy as np
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from robot_dynamics_learning.data.messages import MAX_ADOPTED_JOINTS
from robot_dynamics_learning.learning import replay, report
from robot_dynamics_learning.learning.replay_evaluator_params import ReplayEvaluatorConfig
from robot_dynamics_learning.nodes.conversions import stamp_to_ns
from robot_dynamics_learning.nodes.parameters import declare_config
from robot_dynamics_learning.nodes.runtime import spin_node
from sensor_msgs.msg import JointState
from std_msgs.msg import Empty

MATCH_TIMEOUT_S = 60.0   # longest wait for the learners' prediction publishers


class ReplayEvaluator(Node):
    """Measured torques and predictions in, a report out at the end of the bag."""

    def __init__(self) -> None:
        super().__init__('replay_evaluator')
        self.config = config = declare_config(self, ReplayEvaluatorConfig)
        self.out = config.out
        self.urdf = config.urdf or None
        self.settle_s = config.settle_s
        self.params = replay.load_learner_params(config.params_file or None)
        self.recorder = replay.StreamRecorder(   # joints chosen as the learners choose them
            time_reset_s=float(self.params['time_reset_s']),
            joint_settle_s=float(self.params.get('joint_settle_s', 1.0)),
            velocity_source=self.params['velocity_source'],
            velocity_window=self.params['velocity_window'],
            stamp_source=self.params['stamp_source'])
        self.first_ns: Optional[int] = None
        reliable = QoSProfile(depth=100, history=HistoryPolicy.KEEP_ALL,
                              reliability=ReliabilityPolicy.RELIABLE)
        self._reliable = reliable
        self.predictions: Dict[str, Dict[str, Dict[int, np.ndarray]]] = {}
        self.refused_predictions = 0
        for learner in config.learners:
            label = learner.rstrip('/').split('/')[-1]
            self.predictions[label] = {'mean': {}, 'std': {}}
            for kind, suffix in (('mean', ''), ('std', '_std')):
                self.create_subscription(
                    JointState, f'{learner}/predicted_torques{suffix}',
                    lambda msg, store=self.predictions[label][kind]: self._on_prediction(
                        msg, store), reliable)
        self._last_prediction = time.monotonic()
        self.create_subscription(Empty, config.end_topic, self._on_end, QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL))
        self._done = False
        self.failed = False   # no report: main() exits with 1
        # joint_states is subscribed once every learner's predictions are matched: the player
        # waits for that subscription, so no prediction of the first samples is lost to
        # discovery (seen once in CI: none arrived from a 1.5 s bag).
        self._prediction_topics = [f'{learner}/predicted_torques'
                                   for learner in config.learners]
        self._waiting_since = time.monotonic()
        self._match_timer = self.create_timer(0.05, self._subscribe_when_matched,
                                              clock=Clock(clock_type=ClockType.STEADY_TIME))
        self.get_logger().info(f'recording joint_states and {list(self.predictions)} until '
                               f'{config.end_topic}; report to {self.out}')

    def _subscribe_when_matched(self) -> None:
        unmatched = [t for t in self._prediction_topics if self.count_publishers(t) == 0]
        waited = time.monotonic() - self._waiting_since
        if unmatched and waited < MATCH_TIMEOUT_S:
            return
        if unmatched:
            self.get_logger().warning(f'no publisher on {unmatched} after {waited:.0f} s; '
                                      'recording anyway')
        self._match_timer.cancel()
        self.create_subscription(JointState, 'joint_states', self._on_joint_state,
                                 self._reliable)

    def _on_joint_state(self, msg: JointState) -> None:
        received = time.time_ns()
        if self.first_ns is None:
            self.first_ns = received
        self.recorder.add(msg, received)

    def _on_prediction(self, msg: JointState, store: Dict[int, np.ndarray]) -> None:
        if len(msg.effort) > MAX_ADOPTED_JOINTS:   # no learner's: kept, it would fill memory
            self.refused_predictions += 1
            self.get_logger().warn(f'refused a prediction of {len(msg.effort)} values '
                                   f'({self.refused_predictions} so far)',
                                   throttle_duration_sec=5.0)
            return
        store[stamp_to_ns(msg.header.stamp)] = np.array(msg.effort, dtype=np.float64)
        self._last_prediction = time.monotonic()

    def _on_end(self, _msg: Empty) -> None:
        if not self._done:
            self._done = True
            self.recorder.adopt()   # a bag shorter than the joint settling window
            self._last_prediction = time.monotonic()   # the quiet period starts now
            self.get_logger().info('end of bag: report once every learner has predicted the '
                                   f'last message, or after {self.settle_s} s without one')
            # Wall time: on sim time the clock stands still once the bag has ended.
            self._timer = self.create_timer(0.05, self._finish_when_settled,
                                            clock=Clock(clock_type=ClockType.STEADY_TIME))

    def _finish_when_settled(self) -> None:
        last = self.recorder.rows[-1][1].stamp_ns if self.recorder.rows else None
        caught_up = all(last in stores['mean'] for stores in self.predictions.values())
        quiet = time.monotonic() - self._last_prediction > self.settle_s
        if caught_up or quiet:
            self._finish()

    def _aligned(self, store: Dict[int, np.ndarray], stamps: np.ndarray, n: int
                 ) -> Optional[np.ndarray]:
        """Predictions (T, n) at the recorded stamps, NaN where none arrived."""
        if not store:
            return None
        out = np.full((stamps.size, n), np.nan)
        for i, stamp in enumerate(stamps.tolist()):
            value = store.get(stamp)
            if value is not None and value.size == n:
                out[i] = value
        return out

    def _finish(self) -> None:
        self._timer.cancel()
        try:
            stream = self.recorder.stream(self.first_ns or 0,
                                          self.resolve_topic_name('joint_states'))
        except ValueError as error:   # nothing to score: say why, no traceback
            self.failed = True
            self.get_logger().error(f'no report: {error}')
            self.context.try_shutdown()
            return
        stamps = np.array([s.stamp_ns for _, s in self.recorder.rows], np.int64)
        n = len(stream.joint_names)
        recorded: Dict[str, Tuple[np.ndarray, Optional[np.ndarray]]] = {}
        for label, stores in self.predictions.items():
            mean = self._aligned(stores['mean'], stamps, n)
            if mean is None:
                self.get_logger().warning(f'no predictions from {label}')
                continue
            recorded[label] = (mean, self._aligned(stores['std'], stamps, n))
        result = replay.recorded_result(stream, recorded, self.params, self.urdf)
        result.bag = 'live replay (bag_player -> ' + ', '.join(self.predictions) + ')'
        metrics = report.write_report(result, self.out)
        self.get_logger().info(report.verdict_line(metrics))
        self.get_logger().info(f'report: {self.out}/report.md')
        self.context.try_shutdown()


def main(args: Optional[List[str]] = None) -> None:
    """Run the evaluator until the bag ends and the report is written (exit 1: no report)."""
    nodes: List[ReplayEvaluator] = []

    def make() -> ReplayEvaluator:
        nodes.append(ReplayEvaluator())
        return nodes[-1]
    spin_node(make, args)
    if nodes and nodes[0].failed:
        sys.exit(1)


if __name__ == '__main__':
    main()
