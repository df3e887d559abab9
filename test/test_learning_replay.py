"""`rdl replay` on real Kinova and Schunk bags: the report's numbers against direct computation."""
import json

import numpy as np
import pytest
from robot_dynamics_learning.cli import main as rdl
from robot_dynamics_learning.data import bag_io
from robot_dynamics_learning.learning import replay, report
from robot_dynamics_learning.learning.buffer import StreamingBuffer

KINOVA_ROWS = 1900
BLOCK_S = 0.2


@pytest.fixture(scope='module')
def kinova(tmp_path_factory):
    """Write the first ~1.9 s (1 kHz) of Kinova RunTrajectory1.csv as an sqlite3 bag."""
    trajectory = bag_io.load_dataset('kinova', 'RunTrajectory1.csv')[0]
    trajectory = trajectory.segment(0, min(KINOVA_ROWS, len(trajectory)))
    bag = tmp_path_factory.mktemp('replay') / 'kinova'
    bag_io.write_joint_trajectories(bag, [trajectory], 'sqlite3')
    return bag, trajectory


@pytest.fixture(scope='module')
def schunk(tmp_path_factory):
    """Write two Schunk runs (250 Hz, torques on the command topic, 1 s apart) as an MCAP bag."""
    runs = bag_io.load_dataset('schunk', '0:2')
    bag = tmp_path_factory.mktemp('replay') / 'schunk'
    bag_io.write_joint_trajectories(bag, runs, 'mcap',
                                    command_topic=bag_io.SCHUNK_COMMAND_TOPIC, effort=False)
    return bag, runs


def _direct_scores(prediction, target, mask):
    """Return nMSE (by the whole stream's torque variance) and RMSE per joint, plain numpy."""
    rows = mask & ~np.isnan(prediction).any(axis=1)
    error = prediction[rows] - target[rows]
    mse = (error ** 2).sum(axis=0) / rows.sum()
    variance = ((target - target.mean(axis=0)) ** 2).sum(axis=0) / len(target)
    return mse / variance, np.sqrt(mse)


def test_kinova_report_matches_direct_computation_and_never_trains_on_test_blocks(
        kinova, tmp_path, monkeypatch):
    bag, trajectory = kinova
    appended = []
    original = StreamingBuffer.append

    def spy(self, time_s, observation, action, target):
        appended.append(time_s)
        return original(self, time_s, observation, action, target)

    monkeypatch.setattr(StreamingBuffer, 'append', spy)
    out = tmp_path / 'report'
    assert rdl(['replay', str(bag), '--models', 'lstm,hybrid', '--holdout', 'every:3',
                '--block-s', str(BLOCK_S), '--out', str(out)]) == 0
    metrics = json.loads((out / 'metrics.json').read_text())
    for name in ('report.md', 'nmse_over_time.png', 'predicted_vs_measured.png',
                 'nmse_per_joint.png'):
        assert (out / name).stat().st_size > 1000, name

    tau, t = trajectory.tau, trajectory.time - trajectory.time[0]
    assert metrics['samples'] == len(trajectory)
    assert metrics['rate_hz'] == pytest.approx(1000.0, rel=1e-6)
    assert metrics['joint_names'] == trajectory.joint_names
    # Held-out blocks from the data's own time: every third block of 0.2 s.
    held = (np.floor(t / BLOCK_S + 1e-9).astype(int) % 3) == 2
    assert metrics['holdout']['held_out_samples'] == held.sum()
    lstm = metrics['models']['lstm']
    assert lstm['held_out']['samples'] == held.sum()   # all after the differentiator warm-up
    # No test sample reached the training buffer: every appended time is a training time.
    stamps = np.round(np.array(appended) * 1e3).astype(int)
    assert len(stamps) == lstm['trained_samples'] == lstm['buffer_samples'] > 0
    assert not held[stamps].any()
    assert lstm['trained_held_out_samples'] == 0 and lstm['train_steps'] > 0
    # Previous-torque baseline, recomputed from the CSV: tau_{t-1} after the warm-up.
    previous = np.full(tau.shape, np.nan)
    previous[20:] = tau[19:-1]
    for split, mask in (('held_out', held), ('prequential', ~held)):
        nmse, rmse = _direct_scores(previous, tau, mask)
        reported = metrics['models']['previous_torque'][split]
        np.testing.assert_allclose(reported['nmse_per_joint'], nmse, rtol=1e-9)
        np.testing.assert_allclose(reported['rmse_per_joint'], rmse, rtol=1e-9)
        assert reported['nmse'] == pytest.approx(nmse.mean(), rel=1e-9)
    # Without a URDF the hybrid is skipped, with the reason in the report.
    assert 'needs the robot URDF' in metrics['skipped']['hybrid']
    text = (out / 'report.md').read_text()
    assert 'hybrid: hybrid needs the robot URDF' in text
    best = metrics['verdict']['best_model']
    assert best == 'lstm' and f'**{best}**' in text


