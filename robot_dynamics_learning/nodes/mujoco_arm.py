"""
mujoco_arm: the arm on MuJoCo (sim/mujoco_arm.py) behind the ros2_control effort contract.

Publishes `joint_states` (`sensor_msgs/JointState`: position, velocity, effort = the torque
applied in that step) after every 1 ms step, and takes torque commands as
`std_msgs/Float64MultiArray` on `command_topic` (`/effort_controller/commands`, URDF joint
order, as ros2_control's JointGroupEffortController). A command is clipped to the URDF's
effort limits, a wrong-sized or non-finite one is refused, all counted; a command is held for
`command_timeout_s`, then `timeout_action` (zero torque or a damping brake) applies.

Time: with `publish_clock` false the simulation runs in real time (`real_time_factor`) and
stamps each state with the node clock at the start plus the simulated time, so stamps are
evenly spaced. With `publish_clock` true it is the clock source, as Gazebo is: it publishes
`/clock` (simulated time) after every step and stamps with simulated time; the other nodes run
with `use_sim_time`, and `real_time_factor` 0 runs as fast as the CPU allows. A thread of its
own steps and publishes at each due time (the executor only carries commands, payload changes
and diagnostics). Payload: the `payload_mass` parameter (dynamic) or `std_msgs/Float64` on
`~/payload_mass`. `/diagnostics` (1 Hz): the simulator's counters and how late each joint
state went out against its due time (p50 / p99 / max, ms, over the last 5 s). On a loaded
machine the tail is time spent runnable behind other processes: `realtime_priority` (every
node has it) puts the stepping thread under SCHED_FIFO.
"""
import threading
import time
from typing import List, Optional

from diagnostic_msgs.msg import DiagnosticArray
import numpy as np
from rclpy._rclpy_pybind11 import RCLError
from rclpy.node import Node
from robot_dynamics_learning.nodes.car_diagnostics import publish_counters
from robot_dynamics_learning.nodes.conversions import clock_msg, joint_state_msg
from robot_dynamics_learning.nodes.parameters import declare_config
from robot_dynamics_learning.nodes.payload import follow_payload
from robot_dynamics_learning.nodes.runtime import spin_node
from robot_dynamics_learning.sim.mujoco_arm import MujocoArm
from robot_dynamics_learning.sim.mujoco_arm_params import MujocoArmNodeConfig
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

LATENESS_WINDOW = 5000   # steps in the publish-lateness percentiles (5 s at 1 kHz)


class MujocoArmNode(Node):
    """Steps MuJoCo in its own thread; parse -> core -> publish."""

    def __init__(self) -> None:
        super().__init__('mujoco_arm')

        self.config = config = declare_config(self, MujocoArmNodeConfig)
        self.sim = MujocoArm(config.world())
        limits = self.sim.model.jnt_range
        self.sim.reset(np.asarray(config.initial_position) if config.initial_position
                       else limits.mean(axis=1))
        self.names: List[str] = self.sim.joint_names
        self.publish_clock = config.publish_clock
        self.factor = config.real_time_factor
        self.duration = config.duration_s
        self._lock = threading.Lock()
        self._lateness = np.zeros(LATENESS_WINDOW)
        self.published = 0
        self.pub_states = self.create_publisher(JointState, 'joint_states', 10)
        self.pub_clock = self.create_publisher(Clock, '/clock', 10) if self.publish_clock \
            else None
        self.pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        self.create_subscription(Float64MultiArray, config.command_topic,
                                 self._on_command, 10)
        follow_payload(self, self._set_payload)
        self.create_timer(1.0, self._diagnostics)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name='mujoco_arm_steps', daemon=True)
        self._thread.start()
        self.get_logger().info(
            f'MuJoCo arm: {len(self.names)} joints, step {self.sim.config.timestep * 1e3:g} ms, '
            f"{'sim time on /clock' if self.publish_clock else 'real time'}, factor "
            f'{self.factor:g}, commands on {config.command_topic}')

    def _on_command(self, msg: Float64MultiArray) -> None:
        data = np.asarray(msg.data, dtype=np.float64)[int(msg.layout.data_offset):]
        with self._lock:
            accepted = self.sim.command(data)
        if not accepted:
            self.get_logger().warn(f'refused torque command {data.tolist()} (needs '
                                   f'{len(self.names)} finite values)',
                                   throttle_duration_sec=2.0)

    def _set_payload(self, mass: float) -> None:
        with self._lock:
            self.sim.set_payload(mass)
        self.get_logger().info(f'payload {mass} kg')

    def _run(self) -> None:
        """Step and publish at each due time (the stepping thread)."""
        period = self.sim.config.timestep / (self.factor or 1.0)
        start_ns = 0 if self.publish_clock else self.get_clock().now().nanoseconds
        start = time.monotonic()
        while not self._stop.is_set():
            due = start + (self.published + 1) * period
            if self.factor > 0:
                delay = due - time.monotonic()
                if delay > 2e-3:
                    self._stop.wait(delay - 1e-3)
                    delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)   # sub-ms sleeps are more precise than Event.wait
            with self._lock:
                state = self.sim.step()
            stamp_ns = start_ns + int(round(state.time / (self.factor or 1.0) * 1e9))
            message = joint_state_msg(stamp_ns, self.names, state.position, state.velocity,
                                      state.effort)
            try:
                if self.pub_clock is not None:
                    self.pub_clock.publish(clock_msg(stamp_ns))
                self._lateness[self.published % LATENESS_WINDOW] = time.monotonic() - due
                self.pub_states.publish(message)
            except RCLError:   # an external shutdown ended the context before destroy_node
                return
            self.published += 1
            if self.duration and state.time >= self.duration - 1e-9:
                self.get_logger().info(f'simulated {state.time:.3f} s: stopping')
                return

    def _late_ms(self) -> dict:
        count = min(self.published, LATENESS_WINDOW)
        if not count or self.factor == 0:
            return {}
        late = self._lateness[:count] * 1e3
        return {'publish_late_ms_p50': round(float(np.percentile(late, 50)), 3),
                'publish_late_ms_p99': round(float(np.percentile(late, 99)), 3),
                'publish_late_ms_max': round(float(late.max()), 3)}

    def _diagnostics(self) -> None:
        with self._lock:
            counts = dict(self.sim.counts)
            payload = self.sim.payload[0]
            sim_time = self.sim.time
            braking = self.sim.timed_out
        values = {**counts, 'published': self.published, 'sim_time_s': round(sim_time, 3),
                  'payload_kg': payload, **self._late_ms()}
        publish_counters(self, self.pub_diag, values, warn=braking,
                         message='no command: ' + self.sim.config.timeout_action if braking
                         else 'commanded', hardware_id='mujoco_arm')

    def destroy_node(self) -> None:
        """Stop the stepping thread first."""
        self._stop.set()
        self._thread.join(timeout=5.0)
        super().destroy_node()


def main(args: Optional[List[str]] = None) -> None:
    """Run the node (console script `mujoco_arm`)."""
    spin_node(MujocoArmNode, args)


if __name__ == '__main__':
    main()
