"""The LSTM's training window chosen on held-out recordings (`learning.window_choice`)."""
import copy
import json

import numpy as np
import pytest
from robot_dynamics_learning import cli
from robot_dynamics_learning.data.splits import split_validation
from robot_dynamics_learning.data.windows import inverse_dynamics_arrays, whole_sequence
from robot_dynamics_learning.learning import cli as learning_cli
from robot_dynamics_learning.learning import window_choice
from robot_dynamics_learning.learning.evaluation import predict_inverse
from robot_dynamics_learning.learning.training import TrainConfig
from robot_dynamics_learning.learning.window_choice import held_out_nmse, train_choosing_window
from robot_dynamics_learning.models.registry import build_model
from test_learning_training import _synthetic_trajectory
import torch

CONFIG = TrainConfig(max_epochs=4, learning_rate=1e-2, progress=False)


def _expected(held: dict, held_sliding: dict) -> tuple:
    """(window, sliding) the choice must return: sliding only SLIDING_MARGIN better."""
    whole = min(held, key=held.get)
    sliding = min(held_sliding, key=held_sliding.get)
    margin = 1.0 - window_choice.SLIDING_MARGIN
    return ((sliding, True) if held_sliding[sliding] < margin * held[whole] else (whole, False))


def _build():
    return build_model('lstm', {'hidden_size': 8}, 6, 2, 2)


def test_the_model_returned_is_the_one_of_the_best_window():
    torch.manual_seed(0)
    recordings = [_synthetic_trajectory(1500)]
    choice = train_choosing_window(_build, recordings, (20, 5, 2), CONFIG)
    assert set(choice.held_nmse) == {20, 5, 2}
    assert set(choice.held_nmse_sliding) == {5, 2}   # 20 LSTM steps a sample: too many
    assert (choice.window, choice.sliding) == _expected(choice.held_nmse,
                                                        choice.held_nmse_sliding)
    assert choice.model.config.sliding == (choice.window if choice.sliding else 0)
    _, held = split_validation(recordings, 20, 0.2)
    # the returned weights score what was recorded for its window (not the last one trained)
    scored = choice.held_nmse_sliding if choice.sliding else choice.held_nmse
    assert held_out_nmse(choice.model, held) == pytest.approx(scored[choice.window])


@pytest.mark.parametrize('sliding_two, chosen', [(0.2, (2, True, 2)), (0.25, (2, False, 0))])
def test_sliding_windows_are_kept_where_they_predict_the_held_data_clearly_better(
        monkeypatch, sliding_two, chosen):
    # window 5 whole, sliding; window 2 whole, sliding: 0.2 is 33 % below the best whole 0.3,
    # 0.25 only 17 %
    scores = iter([0.5, 0.4, 0.3, sliding_two])
    monkeypatch.setattr(window_choice, 'held_out_nmse', lambda model, held: next(scores))
    choice = train_choosing_window(_build, [_synthetic_trajectory(1500)], (5, 2), CONFIG)
    assert (choice.window, choice.sliding, choice.model.config.sliding) == chosen
    assert choice.held_nmse == {5: 0.5, 2: 0.3}
    assert choice.held_nmse_sliding == {5: 0.4, 2: sliding_two}
    assert choice.result.seconds >= 0.0 and choice.result.epochs <= CONFIG.max_epochs


def test_the_chosen_models_variance_covers_the_held_recordings_predicted_whole():
    torch.manual_seed(0)
    recordings = [_synthetic_trajectory(1500)]
    choice = train_choosing_window(_build, recordings, (20, 5), CONFIG)
    _, held = split_validation(recordings, 20, 0.2)
    predicted = predict_inverse(choice.model, held)
    z = np.abs(predicted['target'] - predicted['prediction']) / np.sqrt(predicted['variance'])
    # Calibrated on exactly these errors (not on the training windows' first steps).
    assert np.mean(z <= 1) == pytest.approx(0.683, abs=0.05)
    assert np.mean(z <= 2) == pytest.approx(0.954, abs=0.05)
    again = copy.deepcopy(choice.model)
    again.calibrate_variance_whole(
        [whole_sequence(inverse_dynamics_arrays(piece)) for piece in held])
    torch.testing.assert_close(again.support.near_var, choice.model.support.near_var)


def test_too_little_data_trains_the_first_window_alone():
    choice = train_choosing_window(_build, [_synthetic_trajectory(80)], (50, 2), CONFIG)
    assert choice.window == 50 and choice.held_nmse == {}
    assert choice.result.epochs >= 1


@pytest.mark.parametrize('windows', [(), (0, 2), (2.5,)])
def test_bad_windows_are_refused(windows):
    with pytest.raises(ValueError, match='windows must be positive integers'):
        train_choosing_window(_build, [_synthetic_trajectory(500)], windows, CONFIG)


def _csv(path, rows: int = 1200) -> str:
    """Write a two-joint recording as CSV (time, q_*, tau_*); `rdl` derives qd and qdd."""
    recording = _synthetic_trajectory(rows)
    table = np.column_stack([recording.time, recording.q, recording.tau])
    path.write_text('time,q_0,q_1,tau_0,tau_1\n'
                    + '\n'.join(','.join(repr(float(v)) for v in row) for row in table) + '\n')
    return str(path)


def test_rdl_train_chooses_among_listed_windows_and_records_the_choice(tmp_path, capsys):
    config = tmp_path / 'lstm.yaml'
    config.write_text('model_type: lstm\nmodel: {hidden_size: 8}\n'
                      'training: {max_epochs: 2, progress: false}\n'
                      'data: {problem: inverse, window: [20, 2]}\n')
    out = tmp_path / 'run'
    assert cli.main(['train', '--config', str(config), '--data', _csv(tmp_path / 'arm.csv'),
                     '--columns', 'q=q_*', 'tau=tau_*', '--out', str(out)]) == 0
    summary = json.loads((out / 'train_summary.json').read_text())
    choice = summary['window_choice']
    assert set(choice['held_nmse']) == {'20', '2'}
    assert set(choice['held_nmse_sliding']) == {'2'}
    assert (str(choice['window']), choice['sliding']) == _expected(choice['held_nmse'],
                                                                   choice['held_nmse_sliding'])
    assert f"window {choice['window']} chosen" in capsys.readouterr().out
    saved = torch.load(out / 'model.pt', weights_only=True)   # the checkpoint predicts so too
    assert saved['config']['sliding'] == (choice['window'] if choice['sliding'] else 0)


@pytest.mark.parametrize('data', ['{problem: inverse, window: []}',
                                  '{problem: inverse, window: [10, 0]}',
                                  '{problem: inverse, window: [10, 10]}',
                                  '{problem: forward, window: [10, 2]}'])
def test_a_bad_window_list_is_refused_with_the_file_named(tmp_path, data):
    config = tmp_path / 'lstm.yaml'
    config.write_text(f'model_type: lstm\ndata: {data}\n')
    with pytest.raises(ValueError, match=r'lstm.yaml: data.window as a list takes distinct'):
        learning_cli.load_config(str(config))


def test_a_model_with_a_nan_score_is_never_chosen(monkeypatch):
    scores = iter([float('nan'), 0.5, float('nan')])   # 20 whole; 5 whole, sliding
    monkeypatch.setattr(window_choice, 'held_out_nmse', lambda model, held: next(scores))
    choice = train_choosing_window(_build, [_synthetic_trajectory(1500)], (20, 5), CONFIG)
    assert (choice.window, choice.sliding) == (5, False)