def test_lstm_replay_is_deterministic_and_scores_match_its_predictions(kinova):
    bag, trajectory = kinova
    params = replay.load_learner_params()
    stream = replay.read_joint_stream(bag)
    holdout = replay.Holdout('after', fraction=0.7, block_s=BLOCK_S)
    runs = [replay.replay(stream, ['lstm'], None, params, holdout, seed=3).runs[-1]
            for _ in range(2)]
    np.testing.assert_array_equal(runs[0].prediction, runs[1].prediction)
    result = replay.replay(stream, ['lstm'], None, params, holdout, seed=3)
    metrics = report.compute_metrics(result)
    lstm = metrics['models']['lstm']
    held = result.held_out
    assert held.any() and not held[:int(0.7 * len(stream))].any()
    nmse, rmse = _direct_scores(result.runs[-1].prediction, trajectory.tau, held)
    np.testing.assert_allclose(lstm['held_out']['nmse_per_joint'], nmse, rtol=1e-9)
    np.testing.assert_allclose(lstm['held_out']['rmse_per_joint'], rmse, rtol=1e-9)
    assert lstm['latency_ms']['p50'] > 0 and lstm['realtime_factor'] > 0


def test_schunk_command_torques_gaps_and_linear_regression(schunk, tmp_path):
    bag, runs = schunk
    out = tmp_path / 'report'
    assert rdl(['replay', str(bag), '--models', 'ffnn', '--holdout', 'every:4',
                '--block-s', '2', '--out', str(out)]) == 0
    metrics = json.loads((out / 'metrics.json').read_text())
    assert metrics['torque_source'] == f'command {bag_io.SCHUNK_COMMAND_TOPIC}'
    assert metrics['samples'] == sum(len(r) for r in runs)
    assert metrics['rate_hz'] == pytest.approx(250.0, rel=0.05)
    assert len(metrics['events']['gaps_s']) == len(runs) - 1   # runs are 1 s apart
    # The command held at each joint state is the dataset's motor torque of that sample.
    stream = replay.read_joint_stream(bag)
    np.testing.assert_allclose(stream.tau, np.concatenate([r.tau for r in runs]))
    assert set(metrics['models']) == {'previous_torque', 'linear_regression', 'ffnn'}
    linear = metrics['models']['linear_regression']
    assert linear['refits'] > 0 and np.isfinite(linear['held_out']['nmse'])


def test_urdf_joint_mismatch_is_refused_naming_both_sets(kinova):
    bag, _ = kinova
    stream = replay.read_joint_stream(bag)
    panda = str(replay.find_config('learner.yaml').parents[1] / 'urdf' / 'panda.urdf')
    result = replay.replay(stream, ['hybrid'], panda, replay.load_learner_params(),
                           replay.Holdout('none'), 0)
    reason = result.skipped['hybrid']
    assert 'joint_1' in reason and 'panda_joint1' in reason and '\n' not in reason
    assert 'rigid_body' in result.skipped


def test_bad_options_are_one_line_errors(kinova, capsys):
    bag, _ = kinova
    assert rdl(['replay', str(bag), '--models', 'nope']) == 2
    assert 'unknown model' in capsys.readouterr().err
    assert rdl(['replay', str(bag), '--holdout', 'every:1']) == 2
    assert 'holdout every must be >= 2' in capsys.readouterr().err
    assert rdl(['replay', str(bag), '--topic', '/other']) == 2
    assert "'/other' is not a JointState topic" in capsys.readouterr().err


