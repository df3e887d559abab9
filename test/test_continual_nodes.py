"""
dynamics_learner and torque_predictor over real DDS on localhost.

Bad messages are counted by reason and never stop the node; every accepted message gets a
prediction with its own stamp; checkpoints survive kill -9 and a corrupt newest one falls
back to the previous; the predictor loads what the learner wrote.
"""
import os
import signal
import time

from diagnostic_msgs.msg import DiagnosticArray
import numpy as np
import psutil
import pytest
from robot_dynamics_learning.learning.checkpoint import CheckpointDirectory, load_checkpoint
from robot_dynamics_learning.learning.continual import (InverseDynamicsStream, Published,
                                                        StreamingPredictor)
from robot_dynamics_learning.learning.learner_params import TorquePredictorConfig
from robot_dynamics_learning.learning.prequential import (saved_variance_scale,
                                                          VARIANCE_SCALE_KEY)
from robot_dynamics_learning.models.registry import build_model
from robot_dynamics_learning.nodes.conversions import joint_state_msg
from robot_dynamics_learning.signals.causal import CausalDifferentiator
from ros_util import matched_publishers, start_node, stop_node, subscribed, TestNode, wait_for
from sensor_msgs.msg import JointState
import torch

pytestmark = pytest.mark.ros

NAMES = ['j1', 'j2', 'j3']
LEARNER = {'window': 8, 'batch_size': 16, 'warmup_samples': 100, 'updates_per_sample': 0.1,
           'accel_window': 5, 'diagnostics_period_s': 0.3, 'recent_capacity': 2000,
           'reservoir_windows': 50, 'model_config.hidden_size': 8,   # a model setting
           'checkpoint_period_s': 0.3, 'joint_names': NAMES}


def good_sample(k: int, stamp_ns: int, names=NAMES):
    t = k * 2e-3
    q = np.sin(t + np.arange(3))
    qd = np.cos(t + np.arange(3))
    tau = 2.0 * q + 0.5 * qd
    order = [NAMES.index(n) for n in names]
    return joint_state_msg(stamp_ns, names, q[order], qd[order], tau[order])


class Probe:
    """Publishes joint states and records predictions and diagnostics."""

    def __init__(self, test_node: TestNode, node_name: str) -> None:
        node = test_node.node
        self.pub = node.create_publisher(JointState, '/joint_states', 100)
        self.predictions = []
        self.diagnostics = {}
        self.node = node
        self.prediction_sub = node.create_subscription(
            JointState, f'/{node_name}/predicted_torques', self.predictions.append, 1000)

        def on_diag(msg):
            for status in msg.status:
                if status.name.startswith(node_name):
                    self.diagnostics = {kv.key: kv.value for kv in status.values}
        node.create_subscription(DiagnosticArray, '/diagnostics', on_diag, 10)

    def send(self, msg, expect_prediction: bool) -> None:
        """Publish one message; wait for its prediction, or a moment when none is due."""
        count = len(self.predictions)
        self.pub.publish(msg)
        if expect_prediction:
            assert wait_for(lambda: len(self.predictions) > count, 15), 'no prediction'
        else:
            time.sleep(0.02)

    def diag(self, key, default=0):
        return float(self.diagnostics.get(key, default))

    def wait_ready(self) -> bool:
        """
        Wait until the node and we hear each other, in both directions.

        It subscribes to our joint states, its diagnostics arrive and its prediction publisher
        is matched with our subscription. Each pair of endpoints is discovered on its own, so
        arriving diagnostics do not mean the predictions will arrive too (a first prediction
        lost that way once failed a fresh-clone `make test`).
        """
        return subscribed(self.pub, timeout=60, also=lambda: bool(self.diagnostics) and
                          matched_publishers(self.node, self.prediction_sub) > 0)


def assert_realtime_threads_ordinary_trainer(pid: int, log: str) -> None:
    """realtime_priority 5: the node's threads run SCHED_FIFO, its trainer process does not."""
    if 'not applied' in log:   # no CAP_SYS_NICE here: the node says so and runs on
        return
    assert 'run under SCHED_FIFO priority 5' in log, log
    threads = os.listdir(f'/proc/{pid}/task')
    assert {os.sched_getscheduler(int(t)) & ~os.SCHED_RESET_ON_FORK for t in threads} == \
        {os.SCHED_FIFO}
    children = psutil.Process(pid).children(recursive=True)
    assert children, 'no trainer process'
    assert {os.sched_getscheduler(child.pid) for child in children} == {os.SCHED_OTHER}


