"""
The continual trainer in its own process: hand-overs, counters, checkpoints, shutdown.

A real child process (spawn) trains an LSTM on a synthetic stream; the parent predicts with
what the child hands over, exactly as the dynamics_learner node does.
"""
import functools
import subprocess
import sys
import time

import numpy as np
import psutil
from robot_dynamics_learning.learning.buffer import BufferConfig
from robot_dynamics_learning.learning.checkpoint import (CheckpointDirectory, load_checkpoint,
                                                         save_to_directory)
from robot_dynamics_learning.learning.continual import LearnerConfig, TrainerConfig
from robot_dynamics_learning.learning.prequential import VARIANCE_SCALE_KEY
from robot_dynamics_learning.learning.trainer_process import (ProcessConfig, ProcessLearner,
                                                              to_numpy, to_torch)
from robot_dynamics_learning.models.lstm import LSTMState
from robot_dynamics_learning.models.registry import build_model
from ros_util import wait_for
import torch

N_OBS, N_ACT, N_TARGET = 3, 0, 2
NAMES = ['a', 'b']


def _learner(tmp_path, **trainer) -> ProcessLearner:
    config = LearnerConfig(BufferConfig(window=8, recent_capacity=2000, reservoir_windows=50),
                           TrainerConfig(batch_size=16, warmup_samples=100,
                                         updates_per_sample=0.2, publish_every=2,
                                         checkpoint_every_s=0.0, **trainer))
    model = build_model('lstm', {'hidden_size': 8}, N_OBS, N_ACT, N_TARGET)
    folder = CheckpointDirectory(tmp_path / 'ckpt')
    return ProcessLearner(model, N_OBS, N_ACT, N_TARGET, config, np.random.default_rng(0),
                          save=functools.partial(save_to_directory, folder, NAMES),
                          process=ProcessConfig(nice=0, block=8))


def _stream(learner: ProcessLearner, count: int, start: int = 0) -> float:
    """Feed a smooth synthetic stream (target: a fixed linear map); return the last error."""
    rng = np.random.default_rng(start)
    error = float('nan')
    for k in range(start, start + count):
        x = np.array([np.sin(0.01 * k), np.cos(0.013 * k), np.sin(0.007 * k)]) \
            + 0.01 * rng.standard_normal(3)
        target = np.array([x[0] + 0.5 * x[1], x[2] - x[0]])
        mean, _ = learner.observe(k * 1e-3, x, None, target if k % 10 else None)
        error = float(np.abs(mean - target).max())
    return error


def _stream_until(learner: ProcessLearner, condition, timeout: float) -> int:
    """Keep streaming (the predictor adopts hand-overs between samples); return the count."""
    count, deadline = 0, time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        _stream(learner, 20, count)
        count += 20
        time.sleep(0.005)
    return count


def test_child_trains_hands_over_weights_and_writes_the_final_checkpoint(tmp_path):
    learner = _learner(tmp_path)
    learner.start()
    try:
        count = _stream_until(learner, lambda: learner.predictor.version >= 3, 60)
        assert learner.predictor.version >= 3
        assert wait_for(lambda: learner.diagnostics()['train_steps'] > 0, 10)
        values = learner.diagnostics()
        # Samples with a target (9 of 10) reach the child's buffer, none twice.
        assert 0 < values['samples'] <= 0.9 * count + 1
        assert values['rejected_steps'] == 0 and values['last_error'] == ''
        child = learner.trainer._process
        assert psutil.Process(child.pid).nice() >= psutil.Process().nice()
    finally:
        learner.stop(checkpoint=True)
    assert not child.is_alive()
    paths = CheckpointDirectory(tmp_path / 'ckpt').paths()
    assert len(paths) == 1
    loaded = load_checkpoint(paths[0], NAMES)
    assert loaded.metadata['steps'] == learner.diagnostics()['train_steps'] > 0
    # The calibration scale lives in the parent; the child saves the newest one it was sent.
    assert loaded.metadata[VARIANCE_SCALE_KEY] == learner.calibration.scale.tolist()
    assert learner.calibration.scale.tolist() != [1.0, 1.0]
    for value in loaded.model.state_dict().values():
        assert torch.isfinite(value).all()


def test_reset_reaches_the_child_buffer_as_a_segment_break(tmp_path):
    learner = _learner(tmp_path)
    learner.start()
    try:
        _stream(learner, 300)
        learner.reset()
        _stream(learner, 300, 300)
        assert wait_for(lambda: learner.diagnostics()['segment_breaks'] >= 1, 30)
    finally:
        learner.stop(checkpoint=False)
    assert not CheckpointDirectory(tmp_path / 'ckpt').paths()


ORPHAN_SCRIPT = """
import sys, time
sys.path.insert(0, {test_dir!r})
from pathlib import Path
from test_continual_process import _learner, _stream
learner = _learner(Path({tmp!r}))
learner.start()
_stream(learner, 400)
print(learner.trainer._process.pid, flush=True)
time.sleep(60)
"""


def test_the_trainer_process_dies_with_its_parent(tmp_path):
    script = ORPHAN_SCRIPT.format(test_dir=str(__import__('pathlib').Path(__file__).parent),
                                  tmp=str(tmp_path))
    parent = subprocess.Popen([sys.executable, '-c', script], stdout=subprocess.PIPE,
                              text=True)
    try:
        child_pid = int(parent.stdout.readline())
        child = psutil.Process(child_pid)
        assert child.is_running()
        parent.kill()    # SIGKILL: no clean-up code runs in the parent
        parent.wait(10)
        started = time.monotonic()
        _, alive = psutil.wait_procs([child], timeout=10)
        assert not alive, f'trainer process outlived its parent by {time.monotonic() - started}'
    finally:
        parent.kill()


def test_recurrent_state_survives_the_numpy_round_trip():
    state = LSTMState(torch.randn(1, 1, 4), torch.randn(1, 1, 4))
    nested = {'state': state, 'list': [torch.ones(2)], 'none': None}
    back = to_torch(to_numpy(nested))
    assert isinstance(back['state'], LSTMState)
    assert torch.equal(back['state'].h, state.h) and torch.equal(back['state'].c, state.c)
    assert torch.equal(back['list'][0], torch.ones(2)) and back['none'] is None
