"""
Every launch file and documented variant, run for real: colcon install + launch_testing.

Each case starts the installed launch file with launch_testing's runner (test/launch_case.py):
the nodes must come up, the expected topics flow, the parameters the nodes report are the
YAML's and the launch arguments' values, and launch's SIGINT ends every process with exit
code 0, no traceback and no orphan process. Skips with the reason where the launch
libraries or colcon are missing (see launch_support.py).
"""
import json
import os
from pathlib import Path
import shutil
import stat
import sys
from typing import Dict

import launch_support
from launch_support import ROOT
import numpy as np
import pytest
from replay_scores import assert_same_scores
import yaml

pytestmark = pytest.mark.skipif(launch_support.missing_reason() is not None,
                                reason=launch_support.missing_reason() or '')

LEARNER = yaml.safe_load((ROOT / 'config' / 'learner.yaml').read_text())[
    '/**/dynamics_learner']['ros__parameters']
CAR = yaml.safe_load((ROOT / 'config' / 'car.yaml').read_text())
ARM_SIM = {'executable': 'arm_sim', 'params_file': 'arm_sim.yaml'}


@pytest.fixture(scope='module')
def install(tmp_path_factory) -> Dict[str, str]:
    """Build the package with colcon in a temporary workspace; return the env that uses it."""
    return launch_support.build_install(tmp_path_factory.mktemp('colcon'))


@pytest.fixture
def home(tmp_path, install) -> Dict[str, str]:
    """Return the install's environment with HOME in a temporary folder (checkpoint dirs)."""
    return dict(install, HOME=str(tmp_path))


def _share(env: Dict[str, str], *parts: str) -> str:
    prefix = env['AMENT_PREFIX_PATH'].split(os.pathsep)[0]
    return str(Path(prefix, 'share', 'robot_dynamics_learning', *parts))


def _run(case: dict, env: Dict[str, str], cwd: Path) -> None:
    marker = launch_support.new_marker()
    result = launch_support.run_launch_test(case, env, cwd, marker)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert launch_support.leftover_processes(marker) == [], 'orphan processes'


def _learner_yaml(node: str, *names: str) -> list:
    return [[node, name, LEARNER[name]] for name in names]


@pytest.mark.parametrize('variant', ['hybrid', 'lstm'])
def test_arm_learning(variant, home, tmp_path):
    args = {} if variant == 'hybrid' else {'model': 'lstm'}
    checkpoints = str(tmp_path / '.rdl' / 'arm_checkpoints' / 'default' / variant)
    _run({'launch': 'arm_learning.launch.py', 'args': args, 'extra_nodes': [ARM_SIM],
          'nodes': ['/dynamics_learner', '/arm_sim'],
          'topics': [['/joint_states', 'sensor_msgs/msg/JointState', 100],
                     ['/dynamics_learner/predicted_torques', 'sensor_msgs/msg/JointState',
                      20]],
          'parameters': [['/dynamics_learner', 'model', variant],
                         ['/dynamics_learner', 'checkpoint_dir', checkpoints]]
          + _learner_yaml('/dynamics_learner', 'window', 'updates_per_sample', 'batch_size')},
         home, tmp_path)


def test_arm_learning_with_predictor_in_a_namespace(home, tmp_path):
    checkpoints = str(tmp_path / 'ckpt')
    _run({'launch': 'arm_learning.launch.py',
          'args': {'predictor': 'true', 'namespace': 'arm1', 'checkpoint_dir': checkpoints},
          'extra_nodes': [dict(ARM_SIM, namespace='arm1')],
          'nodes': ['/arm1/dynamics_learner', '/arm1/torque_predictor', '/arm1/arm_sim'],
          'topics': [['/arm1/joint_states', 'sensor_msgs/msg/JointState', 100],
                     ['/arm1/dynamics_learner/predicted_torques',
                      'sensor_msgs/msg/JointState', 20]],
          'parameters': [['/arm1/dynamics_learner', 'checkpoint_dir', checkpoints],
                         ['/arm1/torque_predictor', 'checkpoint_dir', checkpoints],
                         ['/arm1/dynamics_learner', 'model', 'hybrid']]
          + _learner_yaml('/arm1/dynamics_learner', 'recent_fraction', 'learning_rate')},
         home, tmp_path)


def test_arm_sim(home, tmp_path):
    _run({'launch': 'arm_sim.launch.py', 'args': {'payload_mass': '0.5'},
          'nodes': ['/dynamics_learner', '/arm_sim'],
          'topics': [['/joint_states', 'sensor_msgs/msg/JointState', 100],
                     ['/dynamics_learner/predicted_torques', 'sensor_msgs/msg/JointState',
                      20]],
          'parameters': [['/arm_sim', 'payload_mass', 0.5], ['/arm_sim', 'rate_hz', 1000.0],
                         ['/dynamics_learner', 'model', 'hybrid']]
          + _learner_yaml('/dynamics_learner', 'window')},
         home, tmp_path)


