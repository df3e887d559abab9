"""Offline training, checkpoints (atomic, weights_only, fallback) and `rdl train/evaluate`."""
import json
import logging
import math
from pathlib import Path
import subprocess
import sys

import numpy as np
import pytest
from robot_dynamics_learning import cli
from robot_dynamics_learning.data import datasets
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.data.windows import inverse_dynamics_windows
from robot_dynamics_learning.learning import checkpoint as checkpoint_module
from robot_dynamics_learning.learning import cli as cli_module
from robot_dynamics_learning.learning.checkpoint import (CheckpointDirectory, load_checkpoint,
                                                         save_checkpoint)
from robot_dynamics_learning.learning.training import split_windows, train_model, TrainConfig
from robot_dynamics_learning.models.registry import build_model, model_builder
import torch

ROOT = Path(__file__).resolve().parents[1]
JOINTS = ['j1', 'j2']


def _synthetic_trajectory(n: int = 2000, seed: int = 0) -> Trajectory:
    """Two joints, tau = inertia * qdd + friction * qd + gravity term (synthetic, for tests)."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) * 0.01
    q = np.stack([np.sin(1.3 * t), np.sin(0.7 * t + 1.0)], 1)
    qd = np.gradient(q, t, axis=0)
    qdd = np.gradient(qd, t, axis=0)
    tau = 2.0 * qdd + 0.5 * qd + 3.0 * np.cos(q) + 0.01 * rng.standard_normal(q.shape)
    return Trajectory(time=t, joint_names=list(JOINTS), q=q, qd=qd, qdd=qdd, tau=tau)


def _windows():
    return split_windows(inverse_dynamics_windows([_synthetic_trajectory()], 50, 25), 0.2)


def test_training_reduces_loss_and_restores_the_best_weights():
    train, val = _windows()
    model = build_model('lstm', {'hidden_size': 16}, 6, 2, 2)
    model.fit_normalization(train)
    initial, _ = model.loss(val)
    result = train_model(model, train, val, TrainConfig(max_epochs=30, progress=False,
                                                        learning_rate=1e-2))
    assert result.best_val_loss < 0.2 * float(initial.detach())
    assert result.history[-1]['train_loss'] < 0.2 * result.history[0]['train_loss']
    loss, _ = model.loss(val)
    assert math.isclose(float(loss), result.best_val_loss, rel_tol=1e-4)


def test_early_stopping_stops_when_validation_does_not_improve():
    train, val = _windows()
    model = build_model('ffnn', {'hidden': [8]}, 6, 2, 2)
    result = train_model(model, train, val, TrainConfig(max_epochs=100, patience=3,
                                                        learning_rate=1e-12, progress=False))
    assert result.epochs == 4  # epoch 1 sets the best, three stale epochs stop it


def test_refit_all_trains_on_the_validation_windows_too_and_keeps_their_calibration():
    train = inverse_dynamics_windows([_synthetic_trajectory()], 1)
    other = _synthetic_trajectory(seed=1)   # a region of q the training windows never reach
    other = Trajectory(time=other.time, joint_names=list(JOINTS), q=other.q + 1.5, qd=other.qd,
                       qdd=other.qdd, tau=other.tau + 3.0 * (np.cos(other.q + 1.5)
                                                             - np.cos(other.q)))
    val = inverse_dynamics_windows([other], 1)
    models, results = [], []
    for refit in (False, True):
        torch.manual_seed(0)
        models.append(build_model('ffnn', {'hidden': [32, 32]}, 6, 2, 2))
        results.append(train_model(models[-1], train, val, TrainConfig(
            max_epochs=40, patience=5, batch_size=256, min_delta=0.0, progress=False,
            refit_all=refit)))
    plain, refitted = results
    first = [entry for entry in refitted.history if not entry.get('refit')]
    assert first == plain.history   # the same early-stopping run decides the epoch count
    best_epoch = int(np.argmin([entry['val_loss'] for entry in first])) + 1
    assert sum(1 for entry in refitted.history if entry.get('refit')) == best_epoch
    # The variance stays the one measured on the windows held out of the first run.
    assert torch.equal(models[0].support.near_var, models[1].support.near_var)
    # and the refitted weights have seen the other region
    val_losses = [float(model.loss(val)[0].detach()) for model in models]
    assert val_losses[1] < 0.5 * val_losses[0]


def test_refit_all_is_refused_where_held_recordings_choose_the_window(tmp_path):
    config = tmp_path / 'lstm.yaml'
    config.write_text('model_type: lstm\ntraining: {refit_all: true}\n'
                      'data: {problem: inverse, window: [10, 2]}\n')
    with pytest.raises(ValueError, match='refit_all would train on the recordings that choose'):
        cli_module.load_config(config)


def test_gp_is_conditioned_not_trained():
    train, val = _windows()
    model = build_model('gp', {'hyper_iterations': 20, 'max_train': 500}, 6, 2, 2)
    result = train_model(model, train, val, TrainConfig(progress=False))
    assert result.history[0]['n_train'] == 500
    assert result.best_val_loss < 0.05


def test_checkpoint_reproduces_predictions_in_a_fresh_process(tmp_path):
    # One thread in both processes: with several, MKL may split a product differently under
    # load, which changes the last bit of the sums (not what this test is about).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _check_fresh_process_reproduces(tmp_path)
    finally:
        torch.set_num_threads(threads)


def _check_fresh_process_reproduces(tmp_path):
    train, val = _windows()
    model = build_model('ac_rkn_inverse', {'latent_obs_dim': 4, 'num_basis': 3}, 6, 2, 2)
    train_model(model, train, val, TrainConfig(max_epochs=2, progress=False))
    path = save_checkpoint(tmp_path / 'model.pt', model, JOINTS, {'run': 'test'})
    torch.save({'observations': val.observations, 'actions': val.actions,
                'targets': val.targets, 'expected': model(val).mean.detach()},
               tmp_path / 'inputs.pt')
    script = (
        'import sys, torch\n'
        'torch.set_num_threads(1)\n'
        'from robot_dynamics_learning.learning.checkpoint import load_checkpoint\n'
        'from robot_dynamics_learning.models.base import SequenceBatch\n'
        f'loaded = load_checkpoint(sys.argv[1], joint_names={JOINTS!r})\n'
        'data = torch.load(sys.argv[2], weights_only=True)\n'
        'batch = SequenceBatch(data["observations"], data["actions"], data["targets"])\n'
        'with torch.no_grad():\n'
        '    out = loaded.model(batch).mean\n'
        'print("EQUAL" if torch.equal(out, data["expected"]) else "DIFFERENT")\n')
    result = subprocess.run([sys.executable, '-c', script, str(path), str(tmp_path / 'inputs.pt')],
                            capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == 'EQUAL'


def test_checkpoint_refuses_mismatches(tmp_path):
    model = build_model('lstm', {'hidden_size': 4}, 6, 2, 2)
    path = save_checkpoint(tmp_path / 'm.pt', model, JOINTS)
    with pytest.raises(ValueError, match='joint names'):
        load_checkpoint(path, joint_names=['j2', 'j1'])
    with pytest.raises(ValueError, match="model type 'lstm'"):
        load_checkpoint(path, model_type='gru')
    with pytest.raises(ValueError, match='hidden_size'):
        load_checkpoint(path, config={'hidden_size': 8})
    assert load_checkpoint(path, joint_names=JOINTS, config={'hidden_size': 4}).joint_names \
        == JOINTS


def test_checkpoint_holds_no_pickled_code(tmp_path):
    model = build_model('ac_rkn_forward', {'latent_obs_dim': 4}, 3, 2, 3)
    path = save_checkpoint(tmp_path / 'm.pt', model)
    payload = torch.load(path, weights_only=True)
    assert payload['model_type'] == 'ac_rkn_forward'
    assert 'obs_norm.mean' in payload['state_dict']


def test_failed_write_leaves_the_previous_checkpoint_and_no_temp_file(tmp_path, monkeypatch):
    model = build_model('lstm', {'hidden_size': 4}, 6, 2, 2)
    path = save_checkpoint(tmp_path / 'm.pt', model, JOINTS)
    before = path.read_bytes()

    def broken_save(obj, stream):
        stream.write(b'partial')
        raise OSError('disk full')

    monkeypatch.setattr(checkpoint_module.torch, 'save', broken_save)
    with pytest.raises(OSError, match='disk full'):
        save_checkpoint(path, model, JOINTS)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ['m.pt']


def test_directory_keeps_last_n_and_falls_back_from_a_corrupt_newest(tmp_path, caplog):
    folder = CheckpointDirectory(tmp_path, keep_last=2)
    model = build_model('lstm', {'hidden_size': 4}, 6, 2, 2)
    for _ in range(4):
        folder.save(model, JOINTS)
    assert [p.name for p in folder.paths()] == ['model_000002.pt', 'model_000003.pt']
    folder.paths()[-1].write_bytes(b'half a file')
    with caplog.at_level(logging.ERROR):
        loaded = folder.load_latest(joint_names=JOINTS)
    assert loaded.path.name == 'model_000002.pt'
    assert 'model_000003.pt' in caplog.text
    folder.paths()[0].write_bytes(b'')
    with pytest.raises(ValueError, match='no valid checkpoint'):
        folder.load_latest()
    with pytest.raises(FileNotFoundError):
        CheckpointDirectory(tmp_path / 'empty').load_latest()


def test_rdl_train_and_evaluate_on_the_pneumatic_arm(tmp_path, capsys):
    config = tmp_path / 'gru.yaml'
    config.write_text(
        'model_type: gru\n'
        'model: {latent_obs_dim: 4, hidden_size: 8, encoder_hidden: [8], decoder_hidden: [8]}\n'
        'training: {max_epochs: 1, progress: false, obs_drop: 0.5}\n'
        'data: {problem: forward, window: 40, stride: 40}\n')
    out = tmp_path / 'run'
    assert cli.main(['train', '--config', str(config), '--data', 'pneumatic',
                     '--out', str(out)]) == 0
    assert (out / 'model.pt').is_file()
    assert cli.main(['evaluate', '--checkpoint', str(out / 'model.pt'), '--data', 'pneumatic',
                     '--horizon', '5', '--out', str(tmp_path / 'eval.json')]) == 0
    metrics = json.loads((tmp_path / 'eval.json').read_text())
    assert len(metrics['multi_step_rmse']) == 5
    assert all(np.isfinite(metrics['multi_step_rmse']))


@pytest.mark.parametrize('path', sorted((ROOT / 'config' / 'models').glob('*.yaml')),
                         ids=lambda path: path.name)
def test_every_shipped_training_config_passes_the_checks_of_rdl_train(path):
    config = cli_module.load_config(path)   # raises on any bad key or value
    builder = model_builder(config['model_type'])
    assert builder.config_class.from_dict(config['model']) is not None
    assert TrainConfig.from_dict(config['training']).max_seconds is None   # converged, unclocked


def test_schunk_split_tests_inside_the_training_joint_ranges():
    train = cli_module.load_split('schunk', 'train')
    test = cli_module.load_split('schunk', 'test')
    runs = datasets.load_schunk()
    assert len(train) + len(test) == len(runs) and len(test) == (len(runs) + 2) // 5
    assert {t.source for t in train}.isdisjoint(t.source for t in test)
    assert train[0].source.endswith('measurement_80')  # the one wide sweep trains, first
    q_train = np.concatenate([t.q for t in train])
    q_test = np.concatenate([t.q for t in test])
    assert np.all(q_test.min(0) >= q_train.min(0)) and np.all(q_test.max(0) <= q_train.max(0))
