"""
car_model_learner: keeps fine-tuning the car model from the car's own driving.

Seed 003's future work, and issue 22's adaptation to a new surface. The logic is ROS-free in
learning/car_adaptation.py (`CarAdaptation`): transitions (o_t, u_t, o_{t+h}) are built on
the header stamps of `car/pose` + `car/twist` (car_state_estimator) and of the commands, not on
a wall-clock timer; an unstamped Twist command is stamped with the newest complete state's
stamp (the state it was computed from). `ContinualTrainer` trains in its own thread (NaN
refusal, gradient clipping, updates_per_transition budget, bounded buffer, at most
train_cpu_share of a core) and writes an atomic checkpoint every save_period_s into
checkpoint_dir, which car_mpc follows (the newest file, checked every reload_period_s).
"""
import functools
from pathlib import Path
from typing import Optional

from geometry_msgs.msg import PoseStamped, Twist, TwistStamped
import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from robot_dynamics_learning.control.car_training import (build_car_model, CAR_MODEL_TYPES,
                                                          load_car_model)
from robot_dynamics_learning.learning.car_adaptation import CarAdaptation, CarAdaptationConfig
from robot_dynamics_learning.learning.checkpoint import CheckpointDirectory
from robot_dynamics_learning.nodes.conversions import (CarCommandParser, CommandMapping,
                                                       parse_or_warn, PoseParser, stamp_to_ns)
from robot_dynamics_learning.nodes.parameters import declare as declare_parameter
from robot_dynamics_learning.nodes.runtime import spin_node
from sensor_msgs.msg import Joy

COMMAND_TYPES = {'twist': Twist, 'twist_stamped': TwistStamped, 'joy': Joy}
STOP_TIMEOUT_S = 1.5   # the training thread's last update; a node has 2 s to end after SIGINT


