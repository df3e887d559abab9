"""
The settings of car_model_learner: one class for the node and its block in config/car.yaml.

The node declares its parameters from `CarModelLearnerConfig` (default, description, range
of every field) and `params.load_node_config` reads the YAML block into the same class; the
learning settings are those of `CarAdaptationConfig` (`adaptation()`), whose defaults they
take, so the node and the benches fine-tune with one set of values.
"""
from dataclasses import dataclass, fields

from robot_dynamics_learning.learning.car_adaptation import CarAdaptationConfig, MAX_SMOOTH_S
from robot_dynamics_learning.params import check_ranges, setting

COMMAND_TYPES = ('twist', 'twist_stamped', 'joy')
_DEFAULTS = CarAdaptationConfig()


@dataclass(frozen=True)
class CarModelLearnerConfig:
    """Parameters of car_model_learner (config/car.yaml documents each one)."""

    model: str = setting('car_mlp', "model type when no checkpoint is given: 'car_mlp' or "
                         "'car_bicycle'")
    checkpoint: str = setting('', 'initial model checkpoint to fine-tune (empty: new model)')
    checkpoint_dir: str = setting('/tmp/car_model', 'where checkpoints are written')
    h: float = setting(_DEFAULTS.h, 'model step = step of the transitions (s)', 0.005, 1.0)
    max_gap_s: float = setting(_DEFAULTS.max_gap_s, 'widest gap between states a transition '
                               'may interpolate over (s)', 0.005, 1.0)
    command_delay_s: float = setting(_DEFAULTS.command_delay_s, 'time from the stamp of a '
                                     'command until the states show it: the estimator lag '
                                     '(about its window_s / 2) plus actuation (s)', 0.0, 1.0)
    command_type: str = setting('twist', f'command message type: {list(COMMAND_TYPES)}')
    throttle_axis: int = setting(1, 'Joy axis of the throttle', 0, 64)
    steering_axis: int = setting(3, 'Joy axis of the steering', 0, 64)
    throttle_scale: float = setting(1.0, 'throttle = throttle_scale * linear.x (or the Joy '
                                    'axis)')
    steering_scale: float = setting(1.0, 'steering = steering_scale * angular.z (or the axis)')
    min_transitions: int = setting(_DEFAULTS.min_transitions, 'transitions collected before '
                                   'training starts', 1, 1000000)
    batch_size: int = setting(_DEFAULTS.batch_size, 'transitions (or windows) per update', 1,
                              100000)
    learning_rate: float = setting(_DEFAULTS.learning_rate, 'Adam learning rate', 1e-7, 1.0)
    grad_clip: float = setting(_DEFAULTS.grad_clip, 'largest gradient norm', 1e-6, 1e6)
    updates_per_transition: float = setting(_DEFAULTS.updates_per_transition, 'budget: most '
                                            'updates per received transition (0: as fast as '
                                            'the CPU share allows)', 0.0, 1000.0)
    recent_capacity: int = setting(_DEFAULTS.recent_capacity, 'transitions in the ring of the '
                                   'newest driving (recent_capacity x h s: the current '
                                   'surface)', 1, 10000000)
    reservoir_transitions: int = setting(_DEFAULTS.reservoir_transitions, 'uniform sample of '
                                         'older transitions (windows) kept against forgetting',
                                         0, 10000000)
    recent_fraction: float = setting(_DEFAULTS.recent_fraction, 'share of a batch from the '
                                     'ring', 0.0, 1.0)
    publish_every: int = setting(_DEFAULTS.publish_every, 'updates between weight hand-overs',
                                 1, 100000)
    save_period_s: float = setting(_DEFAULTS.save_period_s, 'checkpoint period (s)', 0.5,
                                   36000.0)
    train_cpu_share: float = setting(_DEFAULTS.train_cpu_share, 'share of one core the '
                                     'training thread may use', 0.01, 1.0)
    rollout_steps: int = setting(_DEFAULTS.rollout_steps, 'consecutive transitions per '
                                 'training window: 1 trains the one-step loss, k > 1 the '
                                 'open-loop loss over k steps (what the MPC plans with)', 1,
                                 1000)
    position_weight: float = setting(_DEFAULTS.position_weight, 'weight (1/m) of the mean '
                                     'position error in the open-loop loss', 0.0, 1000.0)
    smooth_s: float = setting(_DEFAULTS.smooth_s, 'half window of the fixed-lag smoother of '
                              'the states (s): a centred quadratic fit instead of '
                              'interpolation; transitions complete this much later (0: off)',
                              0.0, MAX_SMOOTH_S)
    seed: int = setting(0, 'random seed of batch sampling')

    def __post_init__(self) -> None:
        """Refuse values that cannot work, naming them (node start and rdl alike)."""
        check_ranges(self)
        if self.command_type not in COMMAND_TYPES:
            raise ValueError(f'command_type must be one of {list(COMMAND_TYPES)}, got '
                             f'{self.command_type!r}')
        self.adaptation()   # its own checks (rollout_steps within recent_capacity)

    def adaptation(self) -> CarAdaptationConfig:
        """Return the learning settings (the fields both classes share)."""
        return CarAdaptationConfig(**{field.name: getattr(self, field.name)
                                      for field in fields(CarAdaptationConfig)})