def _car_yaml(node: str, *names: str) -> list:
    block = CAR[f'/**/{node.lstrip("/")}']['ros__parameters']
    return [[node, name, block[name]] for name in names]


@pytest.mark.parametrize('learn', [False, True])
def test_car_sim(learn, home, tmp_path):
    nodes = ['/car_sim', '/car_state_estimator', '/car_mpc']
    runs = str(tmp_path / '.rdl' / 'runs' / 'car_sim-')
    parameters = ([['/car_mpc', 'track_file', _share(home, 'config', 'tracks', 'oval.yaml')],
                   ['/car_mpc', 'use_sim_time', False]]
                  + _car_yaml('/car_mpc', 'horizon', 'candidates', 'budget_s')
                  + _car_yaml('/car_state_estimator', 'window_s'))
    if learn:
        nodes.append('/car_model_learner')
        parameters += [['/car_model_learner', 'checkpoint_dir', {'startswith': runs}],
                       ['/car_mpc', 'checkpoint_dir', {'startswith': runs}],
                       ['/car_mpc', 'grip_weight', 20.0]]   # the grip bound on the estimate
    else:
        parameters += [['/car_mpc', 'checkpoint_dir', ''], ['/car_mpc', 'grip_weight', 0.0]]
    _run({'launch': 'car_sim.launch.py', 'args': {'learn': str(learn).lower()},
          'nodes': nodes,
          'topics': [['/vrpn_mocap/rc_car/pose', 'geometry_msgs/msg/PoseStamped', 50],
                     ['/car/twist', 'geometry_msgs/msg/TwistStamped', 20],
                     ['/command', 'geometry_msgs/msg/Twist', 10]],
          'parameters': parameters, 'same': [['/car_mpc', '/car_model_learner',
                                              'checkpoint_dir']] if learn else []},
         home, tmp_path)


def test_car_mpc(home, tmp_path):
    car_sim = {'executable': 'car_sim', 'params_file': 'car.yaml',
               'parameters': {'track_file': _share(home, 'config', 'tracks', 'oval.yaml')},
               'remappings': {'mocap_pose': '/vrpn_mocap/rc_car/pose', 'command': '/rc_car/cmd'}}
    _run({'launch': 'car_mpc.launch.py', 'extra_nodes': [car_sim],
          'nodes': ['/car_state_estimator', '/car_mpc'],
          'topics': [['/car/pose', 'geometry_msgs/msg/PoseStamped', 20],
                     ['/rc_car/cmd', 'geometry_msgs/msg/Twist', 10]],
          'parameters': [['/car_mpc', 'checkpoint', _share(home, 'config', 'models',
                                                           'car_mlp_sim.pt')],
                         ['/car_mpc', 'use_sim_time', False],
                         # the real car's estimator: quadratic fit, no delay (not car.yaml's)
                         ['/car_state_estimator', 'order', 2],
                         ['/car_state_estimator', 'window_s', 0.12],
                         ['/car_mpc', 'grip_weight', 0.0]]   # no learner: no grip bound
          + _car_yaml('/car_mpc', 'rate_hz', 'target_speed')},
         home, tmp_path)


def test_car_sim_gazebo_without_ros_gz_fails_at_launch_naming_what_is_missing(home, tmp_path):
    marker = launch_support.new_marker()
    result = launch_support.run_launch_file('car_sim.launch.py', {'gazebo': 'true'}, home,
                                            tmp_path, marker)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert 'gazebo:=true needs ros_gz_sim, ros_gz_bridge, robot_state_publisher' in output
    assert 'process started' not in output, 'nodes started although the launch cannot work'
    assert launch_support.leftover_processes(marker) == []


STANDINS = ROOT / 'test' / 'standins'


def _standin_ros_gz(prefix: Path) -> None:
    """Make an ament prefix with stand-ins for ros_gz_sim, ros_gz_bridge, robot_state_publisher."""
    index = prefix / 'share' / 'ament_index' / 'resource_index' / 'packages'
    index.mkdir(parents=True)
    for package in ('ros_gz_sim', 'ros_gz_bridge', 'robot_state_publisher'):
        (index / package).touch()
        (prefix / 'share' / package).mkdir(parents=True)
    (prefix / 'share' / 'ros_gz_sim' / 'launch').mkdir()
    shutil.copy(STANDINS / 'gz_sim.launch.py', prefix / 'share' / 'ros_gz_sim' / 'launch')
    executables = {('ros_gz_bridge', 'parameter_bridge'): 'parameter_bridge.py',
                   ('robot_state_publisher', 'robot_state_publisher'): 'idle_node.py',
                   ('ros_gz_sim', 'create'): None}
    for (package, name), source in executables.items():
        path = prefix / 'lib' / package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        body = (STANDINS / source).read_text() if source else 'print("stand-in: spawned")\n'
        path.write_text(f'#!{sys.executable}\n' + body)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_car_sim_gazebo_runs_every_car_node_on_sim_time_and_drives(home, tmp_path):
    """The defect: bridged sim-time stamps looked 1.8e9 s old and the MPC braked forever."""
    from robot_dynamics_learning.control.track import load_track_spec, Track
    start = Track(load_track_spec(ROOT / 'config' / 'tracks' / 'oval.yaml')).pose_at(0.0)
    prefix = tmp_path / 'standin'
    _standin_ros_gz(prefix)
    env = dict(home, RDL_STANDIN_START=','.join(str(float(v)) for v in start),
               AMENT_PREFIX_PATH=os.pathsep.join([home['AMENT_PREFIX_PATH'], str(prefix)]))
    _run({'launch': 'car_sim.launch.py', 'args': {'gazebo': 'true'},
          'nodes': ['/car_state_estimator', '/car_mpc', '/parameter_bridge'],
          'topics': [['/cmd_vel_gz', 'geometry_msgs/msg/Twist', 10]],
          'driving': '/cmd_vel_gz',
          'parameters': [['/car_mpc', 'use_sim_time', True],
                         ['/car_state_estimator', 'use_sim_time', True],
                         ['/car_mpc', 'publish_gz_cmd', True]]},
         env, tmp_path)


