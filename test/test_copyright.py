"""ROS 2 standard copyright check; skipped where ament_copyright is not installed (PyPI)."""
from pathlib import Path

import pytest

ament_copyright = pytest.importorskip('ament_copyright.main')


@pytest.mark.copyright
@pytest.mark.linter
def test_copyright():
    root = Path(__file__).resolve().parents[1]
    rc = ament_copyright.main(argv=[str(root / 'robot_dynamics_learning'), str(root / 'test')])
    assert rc == 0, 'Found errors'