def test_learner_counts_bad_messages_and_predicts_every_accepted_one(tmp_path):
    log = tmp_path / 'learner.log'
    process = start_node('dynamics_learner', {**LEARNER, 'checkpoint_dir': str(tmp_path),
                                              'realtime_priority': 5}, log_path=log)
    try:
        with TestNode() as test_node:
            probe = Probe(test_node, 'dynamics_learner')
            assert probe.wait_ready(), log.read_text()
            assert_realtime_threads_ordinary_trainer(process.pid, log.read_text())
            stamp = 1_000_000_000
            sent = []
            since_reset = 0
            for k in range(400):
                stamp += 2_000_000
                msg = good_sample(k, stamp)
                if k == 50:
                    msg.position[0] = float('nan')
                elif k == 60:
                    msg = joint_state_msg(stamp, NAMES[:2], np.zeros(2), np.zeros(2),
                                          np.zeros(2))
                elif k == 70:
                    msg = good_sample(k, stamp, names=['j3', 'j1', 'j2'])
                elif k == 80:
                    msg.effort = []
                elif k == 90:
                    msg = good_sample(k, stamp - 10_000_000)
                elif k == 200:   # the bag loops: time jumps back 1 s
                    stamp -= 1_000_000_000
                    msg = good_sample(k, stamp)
                    since_reset = 0
                accepted = k not in (50, 60, 90)
                if accepted:
                    sent.append(stamp)
                    since_reset += 1
                # Lock-step (one message in flight) so that a loaded CI machine drops nothing.
                probe.send(msg, expect_prediction=accepted and since_reset >= 5)
            assert wait_for(lambda: probe.diag('messages_accepted') >= len(sent), 20), \
                (len(sent), probe.diagnostics)
            warmup = 4 * 2   # the acceleration estimate needs 5 samples after start and reset
            assert wait_for(lambda: len(probe.predictions) >= len(sent) - warmup, 10)
            assert wait_for(lambda: probe.diag('train_steps') > 0, 30), log.read_text()
            time.sleep(0.5)
            d = probe.diagnostics
            assert probe.diag('messages_accepted') == len(sent)
            assert probe.diag('messages_non_finite') == 1
            assert probe.diag('messages_missing_joint') == 1
            assert probe.diag('messages_stamp_backwards') == 1
            assert probe.diag('time_resets') == 1
            assert probe.diag('predict_only') == 1
            assert d['last_error'] == '' or 'non-finite' in d['last_error']
            stamps = [p.header.stamp.sec * 10**9 + p.header.stamp.nanosec
                      for p in probe.predictions]
            assert set(stamps) <= set(sent)
            assert len(stamps) == len(sent) - warmup
            assert list(probe.predictions[-1].name) == NAMES
            assert all(np.isfinite(p.effort).all() for p in probe.predictions)
        assert process.poll() is None, 'the node stopped'
    finally:
        stop_node(process)
    # A clean stop wrote a final checkpoint with finite weights.
    loaded = CheckpointDirectory(tmp_path).load_latest(NAMES, 'lstm')
    assert all(torch.isfinite(v).all() for v in loaded.model.state_dict().values())
    assert loaded.metadata['steps'] > 0
    # ... with the calibration scale of the published std, measured on the scored samples.
    scale, why = saved_variance_scale(loaded.metadata, len(NAMES))
    assert scale is not None, why
    assert not np.allclose(scale, 1.0)


