"""
The settings of dynamics_learner and torque_predictor: one class each, for node, YAML and rdl.

`config/learner.yaml` holds both nodes' blocks; `dynamics_learner` declares its parameters
from `DynamicsLearnerConfig` and `rdl replay` / `rdl simulate arm --learn` read the same
block into it (`params.load_node_config`), so the node and the offline runs learn with the
same values. The learner's defaults are those of `BufferConfig` and `TrainerConfig`.
"""
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from robot_dynamics_learning.data.joint_velocity import check_velocity_source, VELOCITY_WINDOW
from robot_dynamics_learning.data.messages import check_stamp_source
from robot_dynamics_learning.learning.buffer import BufferConfig
from robot_dynamics_learning.learning.continual import LearnerConfig, TrainerConfig
from robot_dynamics_learning.params import (build_from, check_ranges, load_node_config,
                                            setting, setting_of, settings_mapping)
from robot_dynamics_learning.resources import resource

INVERSE_MODELS = ('lstm', 'ac_rkn_inverse', 'hybrid', 'rigid_body', 'ffnn')
URDF_MODELS = ('hybrid', 'rigid_body')   # their model_config names a URDF


@dataclass(frozen=True)
class DynamicsLearnerConfig:
    """Parameters of dynamics_learner (config/learner.yaml documents each one)."""

    model: str = setting('lstm', f'model type, one of {INVERSE_MODELS}')
    model_config: Mapping[str, Any] = settings_mapping(
        'settings of this model (docs/models.md), as a mapping: model_config.<key>')
    urdf: str = setting('', 'robot URDF of the hybrid and rigid_body models unless '
                        'model_config names one: a path, or a file name in the urdf/ folder '
                        'of the package; empty: panda.urdf (the simulated arm)')
    joint_names: Optional[Tuple[str, ...]] = setting(
        None, 'joints to learn, in this order; unset (or empty): adopt the joint set with the '
        'most joints among the joint_states messages of the first joint_settle_s',
        unset_type='string_array')
    joint_settle_s: float = setting(1.0, 'joint_names unset: seconds of joint_states, from the '
                                    'first message, among whose joint sets the largest is '
                                    'adopted (messages held meanwhile, then learned from); 0: '
                                    "the first message's set", 0.0, 60.0)
    torque_source: str = setting('effort', "'effort' (JointState effort) or 'command' "
                                 '(Float64MultiArray on command_topic, joint order as '
                                 'command_joint_names)')
    command_topic: str = setting('/effort_controller/commands', 'torque command topic')
    command_joint_names: Optional[Tuple[str, ...]] = setting(
        None, "joint order of the command array: the effort controller's `joints` parameter "
        '(often not the order of /joint_states); matched to the learned joints by name, '
        'others ignored; unset (or empty): the order of joint_names', unset_type='string_array')
    checkpoint_dir: str = setting('', 'folder for checkpoints; empty disables them')
    keep_checkpoints: int = setting(3, 'checkpoints kept', 1, 1000)
    checkpoint_period_s: float = setting(TrainerConfig.checkpoint_every_s,
                                         'seconds between checkpoints', 0.1, 86400.0)
    resume: bool = setting(True, 'continue from the newest valid checkpoint if there is one')
    batch_size: int = setting_of(TrainerConfig, 'batch_size')
    window: int = setting_of(BufferConfig, 'window')
    learning_rate: float = setting_of(TrainerConfig, 'learning_rate')
    grad_clip: float = setting_of(TrainerConfig, 'grad_clip')
    updates_per_sample: float = setting_of(TrainerConfig, 'updates_per_sample')
    warmup_samples: int = setting_of(TrainerConfig, 'warmup_samples')
    recent_capacity: int = setting_of(BufferConfig, 'recent_capacity')
    reservoir_windows: int = setting_of(BufferConfig, 'reservoir_windows')
    recent_fraction: float = setting_of(BufferConfig, 'recent_fraction')
    gap_factor: float = setting_of(BufferConfig, 'gap_factor')
    prequential_window: int = setting_of(TrainerConfig, 'prequential_window')
    renormalize_factor: float = setting_of(TrainerConfig, 'renormalize_factor')
    publish_every: int = setting_of(TrainerConfig, 'publish_every')
    time_reset_s: float = setting(0.5, 'a stamp this far backwards is a time reset (looping '
                                  'bag): state is reset instead of rejecting', 0.0, 1e9)
    accel_window: int = setting(21, 'samples in the causal acceleration estimate (a one-sided '
                                'quadratic fit to velocities, signals/causal.py)', 3, 1000)
    velocity_source: str = setting('auto', "joint velocities: 'auto' (the messages' velocity, "
                                   'differentiated from the positions where a message has '
                                   "none), 'measured' (a message without velocity is refused) "
                                   "or 'positions' (always differentiated: a driver whose "
                                   'velocity is wrong, e.g. zeros)')
    velocity_window: int = setting(VELOCITY_WINDOW, 'samples in the causal velocity estimate '
                                   'from positions (a one-sided quadratic fit, no delay)',
                                   3, 1000)
    stamp_source: str = setting('auto', "message times: 'auto' (header stamps; arrival times "
                                'on the node clock when the first message is stamped 0: a '
                                "driver that never stamps), 'header' (a stamp of 0 is "
                                "refused) or 'receipt' (arrival times always)")
    diagnostics_period_s: float = setting(1.0, 'seconds between diagnostics', 0.01, 3600.0)
    queue_depth: int = setting(20, 'joint_states subscription queue (best effort): messages '
                               'absorbed in a burst; also the most a backlog can delay them',
                               1, 10000)
    drain_max: int = setting(20, 'queued joint states handled in one callback after a stall '
                             '(0: one per executor round trip)', 0, 10000)
    torch_threads: int = setting(1, 'torch intra-op threads (training shares the CPU)', 1, 64)
    train_cpu_share: float = setting(0.5, 'share of one core the trainer may use (it pauses '
                                     'between updates); leaves the callback room at 1 kHz on '
                                     'a small CPU', 0.01, 1.0)
    trainer_process: bool = setting(True, 'train in a child process (true) instead of a '
                                    'thread of this one: the callback then never waits for '
                                    "the trainer's interpreter lock, and training runs at a "
                                    'lower CPU priority (trainer_nice)')
    trainer_nice: int = setting(10, 'niceness of the trainer process (0-19): training yields '
                                'the CPU to this node, the robot driver and the controller',
                                0, 19)
    lockstep: bool = setting(False, 'bag replay evaluation (bag_replay.launch.py): train in '
                             'the callback after each prediction, the updates_per_sample '
                             'budget exactly as `rdl replay` does, on a reliable keep-all '
                             'subscription; the same scores as `rdl replay` for a seed. Not '
                             'for a robot: the callback waits for training')
    seed: int = setting(0, 'random seed of the buffer sampling and model initialisation')
    record_path: str = setting('', 'write the newest record_max_samples (stamp, measured '
                               'torque, prediction, prequential nMSE) to this .npz at '
                               'shutdown; empty: off')
    record_max_samples: int = setting(200000, 'samples kept for record_path', 1, 100_000_000)
    status_path: str = setting('', 'also write the diagnostics (and last_stamp_ns, the newest '
                               'accepted stamp) to this JSON file every diagnostics period, '
                               'replaced atomically: progress for a ROS-free supervisor such '
                               'as the demo; empty: off')

    def __post_init__(self) -> None:
        """Refuse values that cannot work, naming them (node start and rdl alike)."""
        check_ranges(self)
        check_velocity_source(self.velocity_source)
        check_stamp_source(self.stamp_source)
        if self.model not in INVERSE_MODELS:
            model_config_class(vars(self))   # refuses a model outside INVERSE_MODELS
        if self.torque_source not in ('effort', 'command'):
            raise ValueError(f"torque_source must be 'effort' or 'command', got "
                             f"'{self.torque_source}'")
        if self.lockstep and self.updates_per_sample == 0:
            raise ValueError('lockstep needs updates_per_sample > 0 (a finite budget)')
        unique_names('joint_names', self.joint_names)
        unique_names('command_joint_names', self.command_joint_names)
        if self.torque_source == 'command' and not self.command_topic:
            raise ValueError("torque_source 'command' needs a command_topic")
        if self.joint_names and self.torque_source == 'command':
            uncommanded(self.joint_names, self.command_joint_names, raise_error=True)

    def learner_config(self) -> LearnerConfig:
        """Return the buffer and trainer settings of the continual learner."""
        return LearnerConfig(build_from(BufferConfig, self),
                             build_from(TrainerConfig, self,
                                        checkpoint_every_s=self.checkpoint_period_s,
                                        max_cpu_share=self.train_cpu_share))


