"""Issue 17 regressions: every defect of a checkpoint is refused before use and falls back."""
import logging
from pathlib import Path

import pytest
from robot_dynamics_learning.learning.checkpoint import (CheckpointDirectory,
                                                         CheckpointMismatch, load_checkpoint,
                                                         save_checkpoint, tensor_checksum)
from robot_dynamics_learning.models.registry import build_model
import torch

JOINTS = ['j1', 'j2']


def _model():
    return build_model('lstm', {'hidden_size': 4}, 6, 2, 2)


def _rewrite(path: Path, edit, checksum: bool = True) -> None:
    """Load a checkpoint's payload, apply `edit`, save it back (valid checksum if asked)."""
    payload = torch.load(path, weights_only=True)
    edit(payload)
    if checksum:
        payload['checksum'] = tensor_checksum(payload['state_dict'])
    torch.save(payload, path)


def _folder_with_bad_newest(tmp_path: Path, edit, checksum: bool = True) -> CheckpointDirectory:
    folder = CheckpointDirectory(tmp_path)
    folder.save(_model(), JOINTS, {'steps': 1})
    folder.save(_model(), JOINTS, {'steps': 2})
    _rewrite(folder.paths()[-1], edit, checksum)
    return folder


def _nan_weights(payload):
    for value in payload['state_dict'].values():
        if value.is_floating_point():
            value.fill_(float('nan'))


def test_f01_nan_weights_are_refused_and_the_previous_checkpoint_used(tmp_path, caplog):
    folder = _folder_with_bad_newest(tmp_path, _nan_weights)
    with pytest.raises(ValueError, match='NaN or inf'):
        load_checkpoint(folder.paths()[-1])
    with caplog.at_level(logging.ERROR):
        loaded = folder.load_latest(JOINTS, 'lstm')
    assert loaded.metadata['steps'] == 1
    assert 'model_000001.pt (non_finite)' in caplog.text
    assert folder.skipped == {'non_finite': 1}
    assert all(torch.isfinite(v).all() for v in loaded.model.state_dict().values())


def _wrong_shape(payload):
    key = next(k for k, v in payload['state_dict'].items() if v.dim() == 2)
    payload['state_dict'][key] = torch.zeros(3, 3)


def _missing_key(payload):
    payload['state_dict'].pop(next(iter(payload['state_dict'])))


def _huge_dims(payload):
    payload['dims']['n_obs'] = 10 ** 9


def _huge_config(payload):
    payload['config']['hidden_size'] = 10 ** 9


def _missing_field(payload):
    del payload['dims']


def _wrong_config_type(payload):
    payload['config']['hidden_size'] = 'big'


@pytest.mark.parametrize('edit', [_wrong_shape, _missing_key, _huge_dims, _huge_config,
                                  _missing_field, _wrong_config_type])
def test_f05_every_defect_is_a_value_error_and_falls_back(tmp_path, edit):
    folder = _folder_with_bad_newest(tmp_path, edit)
    with pytest.raises(ValueError, match=str(folder.paths()[-1])):
        load_checkpoint(folder.paths()[-1])
    assert folder.load_latest(JOINTS, 'lstm').metadata['steps'] == 1


def test_f05_absurd_sizes_are_refused_before_allocation(tmp_path):
    folder = _folder_with_bad_newest(tmp_path, _huge_config)
    # hidden_size 1e9 would need about 16e9 floats per LSTM matrix; refused on shapes first.
    with pytest.raises(ValueError, match='does not build a model|do not fit the model'):
        load_checkpoint(folder.paths()[-1])


def test_f05_a_mismatch_is_not_corruption(tmp_path):
    folder = CheckpointDirectory(tmp_path)
    folder.save(_model(), JOINTS)
    with pytest.raises(CheckpointMismatch, match='joint names'):
        folder.load_latest(['a', 'b'])


def test_f06_flipped_bytes_in_a_tensor_are_detected(tmp_path):
    model = _model()
    with torch.no_grad():
        weight = model.state_dict()['lstm.weight_ih_l0']
        weight.copy_(torch.linspace(0.1, 0.9, weight.numel()).reshape(weight.shape))
    folder = CheckpointDirectory(tmp_path)
    folder.save(_model(), JOINTS, {'steps': 1})
    path = folder.save(model, JOINTS, {'steps': 2})
    data = bytearray(path.read_bytes())
    raw = weight.numpy().tobytes()
    at = data.find(raw)
    assert at > 0
    for k in range(64):
        data[at + 4 * k + 3] ^= 0x10   # exponent bits of 64 float32 values
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match='checksum mismatch'):
        load_checkpoint(path)
    assert folder.load_latest(JOINTS).metadata['steps'] == 1


def test_f06_a_checkpoint_without_checksum_is_refused(tmp_path):
    path = save_checkpoint(tmp_path / 'm.pt', _model(), JOINTS)
    _rewrite(path, lambda payload: payload.pop('checksum'), checksum=False)
    with pytest.raises(ValueError, match="'checksum'"):
        load_checkpoint(path)


def test_f13_temporary_files_of_a_killed_writer_are_removed_at_the_next_save(tmp_path):
    folder = CheckpointDirectory(tmp_path)
    folder.save(_model(), JOINTS)
    leftover = tmp_path / '.model_000001.pt.abc123.tmp'   # what kill -9 mid-save leaves
    leftover.write_bytes(b'partial')
    other = tmp_path / '.other_000001.pt.abc.tmp'          # another prefix's: not ours
    other.write_bytes(b'partial')
    folder.save(_model(), JOINTS)
    assert not leftover.exists()
    assert other.exists()
    assert [p.name for p in folder.paths()] == ['model_000000.pt', 'model_000001.pt']
