"""ROS 2 standard flake8 check (ament_flake8, ament style: 99 columns, single quotes)."""
from pathlib import Path

from ament_flake8.main import main_with_errors
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ['robot_dynamics_learning', 'test', 'launch', 'bench', 'setup.py']


@pytest.mark.flake8
@pytest.mark.linter
def test_flake8():
    paths = [str(ROOT / name) for name in CHECKED if (ROOT / name).exists()]
    rc, errors = main_with_errors(argv=paths)
    assert rc == 0, f'Found {len(errors)} code style errors / warnings:\n' + '\n'.join(errors)
