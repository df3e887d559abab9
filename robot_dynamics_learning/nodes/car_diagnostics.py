"""Node counters (car, arm) as `diagnostic_msgs/DiagnosticArray` on /diagnostics."""
from typing import Dict

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node


def publish_counters(node: Node, publisher, values: Dict[str, object], warn: bool = False,
                     message: str = '', hardware_id: str = 'rc_car') -> None:
    """Publish one status named after the node with every value as a key/value pair."""
    status = DiagnosticStatus(level=DiagnosticStatus.WARN if warn else DiagnosticStatus.OK,
                              name=node.get_fully_qualified_name(), message=message,
                              hardware_id=hardware_id)
    status.values = [KeyValue(key=str(k), value=str(v)) for k, v in values.items()]
    array = DiagnosticArray(status=[status])
    array.header.stamp = node.get_clock().now().to_msg()
    publisher.publish(array)