def test_time_resets_and_rejections_are_events(kinova, tmp_path):
    """A bag played twice into one recording (stamps jump back) with one NaN message."""
    bag, trajectory = kinova
    joints = bag_io.read_topic(bag, '/joint_states')
    n = len(joints)
    fields = {k: np.concatenate([v, v]) for k, v in joints.fields.items()}
    fields['position'][100, 2] = np.nan
    looped = bag_io.TopicArrays(
        topic='/joint_states', msgtype=joints.msgtype,
        stamp_ns=np.concatenate([joints.stamp_ns, joints.stamp_ns]),
        receive_ns=joints.receive_ns[0] + np.arange(2 * n, dtype=np.int64) * 10**6,
        stamp_source='header', fields=fields, joint_names=joints.joint_names)
    recorded = tmp_path / 'looped'
    bag_io.write_topic_arrays(recorded, [looped], 'sqlite3')
    stream = replay.read_joint_stream(recorded)
    assert len(stream) == 2 * n - 1
    assert np.flatnonzero(stream.reset_before).tolist() == [n - 1]
    assert [reason for _, reason in stream.rejections] == ['non_finite']
    result = replay.replay(stream, [], None, replay.load_learner_params(),
                           replay.Holdout('none'))
    events = report.compute_metrics(result)['events']
    assert events['time_resets_s'] == pytest.approx([n * 1e-3])
    assert [r[1] for r in events['rejections']] == ['non_finite']
    assert events['rejections'][0][0] == pytest.approx(100e-3)
    assert events['gaps_s'] == []


def test_a_reversed_command_array_is_read_by_command_joint_names(schunk):
    bag, runs = schunk   # torques on the command topic, in the learned joints' order
    joints = list(replay.read_joint_stream(bag).joint_names)
    with pytest.raises(ValueError, match=r"lack the learned joints \['" + joints[0]):
        replay.read_joint_stream(bag, command_joint_names=joints[1:] + ['other'])
    swapped = joints[::-1]   # a controller listing the joints the other way round
    stream = replay.read_joint_stream(bag, command_joint_names=swapped)
    np.testing.assert_allclose(stream.tau, np.concatenate([r.tau for r in runs])[:, ::-1])


def test_replay_adopts_the_arm_when_a_gripper_shares_the_topic_and_publishes_first(tmp_path):
    bag = tmp_path / 'shared'
    with bag_io.BagWriter(bag, 'mcap') as writer:
        for k in range(1200):
            stamp = 1_000_000_000 + k * 1_000_000
            gripper = k % 3 == 0
            names, values = (['finger'], np.array([0.01])) if gripper else (
                ['a', 'b'], np.sin(np.array([1.0, 2.0]) * k / 100))
            writer.write('/joint_states', 'sensor_msgs/msg/JointState', stamp,
                         writer.joint_state(stamp + gripper, names, values, 0 * values,
                                            2 * values))
    stream = replay.read_joint_stream(bag)
    assert stream.joint_names == ['a', 'b'] and len(stream) == 800


def test_a_baseline_without_error_gives_a_verdict_not_a_division_by_zero():
    metrics = {'verdict': {'split': 'held_out', 'best_model': 'ffnn',
                           'best_baseline': 'previous_torque', 'model_nmse': 3.0,
                           'baseline_nmse': 0.0, 'baseline_over_model': 0.0},
               'models': {'ffnn': {}}, 'duration_s': 4.0, 'joint_names': ['a']}
    text = report.verdict_line(metrics)
    assert 'cannot be compared with the best baseline, previous_torque' in text


@pytest.mark.parametrize('rows', [1, 5])
def test_a_bag_too_short_to_score_is_refused_in_one_line(kinova, tmp_path, capsys, rows):
    _, trajectory = kinova
    bag = tmp_path / 'short'
    bag_io.write_joint_trajectories(bag, [trajectory.segment(0, rows)], 'sqlite3')
    # Before: np.percentile of an empty latency array raised IndexError (a traceback).
    assert rdl(['replay', str(bag), '--models', 'ffnn', '--out', str(tmp_path / 'r')]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f'too few samples to replay: {rows} accepted, 0 of them past' in err
    assert not (tmp_path / 'r').exists()


def test_block_lengths_that_hold_back_nothing_and_absent_command_topics_are_refused(
        kinova, tmp_path, capsys):
    bag, _ = kinova
    out = str(tmp_path / 'r')
    for block_s in ('0', '-1'):   # 0 fell back to the default blocks
        assert rdl(['replay', str(bag), '--block-s', block_s, '--out', out]) == 2
        assert f'--block-s must be > 0 seconds, got {block_s}' in capsys.readouterr().err
    for block_s in ('0.0002', '100'):   # the report said "(0 samples)" and scored prequentially
        assert rdl(['replay', str(bag), '--models', 'ffnn', '--block-s', block_s,
                    '--out', out]) == 2
        assert 'holds back none of the' in capsys.readouterr().err
    assert rdl(['replay', str(bag), '--command-topic', '/nope', '--out', out]) == 2
    err = capsys.readouterr().err
    assert "command topic '/nope' is not in the bag" in err and "['/joint_states']" in err
    assert not (tmp_path / 'r').exists()
