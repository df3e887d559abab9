"""
Checkpoints: weights, config, normalisation, target convention and joint order in one file.

Writes are atomic (temp file in the same folder, fsync, os.replace, fsync of the folder), so
a reader never sees a half-written checkpoint. Reads use `torch.load(weights_only=True)`: the
file holds only tensors and plain Python values, never pickled code. The model is rebuilt
through the registry and refused on a joint-name, model-type or config mismatch.
"""
import logging
import os
from pathlib import Path
import re
import tempfile
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from robot_dynamics_learning.models.base import DynamicsModel
from robot_dynamics_learning.models.registry import build_model
import torch

FORMAT_VERSION = 1
LOG = logging.getLogger(__name__)


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
    model_type = getattr(model, 'model_type', None)
    if model_type is None:
        raise ValueError(f'{type(model).__name__} was not built by the registry (no model_type)')
    return {
        'format_version': FORMAT_VERSION,
        'model_type': model_type,
        'config': model.config.to_dict(),
        'dims': {'n_obs': model.n_obs, 'n_act': model.n_act, 'n_target': model.n_target},
        'target_convention': model.target_convention,
        'joint_names': [str(name) for name in joint_names],
        'metadata': dict(metadata or {}),
        'state_dict': {key: value.detach().cpu().clone()
                       for key, value in model.state_dict().items()},
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

    joint_names, model_type, config: what the caller expects; a difference is a ValueError
    that names it (a model trained for other joints or another architecture is never used).
    """
    path = Path(path)
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as error:  # torch raises several types for truncated or foreign files
        raise ValueError(f'{path}: not a readable checkpoint ({type(error).__name__}: {error})'
                         ) from error
    return LoadedCheckpoint(*model_from_payload(payload, joint_names, model_type, config,
                                                source=str(path)), path)


def model_from_payload(payload: Any, joint_names: Optional[Sequence[str]] = None,
                       model_type: Optional[str] = None,
                       config: Optional[Dict[str, Any]] = None, source: str = 'checkpoint'
                       ) -> Tuple[DynamicsModel, str, Dict[str, Any], List[str],
                                  Dict[str, Any]]:
    """
    Rebuild the model of a `checkpoint_payload` dict through the registry (eval mode).

    Returns (model, model_type, config, joint_names, metadata). joint_names, model_type,
    config: what the caller expects; a difference is a ValueError naming `source` and what
    differs.
    """
    if not isinstance(payload, dict) or payload.get('format_version') != FORMAT_VERSION:
        raise ValueError(f'{source}: not a robot_dynamics_learning checkpoint of format '
                         f'{FORMAT_VERSION}')
    saved_joints = list(payload['joint_names'])
    if joint_names is not None and list(joint_names) != saved_joints:
        raise ValueError(f'{source}: joint names {saved_joints} do not match the expected '
                         f'{list(joint_names)} (order matters)')
    if model_type is not None and model_type != payload['model_type']:
        raise ValueError(f"{source}: model type '{payload['model_type']}' does not match the "
                         f"expected '{model_type}'")
    dims = payload['dims']
    model = build_model(payload['model_type'], payload['config'], dims['n_obs'], dims['n_act'],
                        dims['n_target'])
    if config is not None:
        expected = type(model.config).from_dict(config).to_dict()
        if expected != payload['config']:
            diff = {key: (payload['config'].get(key), value) for key, value in expected.items()
                    if payload['config'].get(key) != value}
            raise ValueError(f'{source}: config differs from the expected one (saved, expected): '
                             f'{diff}')
    if model.target_convention != payload['target_convention']:
        raise ValueError(f"{source}: target convention '{payload['target_convention']}' differs "
                         f"from this code's '{model.target_convention}'")
    model.load_state_dict(payload['state_dict'])
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

    def paths(self) -> List[Path]:
        """Return checkpoint paths, oldest first (by number)."""
        if not self.folder.is_dir():
            return []
        numbered = [(int(match.group(1)), path) for path in self.folder.iterdir()
                    if (match := self._pattern.fullmatch(path.name))]
        return [path for _, path in sorted(numbered)]

    def save(self, model: DynamicsModel, joint_names: Sequence[str] = (),
             metadata: Optional[Dict[str, Any]] = None) -> Path:
        """Save the next numbered checkpoint atomically, then prune to `keep_last`."""
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
        Load the newest checkpoint that is valid; fall back to older ones when it is corrupt.

        A mismatch of joints, type or config is not corruption: it raises at once, because
        an older file from the same run would not match either.
        """
        paths = self.paths()
        if not paths:
            raise FileNotFoundError(f'no {self.prefix}_*.pt checkpoints in {self.folder}')
        errors = []
        for path in reversed(paths):
            try:
                payload_ok = self._readable(path)
            except ValueError as error:
                LOG.error('skipping corrupt checkpoint %s: %s', path, error)
                errors.append(f'{path.name}: {error}')
                continue
            if payload_ok:
                return load_checkpoint(path, joint_names, model_type, config)
        raise ValueError(f'no valid checkpoint in {self.folder}: ' + '; '.join(errors))

    @staticmethod
    def _readable(path: Path) -> bool:
        """Return True if the file loads as a checkpoint; raise ValueError if corrupt."""
        try:
            payload = torch.load(path, map_location='cpu', weights_only=True)
        except Exception as error:  # truncated zip, foreign pickle, I/O error
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else ''
            raise ValueError(f'{type(error).__name__}: {first_line}') from error
        if not isinstance(payload, dict) or payload.get('format_version') != FORMAT_VERSION:
            raise ValueError('not a checkpoint of this format')
        return True
