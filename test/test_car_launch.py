"""Car launch files and configs: everything they name exists and is installed."""
import ast
from glob import glob
import importlib
import importlib.util
from pathlib import Path
import re

import pytest
from robot_dynamics_learning.control.track import load_track_spec, Track
import yaml

ROOT = Path(__file__).resolve().parents[1]
LAUNCH_FILES = ['launch/car_sim.launch.py', 'launch/car_mpc.launch.py']
CAR_NODES = ['car_sim', 'car_state_estimator', 'car_model_learner', 'car_mpc']


def _setup_data_files():
    """(install folder, [source files]) pairs of setup.py, globs expanded as setup.py does."""
    tree = ast.parse((ROOT / 'setup.py').read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == 'data_files':
            source = ast.get_source_segment((ROOT / 'setup.py').read_text(), node.value)
            source = source.replace('{PACKAGE}', 'robot_dynamics_learning')
            source = re.sub(r"\bf'", "'", source)  # f-strings: only {PACKAGE} is used
            return eval(source, {'glob': lambda p: glob(str(ROOT / p))})  # noqa: S307
    raise AssertionError('setup.py has no data_files')


def _installed(folder):
    return {Path(p).name for target, files in _setup_data_files()
            if target == f'share/robot_dynamics_learning/{folder}' for p in files}


def _setup_nodes():
    tree = ast.parse((ROOT / 'setup.py').read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], 'id', '') == 'NODES':
            return [element.value for element in node.value.elts]
    raise AssertionError('setup.py has no NODES list')


def _keywords(path, keyword):
    tree = ast.parse((ROOT / path).read_text())
    return [kw.value.value for node in ast.walk(tree) if isinstance(node, ast.Call)
            for kw in node.keywords if kw.arg == keyword and isinstance(kw.value, ast.Constant)]


@pytest.mark.parametrize('launch_file', LAUNCH_FILES)
def test_launch_file_names_only_installed_things(launch_file):
    executables = set(_keywords(launch_file, 'executable'))
    ours = executables & set(CAR_NODES)
    assert ours, 'no car executables found'
    for executable in ours:
        assert executable in _setup_nodes(), f'{executable} is not a console script'
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
            assert name in _installed(folder), f'{folder}/{name} is not installed by setup.py'
    assert Path(launch_file).name in _installed('launch')


def test_car_config_sets_only_declared_parameters():
    data = yaml.safe_load((ROOT / 'config' / 'car.yaml').read_text())
    assert {key.split('/')[-1] for key in data} == set(CAR_NODES)
    for key, block in data.items():
        node = key.split('/')[-1]
        source = (ROOT / 'robot_dynamics_learning' / 'nodes' / f'{node}.py').read_text()
        for name in block['ros__parameters']:
            assert f"declare('{name}'" in source, f'{node} does not declare {name}'


@pytest.mark.parametrize('track', sorted(glob(str(ROOT / 'config' / 'tracks' / '*.yaml'))))
def test_tracks_load_and_are_installed(track):
    loaded = Track(load_track_spec(Path(track)))
    assert loaded.length > 5.0
    assert Path(track).name in _installed('config/tracks')


def test_car_node_modules_have_main():
    for node in CAR_NODES:
        text = (ROOT / 'robot_dynamics_learning' / 'nodes' / f'{node}.py').read_text()
        assert 'spin_node(' in text and "if __name__ == '__main__':" in text


@pytest.mark.parametrize('launch_file', LAUNCH_FILES)
def test_launch_description_loads(launch_file):
    pytest.importorskip('launch')
    pytest.importorskip('launch_ros')
    spec = importlib.util.spec_from_file_location('car_launch_under_test', ROOT / launch_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    description = module.generate_launch_description()
    assert len(description.entities) >= 3
