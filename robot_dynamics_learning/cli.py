"""
`rdl`: the offline command line (bags, datasets, training, identification, simulation, MPC).

Each subsystem registers its own sub-commands through a `register(subparsers)` function. Only
the module of the command being run is imported: `rdl --help` lists the commands from the
table below without loading torch (about 6 s on a small machine).
"""
import argparse
import importlib
import sys
from typing import Optional, Sequence

from robot_dynamics_learning.memory import retain_freed_memory

# command -> (module exposing `register(subparsers)`, its one-line help for `rdl --help`).
COMMANDS = {
    'bag': ('robot_dynamics_learning.data.cli',
            'inspect and export rosbag2 recordings (sqlite3 or MCAP, no ROS needed)'),
    'data': ('robot_dynamics_learning.data.cli', 'convert the shared datasets'),
    'identify': ('robot_dynamics_learning.learning.identify_cli',
                 'identify rigid-body parameters from (q, qd, qdd, tau) data'),
    'train': ('robot_dynamics_learning.learning.cli', 'train a dynamics model offline'),
    'evaluate': ('robot_dynamics_learning.learning.cli', 'evaluate a checkpoint'),
    'replay': ('robot_dynamics_learning.learning.replay_cli',
               'evaluate models on a JointState bag: predict-then-train, report'),
    'car': ('robot_dynamics_learning.control.cli',
            'RC car: train models, scenarios, simulated laps'),
    'simulate': ('robot_dynamics_learning.sim.cli', 'run a built-in simulator offline'),
}
COMMAND_MODULES = tuple(dict.fromkeys(module for module, _ in COMMANDS.values()))


def build_parser(command: Optional[str] = None) -> argparse.ArgumentParser:
    """
    Build the `rdl` parser: every command's full options, or only `command`'s.

    With an unknown or no command the sub-commands are listed from `COMMANDS` without
    importing their modules (enough for `--help` and for the error message).
    """
    parser = argparse.ArgumentParser(
        prog='rdl',
        description='robot_dynamics_learning offline tools: the same core the ROS nodes run.')
    subparsers = parser.add_subparsers(dest='command', metavar='COMMAND', required=True)
    if command is None:
        modules = COMMAND_MODULES
    elif command in COMMANDS:
        modules = (COMMANDS[command][0],)
    else:
        for name, (_, text) in COMMANDS.items():
            subparsers.add_parser(name, help=text)
        return parser
    for module_name in modules:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parse arguments and run the chosen sub-command's handler (`args.func`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith('-')), '')
    args = build_parser(command).parse_args(argv)
    retain_freed_memory()
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, FileExistsError) as error:
        print(f'rdl: error: {error}', file=sys.stderr)
        return 2


if __name__ == '__main__':
    sys.exit(main())
