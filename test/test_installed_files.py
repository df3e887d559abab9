"""Every file the package reads at run time is installed by setup.py (the share folder)."""
from pathlib import Path

from launch_checks import ROOT, setup_data_files


def test_every_config_file_is_installed():
    installed = {Path(p).resolve() for _, files in setup_data_files() for p in files}
    missing = [str(path.relative_to(ROOT)) for path in sorted((ROOT / 'config').rglob('*'))
               if path.is_file() and path.resolve() not in installed]
    assert not missing, f'config files setup.py does not install: {missing}'
