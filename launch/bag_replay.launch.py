"""
Evaluate learners on a recorded bag, the ROS way: bag_player -> learner(s) -> replay_evaluator.

    ros2 launch robot_dynamics_learning bag_replay.launch.py bag:=/path/to/bag \
        models:=lstm,ac_rkn_inverse out:=replay_report

bag_player publishes the bag with /clock; one dynamics_learner per model (named
learner_<model>, on sim time, no checkpoints, `lockstep`: each sample predicted, then the
updates_per_sample budget trained in the callback, on a reliable keep-all subscription, as
`rdl replay` does) learns predict-then-train; the replay_evaluator records measured torques
and predictions and, when the player signals the end of the bag, writes the same report as
`rdl replay --holdout none` (the same scores for a seed) and exits, which ends the launch.

Arguments: bag, models (comma-separated: lstm, ac_rkn_inverse, ffnn, hybrid, rigid_body),
urdf (hybrid / rigid_body, and the rigid-body baseline), learner_params (default
config/learner.yaml), rate (playback speed), out (report folder).
"""
from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import (DeclareLaunchArgument, EmitEvent, OpaqueFunction,
                            RegisterEventHandler)
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from robot_dynamics_learning.launch_common import shared_arguments

PACKAGE = 'robot_dynamics_learning'


def _nodes(context) -> list:
    """Player, one learner per model, evaluator; the launch ends with the evaluator."""
    value = lambda name: LaunchConfiguration(name).perform(context)  # noqa: E731
    models = [m.strip() for m in value('models').split(',') if m.strip()]
    learners = [f'learner_{model}' for model in models]
    params_file = value('learner_params')
    player = Node(package=PACKAGE, executable='bag_player', name='bag_player', output='screen',
                  parameters=[{'bag': value('bag'), 'rate': float(value('rate')),
                               'publish_clock': True, 'topics': [value('topic')],
                               'wait_for_subscribers': 1 + len(models)}],
                  remappings=[(value('topic'), '/joint_states')])
    learner_nodes = [
        Node(package=PACKAGE, executable='dynamics_learner', name=name, output='screen',
             parameters=[params_file, {'model': model, 'checkpoint_dir': '',
                                       'urdf': value('urdf'), 'use_sim_time': True,
                                       # every message, trained as `rdl replay` trains
                                       'lockstep': True}])
        for model, name in zip(models, learners)]
    evaluator = Node(package=PACKAGE, executable='replay_evaluator', name='replay_evaluator',
                     output='screen',
                     parameters=[{'out': value('out'), 'learners': [f'/{n}' for n in learners],
                                  'urdf': value('urdf'), 'params_file': params_file,
                                  'use_sim_time': True}])
    return [player, *learner_nodes, evaluator, RegisterEventHandler(OnProcessExit(
        target_action=evaluator, on_exit=[EmitEvent(event=Shutdown(reason='report written'))]))]


def generate_launch_description() -> LaunchDescription:
    """Declare the arguments; the nodes depend on `models`."""
    share = get_package_share_directory(PACKAGE)
    return LaunchDescription([
        DeclareLaunchArgument('bag', description='rosbag2 folder (sqlite3 or MCAP)'),
        DeclareLaunchArgument('topic', default_value='/joint_states',
                              description='JointState topic of the bag (with effort)'),
        DeclareLaunchArgument('models', default_value='lstm',
                              description='comma-separated: lstm, ac_rkn_inverse, ffnn, '
                              'hybrid, rigid_body'),
        DeclareLaunchArgument('urdf', default_value='',
                              description='robot URDF (hybrid, rigid_body, rigid-body baseline)'),
        *shared_arguments(share, 'bag_replay', 'learner_params'),
        DeclareLaunchArgument('rate', default_value='1.0', description='playback speed'),
        DeclareLaunchArgument('out', default_value='replay_report', description='report folder'),
        OpaqueFunction(function=_nodes),
    ])
