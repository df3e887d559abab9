"""The ROS route of `rdl replay` over real DDS: bag_player -> dynamics_learner -> evaluator."""
import json

import numpy as np
import pytest
from replay_scores import assert_same_scores
from robot_dynamics_learning.data import bag_io
from robot_dynamics_learning.learning import replay, report
from ros_util import ROOT, start_node, stop_node
from test_stamp_source import write_unstamped

pytestmark = pytest.mark.ros

ROWS = 1500


@pytest.fixture(scope='module', params=['stamped', 'unstamped'])
def kinova_bag(request, tmp_path_factory):
    """
    1.5 s (1 kHz) of Kinova RunTrajectory1.csv, header-stamped or as a driver that never stamps.

    Unstamped, `rdl replay` times the samples by the bag's log times and bag_player stamps them
    with the same, so the evaluator can match the predictions to the samples.
    """
    trajectory = bag_io.load_dataset('kinova', 'RunTrajectory1.csv')[0]
    trajectory = trajectory.segment(0, min(ROWS, len(trajectory)))
    bag = tmp_path_factory.mktemp('evaluator') / 'kinova'
    if request.param == 'stamped':
        bag_io.write_joint_trajectories(bag, [trajectory], 'mcap')
        return bag
    log_ns = 10**18 + np.round(trajectory.time * 1e9).astype(np.int64)
    return write_unstamped(bag, trajectory, log_ns, 'mcap')


def test_evaluator_writes_the_replay_report_when_the_bag_ends(kinova_bag, tmp_path):
    out = tmp_path / 'report'
    logs = {name: tmp_path / f'{name}.log' for name in ('evaluator', 'learner', 'player')}
    params = ROOT / 'config' / 'learner.yaml'
    evaluator = start_node('replay_evaluator', params={
        'out': str(out), 'learners': ['/learner_lstm'], 'use_sim_time': True},
        log_path=logs['evaluator'])
    learner = start_node('dynamics_learner', params_file=params, params={
        'model': 'lstm', 'use_sim_time': True, 'lockstep': True},
        remaps={'__node': 'learner_lstm'}, log_path=logs['learner'])
    player = start_node('bag_player', params={
        'bag': str(kinova_bag), 'publish_clock': True, 'wait_for_subscribers': 2, 'rate': 0.5,
        'topics': ['/joint_states']}, log_path=logs['player'])
    try:
        code = evaluator.wait(timeout=120)
        text = '\n'.join(f'--- {k}\n{v.read_text()}' for k, v in logs.items())
        assert code == 0, text
        assert player.wait(timeout=20) == 0, text
    finally:
        for process in (player, learner, evaluator):
            if process.poll() is None:
                stop_node(process)
    metrics = json.loads((out / 'metrics.json').read_text())
    assert (out / 'report.md').is_file() and (out / 'nmse_over_time.png').is_file()
    # Every message reached the evaluator and, in lockstep, the learner (reliable, keep all).
    assert metrics['samples'] == ROWS and metrics['messages'] == {'accepted': ROWS}
    live = metrics['models']['learner_lstm']
    # The same samples, baseline and learner scores as `rdl replay` on the bag: the node
    # trains in lockstep exactly as `rdl replay` does.
    stream = replay.read_joint_stream(kinova_bag)
    offline = report.compute_metrics(replay.replay(
        stream, ['lstm'], None, replay.load_learner_params(), replay.Holdout('none')))
    assert live['prequential']['samples'] == offline['models']['lstm']['prequential']['samples']
    np.testing.assert_allclose(metrics['models']['previous_torque']['prequential']['nmse'],
                               offline['models']['previous_torque']['prequential']['nmse'],
                               rtol=1e-9)
    assert_same_scores(live, offline['models']['lstm'])
    if stream.times == 'arrival':   # an unstamped bag: the player filled in the log times
        assert 'stamped with log times' in logs['player'].read_text()
