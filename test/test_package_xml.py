"""package.xml is valid format 3 and declares what the code imports."""
from pathlib import Path

from catkin_pkg.package import parse_package
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.linter
def test_package_xml_is_valid():
    package = parse_package(str(ROOT / 'package.xml'))
    package.validate()
    assert package.package_format == 3
    assert package.name == 'robot_dynamics_learning'
    assert [e.content for e in package.exports if e.tagname == 'build_type'] == ['ament_python']
    exec_depends = {d.name for d in package.exec_depends}
    for needed in ('rclpy', 'std_msgs', 'sensor_msgs', 'geometry_msgs', 'lifecycle_msgs',
                   'launch', 'launch_ros',
                   'python3-numpy', 'python3-scipy', 'python3-yaml'):
        assert needed in exec_depends, needed
    assert {'ament_flake8', 'ament_pep257', 'python3-pytest'} <= {
        d.name for d in package.test_depends}


def test_setup_installs_ros_package_files():
    setup_py = (ROOT / 'setup.py').read_text()
    for needed in ("'share/ament_index/resource_index/packages'", "['package.xml']",
                   "glob('launch/*launch.[pxy][yma]*')", "glob('config/*.yaml')",
                   "'rdl = {PACKAGE}.cli:main'"):
        assert needed in setup_py, needed
    assert (ROOT / 'resource' / 'robot_dynamics_learning').is_file()
    setup_cfg = (ROOT / 'setup.cfg').read_text()
    assert 'install_scripts=$base/lib/robot_dynamics_learning' in setup_cfg
