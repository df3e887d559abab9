"""Node parameters, their YAML files and `rdl` are one set: declared from one config class."""
import dataclasses
from pathlib import Path

import pytest
import rclpy
from rclpy.context import Context
from rclpy.node import Node
from robot_dynamics_learning.control.arm_controller_params import ArmControllerNodeConfig
from robot_dynamics_learning.control.car_estimator_params import CarStateEstimatorConfig
from robot_dynamics_learning.control.car_mpc_params import CarMPCConfig
from robot_dynamics_learning.data.bag_player_params import BagPlayerConfig
from robot_dynamics_learning.learning import replay
from robot_dynamics_learning.learning.car_adaptation_params import CarModelLearnerConfig
from robot_dynamics_learning.learning.learner_params import (DynamicsLearnerConfig,
                                                             model_config_class,
                                                             TorquePredictorConfig)
from robot_dynamics_learning.learning.replay_evaluator_params import ReplayEvaluatorConfig
from robot_dynamics_learning.nodes.parameters import declare_config
from robot_dynamics_learning.params import (from_values, load_node_config, ros_parameters,
                                            SHARED_PARAMETERS)
from robot_dynamics_learning.sim.arm_sim_params import ArmSimConfig
from robot_dynamics_learning.sim.car_sim_params import CarSimConfig
from robot_dynamics_learning.sim.mujoco_arm_params import MujocoArmNodeConfig

pytestmark = pytest.mark.ros

CONFIG = Path(__file__).resolve().parents[1] / 'config'
SETTINGS = {'model_config': model_config_class}
# (node name, config class, YAML file, the file's deliberate choices over the defaults).
NODES = [
    ('dynamics_learner', DynamicsLearnerConfig, 'learner.yaml', {'model': 'hybrid'}),
    ('torque_predictor', TorquePredictorConfig, 'learner.yaml', {}),
    ('car_mpc', CarMPCConfig, 'car.yaml', {}),
    ('arm_sim', ArmSimConfig, 'arm_sim.yaml', {}),
    ('car_sim', CarSimConfig, 'car.yaml', {}),
    ('mujoco_arm', MujocoArmNodeConfig, 'arm_control.yaml', {}),
    ('arm_controller', ArmControllerNodeConfig, 'arm_control.yaml', {}),
    ('car_state_estimator', CarStateEstimatorConfig, 'car.yaml', {}),
    ('car_model_learner', CarModelLearnerConfig, 'car.yaml', {}),
]
# Nodes without a YAML file of their own: the launch files set what they need.
NODES_WITHOUT_YAML = [('bag_player', BagPlayerConfig), ('replay_evaluator',
                                                        ReplayEvaluatorConfig)]


def declared(name: str, cls: type, args=()) -> object:
    """Return what a real rclpy node named `name` declares from `cls`, given ROS `args`."""
    context = Context()
    rclpy.init(args=['--ros-args', *args], context=context)
    try:
        node = Node(name, context=context)
        try:
            return declare_config(node, cls, SETTINGS if cls is DynamicsLearnerConfig else None)
        finally:
            node.destroy_node()
    finally:
        rclpy.shutdown(context=context)


@pytest.mark.parametrize('name, cls, yaml, choices', NODES)
def test_node_defaults_yaml_and_rdl_are_one_set(name, cls, yaml, choices):
    path = CONFIG / yaml
    assert declared(name, cls) == cls()                      # node defaults == class defaults
    from_file = declared(name, cls, ['--params-file', str(path)])
    assert from_file == load_node_config(cls, path, name)    # node with the file == rdl
    block = ros_parameters(path, name)
    fields = {field.name for field in dataclasses.fields(cls)}
    assert set(block) <= fields | set(SHARED_PARAMETERS)
    differ = {key: value for key, value in block.items()   # YAML lists are the fields' tuples
              if key in fields and (tuple(value) if isinstance(value, list) else value)
              != getattr(cls(), key)}
    assert differ == choices                                 # the file says only its choices
    assert dataclasses.replace(cls(), **choices) == from_file


@pytest.mark.parametrize('name, cls', NODES_WITHOUT_YAML)
def test_node_defaults_are_the_class_defaults(name, cls):
    assert declared(name, cls) == cls()


def test_a_value_given_at_start_reaches_the_class_and_a_bad_one_is_refused():
    assert declared('bag_player', BagPlayerConfig, ['-p', 'rate:=2.5']).rate == 2.5
    with pytest.raises(Exception, match='rate'):   # outside the declared range
        declared('bag_player', BagPlayerConfig, ['-p', 'rate:=0.0'])


def test_rdl_replay_reads_the_learner_block_into_the_node_class():
    params = replay.load_learner_params()
    assert from_values(DynamicsLearnerConfig, params, 'test') == \
        load_node_config(DynamicsLearnerConfig, CONFIG / 'learner.yaml', 'dynamics_learner')
    assert params['recent_fraction'] == 0.5 and params['updates_per_sample'] == 0.05


def test_model_settings_are_a_mapping_checked_against_the_model():
    config = declared('dynamics_learner', DynamicsLearnerConfig,
                      ['-p', 'model:=lstm', '-p', 'model_config.hidden_size:=16'])
    assert config.model_config == {'hidden_size': 16}
    with pytest.raises(ValueError, match=r'model_config.hidden_size is not a setting of '
                                         r'AcRKN\w*Config'):
        declared('dynamics_learner', DynamicsLearnerConfig,
                 ['-p', 'model:=ac_rkn_inverse', '-p', 'model_config.hidden_size:=16'])


def test_the_json_string_of_model_config_still_works_with_a_warning():
    with pytest.deprecated_call():
        config = declared('dynamics_learner', DynamicsLearnerConfig,
                          ['-p', 'model_config:=\'{"hidden_size": 16}\''])
    assert config.model_config == {'hidden_size': 16}


def test_out_of_range_values_are_refused_by_the_class_for_rdl_too():
    with pytest.raises(ValueError, match='recent_fraction must be in'):
        DynamicsLearnerConfig(recent_fraction=1.5)
    with pytest.raises(ValueError, match='parameter model must be one of'):
        from_values(DynamicsLearnerConfig, {'model': 'gp'}, 'test')
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['batchsize'\]"):
        from_values(DynamicsLearnerConfig, {'batchsize': 3}, 'test')


def test_rdl_simulate_arm_defaults_are_the_nodes():
    from robot_dynamics_learning.cli import build_parser
    args = build_parser('simulate').parse_args(['simulate', 'arm', '--out', 'x.npz'])
    node = ArmSimConfig()
    assert (args.rate, args.trajectory, args.payload, args.urdf, args.seed) == \
        (node.rate_hz, node.trajectory, node.payload_mass, node.urdf, node.seed)


def test_a_block_for_every_node_lends_only_the_names_this_node_has(tmp_path):
    path = tmp_path / 'params.yaml'
    path.write_text('/**:\n  ros__parameters:\n    use_sim_time: true\n    window: 16\n'
                    '    horizon: 5\n'   # car_mpc's: ROS ignores it for the learner
                    'dynamics_learner:\n  ros__parameters:\n    batch_size: 8\n')
    config = load_node_config(DynamicsLearnerConfig, path, 'dynamics_learner')
    assert (config.window, config.batch_size) == (16, 8)
    path.write_text('dynamics_learner:\n  ros__parameters:\n    horizon: 5\n')
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['horizon'\]"):
        load_node_config(DynamicsLearnerConfig, path, 'dynamics_learner')
