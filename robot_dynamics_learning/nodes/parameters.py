"""Declaring described, ranged parameters in one line (ros2/demos style), and their guards."""
import math
from typing import List, Optional

from rcl_interfaces.msg import (FloatingPointRange, IntegerRange, ParameterDescriptor,
                                SetParametersResult)
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from robot_dynamics_learning.data.messages import StampBounds


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
    is off by default: bags replayed without /clock carry their recording's stamps.
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
                       reset_after_ns=None if reset_after_s is None else int(reset_after_s * 1e9))


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
