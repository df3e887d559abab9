"""
The RC car with motion capture: car_state_estimator -> car_mpc (-> car_model_learner).

    ros2 launch robot_dynamics_learning car_mpc.launch.py mocap_topic:=/vrpn_mocap/car/pose \
        command_topic:=/car/cmd checkpoint:=/path/to/car_mlp_dart.pt
    ros2 launch robot_dynamics_learning car_mpc.launch.py learn:=true  # keep learning

learn:=true also switches car_mpc's grip bound on (grip_weight launch_common.LEARN_GRIP_WEIGHT
on the learner's car/grip estimate, with the grip speed profile: docs/car.md); without it 0.

Arguments: mocap_topic (PoseStamped of the car's rigid body), command_topic (Twist out:
linear.x throttle, angular.z steering, see docs/car.md), params, track, checkpoint, learn,
checkpoint_dir (where car_model_learner writes and car_mpc reloads models; default a new
folder per run under ~/.rdl/runs, so the MPC never reloads a model another car left),
use_sim_time (true when replaying a bag with --clock), estimator_order and
estimator_window_s (default 2 and 0.12 s: no delay and the lowest errors on replayed Vicon
recordings, docs/results_car.md section 8; config/car.yaml's straight line suits car_sim's
noisier emulated mocap).
On a real car set throttle_min to the ESC's lowest allowed throttle in the params file
(0.0 for the DART car).
"""
from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PythonExpression
from launch_ros.actions import Node
from robot_dynamics_learning.launch_common import grip_weight_for, shared_arguments, typed

PACKAGE = 'robot_dynamics_learning'


def generate_launch_description() -> LaunchDescription:
    """Declare the arguments, the estimator, the MPC and the optional learner."""
    share = get_package_share_directory(PACKAGE)
    params = LaunchConfiguration('params')
    learn = LaunchConfiguration('learn')
    checkpoint_dir = LaunchConfiguration('checkpoint_dir')
    use_sim_time = typed('use_sim_time', bool)
    return LaunchDescription([
        DeclareLaunchArgument('mocap_topic', default_value='/vrpn_mocap/rc_car/pose',
                              description='PoseStamped of the car from the mocap system'),
        DeclareLaunchArgument('command_topic', default_value='/rc_car/cmd',
                              description='Twist command topic of the car driver'),
        *shared_arguments(share, 'car_mpc', 'car_params', 'track', 'checkpoint', 'learn',
                          'run_checkpoint_dir', 'use_sim_time'),
        DeclareLaunchArgument('estimator_order', default_value='2',
                              description='causal fit order of car_state_estimator: 2 (no '
                              'delay, suits a Vicon-class mocap) or 1 (straight line, least '
                              'noise, about window/2 delay)'),
        DeclareLaunchArgument('estimator_window_s', default_value='0.12',
                              description='causal fit window of car_state_estimator (s)'),
        Node(package=PACKAGE, executable='car_state_estimator', name='car_state_estimator',
             output='screen', parameters=[params, {
                 'use_sim_time': use_sim_time,
                 'order': typed('estimator_order', int),
                 'window_s': typed('estimator_window_s', float)}],
             remappings=[('mocap_pose', LaunchConfiguration('mocap_topic'))]),
        Node(package=PACKAGE, executable='car_mpc', name='car_mpc', output='screen',
             parameters=[params, {
                 'track_file': LaunchConfiguration('track'),
                 'checkpoint': LaunchConfiguration('checkpoint'),
                 'checkpoint_dir': PythonExpression(["'", checkpoint_dir, "' if '", learn,
                                                     "' == 'true' else ''"]),
                 'grip_weight': grip_weight_for(learn),
                 'use_sim_time': use_sim_time}],
             remappings=[('command', LaunchConfiguration('command_topic'))]),
        Node(package=PACKAGE, executable='car_model_learner', name='car_model_learner',
             output='screen', condition=IfCondition(learn),
             parameters=[params, {'checkpoint': LaunchConfiguration('checkpoint'),
                                  'checkpoint_dir': checkpoint_dir,
                                  'use_sim_time': use_sim_time}],
             remappings=[('command', LaunchConfiguration('command_topic'))]),
    ])
