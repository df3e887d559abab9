"""
The arm learning while it is controlled, on a physics engine: simulator -> learner -> controller.

    ros2 launch robot_dynamics_learning arm_gazebo.launch.py                       # MuJoCo
    ros2 launch robot_dynamics_learning arm_gazebo.launch.py simulator:=gazebo     # gz sim
    ros2 param set /mujoco_arm payload_mass 2.0                 # MuJoCo: change the payload

One ROS graph for both simulators, the ros2_control effort-controller contract:
`/joint_states` (position, velocity, effort) from the simulator, `/effort_controller/commands`
(std_msgs/Float64MultiArray) to it, `/clock` from it; dynamics_learner (the hybrid on
urdf/panda.urdf, which knows neither the simulated joint friction, damping and armature nor
the payload) and arm_controller (PD + the learner's newest checkpoint as feed-forward) run
with use_sim_time.
- simulator:=mujoco (default; what CI runs): mujoco_arm publishes /clock and steps in real
  time.
- simulator:=gazebo: gz sim with worlds/arm.sdf, urdf/panda_gazebo.urdf spawned from
  robot_state_publisher's robot_description with the gz_ros2_control system plugin,
  config/arm_controllers.yaml (joint_state_broadcaster + effort_controller, a
  JointGroupEffortController) loaded by two spawners, /clock bridged by ros_gz_bridge.
  Without ros_gz_sim, ros_gz_bridge, robot_state_publisher, gz_ros2_control,
  controller_manager, joint_state_broadcaster or effort_controllers the launch stops with an
  error naming what is missing, before any node starts.

Arguments: simulator, params (config/arm_control.yaml: mujoco_arm and arm_controller),
learner_params (config/learner.yaml), model, model_config (a YAML mapping of the model's
settings; default: the hybrid with a 10 s payload memory; the learner checkpoints every second
here), feedforward (learned | urdf | none), trajectory,
payload_mass (MuJoCo), checkpoint_dir (default: a new folder per run under ~/.rdl/runs),
gui (gazebo: false runs the server only), realtime_priority.
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription, OpaqueFunction
from launch.conditions import IfCondition
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration, PythonExpression
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from robot_dynamics_learning.launch_common import require_packages, shared_arguments, typed
import yaml

PACKAGE = 'robot_dynamics_learning'
SIMULATORS = ('mujoco', 'gazebo')
GAZEBO_PACKAGES = ('ros_gz_sim', 'ros_gz_bridge', 'robot_state_publisher', 'gz_ros2_control',
                   'controller_manager', 'joint_state_broadcaster', 'effort_controllers')
CLOCK_BRIDGE = '/clock@rosgraph_msgs/msg/Clock[gz.msgs.Clock'
CONTROLLERS = ('joint_state_broadcaster', 'effort_controller')
MODEL_NAME = 'panda'
CONTROLLERS_PLACEHOLDER = '@CONTROLLERS_YAML@'
# The controller feeds forward the learner's checkpoints: one per second, and a payload
# estimate that averages over a reference period (10 s) instead of following its phase over
# the last 1 s (config/learner.yaml's 0.999), tracked 1.8 instead of 2.6 mrad
# (docs/simulation.md).
CHECKPOINT_PERIOD_S = 1.0
HYBRID_CONFIG = {'hidden_size': 32, 'num_layers': 1, 'payload_forgetting': 0.9999}


def generate_launch_description() -> LaunchDescription:
    """Declare the arguments, the simulator check, the learner and the controller."""
    share = get_package_share_directory(PACKAGE)
    config = LaunchConfiguration
    checkpoint_dir = config('checkpoint_dir')
    realtime_priority = typed('realtime_priority', int)
    return LaunchDescription([
        DeclareLaunchArgument('simulator', default_value='mujoco', choices=list(SIMULATORS),
                              description='mujoco (CI) | gazebo (gz sim + gz_ros2_control)'),
        DeclareLaunchArgument('params', default_value=os.path.join(share, 'config',
                                                                   'arm_control.yaml'),
                              description='YAML parameters of mujoco_arm and arm_controller'),
        *shared_arguments(share, 'arm_gazebo', 'learner_params', 'model', 'trajectory',
                          'payload_mass', 'run_checkpoint_dir', 'realtime_priority'),
        DeclareLaunchArgument('model_config', default_value='',
                              description="the learner's model settings as a YAML mapping, "
                              "e.g. '{hidden_size: 64}'; empty: for the hybrid "
                              f'{HYBRID_CONFIG}, for other models their defaults'),
        DeclareLaunchArgument('feedforward', default_value='learned',
                              description='learned | urdf | none'),
        DeclareLaunchArgument('gui', default_value='true',
                              description='gazebo: start the GUI too (false: server only)'),
        OpaqueFunction(function=_require_simulator),
        Node(package=PACKAGE, executable='mujoco_arm', name='mujoco_arm', output='screen',
             condition=IfCondition(PythonExpression(
                 ["'", config('simulator'), "' == 'mujoco'"])),
             parameters=[config('params'), {
                 'publish_clock': True,
                 'payload_mass': typed('payload_mass', float),
                 'realtime_priority': realtime_priority}]),
        OpaqueFunction(function=_learner),
        Node(package=PACKAGE, executable='arm_controller', name='arm_controller',
             output='screen', parameters=[config('params'), {
                 'feedforward': config('feedforward'), 'checkpoint_dir': checkpoint_dir,
                 'trajectory': config('trajectory'), 'use_sim_time': True,
                 'realtime_priority': realtime_priority}]),
        OpaqueFunction(function=_gazebo_actions, args=[share]),
    ])


def _learner(context) -> list:
    """Return dynamics_learner with its model settings as `model_config.<key>` parameters."""
    value = context.launch_configurations
    model = value['model']
    text = value['model_config'].strip()
    settings = yaml.safe_load(text) if text else (HYBRID_CONFIG if model == 'hybrid' else {})
    if not isinstance(settings, dict):
        raise RuntimeError(f'model_config must be a YAML mapping, got {text!r}')
    return [Node(package=PACKAGE, executable='dynamics_learner', name='dynamics_learner',
                 output='screen', parameters=[value['learner_params'], {
                     'model': model,
                     **{f'model_config.{key}': v for key, v in settings.items()},
                     'checkpoint_dir': value['checkpoint_dir'],
                     'checkpoint_period_s': CHECKPOINT_PERIOD_S, 'use_sim_time': True,
                     'realtime_priority': int(value['realtime_priority'])}])]


def _require_simulator(context) -> list:
    """Stop the launch before any node starts when simulator:=gazebo cannot work here."""
    if context.launch_configurations['simulator'] == 'gazebo':
        require_packages('simulator:=gazebo', GAZEBO_PACKAGES, 'install Gazebo Harmonic with '
                         'ros_gz and gz_ros2_control (e.g. ros-jazzy-ros-gz '
                         'ros-jazzy-gz-ros2-control ros-jazzy-ros2-controllers) or use '
                         'simulator:=mujoco')
    return []


def _gazebo_actions(context, share: str) -> list:
    """Return gz sim, the spawned arm, the /clock bridge and the controller spawners."""
    if context.launch_configurations['simulator'] != 'gazebo':
        return []
    gui = context.launch_configurations['gui'].lower() in ('true', '1')
    world = os.path.join(share, 'worlds', 'arm.sdf')
    with open(os.path.join(share, 'urdf', 'panda_gazebo.urdf')) as stream:
        description = stream.read().replace(
            CONTROLLERS_PLACEHOLDER, os.path.join(share, 'config', 'arm_controllers.yaml'))
    return [
        IncludeLaunchDescription(
            PythonLaunchDescriptionSource(os.path.join(
                get_package_share_directory('ros_gz_sim'), 'launch', 'gz_sim.launch.py')),
            launch_arguments={'gz_args': ('-r ' if gui else '-r -s ') + world}.items()),
        Node(package='robot_state_publisher', executable='robot_state_publisher',
             output='screen', parameters=[{
                 'robot_description': ParameterValue(description, value_type=str),
                 'use_sim_time': True}]),
        Node(package='ros_gz_sim', executable='create', output='screen',
             arguments=['-topic', 'robot_description', '-name', MODEL_NAME]),
        Node(package='ros_gz_bridge', executable='parameter_bridge', output='screen',
             arguments=[CLOCK_BRIDGE]),
    ] + [Node(package='controller_manager', executable='spawner', output='screen',
              arguments=[name, '--controller-manager', '/controller_manager'])
         for name in CONTROLLERS]
