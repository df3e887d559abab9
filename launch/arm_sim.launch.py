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
from launch_ros.parameter_descriptions import ParameterValue

PACKAGE = 'robot_dynamics_learning'


def generate_launch_description() -> LaunchDescription:
    """Declare the arguments, the simulator and the learner."""
    share = get_package_share_directory(PACKAGE)
    namespace = LaunchConfiguration('namespace')
    realtime_priority = ParameterValue(LaunchConfiguration('realtime_priority'), value_type=int)
    return LaunchDescription([
        DeclareLaunchArgument('model', default_value='hybrid',
                              description='lstm | ac_rkn_inverse | hybrid | rigid_body | ffnn'),
        DeclareLaunchArgument('payload_mass', default_value='0.0',
                              description='initial payload at the flange (kg)'),
        DeclareLaunchArgument('trajectory', default_value='excitation',
                              description='excitation | reaching | mixed'),
        DeclareLaunchArgument('sim_params',
                              default_value=os.path.join(share, 'config', 'arm_sim.yaml'),
                              description='YAML parameters of arm_sim'),
        DeclareLaunchArgument('learner_params',
                              default_value=os.path.join(share, 'config', 'learner.yaml'),
                              description='YAML parameters of dynamics_learner'),
        DeclareLaunchArgument('checkpoint_dir', default_value='',
                              description="checkpoint folder ('' = none)"),
        DeclareLaunchArgument('realtime_priority', default_value='0',
                              description='SCHED_FIFO priority (1-99) of all node threads; '
                              '0: normal scheduling (needs CAP_SYS_NICE or an rtprio limit)'),
        DeclareLaunchArgument('namespace', default_value='', description='node namespace'),
        Node(package=PACKAGE, executable='arm_sim', name='arm_sim', namespace=namespace,
             output='screen',
             parameters=[LaunchConfiguration('sim_params'), {
                 'payload_mass': ParameterValue(LaunchConfiguration('payload_mass'),
                                                value_type=float),
                 'trajectory': LaunchConfiguration('trajectory'),
                 'realtime_priority': realtime_priority}]),
        Node(package=PACKAGE, executable='dynamics_learner', name='dynamics_learner',
             namespace=namespace, output='screen',
             parameters=[LaunchConfiguration('learner_params'), {
                 'model': LaunchConfiguration('model'),
                 'checkpoint_dir': LaunchConfiguration('checkpoint_dir'),
                 'realtime_priority': realtime_priority}]),
    ])
