"""
Node settings as frozen dataclasses: one definition for the node, its YAML file and `rdl`.

Each field of a node's config class carries its default, a description, an optional range
and whether it may change at run time (`setting`). The node declares its ROS parameters from
the fields (`nodes/parameters.declare_config`); `rdl` reads the same YAML file's
`<node>: ros__parameters:` block into the same class (`load_node_config`), so both run with
one set of values. A field made with `settings_mapping` holds nested settings (a model's own
config): in YAML a mapping, as ROS parameters `<field>.<key>`. ROS-free: imports only yaml.
"""
import dataclasses
import json
from pathlib import Path
from typing import Any, Container, Dict, Mapping, Optional, Type, TypeVar
import warnings

ConfigT = TypeVar('ConfigT')
# Declared by every node or by shared helpers (nodes/runtime.py, nodes/lifecycle.py,
# declare_stamp_bounds), so they may stand in any node's block without being a field of its
# config class.
SHARED_PARAMETERS = ('realtime_priority', 'autostart', 'max_future_stamp_s', 'max_stamp_age_s',
                     'use_sim_time')


def setting(default: Any, description: str, low: Optional[float] = None,
            high: Optional[float] = None, dynamic: bool = False,
            unset_type: Optional[str] = None) -> Any:
    """
    Return a dataclass field with its ROS parameter descriptor in the metadata.

    low/high: the inclusive range (ints: an integer range). dynamic: may change at run time
    (read-only otherwise: most settings are read once at start). unset_type: for a None
    default, the ROS type it is declared with ('string_array', ...): it stays unset until given.
    """
    if isinstance(default, list):
        raise TypeError('list defaults are mutable: give a tuple')
    return dataclasses.field(default=default, metadata={
        'description': description, 'range': None if low is None else (low, high),
        'dynamic': dynamic, 'unset_type': unset_type})


def setting_of(cls: type, name: str, default: Any = dataclasses.MISSING) -> Any:
    """
    Return a field with the description and range of `cls`'s field `name` (and its default).

    A node setting that passes straight to a core class (a trainer's batch size) keeps one
    definition there instead of a copy that could drift.
    """
    field = cls.__dataclass_fields__[name]
    return dataclasses.field(default=field.default if default is dataclasses.MISSING
                             else default, metadata=field.metadata)


def build_from(cls: Type[ConfigT], config: Any, **extra: Any) -> ConfigT:
    """Return `cls` built from the fields of `config` that it has by name, and `extra`."""
    names = {field.name for field in dataclasses.fields(cls)}
    values = {field.name: getattr(config, field.name) for field in dataclasses.fields(config)
              if field.name in names}
    return cls(**{**values, **extra})


def settings_mapping(description: str) -> Any:
    """Return a field of nested settings (a mapping; ROS parameters `<field>.<key>`)."""
    return dataclasses.field(default_factory=dict, metadata={
        'description': description, 'range': None, 'dynamic': False, 'unset_type': None,
        'mapping': True})


def is_mapping(field: dataclasses.Field) -> bool:
    """Return True for a `settings_mapping` field."""
    return bool(field.metadata.get('mapping'))


def from_values(cls: Type[ConfigT], values: Mapping[str, Any], source: str) -> ConfigT:
    """
    Build `cls` from parameter values (flat `a.b` names or nested mappings alike).

    Unknown names are a ValueError naming `source` and the known names. A mapping field
    given as a JSON string (the format before mappings) is read with a DeprecationWarning.
    """
    fields = {field.name: field for field in dataclasses.fields(cls)}
    kwargs: Dict[str, Any] = {}
    unknown = []
    for name, value in values.items():
        head, _, rest = str(name).partition('.')
        field = fields.get(head)
        if field is None:
            if head not in SHARED_PARAMETERS:
                unknown.append(name)
            continue
        if not is_mapping(field):
            if rest:
                unknown.append(name)
                continue
            kwargs[head] = tuple(value) if isinstance(value, list) else value
            continue
        nested = kwargs.setdefault(head, {})
        if rest:
            nested[rest] = value
        elif isinstance(value, str):
            nested.update(legacy_json(head, value, source))
        else:
            nested.update(value or {})
    if unknown:
        raise ValueError(f'{source}: unknown parameter(s) {sorted(unknown)} for '
                         f'{cls.__name__}; known: {sorted(fields)}')
    return cls(**kwargs)


def legacy_json(name: str, text: str, source: str) -> Dict[str, Any]:
    """Read a JSON-string mapping (deprecated: give a YAML mapping or `name.key` values)."""
    if not text.strip() or text.strip() == '{}':
        return {}
    warnings.warn(f'{source}: {name} as a JSON string is deprecated and will be removed in '
                  f'the next release; give a mapping ({name}: {{key: value}}) or '
                  f'{name}.<key> parameters', DeprecationWarning, stacklevel=3)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f'{source}: {name} is not a JSON object: {error}') from None
    if not isinstance(value, dict):
        raise ValueError(f'{source}: {name} must be a JSON object, got {text!r}')
    return value


def ros_parameters(path: Path, node_name: str,
                   known: Optional[Container[str]] = None) -> Dict[str, Any]:
    """
    Return the `ros__parameters` of `node_name` in a ROS params YAML, as `--params-file` does.

    Blocks for '/**', '/**/<node>', '<node>' and '/<ns>/<node>' are merged in file order.
    A '/**' block is meant for every node: with `known`, its other names are left out (ROS
    ignores them for a node that does not declare them).
    """
    import yaml
    document = yaml.safe_load(Path(path).read_text()) or {}
    values: Dict[str, Any] = {}
    found = False
    for key, block in document.items():
        wildcard = key == '/**'
        if wildcard or str(key).rstrip('/').split('/')[-1] == node_name:
            found = found or not wildcard
            block = (block or {}).get('ros__parameters', {}) or {}
            values.update((name, value) for name, value in block.items()
                          if not wildcard or known is None
                          or str(name).partition('.')[0] in known)
    if not found:
        raise ValueError(f'{path}: no {node_name} ros__parameters block')
    return values


def load_node_config(cls: Type[ConfigT], path: Path, node_name: str) -> ConfigT:
    """Read `node_name`'s block of the ROS params YAML `path` into its config class."""
    known = {field.name for field in dataclasses.fields(cls)}
    return from_values(cls, ros_parameters(path, node_name, known), f'{path} ({node_name})')


def check_ranges(config: Any) -> None:
    """Raise a ValueError naming the first field outside its declared range (or not finite)."""
    for field in dataclasses.fields(config):
        span, value = field.metadata.get('range'), getattr(config, field.name)
        if span is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if not span[0] <= value <= span[1]:   # False for NaN as well
            raise ValueError(f'{type(config).__name__}.{field.name} must be in '
                             f'[{span[0]}, {span[1]}], got {value!r}')
