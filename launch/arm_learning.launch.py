"""
Learn an arm's dynamics on a robot: dynamics_learner [+ torque_predictor] on /joint_states.

    ros2 launch robot_dynamics_learning arm_learning.launch.py model:=hybrid \
        urdf:=/path/to/my_arm.urdf checkpoint_dir:=$HOME/.rdl/arm namespace:=arm1 predictor:=true

Arguments: model, urdf (the robot's URDF for hybrid / rigid_body: a path or a file in the
package's urdf/ folder), params_file (default config/learner.yaml), checkpoint_dir (default
~/.rdl/arm_checkpoints/<namespace or 'default'>/<model>: one folder per robot and model type,
resumed at the next start), namespace, use_sim_time, predictor (also start a prediction-only
node reading the learner's checkpoints).
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution, PythonExpression
from launch_ros.actions import Node
from robot_dynamics_learning.launch_common import shared_arguments, typed

PACKAGE = 'robot_dynamics_learning'


def generate_launch_description() -> LaunchDescription:
    """Declare the arguments and the learner (and optional predictor) nodes."""
    share = get_package_share_directory(PACKAGE)
    model = LaunchConfiguration('model')
    params_file = LaunchConfiguration('params_file')
    checkpoint_dir = LaunchConfiguration('checkpoint_dir')
    namespace = LaunchConfiguration('namespace')
    realtime_priority = typed('realtime_priority', int)
    use_sim_time = typed('use_sim_time', bool)
    return LaunchDescription([
        *shared_arguments(share, 'arm_learning', 'model', 'realtime_priority', 'namespace',
                          'use_sim_time'),
        DeclareLaunchArgument('urdf', default_value='panda.urdf',
                              description='robot URDF of the hybrid / rigid_body model (its '
                              'moving joints are the learned joints, in their order)'),
        DeclareLaunchArgument('params_file',
                              default_value=os.path.join(share, 'config', 'learner.yaml'),
                              description='YAML parameters of the learner and predictor'),
        DeclareLaunchArgument('checkpoint_dir', default_value=PathJoinSubstitution([
            os.path.join(os.path.expanduser('~'), '.rdl', 'arm_checkpoints'),
            PythonExpression(["'", namespace, "'.strip('/') or 'default'"]), model]),
            description='folder of checkpoints (resumed at start); default: one per '
            'namespace and model type'),
        DeclareLaunchArgument('predictor', default_value='false',
                              description='also start torque_predictor on the checkpoints'),
        Node(package=PACKAGE, executable='dynamics_learner', name='dynamics_learner',
             namespace=namespace, output='screen',
             parameters=[params_file, {'model': model, 'checkpoint_dir': checkpoint_dir,
                                       'urdf': LaunchConfiguration('urdf'),
                                       'use_sim_time': use_sim_time,
                                       'realtime_priority': realtime_priority}]),
        Node(package=PACKAGE, executable='torque_predictor', name='torque_predictor',
             namespace=namespace, output='screen',
             condition=IfCondition(LaunchConfiguration('predictor')),
             parameters=[params_file, {'checkpoint_dir': checkpoint_dir,
                                       'use_sim_time': use_sim_time,
                                       'realtime_priority': realtime_priority}]),
    ])
