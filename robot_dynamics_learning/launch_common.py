"""
What the launch files share: their common arguments and the check for optional packages.

A user who learns `checkpoint_dir` or `realtime_priority` in one launch file finds it the
same in the next; what belongs to one launch file stays in that file. Defaults may name
`{share}` (the package's share folder) and `{run}` (a new folder per run under ~/.rdl/runs,
so that no run reloads the checkpoints another run left). Imported by launch files only (it
needs the `launch` packages, the core does not).
"""
import os
import time
from typing import Dict, Iterable, List, Tuple

from ament_index_python.packages import get_package_share_directory, PackageNotFoundError
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration, PythonExpression
from launch_ros.parameter_descriptions import ParameterValue

MODELS = 'lstm | ac_rkn_inverse | hybrid | rigid_body | ffnn'
# name: (default, description)
SHARED: Dict[str, Tuple[str, str]] = {
    'model': ('hybrid', f'the learner model ({MODELS})'),
    'trajectory': ('excitation', 'reference trajectory: excitation | reaching | mixed'),
    'payload_mass': ('0.0', 'initial payload at the flange (kg)'),
    'learner_params': (os.path.join('{share}', 'config', 'learner.yaml'),
                       'YAML parameters of dynamics_learner (and torque_predictor)'),
    'car_params': (os.path.join('{share}', 'config', 'car.yaml'),
                   'YAML parameters of the car nodes'),
    'track': (os.path.join('{share}', 'config', 'tracks', 'oval.yaml'), 'race track YAML'),
    'checkpoint': (os.path.join('{share}', 'config', 'models', 'car_mlp_sim.pt'),
                   'car model checkpoint'),
    'learn': ('false', 'also run car_model_learner (car_mpc then reloads its checkpoints)'),
    'run_checkpoint_dir': ('{run}', "folder of the learner's checkpoints, which the consumer "
                           'reloads; default: a new one per run'),
    'realtime_priority': ('0', 'SCHED_FIFO priority (1-99) of all node threads; 0: normal '
                          'scheduling (needs CAP_SYS_NICE or an rtprio limit)'),
    'use_sim_time': ('false', 'use /clock (bag replay with --clock, simulators)'),
    'namespace': ('', 'namespace of the nodes (joint_states is relative)'),
}
# Entries whose argument name differs from their catalogue name.
ARGUMENT_NAMES = {'car_params': 'params', 'run_checkpoint_dir': 'checkpoint_dir'}


def run_folder(launch_name: str) -> str:
    """Return a new checkpoint folder for this launch: ~/.rdl/runs/<name>-<time>-<pid>."""
    return os.path.join(os.path.expanduser('~'), '.rdl', 'runs',
                        f'{launch_name}-{time.strftime("%Y%m%d-%H%M%S")}-{os.getpid()}')


def shared_arguments(share: str, launch_name: str, *names: str,
                     **defaults: str) -> List[DeclareLaunchArgument]:
    """
    Declare the shared arguments `names` (catalogue names, `SHARED`) for one launch file.

    `defaults` overrides a default by argument name (e.g. model='lstm').
    """
    run = run_folder(launch_name)
    declared = []
    for name in names:
        default, description = SHARED[name]
        argument = ARGUMENT_NAMES.get(name, name)
        default = defaults.pop(argument, default.format(share=share, run=run))
        declared.append(DeclareLaunchArgument(argument, default_value=default,
                                              description=description))
    if defaults:
        raise ValueError(f'defaults for undeclared arguments: {sorted(defaults)}')
    return declared


def typed(name: str, value_type: type) -> ParameterValue:
    """Return launch argument `name` as a parameter of `value_type` (not a string)."""
    return ParameterValue(LaunchConfiguration(name), value_type=value_type)


# car_mpc's grip_weight with learn:=true: the grip bound on car_model_learner's car/grip
# estimate, as measured in docs/results_car.md section 10. Without the learner 0: there is no
# estimate to bound with. This overrides the params file's grip_weight.
LEARN_GRIP_WEIGHT = 20.0


def grip_weight_for(learn: LaunchConfiguration) -> ParameterValue:
    """Return car_mpc's grip_weight: LEARN_GRIP_WEIGHT where `learn` is 'true', else 0."""
    return ParameterValue(PythonExpression([f"{LEARN_GRIP_WEIGHT} if '", learn,
                                            "' == 'true' else 0.0"]), value_type=float)


def has_package(package: str) -> bool:
    """Return True when an ament package is installed (the Gazebo pieces are optional)."""
    try:
        get_package_share_directory(package)
    except PackageNotFoundError:
        return False
    return True


def require_packages(request: str, packages: Iterable[str], install: str) -> None:
    """
    Stop the launch before any node starts when `request` needs packages that are missing.

    The error names every missing package and says what to install or launch instead.
    """
    missing = [name for name in packages if not has_package(name)]
    if missing:
        raise RuntimeError(f'{request} needs {", ".join(missing)} (not found in the ament '
                           f'index): {install}')
