"""
The settings of car_model_learner: one class for the node and its block in config/car.yaml.

The node declares its parameters from `CarModelLearnerConfig` (default, description, range
of every field) and `params.load_node_config` reads the YAML block into the same class. Its
learning settings are `CarAdaptationConfig`'s own fields and its `command` settings
`CarCommandSettings`' (both inherited), so the node and the benches fine-tune with one
definition; the class adds the model and its checkpoints.
"""
from dataclasses import dataclass

from robot_dynamics_learning.data.messages import CarCommandSettings
from robot_dynamics_learning.learning.car_adaptation import CarAdaptationConfig
from robot_dynamics_learning.params import build_from, check_ranges, setting


@dataclass(frozen=True)
class CarModelLearnerConfig(CarCommandSettings, CarAdaptationConfig):
    """Parameters of car_model_learner (config/car.yaml documents each one)."""

    model: str = setting('car_mlp', "model type when no checkpoint is given: 'car_mlp' or "
                         "'car_bicycle'")
    checkpoint: str = setting('', 'initial model checkpoint to fine-tune (empty: new model)')
    checkpoint_dir: str = setting('/tmp/car_model', 'folder the checkpoints are written to '
                                  '(car_mpc follows it); empty: no checkpoints')
    seed: int = setting(0, 'random seed of batch sampling')

    def __post_init__(self) -> None:
        """Refuse values that cannot work, naming them (node start and rdl alike)."""
        CarAdaptationConfig.__post_init__(self)
        CarCommandSettings.__post_init__(self)
        check_ranges(self)

    def adaptation(self) -> CarAdaptationConfig:
        """Return the learning settings alone."""
        return build_from(CarAdaptationConfig, self)