def unique_names(parameter: str, names: Optional[Sequence[str]]) -> None:
    """Refuse a joint name list with a repeated or empty name: matching by name needs both."""
    if not names:
        return
    repeated = sorted(name for name, count in Counter(names).items() if count > 1)
    if repeated or '' in names:
        raise ValueError(f'{parameter} must name each joint once and by a non-empty name; got '
                         f'{list(names)}' + (f' (repeated: {repeated})' if repeated else ''))


def uncommanded(joints: Sequence[str], command_names: Optional[Sequence[str]],
                raise_error: bool = False) -> List[str]:
    """
    Return the learned joints that command_names lacks (none when it is unset).

    raise_error: refuse them instead, at start, where both lists are known: every command
    would be rejected, so the learner would never train.
    """
    missing = [name for name in joints if command_names and name not in command_names]
    if missing and raise_error:
        raise ValueError(f'command_joint_names {list(command_names)} lack the learned joints '
                         f"{missing}: list every joint of joint_names (in the controller's "
                         'order)')
    return missing


def model_config_class(values: Mapping[str, Any]) -> type:
    """Return the config class of the model that parameter values name (checked first)."""
    from robot_dynamics_learning.models.registry import model_builder
    model = values.get('model', DynamicsLearnerConfig.model)
    if model not in INVERSE_MODELS:
        raise ValueError(f"parameter model must be one of {INVERSE_MODELS}, got '{model}'")
    return model_builder(model).config_class


