"""Static checks shared by the launch-file tests: what setup.py installs, what launches name."""
import ast
from glob import glob
from pathlib import Path
import re
from typing import List, Set

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = 'robot_dynamics_learning'


def _setup_tree() -> ast.AST:
    return ast.parse((ROOT / 'setup.py').read_text())


def setup_data_files() -> list:
    """(install folder, [source files]) pairs of setup.py, globs expanded as setup.py does."""
    text = (ROOT / 'setup.py').read_text()
    for node in ast.walk(_setup_tree()):
        if isinstance(node, ast.keyword) and node.arg == 'data_files':
            source = ast.get_source_segment(text, node.value).replace('{PACKAGE}', PACKAGE)
            source = re.sub(r"\bf'", "'", source)  # f-strings: only {PACKAGE} is used
            return eval(source, {'glob': lambda p: glob(str(ROOT / p))})  # noqa: S307
    raise AssertionError('setup.py has no data_files')


def installed(folder: str) -> Set[str]:
    """Return the names of the files setup.py installs into share/<package>/<folder>."""
    return {Path(p).name for target, files in setup_data_files()
            if target == f'share/{PACKAGE}/{folder}' for p in files}


def setup_nodes() -> List[str]:
    """Return the console-script node names of setup.py's NODES list."""
    for node in ast.walk(_setup_tree()):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], 'id', '') == 'NODES':
            return [element.value for element in node.value.elts]
    raise AssertionError('setup.py has no NODES list')


def keywords(path: str, keyword: str) -> list:
    """Return the constant values of `keyword=` arguments of every call in `path`."""
    tree = ast.parse((ROOT / path).read_text())
    return [kw.value.value for node in ast.walk(tree) if isinstance(node, ast.Call)
            for kw in node.keywords if kw.arg == keyword and isinstance(kw.value, ast.Constant)]


# Nodes that declare their parameters from a config class (nodes/parameters.declare_config).
NODE_CONFIGS = {
    'dynamics_learner': 'learning.learner_params.DynamicsLearnerConfig',
    'torque_predictor': 'learning.learner_params.TorquePredictorConfig',
    'car_mpc': 'control.car_mpc_params.CarMPCConfig',
    'arm_sim': 'sim.arm_sim_params.ArmSimConfig',
    'car_sim': 'sim.car_sim_params.CarSimConfig',
    'car_model_learner': 'learning.car_adaptation_params.CarModelLearnerConfig',
    'car_state_estimator': 'control.car_estimator_params.CarStateEstimatorConfig',
    'mujoco_arm': 'sim.mujoco_arm_params.MujocoArmNodeConfig',
    'arm_controller': 'control.arm_controller_params.ArmControllerNodeConfig',
    'bag_player': 'data.bag_player_params.BagPlayerConfig',
    'replay_evaluator': 'learning.replay_evaluator_params.ReplayEvaluatorConfig',
}


def declared_parameters(node: str) -> Set[str]:
    """Return the parameters `node` declares: the fields of its config class and the shared."""
    import dataclasses
    import importlib
    from robot_dynamics_learning.params import SHARED_PARAMETERS
    module, _, name = NODE_CONFIGS[node].rpartition('.')
    cls = getattr(importlib.import_module(f'{PACKAGE}.{module}'), name)
    names = {field.name for field in dataclasses.fields(cls)}
    return names | set(SHARED_PARAMETERS)
