"""
`rdl`: the offline command line (bags, datasets, training, identification, simulation, MPC).

Each subsystem registers its own sub-commands through a `register(subparsers)` function, so
this module only lists the subsystems and dispatches.
"""
import argparse
import importlib
import sys
from typing import Optional, Sequence

from robot_dynamics_learning.memory import retain_freed_memory

# Modules exposing `register(subparsers: argparse._SubParsersAction) -> None`.
COMMAND_MODULES = (
    'robot_dynamics_learning.data.cli',
    'robot_dynamics_learning.dynamics.cli',
    'robot_dynamics_learning.learning.cli',
    'robot_dynamics_learning.learning.replay_cli',
    'robot_dynamics_learning.control.cli',
    'robot_dynamics_learning.sim.cli',
)


def build_parser() -> argparse.ArgumentParser:
    """Build the full `rdl` parser from every subsystem's sub-commands."""
    parser = argparse.ArgumentParser(
        prog='rdl',
        description='robot_dynamics_learning offline tools: the same core the ROS nodes run.')
    subparsers = parser.add_subparsers(dest='command', metavar='COMMAND', required=True)
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parse arguments and run the chosen sub-command's handler (`args.func`)."""
    args = build_parser().parse_args(argv)
    retain_freed_memory()
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, FileExistsError) as error:
        print(f'rdl: error: {error}', file=sys.stderr)
        return 2


if __name__ == '__main__':
    sys.exit(main())