def model_settings(model_type: str, settings: Mapping[str, Any],
                   urdf: str = '') -> Dict[str, Any]:
    """
    Return `settings` checked against `model_type`'s own config, with the URDF filled in.

    A key the model does not have, or a bad value, is a ValueError naming the model and its
    settings, raised at start rather than at the first message.
    """
    from robot_dynamics_learning.models.registry import model_builder
    values = dict(settings)
    if model_type in URDF_MODELS and 'urdf' not in values:
        name = urdf or 'panda.urdf'
        values['urdf'] = str(name if '/' in name else resource(f'urdf/{name}'))
    try:
        model_builder(model_type).config_class.from_dict(values)
    except (TypeError, ValueError) as error:
        raise ValueError(f"model_config does not fit model '{model_type}': {error}") from None
    return values


@dataclass(frozen=True)
class TorquePredictorConfig:
    """Parameters of torque_predictor (config/learner.yaml)."""

    checkpoint_dir: str = setting('', 'folder of checkpoints written by dynamics_learner '
                                  '(required)')
    poll_period_s: float = setting(1.0, 'seconds between checks for a newer checkpoint',
                                   0.05, 3600.0)
    accel_window: int = setting(DynamicsLearnerConfig.accel_window, 'samples in the causal '
                                "acceleration estimate (must match the learner's)", 3, 1000)
    velocity_source: str = setting(DynamicsLearnerConfig.velocity_source, 'joint velocities: '
                                   "'auto', 'measured' or 'positions' (as the learner's)")
    velocity_window: int = setting(DynamicsLearnerConfig.velocity_window, 'samples in the '
                                   "velocity estimate from positions (as the learner's)",
                                   3, 1000)
    stamp_source: str = setting(DynamicsLearnerConfig.stamp_source, "message times: 'auto', "
                                "'header' or 'receipt' (as the learner's)")
    history_size: int = setting(BufferConfig.window, 'recent samples replayed to warm up the '
                                'recurrent state of a newly loaded model (one training window)',
                                1, 100000)
    time_reset_s: float = setting(DynamicsLearnerConfig.time_reset_s, 'a stamp this far '
                                  'backwards resets the recurrent state', 0.0, 1e9)
    diagnostics_period_s: float = setting(1.0, 'seconds between diagnostics', 0.01, 3600.0)
    torch_threads: int = setting(1, 'torch intra-op threads', 1, 64)

    def __post_init__(self) -> None:
        """Refuse values outside their ranges, naming them."""
        check_ranges(self)
        check_velocity_source(self.velocity_source)
        check_stamp_source(self.stamp_source)


def learner_params(path: Optional[Path] = None) -> DynamicsLearnerConfig:
    """Return dynamics_learner's settings from a ROS params YAML (default config/learner.yaml)."""
    path = Path(path) if path is not None else resource('config/learner.yaml')
    return load_node_config(DynamicsLearnerConfig, path, 'dynamics_learner')
