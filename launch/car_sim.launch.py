"""
Simulated RC car driven by the MPC: car_sim -> car_state_estimator -> car_mpc -> car_sim.

    ros2 launch robot_dynamics_learning car_sim.launch.py
    ros2 launch robot_dynamics_learning car_sim.launch.py learn:=true   # + car_model_learner
    ros2 launch robot_dynamics_learning car_sim.launch.py gazebo:=true  # Gazebo car instead

Arguments: params (YAML of all car nodes), track (track YAML), checkpoint (car model),
learn (also run car_model_learner; car_mpc then reloads its checkpoints and switches its
grip bound on: grip_weight launch_common.LEARN_GRIP_WEIGHT on the learner's car/grip
estimate, else 0), checkpoint_dir
(where the learner writes; default a new folder per run under ~/.rdl/runs, so no run reloads
another run's model), gazebo (drive the urdf/rc_car.urdf car in gz sim through ros_gz: its
pose is bridged as the mocap pose and cmd_vel_gz as its AckermannSteering command; our
simulator is not started, and every car node runs on the bridged /clock). gazebo:=true
without ros_gz installed stops the launch with an error naming what is missing.
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription, OpaqueFunction
from launch.conditions import IfCondition, UnlessCondition
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import Command, LaunchConfiguration, PythonExpression
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from robot_dynamics_learning.launch_common import (grip_weight_for, has_package,
                                                   require_packages, shared_arguments)

PACKAGE = 'robot_dynamics_learning'
MOCAP_TOPIC = '/vrpn_mocap/rc_car/pose'
GAZEBO_PACKAGES = ('ros_gz_sim', 'ros_gz_bridge', 'robot_state_publisher')


def generate_launch_description() -> LaunchDescription:
    """Declare the arguments and the car nodes (plus Gazebo when asked)."""
    share = get_package_share_directory(PACKAGE)
    params = LaunchConfiguration('params')
    track = LaunchConfiguration('track')
    gazebo = LaunchConfiguration('gazebo')
    checkpoint_dir = LaunchConfiguration('checkpoint_dir')
    learn = LaunchConfiguration('learn')
    use_sim_time = ParameterValue(gazebo, value_type=bool)   # Gazebo stamps are sim time
    return LaunchDescription([
        *shared_arguments(share, 'car_sim', 'car_params', 'track', 'checkpoint', 'learn',
                          'run_checkpoint_dir'),
        DeclareLaunchArgument('gazebo', default_value='false',
                              description='drive the Gazebo car instead of car_sim'),
        OpaqueFunction(function=_require_gazebo_packages),
        Node(package=PACKAGE, executable='car_sim', name='car_sim', output='screen',
             parameters=[params, {'track_file': track}],
             remappings=[('mocap_pose', MOCAP_TOPIC)], condition=UnlessCondition(gazebo)),
        Node(package=PACKAGE, executable='car_state_estimator', name='car_state_estimator',
             output='screen', parameters=[params, {'use_sim_time': use_sim_time}],
             remappings=[('mocap_pose', MOCAP_TOPIC)]),
        Node(package=PACKAGE, executable='car_mpc', name='car_mpc', output='screen',
             parameters=[params, {
                 'track_file': track, 'checkpoint': LaunchConfiguration('checkpoint'),
                 'checkpoint_dir': PythonExpression(["'", checkpoint_dir, "' if '", learn,
                                                     "' == 'true' else ''"]),
                 'grip_weight': grip_weight_for(learn),
                 'publish_gz_cmd': ParameterValue(gazebo, value_type=bool),
                 'use_sim_time': use_sim_time}]),
        Node(package=PACKAGE, executable='car_model_learner', name='car_model_learner',
             output='screen', condition=IfCondition(learn),
             parameters=[params, {'checkpoint': LaunchConfiguration('checkpoint'),
                                  'checkpoint_dir': checkpoint_dir,
                                  'use_sim_time': use_sim_time}]),
    ] + (_gazebo_actions(share, gazebo) if has_package('ros_gz_sim') else []))


def _require_gazebo_packages(context) -> list:
    """Stop the launch before any node starts when gazebo:=true cannot work here."""
    if context.launch_configurations.get('gazebo', 'false').lower() in ('true', '1'):
        require_packages('gazebo:=true', GAZEBO_PACKAGES, 'install Gazebo Harmonic with '
                         'ros_gz (e.g. ros-jazzy-ros-gz) or launch without gazebo:=true to use '
                         'the built-in car simulator')
    return []


def _gazebo_actions(share: str, gazebo: LaunchConfiguration) -> list:
    """Start gz sim with the car world, spawn the URDF car, bridge pose and command."""
    return [
        IncludeLaunchDescription(
            PythonLaunchDescriptionSource(os.path.join(
                get_package_share_directory('ros_gz_sim'), 'launch', 'gz_sim.launch.py')),
            launch_arguments={'gz_args': '-r ' + os.path.join(share, 'worlds',
                                                              'car_track.sdf')}.items(),
            condition=IfCondition(gazebo)),
        Node(package='robot_state_publisher', executable='robot_state_publisher',
             condition=IfCondition(gazebo), parameters=[{'robot_description': ParameterValue(
                 Command(['cat ', os.path.join(share, 'urdf', 'rc_car.urdf')]),
                 value_type=str)}]),
        Node(package='ros_gz_sim', executable='create', condition=IfCondition(gazebo),
             arguments=['-topic', 'robot_description', '-name', 'rc_car', '-z', '0.05']),
        Node(package='ros_gz_bridge', executable='parameter_bridge', condition=IfCondition(
            gazebo), arguments=[
                '/model/rc_car/pose@geometry_msgs/msg/PoseStamped[gz.msgs.Pose',
                '/model/rc_car/cmd_vel@geometry_msgs/msg/Twist]gz.msgs.Twist',
                '/clock@rosgraph_msgs/msg/Clock[gz.msgs.Clock'],
             remappings=[('/model/rc_car/pose', MOCAP_TOPIC),
                         ('/model/rc_car/cmd_vel', 'cmd_vel_gz')]),
    ]
