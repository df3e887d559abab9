"""
Gazebo and launch files of the arm, checked without Gazebo.

libsdformat 12 (Debian's libsdformat-dev; Harmonic reads the same SDF 1.9) parses every world
and converts every URDF, through a small C++ checker compiled at test time (skipped with the
reason where the library or a compiler is missing). Plugin file names and class names, the
/clock bridge's topic and type pair, the controllers YAML and the <ros2_control> interfaces
are checked against the URDF and against what the nodes expect. What needs a machine with
Gazebo (gz sim loading the plugins, the controllers moving the arm) is listed in
docs/simulation.md.
"""
import ast
from glob import glob
from pathlib import Path
import re
import shutil
import subprocess
from typing import Dict
import xml.etree.ElementTree as ElementTree

from launch_checks import installed, keywords, ROOT, setup_nodes
import pytest
from robot_dynamics_learning.control.arm_controller_params import ArmControllerNodeConfig
from robot_dynamics_learning.dynamics import load_urdf
from robot_dynamics_learning.learning.learner_params import DynamicsLearnerConfig
from robot_dynamics_learning.sim.mujoco_arm import MujocoArmConfig
from robot_dynamics_learning.sim.mujoco_arm_params import MujocoArmNodeConfig
import yaml

LAUNCH = 'launch/arm_gazebo.launch.py'
GAZEBO_URDF = ROOT / 'urdf' / 'panda_gazebo.urdf'
CONTROLLERS_YAML = ROOT / 'config' / 'arm_controllers.yaml'
# ros_gz_bridge type pairs we use (ros_gz_bridge README, Jazzy / Harmonic).
BRIDGE_PAIRS = {'rosgraph_msgs/msg/Clock': 'gz.msgs.Clock',
                'geometry_msgs/msg/PoseStamped': 'gz.msgs.Pose',
                'geometry_msgs/msg/Twist': 'gz.msgs.Twist',
                'sensor_msgs/msg/JointState': 'gz.msgs.Model'}
CHECKER = r"""
#include <iostream>
#include <sdf/sdf.hh>
int main(int argc, char **argv) {
  sdf::Root root;
  sdf::Errors errors = root.Load(argv[1]);
  for (const auto &error : errors) std::cerr << error << std::endl;
  if (!errors.empty()) return 1;
  std::cout << root.Element()->ToString("") << std::endl;
  return 0;
}
"""


def launch_constants() -> Dict[str, object]:
    """Return the module-level constants of the launch file (launch itself not needed)."""
    tree = ast.parse((ROOT / LAUNCH).read_text())
    return {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, (ast.Constant, ast.Tuple))}