class CarModelLearnerNode(Node):
    """Feeds stamped states and commands to `CarAdaptation` (O(1) work per message)."""

    def __init__(self) -> None:
        super().__init__('car_model_learner')

        declare = functools.partial(declare_parameter, self)
        defaults = CarAdaptationConfig()
        declare('model', 'car_mlp', f'model type when no checkpoint is given: '
                f'{list(CAR_MODEL_TYPES)}')
        declare('checkpoint', '', 'initial model checkpoint to fine-tune (empty: new model)')
        declare('checkpoint_dir', '/tmp/car_model', 'where checkpoints are written')
        declare('h', defaults.h, 'model step = step of the transitions (s)', 0.005, 1.0)
        declare('max_gap_s', defaults.max_gap_s, 'widest gap between states a transition may '
                'interpolate over (s)', 0.005, 1.0)
        declare('command_delay_s', defaults.command_delay_s, 'time from the stamp of a command '
                'until the states show it: the estimator lag (about its window_s / 2) plus '
                'actuation (s)', 0.0, 1.0)
        declare('command_type', 'twist', f'command message type: {sorted(COMMAND_TYPES)}')
        declare('throttle_axis', 1, 'Joy axis of the throttle', 0, 64)
        declare('steering_axis', 3, 'Joy axis of the steering', 0, 64)
        declare('throttle_scale', 1.0, 'throttle = throttle_scale * linear.x (or the Joy axis)')
        declare('steering_scale', 1.0, 'steering = steering_scale * angular.z (or the axis)')
        declare('min_transitions', defaults.min_transitions, 'transitions collected before '
                'training starts', 1, 1000000)
        declare('batch_size', defaults.batch_size, 'transitions per update', 1, 100000)
        declare('learning_rate', defaults.learning_rate, 'Adam learning rate', 1e-7, 1.0)
        declare('grad_clip', defaults.grad_clip, 'largest gradient norm', 1e-6, 1e6)
        declare('updates_per_transition', defaults.updates_per_transition, 'budget: most '
                'updates per received transition (0: as fast as the CPU share allows)',
                0.0, 1000.0)
        declare('recent_capacity', defaults.recent_capacity, 'transitions in the ring of the '
                'newest driving (recent_capacity x h s: the current surface)', 1, 10000000)
        declare('reservoir_transitions', defaults.reservoir_transitions, 'uniform sample of '
                'older transitions kept against forgetting', 0, 10000000)
        declare('recent_fraction', defaults.recent_fraction, 'share of a batch from the ring',
                0.0, 1.0)
        declare('publish_every', defaults.publish_every, 'updates between weight hand-overs',
                1, 100000)
        declare('save_period_s', defaults.save_period_s, 'checkpoint period (s)', 0.5, 36000.0)
        declare('train_cpu_share', defaults.train_cpu_share, 'share of one core the training '
                'thread may use', 0.01, 1.0)
        declare('seed', 0, 'random seed of batch sampling')
        get = self.get_parameter
        command_type = get('command_type').value
        if command_type not in COMMAND_TYPES:
            raise ValueError(f'command_type must be one of {sorted(COMMAND_TYPES)}, got '
                             f'{command_type!r}')
        config = CarAdaptationConfig(**{name: get(name).value for name in (
            'h', 'max_gap_s', 'command_delay_s', 'min_transitions', 'batch_size',
            'learning_rate', 'grad_clip', 'updates_per_transition', 'recent_capacity',
            'reservoir_transitions', 'recent_fraction', 'publish_every', 'save_period_s',
            'train_cpu_share')})
        if get('checkpoint').value:
            model, fit = load_car_model(Path(get('checkpoint').value)), False
        else:
            model, fit = build_car_model(get('model').value, config.h), True
        folder = CheckpointDirectory(Path(get('checkpoint_dir').value), prefix='car_model')
        self.adaptation = CarAdaptation(
            model, config, np.random.default_rng(int(get('seed').value)),
            save=lambda m, metadata: folder.save(m, metadata=metadata), fit_normalization=fit)
        self.parser = CarCommandParser(CommandMapping(
            get('throttle_axis').value, get('steering_axis').value,
            get('throttle_scale').value, get('steering_scale').value), check_stamps=False)
        self.pose_parser = PoseParser(check_stamps=False)   # order: CarTransitions checks
        self._pose: Optional[tuple] = None
        self._twist: Optional[tuple] = None
        self._state_stamp: Optional[float] = None   # newest complete state (s)
        inputs = MutuallyExclusiveCallbackGroup()
        self.create_subscription(PoseStamped, 'car/pose', self._on_pose, qos_profile_sensor_data,
                                 callback_group=inputs)
        self.create_subscription(TwistStamped, 'car/twist', self._on_twist,
                                 qos_profile_sensor_data, callback_group=inputs)
        self.create_subscription(COMMAND_TYPES[command_type], 'command', self._on_command, 10,
                                 callback_group=inputs)
        self.create_timer(5.0, self._log, callback_group=inputs)
        self.adaptation.start()

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
        if stamp != self._state_stamp:
            self._state_stamp = stamp
            self.adaptation.add_state(stamp, (*self._pose[1], *self._twist[1]))

    def _on_command(self, msg) -> None:
        command = parse_or_warn(self, self.parser, msg, 'command')
        if command is None:
            return
        stamp = command.stamp_ns * 1e-9 if command.stamp_ns is not None else self._state_stamp
        if stamp is not None:
            self.adaptation.add_command(stamp, (command.throttle, command.steering))

    def _log(self) -> None:
        stats = self.adaptation.diagnostics()
        # 'steps N' leads: test_nodes_shutdown waits for it
        self.get_logger().info(f'steps {stats["train_steps"]}, {stats}; commands '
                               f'{self.parser.counter.summary()}')

    def destroy_node(self) -> None:
        """Stop the training thread first (it checks the flag between updates)."""
        self.adaptation.stop(checkpoint=False, timeout=STOP_TIMEOUT_S)
        super().destroy_node()


def main(args=None) -> None:
    """Run the node (console script `car_model_learner`)."""
    spin_node(CarModelLearnerNode, args)


if __name__ == '__main__':
    main()
