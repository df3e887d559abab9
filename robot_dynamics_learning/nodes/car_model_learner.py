"""
car_model_learner: keeps learning the car model from the car's own driving.

This is seed 003's future work: update the model with data collected while driving.

Samples the estimated state (`car/pose` + `car/twist` from car_state_estimator) and the
latest command (`command`: Twist, TwistStamped or Joy by `command_type`, mapping as in
data/messages.CommandMapping) every h seconds; each pair of consecutive samples is one
transition (o_t, u_t, o_{t+1}) in a streaming buffer (learning/buffer.py: recent ring plus
reservoir). A training thread runs Adam steps of the model's relative L1 loss and saves an
atomic checkpoint every save_period_s into checkpoint_dir, which car_mpc reloads.
"""
import functools
from pathlib import Path
import threading
import time
from typing import Optional

from geometry_msgs.msg import PoseStamped, Twist, TwistStamped
import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from robot_dynamics_learning.control.car_training import (build_car_model, CAR_MODEL_TYPES,
                                                          load_car_model)
from robot_dynamics_learning.learning.buffer import BufferConfig, StreamingBuffer
from robot_dynamics_learning.learning.checkpoint import CheckpointDirectory
from robot_dynamics_learning.nodes.conversions import (CarCommandParser, CommandMapping,
                                                       stamp_to_ns)
from robot_dynamics_learning.nodes.parameters import declare as declare_parameter
from robot_dynamics_learning.nodes.runtime import spin_node
from sensor_msgs.msg import Joy
import torch

COMMAND_TYPES = {'twist': Twist, 'twist_stamped': TwistStamped, 'joy': Joy}
STOP_TIMEOUT_S = 1.5   # the training thread's last step; a node has 2 s to end after SIGINT


