"""The allocator tuning our entry points call (see robot_dynamics_learning/memory.py)."""
import platform

import pytest
from robot_dynamics_learning.memory import retain_freed_memory


@pytest.mark.skipif(platform.system() != 'Linux' or platform.libc_ver()[0] != 'glibc',
                    reason='mallopt is glibc only')
def test_glibc_accepts_the_thresholds():
    assert retain_freed_memory() is True
