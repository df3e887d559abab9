"""Run every benchmark; each writes bench/results/<name>.json and prints a summary."""
import importlib
import sys

# Modules exposing `main() -> None`; each measures its baselines in the same run.
BENCHMARKS = (
    'rbd',
    'mpc',
    'mpc_solvers',
    'mpc_load',
    'bag_read',
    'models',
    'continual',
    'replay',
    'arm_control',
)


def main() -> int:
    """Run the benchmarks named on the command line, or all of them."""
    selected = sys.argv[1:] or list(BENCHMARKS)
    for name in selected:
        print(f'== bench.{name}', flush=True)
        importlib.import_module(f'bench.{name}').main()
    return 0


if __name__ == '__main__':
    sys.exit(main())
