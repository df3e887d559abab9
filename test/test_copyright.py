"""ROS 2 standard copyright check; skipped where ament_copyright is not installed (PyPI)."""
from pathlib import Path

import pytest


@pytest.mark.copyright
@pytest.mark.linter
def test_copyright():
    # Imported here: a module-level skip would skip the whole test folder's collection under
    # launch_testing's pytest plugin, which imports every test module while collecting.
    ament_copyright = pytest.importorskip('ament_copyright.main')
    root = Path(__file__).resolve().parents[1]
    rc = ament_copyright.main(argv=[str(root / 'robot_dynamics_learning'), str(root / 'test')])
    assert rc == 0, 'Found errors'
