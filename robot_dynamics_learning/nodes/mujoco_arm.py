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
import functools
import threading
import time
from typing import List, Optional

from diagnostic_msgs.msg import DiagnosticArray
import numpy as np
from rcl_interfaces.msg import SetParametersResult
from rclpy._rclpy_pybind11 import RCLError
from rclpy.node import Node
from rclpy.parameter import Parameter
from robot_dynamics_learning.nodes.car_diagnostics import publish_counters
from robot_dynamics_learning.nodes.conversions import clock_msg, joint_state_msg
from robot_dynamics_learning.nodes.parameters import declare as declare_parameter
from robot_dynamics_learning.nodes.runtime import spin_node
from robot_dynamics_learning.sim.mujoco_arm import (MujocoArm, MujocoArmConfig,
                                                    TIMEOUT_ACTIONS)
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64, Float64MultiArray

LATENESS_WINDOW = 5000   # steps in the publish-lateness percentiles (5 s at 1 kHz)


class MujocoArmNode(Node):
    """Steps MuJoCo in its own thread; parse -> core -> publish."""

    def __init__(self) -> None:
        super().__init__('mujoco_arm')

        declare = functools.partial(declare_parameter, self)

        default = MujocoArmConfig()
        declare('urdf', '', 'arm URDF path (empty: the package urdf/panda.urdf)')
        declare('flange', '', 'body the payload is fixed to (empty: the last body)')
        declare('timestep', default.timestep, 'simulation step and publish period (s)',
                1e-4, 0.01)
        declare('friction', list(default.friction), 'dry (Coulomb) joint friction, N m')
        declare('damping', list(default.damping), 'viscous joint damping, N m s/rad')
        declare('armature', list(default.armature), 'rotor inertia at each joint, kg m^2')
        declare('payload_mass', 0.0, 'payload at the flange (kg); may change at run time',
                0.0, 50.0, dynamic=True)
        declare('payload_com', list(default.payload_com), 'payload centre of mass in the '
                'flange frame (m)')
        declare('command_timeout_s', default.command_timeout_s, 'a command is held this long '
                '(simulated s), then timeout_action applies', 0.0, 10.0)
        declare('timeout_action', default.timeout_action, f'one of {TIMEOUT_ACTIONS}')
        declare('brake_damping', default.brake_damping, 'damping of the timeout brake, '
                'N m s/rad', 0.0, 1000.0)
        declare('initial_position', Parameter.Type.DOUBLE_ARRAY, 'start configuration (rad); '
                'unset: the middle of every joint range')
        declare('command_topic', '/effort_controller/commands', 'torque command topic')
        declare('publish_clock', False, 'be the clock source: publish /clock and stamp with '
                'simulated time (other nodes: use_sim_time)')
        declare('real_time_factor', 1.0, 'simulated seconds per wall second (0: as fast as '
                'possible, only with publish_clock)', 0.0, 100.0)
        declare('duration_s', 0.0, 'stop after this many simulated seconds (0: never)',
                0.0, 1e9)
        get = self.get_parameter
        self.sim = MujocoArm(MujocoArmConfig(
            urdf=get('urdf').value, flange=get('flange').value, timestep=get('timestep').value,
            friction=tuple(get('friction').value), damping=tuple(get('damping').value),
            armature=tuple(get('armature').value), payload_mass=get('payload_mass').value,
            payload_com=tuple(get('payload_com').value),
            command_timeout_s=get('command_timeout_s').value,
            timeout_action=get('timeout_action').value,
            brake_damping=get('brake_damping').value))
        initial = list(self.get_parameter_or(
            'initial_position', Parameter('initial_position', value=[])).value)
        limits = self.sim.model.jnt_range
        self.sim.reset(np.asarray(initial) if initial else limits.mean(axis=1))
        self.names: List[str] = self.sim.joint_names
        self.publish_clock = bool(get('publish_clock').value)
        self.factor = float(get('real_time_factor').value)
        if self.factor == 0 and not self.publish_clock:
            raise ValueError('real_time_factor 0 (as fast as possible) needs publish_clock: '
                             'stamps on the wall clock would run ahead of it')
        self.duration = float(get('duration_s').value)
        self._lock = threading.Lock()
        self._lateness = np.zeros(LATENESS_WINDOW)
        self.published = 0
        self.pub_states = self.create_publisher(JointState, 'joint_states', 10)
        self.pub_clock = self.create_publisher(Clock, '/clock', 10) if self.publish_clock \
            else None
        self.pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        self.create_subscription(Float64MultiArray, get('command_topic').value,
                                 self._on_command, 10)
        self.create_subscription(Float64, '~/payload_mass', self._on_payload, 10)
        self.add_on_set_parameters_callback(self._on_parameters)
        self.create_timer(1.0, self._diagnostics)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name='mujoco_arm_steps', daemon=True)
        self._thread.start()
        self.get_logger().info(
            f'MuJoCo arm: {len(self.names)} joints, step {self.sim.config.timestep * 1e3:g} ms, '
            f"{'sim time on /clock' if self.publish_clock else 'real time'}, factor "
            f'{self.factor:g}, commands on {get("command_topic").value}')

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

    def _on_payload(self, msg: Float64) -> None:
        if not (msg.data >= 0.0 and msg.data < float('inf')):
            self.get_logger().warn(f'ignored payload mass {msg.data} (must be finite, >= 0)')
            return
        self._set_payload(msg.data)

    def _on_parameters(self, parameters: List[Parameter]) -> SetParametersResult:
        for parameter in parameters:
            if parameter.name == 'payload_mass':
                self._set_payload(parameter.value)
        return SetParametersResult(successful=True)

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
            except RCLError:   # Ctrl-C shut the context down before destroy_node ran
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
