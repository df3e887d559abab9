"""
Run-time payload changes of a simulated arm: the `payload_mass` parameter or a message.

Both simulators (arm_sim, mujoco_arm) take a new payload either way: `ros2 param set <node>
payload_mass 2.0` or `std_msgs/Float64` on `~/payload_mass`, which sets the parameter, so
both go through its declared range (a refused mass is ignored with a warning) and the
parameter always shows the payload in use.
"""
from typing import Callable, List

from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter
from std_msgs.msg import Float64


def follow_payload(node: Node, apply: Callable[[float], None]) -> None:
    """Call `apply(mass_kg)` for every accepted payload change, by parameter or message."""
    def on_message(msg: Float64) -> None:
        result = node.set_parameters([Parameter('payload_mass', value=float(msg.data))])[0]
        if not result.successful:
            node.get_logger().warn(f'ignored payload mass {msg.data} ({result.reason})')

    def on_parameters(parameters: List[Parameter]) -> SetParametersResult:
        for parameter in parameters:
            if parameter.name == 'payload_mass':
                apply(parameter.value)
        return SetParametersResult(successful=True)

    node.create_subscription(Float64, '~/payload_mass', on_message, 10)
    node.add_on_set_parameters_callback(on_parameters)
