"""
Where the package's own files (URDFs, configs, tracks, shipped models) are found.

In a source checkout they sit beside the Python package; in a colcon/ament install they are
under `share/robot_dynamics_learning/` (setup.py's data_files), found through the ament
index. One place decides, so no module guesses paths from `__file__`.
"""
from pathlib import Path
from typing import List, Optional

PACKAGE = 'robot_dynamics_learning'
_SOURCE_ROOT = Path(__file__).resolve().parent.parent


def source_root() -> Optional[Path]:
    """Return the repository root when running from a source checkout, else None."""
    return _SOURCE_ROOT if (_SOURCE_ROOT / 'package.xml').is_file() else None


def share_dir() -> Optional[Path]:
    """Return the installed share/<package> folder (ament index), or None if not installed."""
    try:
        from ament_index_python.packages import (get_package_share_directory,
                                                 PackageNotFoundError)
    except ImportError:
        return None
    try:
        return Path(get_package_share_directory(PACKAGE))
    except (PackageNotFoundError, LookupError, OSError):   # OSError: AMENT_PREFIX_PATH unset
        return None


def resource(relative: str) -> Path:
    """
    Return the package file `relative` (e.g. 'urdf/panda.urdf').

    Looks in the source tree first, then in the installed share folder; raises
    FileNotFoundError naming every place looked in.
    """
    looked: List[str] = []
    for base in (source_root(), share_dir()):
        if base is None:
            continue
        path = base / relative
        if path.exists():
            return path
        looked.append(str(path))
    if not looked:
        looked.append(f'{_SOURCE_ROOT} (no package.xml: not a source checkout) and no '
                      f'installed {PACKAGE} in the ament index')
    raise FileNotFoundError(f"package file '{relative}' not found; looked in: "
                            + ', '.join(looked))