def test_predictor_publishes_the_std_calibrated_by_the_checkpoint_scale(tmp_path):
    """Messages without efforts: the std is the model's own times sqrt(the saved scale)."""
    torch.manual_seed(0)
    model = build_model('lstm', {'hidden_size': 8}, 9, 3, 3)
    scale = np.array([4.0, 9.0, 0.25])
    CheckpointDirectory(tmp_path).save(model, NAMES, {'steps': 1,
                                                      VARIANCE_SCALE_KEY: scale.tolist()})
    log = tmp_path / 'predictor.log'
    process = start_node('torque_predictor', {'checkpoint_dir': str(tmp_path),
                                              'accel_window': 5, 'diagnostics_period_s': 0.3},
                         log_path=log)
    messages = []
    for k in range(40):
        msg = good_sample(k, 10**9 + k * 2_000_000)
        msg.effort = []
        messages.append(msg)
    try:
        with TestNode() as test_node:
            probe = Probe(test_node, 'torque_predictor')
            stds = []
            test_node.node.create_subscription(
                JointState, '/torque_predictor/predicted_torques_std', stds.append, 1000)
            assert probe.wait_ready(), log.read_text()
            for k, msg in enumerate(messages):
                probe.send(msg, expect_prediction=k >= 4)
            assert wait_for(lambda: len(stds) == len(probe.predictions) == 36, 10), log.read_text()
        assert process.poll() is None
    finally:
        stop_node(process)
    # The same stream through the same core offline, uncalibrated.
    loaded = load_checkpoint(CheckpointDirectory(tmp_path).paths()[-1], NAMES)
    stream = InverseDynamicsStream(3, CausalDifferentiator(3, window=5))
    predictor = StreamingPredictor(lambda: Published(1, loaded.model), 9, 3,
                                   TorquePredictorConfig.history_size)
    own = []
    for msg in messages:
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        features = stream.sample(stamp, np.array(msg.position), np.array(msg.velocity), None)
        if features is not None:
            own.append(np.sqrt(predictor.predict(features[0], features[1])[1]))
    np.testing.assert_allclose([list(m.effort) for m in stds], np.sqrt(scale) * np.array(own),
                               rtol=1e-4)


def stream(probe: Probe, count: int, start_stamp: int) -> int:
    stamp = start_stamp
    for k in range(count):
        stamp += 2_000_000
        probe.send(good_sample(k, stamp), expect_prediction=k >= 4)
    return stamp


def test_kill_9_resume_corrupt_fallback_and_predictor_reload(tmp_path):
    log = tmp_path / 'learner.log'
    params = {**LEARNER, 'checkpoint_dir': str(tmp_path / 'ckpt')}
    process = start_node('dynamics_learner', params, log_path=log)
    folder = CheckpointDirectory(tmp_path / 'ckpt')
    try:
        with TestNode() as test_node:
            probe = Probe(test_node, 'dynamics_learner')
            assert probe.wait_ready(), log.read_text()
            stamp = stream(probe, 400, 10**9)
            assert wait_for(lambda: len(folder.paths()) >= 2, 30), log.read_text()
            children = psutil.Process(process.pid).children(recursive=True)
            assert children, 'the trainer runs in a child process by default'
            os.kill(process.pid, signal.SIGKILL)   # no chance to clean up
            process.wait(10)
            # The trainer process dies with the node: no orphan keeps writing checkpoints.
            _, alive = psutil.wait_procs(children, timeout=10)
            assert not alive, alive
    finally:
        stop_node(process)
    paths = folder.paths()
    assert 2 <= len(paths) <= 3      # keep_checkpoints 3
    for path in paths:               # atomic writes: every file is complete
        load_checkpoint(path, NAMES)
    # A kill that lands inside a write leaves its temporary file (nothing can prevent that);
    # the next save removes it (checked at the end, after the resumed learner saved again).
    steps = [load_checkpoint(p).metadata['steps'] for p in paths]
    paths[-1].write_bytes(paths[-1].read_bytes()[:100])   # corrupt the newest
    log2 = tmp_path / 'learner2.log'
    process = start_node('dynamics_learner', params, log_path=log2)
    predictor_log = tmp_path / 'predictor.log'
    predictor = start_node('torque_predictor', {'checkpoint_dir': str(tmp_path / 'ckpt'),
                                                'poll_period_s': 0.2, 'accel_window': 5,
                                                'diagnostics_period_s': 0.3},
                           log_path=predictor_log)
    try:
        with TestNode() as test_node:
            probe = Probe(test_node, 'dynamics_learner')
            predicted = Probe(test_node, 'torque_predictor')
            assert probe.wait_ready(), log2.read_text()
            text = log2.read_text()
            assert f'resumed from {paths[-2]}' in text, text
            assert 'skipping corrupt checkpoint' in text or 'corrupt' in text.lower()
            assert wait_for(lambda: predicted.diagnostics, 30), predictor_log.read_text()
            loads_before = predicted.diag('loads')
            stream(probe, 300, stamp + 10**9)
            assert wait_for(lambda: probe.diag('train_steps') > steps[-2], 20)
            assert len(predicted.predictions) > 0
            assert wait_for(lambda: predicted.diag('loads') > loads_before, 20), \
                predictor_log.read_text()
        assert process.poll() is None and predictor.poll() is None
    finally:
        stop_node(process)
        stop_node(predictor)
    assert not list((tmp_path / 'ckpt').glob('*.tmp'))   # the resumed learner saved again
