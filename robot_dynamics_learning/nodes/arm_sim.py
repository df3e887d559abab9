"""
arm_sim: the simulated 7-DoF arm (sim/arm.py) publishing `/joint_states` in real time.

A child process simulates blocks of samples ahead (sim/arm_stream.py); the node publishes
each one at its own due time (1 kHz by default), stamped with that time, so stamps are evenly
spaced and a subscriber's latency is measured from when the sample "happened". The payload
at the flange changes at run time through the `payload_mass` parameter or a
`std_msgs/Float64` on `~/payload_mass` (kg); it applies from the next block simulated (blocks
are simulated up to three ahead of publication: `block` 50 at 1 kHz, 150 ms). With
`publish_command` the motor torque also goes out as `std_msgs/Float64MultiArray`
(ros2_control effort-controller style).
"""
import threading
import time
from typing import List

from rclpy._rclpy_pybind11 import RCLError
from rclpy.node import Node
from robot_dynamics_learning.nodes.conversions import float64_array_msg, joint_state_msg
from robot_dynamics_learning.nodes.parameters import declare_config
from robot_dynamics_learning.nodes.payload import follow_payload
from robot_dynamics_learning.nodes.runtime import spin_node
from robot_dynamics_learning.sim.arm_sim_params import ArmSimConfig
from robot_dynamics_learning.sim.arm_stream import ArmStream, SimBlock, SimEvent
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray


class ArmSimNode(Node):
    """Publishes simulated joint states; owns the simulator thread."""

    def __init__(self) -> None:
        super().__init__('arm_sim')

        self.params = params = declare_config(self, ArmSimConfig)
        config = params.arm_config()
        # The physics runs in a child process, whole blocks ahead of their due times: in
        # this process it took turns with the publisher for the GIL and the CPU, and samples
        # went out late every block (sim/arm_stream.py).
        self.stream = ArmStream(config, params.block, params.duration_s, params.schedule(),
                                threads=params.torch_threads)
        self.stream.start(cancelled=lambda: not self.context.ok())
        self.names: List[str] = self.stream.joint_names
        self.factor = params.real_time_factor
        self.sim_time = 0.0
        self.payload = config.payload_mass
        self.published = 0
        self.overruns = 0
        self.pub_states = self.create_publisher(JointState, 'joint_states', 10)
        self.pub_command = (self.create_publisher(Float64MultiArray, params.command_topic, 10)
                            if params.publish_command else None)
        follow_payload(self, self._request_payload)
        self.create_timer(5.0, self._log_rate)
        self._last_count = (0, time.monotonic())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._publish_blocks, name='arm_sim_publisher',
                                        daemon=True)
        self._thread.start()
        self.get_logger().info(f'simulating {len(self.names)} joints at '
                               f'{params.rate_hz:.0f} Hz, payload '
                               f'{config.payload_mass} kg')

    def _log_rate(self) -> None:
        count, stamp = self.published, time.monotonic()
        rate = (count - self._last_count[0]) / (stamp - self._last_count[1])
        self._last_count = (count, stamp)
        self.get_logger().info(f'published {count} joint states ({rate:.0f} /s), sim time '
                               f'{self.sim_time:.2f} s, late samples {self.overruns}, payload '
                               f'{self.payload} kg')

    def _request_payload(self, mass: float) -> None:
        self.stream.request_payload(mass)
        self.get_logger().info(f'payload change to {mass} kg requested')

    def _publish_blocks(self) -> None:
        """Publish every simulated sample at its own due time (the publisher thread)."""
        start_wall = time.monotonic()
        start_ns = self.get_clock().now().nanoseconds
        self.get_logger().info(f'stamp origin {start_ns} ns (stamp = origin + simulated time)')
        while not self._stop.is_set():
            message = self.stream.next_message(timeout=0.1)
            if message is None:
                continue
            if isinstance(message, SimEvent):
                log = self.get_logger()
                (log.error if message.error else log.info)(message.text)
                continue
            if not isinstance(message, SimBlock):   # the end of the simulated duration
                return
            samples, self.payload = message.samples, message.payload_kg
            for k, t in enumerate(samples.time):
                if self.factor > 0:
                    delay = start_wall + t / self.factor - time.monotonic()
                    if delay > 2e-3:
                        self._stop.wait(delay)
                    elif delay > 0:
                        time.sleep(delay)   # sub-ms sleeps are more precise than Event.wait
                    elif delay < -5e-3:
                        self.overruns += 1
                if self._stop.is_set():
                    return
                stamp_ns = start_ns + int(round(t * 1e9 / (self.factor or 1.0)))
                try:
                    self.pub_states.publish(joint_state_msg(
                        stamp_ns, self.names, samples.position[k, 0], samples.velocity[k, 0],
                        samples.effort[k, 0]))
                    if self.pub_command is not None:
                        self.pub_command.publish(float64_array_msg(samples.command[k, 0]))
                except RCLError:   # an external shutdown ended the context before destroy_node
                    return
                self.published += 1
                self.sim_time = float(t)

    def destroy_node(self) -> None:
        """Stop the simulation thread first."""
        self._stop.set()
        self._thread.join(timeout=5.0)
        self.stream.stop()
        super().destroy_node()


def main(args=None) -> None:
    """Run the node (console script `arm_sim`)."""
    spin_node(ArmSimNode, args)


if __name__ == '__main__':
    main()
