"""
The settings of car_model_learner: one class for the node and its block in config/car.yaml.

The node declares its parameters from `CarModelLearnerConfig` (default, description, range
of every field) and `params.load_node_config` reads the YAML block into the same class. Its
learning settings are `CarAdaptationConfig`'s own fields (inherited), so the node and the
benches fine-tune with one definition; the class adds how the node gets its data.
"""
from dataclasses import dataclass

from robot_dynamics_learning.learning.car_adaptation import CarAdaptationConfig
from robot_dynamics_learning.params import build_from, check_ranges, setting

COMMAND_TYPES = ('twist', 'twist_stamped', 'joy')


@dataclass(frozen=True)
class CarModelLearnerConfig(CarAdaptationConfig):
    """Parameters of car_model_learner (config/car.yaml documents each one)."""

    model: str = setting('car_mlp', "model type when no checkpoint is given: 'car_mlp' or "
                         "'car_bicycle'")
    checkpoint: str = setting('', 'initial model checkpoint to fine-tune (empty: new model)')
    checkpoint_dir: str = setting('/tmp/car_model', 'where checkpoints are written')
    command_type: str = setting('twist', f'command message type: {list(COMMAND_TYPES)}')
    throttle_axis: int = setting(1, 'Joy axis of the throttle', 0, 64)
    steering_axis: int = setting(3, 'Joy axis of the steering', 0, 64)
    throttle_scale: float = setting(1.0, 'throttle = throttle_scale * linear.x (or the Joy '
                                    'axis)')
    steering_scale: float = setting(1.0, 'steering = steering_scale * angular.z (or the axis)')
    seed: int = setting(0, 'random seed of batch sampling')

    def __post_init__(self) -> None:
        """Refuse values that cannot work, naming them (node start and rdl alike)."""
        super().__post_init__()
        check_ranges(self)
        if self.command_type not in COMMAND_TYPES:
            raise ValueError(f'command_type must be one of {list(COMMAND_TYPES)}, got '
                             f'{self.command_type!r}')

    def adaptation(self) -> CarAdaptationConfig:
        """Return the learning settings alone."""
        return build_from(CarAdaptationConfig, self)
