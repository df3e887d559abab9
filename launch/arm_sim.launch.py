"""
Simulated arm plus online learner: arm_sim publishes /joint_states, dynamics_learner learns.

    ros2 launch robot_dynamics_learning arm_sim.launch.py model:=hybrid payload_mass:=0.0
    ros2 param set /arm_sim payload_mass 2.0      # change the payload while it learns

Arguments: model, payload_mass, trajectory, learner_params, sim_params, checkpoint_dir
('' = no checkpoints), namespace.
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from robot_dynamics_learning.launch_common import shared_arguments, typed

PACKAGE = 'robot_dynamics_learning'


def generate_launch_description() -> LaunchDescription:
    """Declare the arguments, the simulator and the learner."""
    share = get_package_share_directory(PACKAGE)
    namespace = LaunchConfiguration('namespace')
    realtime_priority = typed('realtime_priority', int)
    return LaunchDescription([
        *shared_arguments(share, 'arm_sim', 'model', 'payload_mass', 'trajectory'),
        DeclareLaunchArgument('sim_params',
                              default_value=os.path.join(share, 'config', 'arm_sim.yaml'),
                              description='YAML parameters of arm_sim'),
        *shared_arguments(share, 'arm_sim', 'learner_params', 'realtime_priority',
                          'namespace'),
        DeclareLaunchArgument('checkpoint_dir', default_value='',
                              description="checkpoint folder ('' = none)"),
        Node(package=PACKAGE, executable='arm_sim', name='arm_sim', namespace=namespace,
             output='screen',
             parameters=[LaunchConfiguration('sim_params'), {
                 'payload_mass': typed('payload_mass', float),
                 'trajectory': LaunchConfiguration('trajectory'),
                 'realtime_priority': realtime_priority}]),
        Node(package=PACKAGE, executable='dynamics_learner', name='dynamics_learner',
             namespace=namespace, output='screen',
             parameters=[LaunchConfiguration('learner_params'), {
                 'model': LaunchConfiguration('model'),
                 'checkpoint_dir': LaunchConfiguration('checkpoint_dir'),
                 'realtime_priority': realtime_priority}]),
    ])