class CarModelLearnerNode(Node):
    """Collects transitions in callbacks (O(1) work) and trains in its own thread."""

    def __init__(self) -> None:
        super().__init__('car_model_learner')

        declare = functools.partial(declare_parameter, self)

        declare('model', 'car_mlp', f'model type when no checkpoint is given: '
                f'{list(CAR_MODEL_TYPES)}')
        declare('checkpoint', '', 'initial model checkpoint to fine-tune (empty: new model)')
        declare('checkpoint_dir', '/tmp/car_model', 'where checkpoints are written')
        declare('h', 0.05, 'model step = sampling period of transitions (s)', 0.005, 1.0)
        declare('command_type', 'twist', f'command message type: {sorted(COMMAND_TYPES)}')
        declare('throttle_axis', 1, 'Joy axis of the throttle', 0, 64)
        declare('steering_axis', 3, 'Joy axis of the steering', 0, 64)
        declare('throttle_scale', 1.0, 'throttle = throttle_scale * linear.x (or the Joy axis)')
        declare('steering_scale', 1.0, 'steering = steering_scale * angular.z (or the axis)')
        declare('stale_timeout_s', 0.1, 'a state older than this is not sampled (s)', 0.01,
                5.0)
        declare('min_transitions', 200, 'transitions collected before training starts', 1,
                1000000)
        declare('batch_size', 256, 'transitions per Adam step', 1, 100000)
        declare('learning_rate', 5e-4, 'Adam learning rate', 1e-7, 1.0)
        declare('steps_per_round', 50, 'Adam steps between checks for new data', 1, 100000)
        declare('save_period_s', 10.0, 'checkpoint period (s)', 0.5, 36000.0)
        declare('seed', 0, 'random seed of batch sampling')
        get = self.get_parameter
        command_type = get('command_type').value
        if command_type not in COMMAND_TYPES:
            raise ValueError(f'command_type must be one of {sorted(COMMAND_TYPES)}, got '
                             f'{command_type!r}')
        self.h = float(get('h').value)
        if get('checkpoint').value:
            self.model = load_car_model(Path(get('checkpoint').value))
            self._normalised = True
        else:
            self.model = build_car_model(get('model').value, self.h)
            self._normalised = False
        if abs(self.model.h - self.h) > 1e-9:
            raise ValueError(f'checkpoint step h={self.model.h} differs from parameter h='
                             f'{self.h}')
        self.parser = CarCommandParser(CommandMapping(
            get('throttle_axis').value, get('steering_axis').value,
            get('throttle_scale').value, get('steering_scale').value), check_stamps=False)
        buffer_config = BufferConfig(window=1, reservoir_windows=5000, reservoir_stride=4)
        self.buffer = StreamingBuffer(6, 2, 6, buffer_config,
                                      np.random.default_rng(int(get('seed').value)))
        self.checkpoints = CheckpointDirectory(Path(get('checkpoint_dir').value),
                                               prefix='car_model')
        self.stale_timeout = float(get('stale_timeout_s').value)
        self.min_transitions = int(get('min_transitions').value)
        self.batch_size = int(get('batch_size').value)
        self.steps_per_round = int(get('steps_per_round').value)
        self.save_period = float(get('save_period_s').value)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=get('learning_rate').value)
        self._lock = threading.Lock()
        self._pose: Optional[tuple] = None
        self._twist: Optional[tuple] = None
        self._state_time = -float('inf')
        self._command: Optional[np.ndarray] = None
        self._previous: Optional[tuple] = None
        self.losses = []
        self.steps = 0
        self.saved = 0
        inputs = MutuallyExclusiveCallbackGroup()
        self.create_subscription(PoseStamped, 'car/pose', self._on_pose, qos_profile_sensor_data,
                                 callback_group=inputs)
        self.create_subscription(TwistStamped, 'car/twist', self._on_twist,
                                 qos_profile_sensor_data, callback_group=inputs)
        self.create_subscription(COMMAND_TYPES[command_type], 'command', self._on_command, 10,
                                 callback_group=inputs)
        self.create_timer(self.h, self._sample, callback_group=inputs)
        self.create_timer(5.0, self._log, callback_group=inputs)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._train, name='car_learner', daemon=True)
        self._thread.start()

    def _on_pose(self, msg: PoseStamped) -> None:
        q = msg.pose.orientation
        yaw = float(np.arctan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y ** 2 + q.z ** 2)))
        position = msg.pose.position
        self._pose = (stamp_to_ns(msg.header.stamp), (position.x, position.y, yaw))

    def _on_twist(self, msg: TwistStamped) -> None:
        self._twist = (stamp_to_ns(msg.header.stamp), (msg.twist.linear.x, msg.twist.linear.y,
                                                       msg.twist.angular.z))
        if self._pose is not None and self._pose[0] == self._twist[0]:
            self._state_time = time.monotonic()

    def _on_command(self, msg) -> None:
        result = self.parser.parse(msg)
        if result.ok:
            self._command = np.array([result.value.throttle, result.value.steering])
        else:
            self.get_logger().warn(f'command rejected ({result.reason.value}: {result.detail})',
                                   throttle_duration_sec=2.0)

    def _sample(self) -> None:
        """Every h: close the previous transition with the current state, open the next."""
        now = time.monotonic()
        fresh = now - self._state_time <= self.stale_timeout
        if not fresh or self._command is None:
            self._previous = None
            return
        state = np.array([*self._pose[1], *self._twist[1]])
        if not np.all(np.isfinite(state)):
            self._previous = None
            return
        if self._previous is not None:
            t_prev, s_prev, u_prev = self._previous
            # The pose yaw arrives wrapped: unwrap the target relative to the previous state.
            target = state.copy()
            target[2] = s_prev[2] + (target[2] - s_prev[2] + np.pi) % (2 * np.pi) - np.pi
            self.buffer.append(t_prev, s_prev, u_prev, target)
        self._previous = (now, state, self._command.copy())

    def _train(self) -> None:
        last_save = time.monotonic()
        while not self._stop.is_set():
            if self.buffer.total < self.min_transitions:
                self._stop.wait(0.5)
                continue
            if not self._normalised:
                self.model.fit_normalization(self.buffer.recent(self.buffer.total))
                self._normalised = True
            self.model.train()
            for _ in range(self.steps_per_round):
                if self._stop.is_set():   # per step: SIGINT must end the node within 2 s
                    break
                batch = self.buffer.sample(self.batch_size)
                loss, _ = self.model.loss(batch)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                with self._lock:
                    self.losses.append(float(loss.detach()))
                    self.steps += 1
            self.model.eval()
            if time.monotonic() - last_save >= self.save_period:
                path = self.checkpoints.save(self.model, metadata={
                    'transitions': self.buffer.total, 'steps': self.steps})
                self.saved += 1
                last_save = time.monotonic()
                self.get_logger().info(f'saved {path}')
            self._stop.wait(0.01)

    def _log(self) -> None:
        with self._lock:
            recent = self.losses[-100:]
        loss = f'{np.mean(recent):.4f}' if recent else 'n/a'
        self.get_logger().info(f'transitions {self.buffer.total}, steps {self.steps}, loss '
                               f'{loss}, checkpoints {self.saved}; commands '
                               f'{self.parser.counter.summary()}')

    def destroy_node(self) -> None:
        """Stop the training thread first (it checks the flag between Adam steps)."""
        self._stop.set()
        self._thread.join(timeout=STOP_TIMEOUT_S)
        super().destroy_node()


def main(args=None) -> None:
    """Run the node (console script `car_model_learner`)."""
    spin_node(CarModelLearnerNode, args)


if __name__ == '__main__':
    main()
