"""Car launch files and configs: everything they name exists and is installed."""
from glob import glob
import importlib
from pathlib import Path
import re

from launch_checks import declared_parameters, installed, keywords, ROOT, setup_nodes
import pytest
from robot_dynamics_learning.control.track import load_track_spec, Track
import yaml

LAUNCH_FILES = ['launch/car_sim.launch.py', 'launch/car_mpc.launch.py']
CAR_NODES = ['car_sim', 'car_state_estimator', 'car_model_learner', 'car_mpc']


@pytest.mark.parametrize('launch_file', LAUNCH_FILES)
def test_launch_file_names_only_installed_things(launch_file):
    executables = set(keywords(launch_file, 'executable'))
    ours = executables & set(CAR_NODES)
    assert ours, 'no car executables found'
    for executable in ours:
        assert executable in setup_nodes(), f'{executable} is not a console script'
        module = importlib.import_module(f'robot_dynamics_learning.nodes.{executable}')
        assert callable(module.main)
    assert executables - ours <= {'robot_state_publisher', 'create', 'parameter_bridge'}
    text = (ROOT / launch_file).read_text()
    for folder, pattern in (('config', r"'config', '([\w-]+\.yaml)'"),
                            ('config/tracks', r"'tracks', '([\w-]+\.yaml)'"),
                            ('config/models', r"'models', '([\w-]+\.pt)'"),
                            ('worlds', r"'worlds',\s*'([\w-]+\.sdf)'"),
                            ('urdf', r"'urdf', '([\w-]+\.urdf)'")):
        for name in re.findall(pattern, text):
            assert (ROOT / folder / name).exists(), f'{folder}/{name} does not exist'
            assert name in installed(folder), f'{folder}/{name} is not installed by setup.py'
    assert Path(launch_file).name in installed('launch')


def test_car_config_sets_only_declared_parameters():
    data = yaml.safe_load((ROOT / 'config' / 'car.yaml').read_text())
    assert {key.split('/')[-1] for key in data} == set(CAR_NODES)
    for key, block in data.items():
        node = key.split('/')[-1]
        for name in block['ros__parameters']:
            assert name in declared_parameters(node), f'{node} does not declare {name}'


@pytest.mark.parametrize('track', sorted(glob(str(ROOT / 'config' / 'tracks' / '*.yaml'))))
def test_tracks_load_and_areinstalled(track):
    loaded = Track(load_track_spec(Path(track)))
    assert loaded.length > 5.0
    assert Path(track).name in installed('config/tracks')


def test_car_node_modules_have_main():
    for node in CAR_NODES:
        text = (ROOT / 'robot_dynamics_learning' / 'nodes' / f'{node}.py').read_text()
        assert 'spin_node(' in text and "if __name__ == '__main__':" in text