@pytest.fixture(scope='module')
def sdf_checker(tmp_path_factory) -> Path:
    """Compile the libsdformat 12 checker once; skip where it cannot be built."""
    compiler, pkg_config = shutil.which('g++'), shutil.which('pkg-config')
    if compiler is None or pkg_config is None:
        pytest.skip('needs g++ and pkg-config to build the libsdformat checker')
    flags = subprocess.run([pkg_config, '--cflags', '--libs', 'sdformat12'],
                           capture_output=True, text=True)
    if flags.returncode:
        pytest.skip('libsdformat 12 not installed (apt-get install -y libsdformat-dev)')
    folder = tmp_path_factory.mktemp('sdf_checker')
    (folder / 'check.cc').write_text(CHECKER)
    binary = folder / 'check_sdf'
    build = subprocess.run([compiler, '-std=c++17', '-O0', str(folder / 'check.cc'), '-o',
                            str(binary)] + flags.stdout.split(), capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    return binary


def load_sdf(checker: Path, path: Path) -> ElementTree.Element:
    """Parse (and for URDF convert) with libsdformat; return the resulting SDF."""
    result = subprocess.run([str(checker), str(path)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, f'{path.name}: {result.stderr}'
    return ElementTree.fromstring(result.stdout)


@pytest.mark.parametrize('world', sorted(glob(str(ROOT / 'worlds' / '*.sdf'))))
def test_worlds_parse_with_libsdformat_and_name_real_systems(sdf_checker, world):
    assert float(ElementTree.parse(world).getroot().get('version')) <= 1.9
    sdf = load_sdf(sdf_checker, Path(world))
    plugins = sdf.findall('./world/plugin')
    assert plugins, 'a world without the Physics system does not simulate'
    for plugin in plugins:
        # gz-sim-<kebab>-system implements gz::sim::systems::<Camel>
        stem = re.fullmatch(r'gz-sim-([a-z-]+)-system', plugin.get('filename'))
        assert stem, plugin.get('filename')
        camel = ''.join(part.capitalize() for part in stem.group(1).split('-'))
        assert plugin.get('name') == f'gz::sim::systems::{camel}'
    assert Path(world).name in installed('worlds')


# Unit-test fixtures, never simulated: libsdformat refuses them, with the reason.
NOT_SIMULATED = {'planar_2link.urdf': 'A model must have at least one link'}


@pytest.mark.parametrize('urdf', sorted(glob(str(ROOT / 'urdf' / '*.urdf'))))
def test_urdfs_convert_to_sdf_with_their_joints(sdf_checker, urdf):
    if Path(urdf).name in NOT_SIMULATED:
        result = subprocess.run([str(sdf_checker), urdf], capture_output=True, text=True)
        assert NOT_SIMULATED[Path(urdf).name] in result.stderr
        return
    sdf = load_sdf(sdf_checker, Path(urdf))
    joints = {j.get('name'): j.get('type') for j in sdf.findall('./model/joint')}
    moving = list(load_urdf(Path(urdf)).joint_names)
    assert set(moving) <= set(joints), f'joints lost in the conversion: {joints}'


def test_gazebo_urdf_converts_with_the_gz_ros2_control_plugin(sdf_checker):
    sdf = load_sdf(sdf_checker, GAZEBO_URDF)
    plugins = sdf.findall('./model/plugin')
    assert [(p.get('filename'), p.get('name')) for p in plugins] == [
        ('gz_ros2_control-system', 'gz_ros2_control::GazeboSimROS2ControlPlugin')]
    assert plugins[0].findtext('parameters') == launch_constants()['CONTROLLERS_PLACEHOLDER']
    fixed = [j for j in sdf.findall('./model/joint') if j.findtext('parent') == 'world']
    assert len(fixed) == 1 and fixed[0].get('type') == 'fixed'


def _robot_elements(path: Path) -> Dict[str, str]:
    """Return link and joint elements of a URDF by name, without <dynamics>, as text."""
    out = {}
    for element in ElementTree.parse(path).getroot():
        if element.tag in ('link', 'joint') and element.get('name') not in (
                'world', 'panda_world_joint'):
            for dynamics in element.findall('dynamics'):
                element.remove(dynamics)
            for part in element.iter():   # indentation is not content
                part.text = (part.text or '').strip()
                part.tail = ''
            out[f'{element.tag}:{element.get("name")}'] = ElementTree.tostring(element).strip()
    return out


def test_gazebo_urdf_is_panda_urdf_plus_the_mujoco_worlds_friction_and_damping():
    assert _robot_elements(GAZEBO_URDF) == _robot_elements(ROOT / 'urdf' / 'panda.urdf')
    world = MujocoArmConfig()
    joints = load_urdf(GAZEBO_URDF).joint_names
    root = ElementTree.parse(GAZEBO_URDF).getroot()
    for k, name in enumerate(joints):
        dynamics = root.find(f"joint[@name='{name}']/dynamics")
        assert float(dynamics.get('damping')) == world.damping[k]
        assert float(dynamics.get('friction')) == world.friction[k]


def test_ros2_control_interfaces_match_the_urdf_and_the_controllers():
    robot = load_urdf(GAZEBO_URDF)
    root = ElementTree.parse(GAZEBO_URDF).getroot()
    (system,) = root.findall('ros2_control')
    assert system.findtext('hardware/plugin') == 'gz_ros2_control/GazeboSimSystem'
    joints = system.findall('joint')
    assert [j.get('name') for j in joints] == list(robot.joint_names)
    for joint, limit in zip(joints, robot.joint_limits.effort.tolist()):
        (command,) = joint.findall('command_interface')
        assert command.get('name') == 'effort'
        bounds = {p.get('name'): float(p.text) for p in command.findall('param')}
        assert bounds == {'min': -limit, 'max': limit}
        assert [s.get('name') for s in joint.findall('state_interface')] == [
            'position', 'velocity', 'effort']
    controllers = yaml.safe_load(CONTROLLERS_YAML.read_text())
    manager = controllers['controller_manager']['ros__parameters']
    assert manager['update_rate'] == 1000
    assert manager['joint_state_broadcaster']['type'] == \
        'joint_state_broadcaster/JointStateBroadcaster'
    assert manager['effort_controller']['type'] == \
        'effort_controllers/JointGroupEffortController'
    assert controllers['effort_controller']['ros__parameters']['joints'] == \
        list(robot.joint_names)
    constants = launch_constants()
    assert set(constants['CONTROLLERS']) == {k for k in manager if k != 'update_rate'}
    # Every controller type's package is among those the launch checks for.
    assert {manager[name]['type'].split('/')[0] for name in constants['CONTROLLERS']} <= \
        set(constants['GAZEBO_PACKAGES'])


def test_command_topic_is_the_effort_controllers():
    """The JointGroupEffortController named effort_controller listens on its /commands."""
    params = yaml.safe_load((ROOT / 'config' / 'arm_control.yaml').read_text())
    for block in params.values():
        assert block['ros__parameters']['command_topic'] == '/effort_controller/commands'
    for config in (MujocoArmNodeConfig, ArmControllerNodeConfig, DynamicsLearnerConfig):
        assert config.command_topic == '/effort_controller/commands'


def test_clock_bridge_is_a_known_type_pair_in_the_right_direction():
    bridge = launch_constants()['CLOCK_BRIDGE']
    topic, ros_type, direction, gz_type = re.fullmatch(
        r'(/[\w/]+)@([\w/]+)([\[\]@])([\w.]+)', bridge).groups()
    assert topic == '/clock' and direction == '['   # '[': from Gazebo to ROS
    assert BRIDGE_PAIRS[ros_type] == gz_type


def test_launch_file_names_only_installed_things():
    constants = launch_constants()
    ours = set(keywords(LAUNCH, 'executable')) & set(setup_nodes())
    assert ours == {'mujoco_arm', 'dynamics_learner', 'arm_controller'}
    assert set(keywords(LAUNCH, 'executable')) - ours == {
        'robot_state_publisher', 'create', 'parameter_bridge', 'spawner'}
    external = set(keywords(LAUNCH, 'package')) - {'robot_dynamics_learning'}
    assert external <= set(constants['GAZEBO_PACKAGES'])
    text = (ROOT / LAUNCH).read_text()
    for folder, name in re.findall(r"'(config|urdf|worlds)', '([\w-]+\.\w+)'", text):
        assert (ROOT / folder / name).exists(), f'{folder}/{name} does not exist'
        assert name in installed(folder), f'{folder}/{name} is not installed by setup.py'
    assert Path(LAUNCH).name in installed('launch')
    assert 'panda_gazebo.urdf' in installed('urdf') and 'arm.sdf' in installed('worlds')
    assert constants['CONTROLLERS_PLACEHOLDER'] in GAZEBO_URDF.read_text()


def test_arm_control_config_has_a_block_for_each_simulated_arm_node():
    """Which names each block may set: test_node_configs.py (declared from the classes)."""
    data = yaml.safe_load((ROOT / 'config' / 'arm_control.yaml').read_text())
    assert {key.split('/')[-1] for key in data} == {'mujoco_arm', 'arm_controller'}
