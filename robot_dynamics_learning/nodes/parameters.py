"""
Declaring described, ranged parameters (ros2/demos style), from a config class, and guards.

`declare_config` declares every field of a node's config dataclass (`params.setting`:
default, description, range) and returns the class built from the values, so a node's
parameters, its YAML block and `rdl` share one definition.
"""
import dataclasses
import math
from typing import Any, Callable, Dict, List, Optional, Type, TypeVar

from rcl_interfaces.msg import (FloatingPointRange, IntegerRange, ParameterDescriptor,
                                SetParametersResult)
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from robot_dynamics_learning.data.messages import RELOCK_AFTER, StampBounds
from robot_dynamics_learning.params import from_values, is_mapping, legacy_json

ConfigT = TypeVar('ConfigT')
UNSET_TYPES = {'string_array': Parameter.Type.STRING_ARRAY,
               'double_array': Parameter.Type.DOUBLE_ARRAY,
               'integer_array': Parameter.Type.INTEGER_ARRAY}
# A mapping field's settings class, from the node's other values (e.g. the model's config).
SettingsClass = Callable[[Dict[str, Any]], type]


def declare(node: Node, name: str, default, description: str,
            low: Optional[float] = None, high: Optional[float] = None,
            dynamic: bool = False) -> None:
    """
    Declare `name` with a description and, given low/high, a range matching its type.

    Parameters are read-only unless `dynamic`: most are read once at start-up, so a runtime
    change would silently do nothing.
    """
    extra = {}
    if low is not None and isinstance(default, float):
        extra['floating_point_range'] = [FloatingPointRange(from_value=float(low),
                                                            to_value=float(high))]
    elif low is not None:
        extra['integer_range'] = [IntegerRange(from_value=int(low), to_value=int(high), step=1)]
    node.declare_parameter(name, default, ParameterDescriptor(
        description=description, read_only=not dynamic, **extra))
    # Ranges refuse NaN and inf; a float without one is checked here, where it enters.
    try:
        value = node.get_parameter(name).value
    except ParameterUninitializedException:   # declared by type only, and not given
        return
    values = value if isinstance(value, (list, tuple)) else [value]
    if any(isinstance(v, float) and not math.isfinite(v) for v in values):
        raise ValueError(f'parameter {name} must be finite, got {value}')


def declare_stamp_bounds(node: Node, max_future_s: float = 1.0,
                         reset_after_s: Optional[float] = None) -> StampBounds:
    """
    Declare `max_future_stamp_s` and `max_stamp_age_s`; return the node's `StampBounds`.

    Both are judged against the node clock (sim time under use_sim_time), so that one
    message stamped ahead cannot hide every real one after it as "backwards". The age bound
    is off by default: bags replayed without /clock carry their recording's stamps. With
    reset_after_s (the node restarts its state on `time_reset`) a jump back that far, or
    RELOCK_AFTER backwards stamps in a row, is a time reset.
    """
    declare(node, 'max_future_stamp_s', float(max_future_s), 'a header stamp further ahead '
            'of the node clock is refused (future_stamp); 0: no bound', 0.0, 1e9)
    declare(node, 'max_stamp_age_s', 0.0, 'a header stamp further behind the node clock is '
            'refused (old_stamp); 0: no bound', 0.0, 1e9)
    future = node.get_parameter('max_future_stamp_s').value
    age = node.get_parameter('max_stamp_age_s').value
    return StampBounds(clock=lambda: node.get_clock().now().nanoseconds,
                       max_future_ns=int(future * 1e9) if future > 0 else None,
                       max_age_ns=int(age * 1e9) if age > 0 else None,
                       reset_after_ns=None if reset_after_s is None else int(reset_after_s * 1e9),
                       relock_after=None if reset_after_s is None else RELOCK_AFTER)


def refuse_clock_changes(node: Node) -> None:
    """
    Refuse `use_sim_time` changes after start-up (set it at launch instead).

    A switch to sim time without /clock stops every timer of the node (watchdogs included)
    and makes all stamps look like the future; the switch is refused before rclpy's time
    source sees it (callbacks added later run first).
    """
    def check(parameters: List[Parameter]) -> SetParametersResult:
        for parameter in parameters:
            if parameter.name == 'use_sim_time':
                return SetParametersResult(successful=False, reason='use_sim_time cannot '
                                           'change at run time: it would stop the clock of '
                                           'the safety timers; set it at start-up')
        return SetParametersResult(successful=True)

    node.add_on_set_parameters_callback(check)


def declare_config(node: Node, cls: Type[ConfigT],
                   settings: Optional[Dict[str, SettingsClass]] = None) -> ConfigT:
    """
    Declare one parameter per field of `cls` and return `cls` built from their values.

    A mapping field (`params.settings_mapping`) becomes `<field>.<key>` parameters, one per
    field of the class `settings[field](values)` names, at that class's defaults; only the
    keys given at launch enter the mapping. A key that class lacks is a ValueError naming it
    and the known keys; the same field given as a JSON string (the format before mappings)
    is still read, with a deprecation warning. Invalid values raise from `cls` itself.
    """
    values: Dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if is_mapping(field):
            continue
        meta = field.metadata
        default = field.default
        if default is None:
            default = UNSET_TYPES[meta['unset_type']]
        elif isinstance(default, tuple):
            default = list(default)
        low, high = meta['range'] or (None, None)
        declare(node, field.name, default, meta['description'], low, high, meta['dynamic'])
        try:
            values[field.name] = node.get_parameter(field.name).value
        except ParameterUninitializedException:   # typed, unset: the field's None
            pass
    for field in dataclasses.fields(cls):
        if is_mapping(field):
            settings_class = (settings or {})[field.name](values)
            values[field.name] = _declare_mapping(node, field, settings_class)
    return from_values(cls, values, f'node {node.get_name()}')


def _declare_mapping(node: Node, field: dataclasses.Field, settings_class: type) -> Dict[str, Any]:
    """Declare `<field>.<key>` for the keys of `settings_class`; return the keys given."""
    name = field.name
    declare(node, name, '', f'deprecated: {name} as a JSON object string; give {name}.<key> '
            'parameters (a mapping in YAML) instead')
    given = legacy_json(name, node.get_parameter(name).value, f'node {node.get_name()}')
    if given:   # Python hides DeprecationWarnings outside __main__: say it in the node's log
        node.get_logger().warning(f'{name} as a JSON string is deprecated; give '
                                  f'{name}.<key> parameters (a mapping in YAML)')
    known = {f.name: f for f in dataclasses.fields(settings_class)}
    # rclpy has no public list of the overrides given at launch; a key given for another
    # model must be refused by name, not silently ignored.
    overrides = [key[len(name) + 1:] for key in node._parameter_overrides
                 if key.startswith(f'{name}.')]
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise ValueError(f'{name}.{unknown[0]} is not a setting of {settings_class.__name__}; '
                         f'its settings: {sorted(known)}')
    for key, spec in known.items():
        default = spec.default
        if default is dataclasses.MISSING or default is None or default == ():
            if key not in overrides:
                continue   # no typed default to declare: only declared when given
            default = node._parameter_overrides[f'{name}.{key}'].value
        declare(node, f'{name}.{key}', list(default) if isinstance(default, tuple) else default,
                f'{settings_class.__name__}.{key} ({field.metadata["description"]})')
        if key in overrides:
            given[key] = node.get_parameter(f'{name}.{key}').value
    return given
