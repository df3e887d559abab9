"""
Checkpoints: weights, config, normalisation, convention tag and joint order in one file.

Writes are atomic (temp file in the same folder, fsync, os.replace, fsync of the folder), so
a reader never sees a half-written checkpoint; a temporary file left by a writer killed
mid-write is removed at the next save. Reads use `torch.load(weights_only=True)`: the file
holds only tensors and plain Python values, never pickled code. Before anything is built, a
checkpoint is checked: a SHA-256 of its tensors (a flipped bit anywhere in the weights is
refused), every floating tensor finite, feature widths within MAX_FEATURES, and the tensor
shapes equal to those of the model its config describes (built on the meta device, which
allocates nothing). Every failure is a `ValueError` naming the file and the reason, so
`CheckpointDirectory.load_latest` falls back to the previous file for all of them; only a
`CheckpointMismatch` (other joints, model type or config than the caller expects) is raised
at once.
"""
import hashlib
import logging
import math
import os
from pathlib import Path
import re
import tempfile
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from robot_dynamics_learning.models.base import DynamicsModel
from robot_dynamics_learning.models.common import DefaultedBuffers
from robot_dynamics_learning.models.registry import (build_model, builds_from_urdf,
                                                     model_builder)
import torch

FORMAT_VERSION = 3   # 3: a versioned `convention` tag replaces the English sentence of 2
READABLE_VERSIONS = (2, 3)
# Format 2 stored each model's target convention as a sentence; the tag each one means.
LEGACY_CONVENTIONS = {
    'absolute joint torque tau_t (N m)': 'joint_torque/1',
    'absolute joint torque tau_t (N m) = RNEA + learned residual':
        'joint_torque_rnea_plus_residual/1',
    'absolute joint torque tau_t (N m) = tau_{t-1} + learned difference':
        'joint_torque_previous_plus_difference/1',
    'next observation o_{t+1} (physical units) = o_t + learned difference':
        'next_observation_difference/1',
    'next observation o_{t+1} = [x, y, yaw, vx, vy, r] after h seconds':
        'car_next_pose_velocity/1',
}
MAX_FEATURES = 100_000   # bound on n_obs, n_act, n_target before anything is allocated
# torch's message when weights_only loading meets an object it will not unpickle.
WEIGHTS_ONLY_REFUSAL = 'Weights only load failed'
LOG = logging.getLogger(__name__)


class CheckpointMismatch(ValueError):
    """A valid checkpoint for other joints, another model type or another config."""


class CorruptCheckpoint(ValueError):
    """
    A file that is not a usable checkpoint; `reason` is a short stable category for counters.

    Reasons: unreadable, malformed, checksum, non_finite, size, config, convention.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def tensor_checksum(state_dict: Dict[str, torch.Tensor]) -> str:
    """Return the SHA-256 (hex) of names, dtypes, shapes and bytes of the tensors, by name."""
    digest = hashlib.sha256()
    for key in sorted(state_dict):
        tensor = state_dict[key].detach().cpu().contiguous()
        digest.update(f'{key}|{tensor.dtype}|{tuple(tensor.shape)}|'.encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


class LoadedCheckpoint(NamedTuple):
    """A model rebuilt from a checkpoint, with what was saved beside it."""

    model: DynamicsModel
    model_type: str
    config: Dict[str, Any]
    joint_names: List[str]
    metadata: Dict[str, Any]
    path: Path


def checkpoint_payload(model: DynamicsModel, joint_names: Sequence[str] = (),
                       metadata: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Return the plain dict a checkpoint holds (tensors cloned: safe to write from a thread)."""
    model_type = model.model_type
    if model_type is None:
        raise ValueError(f'{type(model).__name__} was not built by the registry (no model_type)')
    state_dict = {key: value.detach().cpu().clone() for key, value in model.state_dict().items()}
    return {
        'format_version': FORMAT_VERSION,
        'model_type': model_type,
        'config': model.config.to_dict(),
        'dims': {'n_obs': model.n_obs, 'n_act': model.n_act, 'n_target': model.n_target},
        'convention': model.convention,
        'joint_names': [str(name) for name in joint_names],
        'metadata': dict(metadata or {}),
        'state_dict': state_dict,
        'checksum': tensor_checksum(state_dict),
    }


