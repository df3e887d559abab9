"""The package's subpackages import each other without a cycle (parsed, nothing imported)."""
import ast
import graphlib
from pathlib import Path
from typing import Dict, Set

PACKAGE = Path(__file__).resolve().parents[1] / 'robot_dynamics_learning'
# (importer, imported) subpackage edges that may close a cycle. Keep it tiny and explicit:
# every entry is a known debt with an owner, never a way to silence a new cycle.
ALLOWED_CYCLE_EDGES: Set[tuple] = set()


def unit(module: str) -> str:
    """Return the layer a dotted module belongs to: its subpackage, or the top-level module."""
    parts = module.split('.')
    return parts[1] if len(parts) > 1 else parts[0]


def imported_modules(tree: ast.AST) -> Set[str]:
    """Return every package module that `tree` imports, at any depth (lazy imports too)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith(f'{PACKAGE.name}.')}


def subpackage_graph() -> Dict[str, Set[str]]:
    """Return layer -> layers it imports, self-edges and allowed cycle edges left out."""
    graph: Dict[str, Set[str]] = {}
    for path in PACKAGE.rglob('*.py'):
        module = '.'.join(path.relative_to(PACKAGE.parent).with_suffix('').parts)
        source = unit(module) if module.count('.') > 1 else module.split('.')[1]
        targets = graph.setdefault(source, set())
        for name in imported_modules(ast.parse(path.read_text(), str(path))):
            target = unit(name)
            if target != source and (source, target) not in ALLOWED_CYCLE_EDGES:
                targets.add(target)
    return graph


def test_subpackages_form_an_acyclic_graph():
    try:
        order = list(graphlib.TopologicalSorter(subpackage_graph()).static_order())
    except graphlib.CycleError as error:
        raise AssertionError(f'import cycle between subpackages: {error.args[1]}') from None
    assert order.index('core_types') < order.index('data') < order.index('learning')
    assert order.index('dynamics') < order.index('models') < order.index('learning')
    assert order.index('learning') < order.index('control') < order.index('nodes')


def test_the_rigid_body_dynamics_import_nothing_of_the_package():
    assert subpackage_graph()['dynamics'] == set()   # the prior every learned model builds on


def test_a_cycle_is_reported():
    graph = subpackage_graph()
    graph['data'].add('learning')
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        assert set(error.args[1]) >= {'data', 'learning'}
    else:
        raise AssertionError('the data <-> learning cycle was not found')


def test_no_layer_below_nodes_imports_the_nodes():
    graph = subpackage_graph()
    assert not [name for name, targets in graph.items() if 'nodes' in targets]
