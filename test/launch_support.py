"""
Real launch tests: a colcon install of this package, `launch_test` runs, orphan checks.

The launch libraries come from a sourced ROS 2 or from the Jazzy wheels that `make setup`
installs when RDL_LAUNCH_WHEELS names their folder (../shared/wheels by default); colcon from
a sourced ROS 2 or from .venv/colcon (installed beside them, kept off the test venv's path so
its pytest plugins stay out). Without them the tests skip with the reason.
"""
import importlib.util
import json
import os
from pathlib import Path
import shutil
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional
import uuid

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = 'robot_dynamics_learning'
LAUNCH_MODULES = ('launch', 'launch_ros', 'launch_testing', 'ament_index_python')
COLCON_SITE = Path(sys.prefix) / 'colcon'


def missing_reason() -> Optional[str]:
    """Return why the real launch tests cannot run here, or None when they can."""
    missing = [name for name in LAUNCH_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        return (f'the ROS 2 launch libraries are not installed ({", ".join(missing)}): source '
                'a ROS 2 or run `make setup` with RDL_LAUNCH_WHEELS=<folder of the Jazzy '
                'launch wheels>')
    if _colcon_command() is None:
        return 'colcon is missing: source a ROS 2 or re-run `make setup` with RDL_LAUNCH_WHEELS'
    return None


def _colcon_command() -> Optional[List[str]]:
    """Return the colcon command: run by this interpreter, so nodes get its shebang."""
    if (COLCON_SITE / 'colcon_core').is_dir() or importlib.util.find_spec('colcon_core'):
        return [sys.executable, '-m', 'colcon']
    if shutil.which('colcon'):
        return ['colcon']
    return None


def build_install(workspace: Path) -> Dict[str, str]:
    """`colcon build` the package into `workspace`; return the environment that uses it."""
    command = _colcon_command()
    env = dict(os.environ)
    if command[0] == sys.executable and (COLCON_SITE / 'colcon_core').is_dir():
        env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(COLCON_SITE),
                                                          env.get('PYTHONPATH')]))
    # Only the package itself: the venv and the fixtures inside the checkout are not packages.
    source = workspace / 'src' / PACKAGE
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        '.venv', '.git', 'build', 'install', 'log', '*.egg-info', '__pycache__', 'out', 'runs'))
    result = subprocess.run(
        command + ['build', '--base-paths', str(workspace / 'src'),
                   '--build-base', str(workspace / 'build'),
                   '--install-base', str(workspace / 'install'),
                   '--event-handlers', 'console_direct-'],
        cwd=workspace, env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f'colcon build failed:\n{result.stdout}\n{result.stderr}')
    prefix = workspace / 'install' / PACKAGE
    site = next(prefix.glob('lib/python3*/site-packages'))
    run_env = dict(os.environ)
    run_env['AMENT_PREFIX_PATH'] = os.pathsep.join(
        filter(None, [str(prefix), os.environ.get('AMENT_PREFIX_PATH')]))
    run_env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(site),
                                                          os.environ.get('PYTHONPATH')]))
    run_env['PATH'] = os.pathsep.join([str(prefix / 'bin'), os.environ['PATH']])
    return run_env


def new_marker() -> str:
    """Return a fresh marker for `run_*`'s environment (see `leftover_processes`)."""
    return uuid.uuid4().hex


def run_launch_test(case: dict, env: Dict[str, str], cwd: Path, marker: str,
                    timeout: float = 240.0) -> subprocess.CompletedProcess:
    """
    Run test/launch_case.py for `case` with launch_testing's own runner.

    Every process it starts carries `marker` in its environment, so `leftover_processes`
    finds those still alive afterwards (orphans).
    """
    env = dict(env, RDL_LAUNCH_CASE=json.dumps(case), RDL_LAUNCH_MARKER=marker,
               PYTHONUNBUFFERED='1')
    # launch's own cwd: relative files a node writes land in the test's temporary folder
    return _run_in_own_group([sys.executable, '-m', 'launch_testing.launch_test',
                              str(ROOT / 'test' / 'launch_case.py')], env, cwd, timeout)


def run_launch_file(launch_file: str, args: Dict[str, str], env: Dict[str, str], cwd: Path,
                    marker: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """Run an installed launch file to its end, as `ros2 launch` would (no ros2cli here)."""
    script = (
        'import os, sys\n'
        'from ament_index_python.packages import get_package_share_directory\n'
        'from launch import LaunchDescription, LaunchService\n'
        'from launch.actions import IncludeLaunchDescription\n'
        'from launch.launch_description_sources import PythonLaunchDescriptionSource\n'
        f'path = os.path.join(get_package_share_directory({PACKAGE!r}), "launch", '
        f'{launch_file!r})\n'
        'arguments = [a.split(":=", 1) for a in sys.argv[1:]]\n'
        'service = LaunchService()\n'
        'service.include_launch_description(LaunchDescription([IncludeLaunchDescription('
        'PythonLaunchDescriptionSource(path), launch_arguments=arguments)]))\n'
        'sys.exit(service.run())\n')
    env = dict(env, RDL_LAUNCH_MARKER=marker)
    return _run_in_own_group([sys.executable, '-c', script]
                             + [f'{name}:={value}' for name, value in args.items()],
                             env, cwd, timeout)


def _run_in_own_group(command: List[str], env: Dict[str, str], cwd: Path,
                      timeout: float) -> subprocess.CompletedProcess:
    """subprocess.run, but a timeout kills the whole process group (launch's nodes too)."""
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        stderr += f'\n[killed after {timeout:.0f} s]'
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def leftover_processes(marker: str, grace_s: float = 3.0) -> List[str]:
    """Command lines of live processes whose environment holds `marker` (after a grace)."""
    deadline = time.monotonic() + grace_s
    while True:
        found = []
        for proc in Path('/proc').iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                if marker.encode() in (proc / 'environ').read_bytes():
                    found.append((proc / 'cmdline').read_bytes().replace(b'\0', b' ').decode())
            except OSError:   # gone meanwhile, or not ours to read
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)
