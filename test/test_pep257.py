"""ROS 2 standard docstring check (ament_pep257)."""
from pathlib import Path

from ament_pep257.main import main
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.linter
@pytest.mark.pep257
def test_pep257():
    rc = main(argv=[str(ROOT / 'robot_dynamics_learning'), str(ROOT / 'launch')])
    assert rc == 0, 'Found code style errors / warnings'
