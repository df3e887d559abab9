"""Every file the package reads at run time is installed by setup.py (the share folder)."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def installed_patterns() -> list:
    """Return the glob patterns of setup.py's data_files."""
    tree = ast.parse((ROOT / 'setup.py').read_text())
    return [node.args[0].value for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, 'id', '') == 'glob']


def test_every_config_file_is_installed():
    installed = {path for pattern in installed_patterns() for path in ROOT.glob(pattern)}
    missing = [str(path.relative_to(ROOT)) for path in sorted((ROOT / 'config').rglob('*'))
               if path.is_file() and path not in installed]
    assert not missing, f'config files setup.py does not install: {missing}'