def test_arm_gazebo_on_mujoco(home, tmp_path):
    """simulator:=mujoco (default): the Gazebo graph on MuJoCo; learner, controller on /clock."""
    runs = str(tmp_path / '.rdl' / 'runs' / 'arm_gazebo-')
    _run({'launch': 'arm_gazebo.launch.py',
          'nodes': ['/mujoco_arm', '/dynamics_learner', '/arm_controller'],
          'topics': [['/joint_states', 'sensor_msgs/msg/JointState', 100],
                     ['/clock', 'rosgraph_msgs/msg/Clock', 100],
                     ['/effort_controller/commands', 'std_msgs/msg/Float64MultiArray', 100],
                     ['/dynamics_learner/predicted_torques', 'sensor_msgs/msg/JointState',
                      20]],
          'parameters': [['/mujoco_arm', 'publish_clock', True],
                         ['/mujoco_arm', 'use_sim_time', False],
                         ['/dynamics_learner', 'use_sim_time', True],
                         ['/arm_controller', 'use_sim_time', True],
                         ['/dynamics_learner', 'model', 'hybrid'],
                         ['/dynamics_learner', 'model_config.payload_forgetting', 0.9999],
                         ['/arm_controller', 'feedforward', 'learned'],
                         ['/arm_controller', 'command_topic', '/effort_controller/commands'],
                         ['/dynamics_learner', 'checkpoint_dir', {'startswith': runs}]],
          'same': [['/dynamics_learner', '/arm_controller', 'checkpoint_dir']]},
         home, tmp_path)


def test_arm_gazebo_without_ros_gz_fails_at_launch_naming_what_is_missing(home, tmp_path):
    marker = launch_support.new_marker()
    result = launch_support.run_launch_file('arm_gazebo.launch.py', {'simulator': 'gazebo'},
                                            home, tmp_path, marker)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert 'simulator:=gazebo needs ros_gz_sim' in output and 'gz_ros2_control' in output
    assert 'process started' not in output, 'nodes started although the launch cannot work'
    assert launch_support.leftover_processes(marker) == []


def test_bag_replay_writes_the_report_and_ends_by_itself(home, tmp_path):
    """The ROS route of `rdl replay`: player -> learner -> evaluator, then the launch exits."""
    from robot_dynamics_learning.data import bag_io
    from robot_dynamics_learning.learning import replay, report
    trajectory = bag_io.load_dataset('kinova', 'RunTrajectory1.csv')[0].segment(0, 1500)
    bag = tmp_path / 'kinova'
    bag_io.write_joint_trajectories(bag, [trajectory], 'mcap')
    out = tmp_path / 'report'
    marker = launch_support.new_marker()
    result = launch_support.run_launch_file(
        'bag_replay.launch.py', {'bag': str(bag), 'models': 'lstm', 'out': str(out)}, home,
        tmp_path, marker, timeout=180.0)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert 'Traceback' not in output, output[-6000:]
    assert launch_support.leftover_processes(marker) == []
    metrics = json.loads((out / 'metrics.json').read_text())
    assert (out / 'report.md').is_file() and metrics['samples'] == 1500
    offline = report.compute_metrics(replay.replay(
        replay.read_joint_stream(bag), ['lstm'], None, replay.load_learner_params(),
        replay.Holdout('none')))
    # Both routes run the same learner code in lockstep: the same scores, baseline included.
    np.testing.assert_allclose(metrics['models']['previous_torque']['prequential']['nmse'],
                               offline['models']['previous_torque']['prequential']['nmse'],
                               rtol=1e-9)
    live = metrics['models']['learner_lstm']
    assert live['prequential']['samples'] == offline['models']['lstm']['prequential']['samples']
    assert_same_scores(live, offline['models']['lstm'])
