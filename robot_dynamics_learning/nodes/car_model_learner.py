"""
car_model_learner: keeps fine-tuning the car model from the car's own driving.

Seed 003's future work, and issue 22's adaptation to a new surface. The logic is ROS-free in
learning/car_adaptation.py (`CarAdaptation`): transitions (o_t, u_t, o_{t+h}) are built on
the header stamps of `car/pose` + `car/twist` (car_state_estimator) and of the commands, not on
a wall-clock timer; an unstamped Twist command is stamped with the newest complete state's
stamp (the state it was computed from). `ContinualTrainer` trains in its own thread (NaN
refusal, gradient clipping, updates_per_transition budget, bounded buffer, at most
train_cpu_share of a core) and writes an atomic checkpoint every save_period_s into
checkpoint_dir, which car_mpc follows (the newest file, checked every reload_period_s). An
empty checkpoint_dir writes none, as dynamics_learner's does (before, the files went into
the working directory of the process); one that is a file is refused at start.
The grip estimate (`learning/car_grip.py`: the lateral acceleration the surface holds, from
the same transitions) goes out on `car/grip` (std_msgs/Float64, m/s^2) after every state
that completed a transition; car_mpc's grip bound takes it. A state or command beyond
float32 (finite, yet inf in the float32 model) is skipped and counted (`out_of_range`): a
few such values had every update refused as non-finite, for good once they entered the
normalisation.
Parameters: the fields of `CarModelLearnerConfig` (learning/car_adaptation_params.py).
"""
from pathlib import Path
from typing import Callable, Optional

from geometry_msgs.msg import PoseStamped, TwistStamped
import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from robot_dynamics_learning.control.car_training import build_car_model, load_car_model
from robot_dynamics_learning.data.loading import FLOAT32_MAX
from robot_dynamics_learning.learning.car_adaptation import CarAdaptation
from robot_dynamics_learning.learning.car_adaptation_params import CarModelLearnerConfig
from robot_dynamics_learning.learning.checkpoint import CheckpointDirectory
from robot_dynamics_learning.nodes.conversions import (parse_or_warn, PoseParser,
                                                       stamp_to_ns, subscribe_commands)
from robot_dynamics_learning.nodes.parameters import declare_config
from robot_dynamics_learning.nodes.runtime import spin_node
from std_msgs.msg import Float64

# The learner's checkpoint names (<prefix>_NNNNNN.pt), which car_mpc follows in checkpoint_dir.
CAR_CHECKPOINT_PREFIX = 'car_model'
STOP_TIMEOUT_S = 1.5   # the training thread's last update; a node has 2 s to end after SIGINT


class CarModelLearnerNode(Node):
    """Feeds stamped states and commands to `CarAdaptation` (O(1) work per message)."""

    def __init__(self) -> None:
        super().__init__('car_model_learner')

        config = declare_config(self, CarModelLearnerConfig)
        adaptation = config.adaptation()
        if config.checkpoint:
            model, fit = load_car_model(Path(config.checkpoint)), False
        else:
            model, fit = build_car_model(config.model, config.h), True
        self.adaptation = CarAdaptation(
            model, adaptation, np.random.default_rng(config.seed),
            save=self._checkpoint_writer(config.checkpoint_dir), fit_normalization=fit)
        self.pose_parser = PoseParser(check_stamps=False)   # order: CarTransitions checks
        self._pose: Optional[tuple] = None
        self._twist: Optional[tuple] = None
        self._state_stamp: Optional[float] = None   # newest complete state (s)
        self.out_of_range = 0   # states and commands skipped: a value beyond float32
        inputs = MutuallyExclusiveCallbackGroup()
        self.create_subscription(PoseStamped, 'car/pose', self._on_pose, qos_profile_sensor_data,
                                 callback_group=inputs)
        self.create_subscription(TwistStamped, 'car/twist', self._on_twist,
                                 qos_profile_sensor_data, callback_group=inputs)
        self.pub_grip = self.create_publisher(Float64, 'car/grip', 10)
        self.parser = subscribe_commands(self, config, self._on_command, callback_group=inputs)
        self.create_timer(5.0, self._log, callback_group=inputs)
        self.adaptation.start()

    def _checkpoint_writer(self, checkpoint_dir: str) -> Optional[Callable]:
        """Return the save function for checkpoint_dir; None (no checkpoints) when empty."""
        if not checkpoint_dir:
            self.get_logger().warn('checkpoint_dir is empty: no checkpoints are written, so '
                                   "car_mpc cannot follow this learner's model (car/grip is "
                                   'still published); set checkpoint_dir to a folder')
            return None
        if Path(checkpoint_dir).exists() and not Path(checkpoint_dir).is_dir():
            raise ValueError(f'checkpoint_dir {checkpoint_dir} is a file, not a folder')
        folder = CheckpointDirectory(Path(checkpoint_dir), prefix=CAR_CHECKPOINT_PREFIX)
        return lambda model, metadata: folder.save(model, metadata=metadata)

    def _on_pose(self, msg: PoseStamped) -> None:
        pose = parse_or_warn(self, self.pose_parser, msg, 'pose')
        if pose is None:
            return
        self._pose = (stamp_to_ns(msg.header.stamp), (*pose.position[:2], pose.yaw))
        self._offer_state()

    def _on_twist(self, msg: TwistStamped) -> None:
        self._twist = (stamp_to_ns(msg.header.stamp), (msg.twist.linear.x, msg.twist.linear.y,
                                                       msg.twist.angular.z))
        self._offer_state()

    def _offer_state(self) -> None:
        """Hand a complete state (pose and twist with the same stamp) to the learner."""
        if self._pose is None or self._twist is None or self._pose[0] != self._twist[0]:
            return
        stamp = self._pose[0] * 1e-9
        state = (*self._pose[1], *self._twist[1])
        if stamp != self._state_stamp and self._fits_float32(state, 'state'):
            self._state_stamp = stamp
            if self.adaptation.add_state(stamp, state):
                self.pub_grip.publish(Float64(data=self.adaptation.grip_estimate()))

    def _fits_float32(self, values: tuple, what: str) -> bool:
        """Return True when every value fits float32 (NaN passes: the learner counts it)."""
        if not np.any(np.abs(np.asarray(values, dtype=np.float64)) > FLOAT32_MAX):
            return True
        self.out_of_range += 1
        self.get_logger().warn(f'skipped a {what} beyond float32 ({self.out_of_range} so '
                               f'far): {values}', throttle_duration_sec=2.0)
        return False

    def _on_command(self, msg) -> None:
        command = parse_or_warn(self, self.parser, msg, 'command')
        if command is None:
            return
        stamp = command.stamp_ns * 1e-9 if command.stamp_ns is not None else self._state_stamp
        values = (command.throttle, command.steering)
        if stamp is not None and self._fits_float32(values, 'command'):
            self.adaptation.add_command(stamp, values)

    def _log(self) -> None:
        stats = self.adaptation.diagnostics()
        # 'steps N' leads: test_nodes_shutdown waits for it
        self.get_logger().info(f'steps {stats["train_steps"]}, {stats}; commands '
                               f'{self.parser.counter.summary()}; out_of_range '
                               f'{self.out_of_range}')

    def destroy_node(self) -> None:
        """Stop the training thread first (it checks the flag between updates)."""
        self.adaptation.stop(checkpoint=False, timeout=STOP_TIMEOUT_S)
        super().destroy_node()


def main(args=None) -> None:
    """Run the node (console script `car_model_learner`)."""
    spin_node(CarModelLearnerNode, args)


if __name__ == '__main__':
    main()
