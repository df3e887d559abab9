"""Declaring described, ranged parameters in one line (ros2/demos style)."""
from typing import Optional

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.node import Node


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
