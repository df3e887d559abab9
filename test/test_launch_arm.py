"""Arm launch files: everything they name exists and is installed (run: test_launch_real)."""
import importlib
from pathlib import Path
import re

from launch_checks import declared_parameters, installed, keywords, ROOT, setup_nodes
import pytest
import yaml

LAUNCH_FILES = ['launch/arm_learning.launch.py', 'launch/arm_sim.launch.py']


@pytest.mark.parametrize('launch_file', LAUNCH_FILES)
def test_launch_file_names_only_installed_executables_and_configs(launch_file):
    executables = keywords(launch_file, 'executable')
    assert executables, 'no executables found'
    nodes = setup_nodes()
    for executable in executables:
        assert executable in nodes, f'{executable} is not a console script in setup.py'
        module = importlib.import_module(f'robot_dynamics_learning.nodes.{executable}')
        assert callable(module.main)
    text = (ROOT / launch_file).read_text()
    configs = set(re.findall(r"'([\w-]+\.yaml)'", text))
    assert configs, 'no config files found'
    installed_configs = installed('config')
    for config in configs:
        assert config in installed_configs, f'{config} is not installed by setup.py'
    assert Path(launch_file).name in installed('launch')


@pytest.mark.parametrize('config', ['config/learner.yaml', 'config/arm_sim.yaml'])
def test_config_files_parse_and_only_set_declared_parameters(config):
    data = yaml.safe_load((ROOT / config).read_text())
    for key, block in data.items():
        node = key.split('/')[-1]
        for name in block['ros__parameters']:
            assert name in declared_parameters(node), f'{config}: {node} does not declare {name}'
