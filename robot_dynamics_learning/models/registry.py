"""
Explicit registry from model type (a config value) to model class and its typed config.

Data conventions every caller must follow (built by `robot_dynamics_learning.data.windows`):
- inverse models ('lstm', 'ac_rkn_inverse', 'ffnn', 'gp', 'previous_value', 'rigid_body',
  'hybrid'):
  observations x_t = [q, qd, qdd] (n_obs = 3 d, raw SI units), actions = the torque executed at
  the previous step tau_{t-1} (n_act = d; models that do not use it ignore it), targets tau_t.
  Streaming: `step(state, x_t, tau_{t-1})`; tau_{t-1} may be None where it is unknown.
- forward models ('ac_rkn_forward', 'rkn', 'lstm_forward', 'gru', 'ffnn' and
  'previous_value' with kind 'forward'): observations o_t, actions a_t, targets o_{t+1};
  `observation_valid` False marks a missing o_t (the model feeds back its own prediction).
"""
import importlib
from typing import Any, Callable, Dict, Optional, Tuple, TYPE_CHECKING

from robot_dynamics_learning.models.base import DynamicsModel

if TYPE_CHECKING:   # the URDF is loaded only for the models built from one
    from robot_dynamics_learning.dynamics.model import RobotModel

# model type -> (module, builder): a DynamicsModel class or a function choosing one; each
# builder has a `config_class` attribute and is called as builder(config, n_obs, n_act, n_target).
_REGISTRY: Dict[str, Tuple[str, str]] = {
    'lstm': ('robot_dynamics_learning.models.lstm', 'LSTMInverseDynamics'),
    'ac_rkn_inverse': ('robot_dynamics_learning.models.rkn', 'AcRKNInverse'),
    'ac_rkn_forward': ('robot_dynamics_learning.models.rkn', 'AcRKNForward'),
    'rkn': ('robot_dynamics_learning.models.rkn', 'RKNForward'),
    'gru': ('robot_dynamics_learning.models.recurrent', 'GRUForward'),
    'lstm_forward': ('robot_dynamics_learning.models.recurrent', 'LSTMForward'),
    'ffnn': ('robot_dynamics_learning.models.ffnn', 'build_ffnn'),
    'gp': ('robot_dynamics_learning.models.gp', 'ExactGP'),
    'previous_value': ('robot_dynamics_learning.models.baselines', 'build_previous_value'),
    'rigid_body': ('robot_dynamics_learning.models.hybrid', 'RigidBodyInverse'),
    'hybrid': ('robot_dynamics_learning.models.hybrid', 'HybridInverse'),
    'car_mlp': ('robot_dynamics_learning.models.car_mlp', 'CarMLP'),
    'car_bicycle': ('robot_dynamics_learning.models.car_bicycle', 'KinematicBicycle'),
}

MODEL_TYPES = tuple(_REGISTRY)
# Always built from a URDF file (others, such as 'previous_value', only with a `urdf` key).
URDF_MODEL_TYPES = ('rigid_body', 'hybrid')


def builds_from_urdf(model_type: str, config: Any) -> bool:
    """
    Return True for a model built from a URDF file into CPU constants.

    Such a model cannot be built on the meta device: a checkpoint's tensor shapes are compared
    with it after the build (their sizes are the URDF's, not the file's).
    """
    return model_type in URDF_MODEL_TYPES or (isinstance(config, dict)
                                              and bool(config.get('urdf')))


def urdf_robot(model_type: str, config: Optional[Dict[str, Any]]) -> Optional['RobotModel']:
    """
    Return the robot of the URDF the model is built from (None: no URDF).

    Data must be read in its joint order before the model is built (its widths, and every
    column, are taken as the URDF's joints) and checked against its joint limits.
    """
    if not builds_from_urdf(model_type, config):
        return None
    from robot_dynamics_learning.dynamics import load_urdf
    from robot_dynamics_learning.models.hybrid import RigidBodyConfig
    urdf = model_builder(model_type).config_class.from_dict(config).urdf
    return load_urdf(RigidBodyConfig(urdf=urdf).path())


def model_builder(model_type: str) -> Callable[..., DynamicsModel]:
    """Return the builder registered for `model_type`; unknown types are a ValueError."""
    if model_type not in _REGISTRY:
        raise ValueError(f"unknown model type '{model_type}'; known: {list(MODEL_TYPES)}")
    module_name, class_name = _REGISTRY[model_type]
    return getattr(importlib.import_module(module_name), class_name)


def build_model(model_type: str, config: Optional[Dict[str, Any]], n_obs: int, n_act: int,
                n_target: int) -> DynamicsModel:
    """
    Build a model from its type name and config dict (validated by its config dataclass).

    n_obs, n_act, n_target: feature widths of observations, actions and targets. The model
    remembers `model_type` so that a checkpoint can rebuild it.
    """
    for name, value in (('n_obs', n_obs), ('n_act', n_act), ('n_target', n_target)):
        if not isinstance(value, int) or value < 0:
            raise ValueError(f'{name} must be a non-negative int, got {value!r}')
    builder = model_builder(model_type)
    model = builder(builder.config_class.from_dict(config), n_obs, n_act, n_target)
    model.model_type = model_type
    return model