def save_checkpoint(path: Path, model: DynamicsModel, joint_names: Sequence[str] = (),
                    metadata: Optional[Dict[str, Any]] = None) -> Path:
    """Write a checkpoint atomically to `path` and return it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = checkpoint_payload(model, joint_names, metadata)
    handle, temp_name = tempfile.mkstemp(prefix=f'.{path.name}.', suffix='.tmp', dir=path.parent)
    try:
        with os.fdopen(handle, 'wb') as stream:
            torch.save(payload, stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp_name, path)
    except BaseException:
        if os.path.exists(temp_name):
            os.unlink(temp_name)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return path


def load_checkpoint(path: Path, joint_names: Optional[Sequence[str]] = None,
                    model_type: Optional[str] = None,
                    config: Optional[Dict[str, Any]] = None,
                    map_location: str = 'cpu') -> LoadedCheckpoint:
    """
    Load a checkpoint with weights_only=True and rebuild its model through the registry.

    joint_names, model_type, config: what the caller expects; a difference is a
    `CheckpointMismatch` that names it (a model trained for other joints or another
    architecture is never used). Any other defect is a ValueError naming the file.
    """
    path = Path(path)
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as error:  # noqa: B902 - torch raises many types for foreign files
        raise CorruptCheckpoint('unreadable', f'{path}: {_unreadable_reason(error)}') from error
    return LoadedCheckpoint(*model_from_payload(payload, joint_names, model_type, config,
                                                source=str(path)), path)


def _unreadable_reason(error: BaseException) -> str:
    """
    Say why torch.load failed, without torch's advice to retry with weights_only=False.

    That advice runs whatever code a foreign file carries; our checkpoints never need it.
    """
    if WEIGHTS_ONLY_REFUSAL in str(error):
        return ('not a robot_dynamics_learning checkpoint: the safe loader (weights_only) '
                'refused it (a damaged or foreign file, or a pickled Python object such as a '
                'whole model, which is never unpickled: that could run code from the file)')
    return f'not a PyTorch checkpoint file ({type(error).__name__}: {_first_line(error)})'


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ''


def _check_payload(payload: Any, source: str) -> None:
    """Refuse (`CorruptCheckpoint` naming the field) a malformed, corrupt or non-finite payload."""
    def refuse(reason: str, text: str) -> None:
        raise CorruptCheckpoint(reason, f'{source}: {text}')

    if not isinstance(payload, dict) or payload.get('format_version') not in READABLE_VERSIONS:
        refuse('malformed', f'not a robot_dynamics_learning checkpoint of format '
               f'{" or ".join(map(str, READABLE_VERSIONS))}')
    convention_key = 'convention' if payload['format_version'] >= 3 else 'target_convention'
    kinds = {'model_type': str, 'config': dict, 'dims': dict, convention_key: str,
             'joint_names': list, 'metadata': dict, 'state_dict': dict, 'checksum': str}
    for key, kind in kinds.items():
        if not isinstance(payload.get(key), kind):
            refuse('malformed', f'field {key!r} is missing or not a {kind.__name__}')
    for name in ('n_obs', 'n_act', 'n_target'):
        value = payload['dims'].get(name)
        if type(value) is not int or not 0 <= value <= MAX_FEATURES:
            refuse('malformed', f'dims.{name} must be an int in [0, {MAX_FEATURES}], got '
                   f'{value!r}')
    if not all(isinstance(name, str) for name in payload['joint_names']):
        refuse('malformed', 'joint_names must be strings')
    state = payload['state_dict']
    for key, value in state.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            refuse('malformed', f'state_dict entry {key!r} is not a named tensor')
    if tensor_checksum(state) != payload['checksum']:
        refuse('checksum', 'tensor checksum mismatch (the file is corrupt)')
    for key, value in state.items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            refuse('non_finite', f'tensor {key!r} has NaN or inf values')
    for key, value in payload['metadata'].items():
        if isinstance(value, float) and not math.isfinite(value):
            refuse('non_finite', f'metadata {key!r} is not finite ({value})')
    steps = payload['metadata'].get('steps', 0)
    if type(steps) is not int or steps < 0:
        refuse('malformed', f'metadata steps must be an int >= 0, got {steps!r}')


def saved_convention_tag(payload: Dict[str, Any]) -> Optional[str]:
    """Return the convention tag of a checked payload (format 2: through its sentence)."""
    if payload['format_version'] >= 3:
        return payload['convention']
    return LEGACY_CONVENTIONS.get(payload['target_convention'])


def _check_shapes(payload: Dict[str, Any], source: str) -> None:
    """
    Compare the saved tensor shapes with the model its config describes, allocating nothing.

    The model is built on the meta device, so a config declaring absurd sizes is refused
    here instead of allocating them; names must match (buffers of a `DefaultedBuffers` module
    may be absent: files from before it), and parameter shapes. Models built from a URDF
    are skipped (`builds_from_urdf`): `load_state_dict` compares theirs after the build.
    """
    if builds_from_urdf(payload['model_type'], payload['config']):
        return
    dims = payload['dims']
    try:
        with torch.device('meta'):
            shell = build_model(payload['model_type'], payload['config'], dims['n_obs'],
                                dims['n_act'], dims['n_target'])
    except (RuntimeError, TypeError, KeyError, ValueError) as error:   # e.g. sizes overflow
        raise CorruptCheckpoint('size', f'{source}: config does not build a model: '
                                f'{_first_line(error)}') from None
    # Parameters are sized by the config; buffers may be sized by data (a GP's training set).
    shapes = {key: tuple(value.shape) for key, value in payload['state_dict'].items()}
    expected = {key: tuple(value.shape) for key, value in shell.named_parameters()}
    saved = {key: shapes[key] for key in shapes if key in expected}
    defaulted = tuple(f'{name}.' for name, module in shell.named_modules()
                      if isinstance(module, DefaultedBuffers))
    names = {key for key in shell.state_dict() if key in shapes or not key.startswith(defaulted)}
    if expected != saved or set(shapes) != names:
        differ = sorted(key for key in names ^ set(shapes)
                        | {k for k in expected if expected[k] != saved.get(k)})[:5]
        listed = ', '.join(f'{k}: {shapes.get(k)}, {expected.get(k)}' for k in differ)
        raise CorruptCheckpoint('size', f'{source}: tensors do not fit the model of its config '
                                f'(name: saved, expected): {listed}')


def model_from_payload(payload: Any, joint_names: Optional[Sequence[str]] = None,
                       model_type: Optional[str] = None,
                       config: Optional[Dict[str, Any]] = None, source: str = 'checkpoint'
                       ) -> Tuple[DynamicsModel, str, Dict[str, Any], List[str],
                                  Dict[str, Any]]:
    """
    Rebuild the model of a `checkpoint_payload` dict through the registry (eval mode).

    Returns (model, model_type, config, joint_names, metadata). joint_names, model_type,
    config: what the caller expects; a difference is a `CheckpointMismatch` naming `source`
    and what differs. A malformed, corrupt or non-finite payload is a ValueError, raised
    before the model is allocated.
    """
    _check_payload(payload, source)
    saved_joints = list(payload['joint_names'])
    if joint_names is not None and list(joint_names) != saved_joints:
        raise CheckpointMismatch(f'{source}: joint names {saved_joints} do not match the '
                                 f'expected {list(joint_names)} (order matters)')
    if model_type is not None and model_type != payload['model_type']:
        raise CheckpointMismatch(f"{source}: model type '{payload['model_type']}' does not "
                                 f"match the expected '{model_type}'")
    try:
        model_builder(payload['model_type']).config_class.from_dict(payload['config'])
    except (TypeError, KeyError, ValueError) as error:   # unknown type, bad config value
        raise CorruptCheckpoint('config', f'{source}: invalid model type or config '
                                f'({type(error).__name__}: {error})') from None
    _check_shapes(payload, source)
    dims = payload['dims']
    try:
        model = build_model(payload['model_type'], payload['config'], dims['n_obs'],
                            dims['n_act'], dims['n_target'])
    except (TypeError, KeyError, ValueError) as error:   # e.g. the config's URDF is gone
        raise CorruptCheckpoint('config', f'{source}: config does not build a model '
                                f'({type(error).__name__}: {error})') from None
    if config is not None:
        expected = type(model.config).from_dict(config).to_dict()
        if expected != payload['config']:
            diff = {key: (payload['config'].get(key), value) for key, value in expected.items()
                    if payload['config'].get(key) != value}
            raise CheckpointMismatch(f'{source}: config differs from the expected one (saved, '
                                     f'expected): {diff}')
    saved_convention = saved_convention_tag(payload)
    if model.convention != saved_convention:
        raise CorruptCheckpoint('convention', f'{source}: target convention '
                                f"'{saved_convention}' differs from this code's "
                                f"'{model.convention}'")
    try:
        model.load_state_dict(payload['state_dict'])
    except RuntimeError as error:   # missing, unexpected or wrong-shaped tensors
        raise CorruptCheckpoint('size', f'{source}: weights do not fit the model: '
                                f'{_first_line(error)}') from None
    model.eval()
    return model, payload['model_type'], payload['config'], saved_joints, payload['metadata']


def save_to_directory(directory: 'CheckpointDirectory', joint_names: Sequence[str],
                      model: DynamicsModel, metadata: Dict[str, Any]) -> Path:
    """
    Save `model` as the next checkpoint of `directory` for `joint_names`.

    A module-level function, so `functools.partial(save_to_directory, directory, names)` is
    the `save(model, metadata)` callable of a continual trainer, picklable for its process.
    """
    return directory.save(model, joint_names, metadata)


class CheckpointDirectory:
    """
    A folder of numbered checkpoints `<prefix>_<NNNNNN>.pt`; keeps the newest `keep_last`.

    `load_latest` returns the newest valid one and falls back to older ones when the newest is
    corrupt, logging a clear error for each file it skips.
    """

    def __init__(self, folder: Path, keep_last: int = 3, prefix: str = 'model') -> None:
        if keep_last < 1:
            raise ValueError(f'keep_last must be >= 1, got {keep_last}')
        if not re.fullmatch(r'[A-Za-z0-9_-]+', prefix):
            raise ValueError(f'checkpoint prefix must be alphanumeric/_/-, got {prefix!r}')
        self.folder = Path(folder)
        self.keep_last = keep_last
        self.prefix = prefix
        self._pattern = re.compile(rf'{re.escape(prefix)}_(\d+)\.pt')
        self.skipped: Dict[str, int] = {}   # checkpoints skipped by load_latest, per reason

    def paths(self) -> List[Path]:
        """Return checkpoint paths, oldest first (by number)."""
        if not self.folder.is_dir():
            return []
        numbered = [(int(match.group(1)), path) for path in self.folder.iterdir()
                    if (match := self._pattern.fullmatch(path.name))]
        return [path for _, path in sorted(numbered)]

    def save(self, model: DynamicsModel, joint_names: Sequence[str] = (),
             metadata: Optional[Dict[str, Any]] = None) -> Path:
        """
        Save the next numbered checkpoint atomically, then prune to `keep_last`.

        Temporary files of this prefix left by a writer killed mid-write are removed first
        (one writer per folder and prefix, so none of them can still be in use).
        """
        for stale in self.folder.glob(f'.{self.prefix}_*.pt.*.tmp'):
            LOG.warning('removing the temporary file %s of an interrupted save', stale)
            stale.unlink(missing_ok=True)
        existing = self.paths()
        number = int(self._pattern.fullmatch(existing[-1].name).group(1)) + 1 if existing else 0
        path = save_checkpoint(self.folder / f'{self.prefix}_{number:06d}.pt', model,
                               joint_names, metadata)
        for old in self.paths()[:-self.keep_last]:
            old.unlink(missing_ok=True)
        return path

    def load_latest(self, joint_names: Optional[Sequence[str]] = None,
                    model_type: Optional[str] = None,
                    config: Optional[Dict[str, Any]] = None) -> LoadedCheckpoint:
        """
        Load the newest checkpoint that is valid; fall back to older ones for any defect.

        A mismatch of joints, type or config (`CheckpointMismatch`) is not corruption: it
        raises at once, because an older file from the same run would not match either.
        """
        paths = self.paths()
        if not paths:
            raise FileNotFoundError(f'no {self.prefix}_*.pt checkpoints in {self.folder}')
        errors = []
        for path in reversed(paths):
            try:
                return load_checkpoint(path, joint_names, model_type, config)
            except (CorruptCheckpoint, OSError) as error:   # corrupt, or removed meanwhile
                reason = error.reason if isinstance(error, CorruptCheckpoint) else 'unreadable'
                self.skipped[reason] = self.skipped.get(reason, 0) + 1
                LOG.error('skipping corrupt checkpoint %s (%s): %s', path, reason, error)
                errors.append(f'{path.name}: {error}')
        raise ValueError(f'no valid checkpoint in {self.folder}: ' + '; '.join(errors))
