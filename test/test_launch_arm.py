"""Arm launch files: everything they name exists and is installed; they load where launch is."""
import ast
from glob import glob
import importlib
import importlib.util
from pathlib import Path
import re

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
LAUNCH_FILES = ['launch/arm_learning.launch.py', 'launch/arm_sim.launch.py']


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


def _installed(pattern, folder):
    """Files setup.py installs into share/<pkg>/<folder> (same globs as setup.py)."""
    return {Path(p).name for p in glob(str(ROOT / folder / pattern))}


@pytest.mark.parametrize('launch_file', LAUNCH_FILES)
def test_launch_file_names_only_installed_executables_and_configs(launch_file):
    executables = _keywords(launch_file, 'executable')
    assert executables, 'no executables found'
    nodes = _setup_nodes()
    for executable in executables:
        assert executable in nodes, f'{executable} is not a console script in setup.py'
        module = importlib.import_module(f'robot_dynamics_learning.nodes.{executable}')
        assert callable(module.main)
    text = (ROOT / launch_file).read_text()
    configs = set(re.findall(r"'([\w-]+\.yaml)'", text))
    assert configs, 'no config files found'
    installed = _installed('*.yaml', 'config')
    for config in configs:
        assert config in installed, f'{config} is not installed by setup.py'
    assert Path(launch_file).name in _installed('*launch.[pxy][yma]*', 'launch')


@pytest.mark.parametrize('config', ['config/learner.yaml', 'config/arm_sim.yaml'])
def test_config_files_parse_and_only_set_declared_parameters(config):
    data = yaml.safe_load((ROOT / config).read_text())
    sources = {'dynamics_learner': 'dynamics_learner.py', 'torque_predictor':
               'torque_predictor.py', 'arm_sim': 'arm_sim.py'}
    for key, block in data.items():
        node = key.split('/')[-1]
        source = (ROOT / 'robot_dynamics_learning' / 'nodes' / sources[node]).read_text()
        for name in block['ros__parameters']:
            assert f"declare('{name}'" in source, f'{config}: {node} does not declare {name}'


@pytest.mark.parametrize('launch_file', LAUNCH_FILES)
def test_launch_description_loads(launch_file):
    pytest.importorskip('launch')
    pytest.importorskip('launch_ros')
    spec = importlib.util.spec_from_file_location('launch_under_test', ROOT / launch_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    description = module.generate_launch_description()
    assert len(description.entities) >= 2
