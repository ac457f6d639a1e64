"""The recipes import each other without cycles, and ``recipes/common`` imports no recipe.

A cycle hidden inside a function (``def main(): from recipes import other``) is still a cycle: the
two modules can no longer be read, tested or moved one without the other.  The graph is read from the
source with :mod:`ast`, so it counts imports at any depth, and needs none of the recipes' extras.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RECIPES = Path(__file__).resolve().parent.parent / "recipes"


def recipe_imports(source: str, modules: set[str]) -> set[str]:
    """Dotted names (``dqn.agent``; ``dqn`` for a package's ``__init__``) of the recipe modules that
    ``source`` imports, at module level or inside functions."""
    found: set[str] = set()

    def add(dotted: str, names: list[str]) -> None:
        children = {f"{dotted}.{name}" for name in names} & modules
        found.update(children or {dotted})

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            if node.module == "recipes" or node.module.startswith("recipes."):
                dotted = node.module.partition(".")[2]
                add(dotted, [alias.name for alias in node.names]) if dotted else found.update(
                    {alias.name for alias in node.names}
                )
        elif isinstance(node, ast.Import):
            found |= {
                alias.name.partition(".")[2] for alias in node.names if alias.name.startswith("recipes.")
            }
    return found & modules


def module_name(path: Path) -> str:
    """``recipes/dqn/agent.py`` -> ``dqn.agent``; ``recipes/dqn/__init__.py`` -> ``dqn``."""
    parts = path.relative_to(RECIPES).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def recipe_sources() -> dict[str, str]:
    return {
        module_name(path): path.read_text()
        for path in sorted(RECIPES.rglob("*.py"))
        if path.parent != RECIPES
    }


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    modules = set(sources)
    return {name: recipe_imports(text, modules) - {name} for name, text in sources.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = lowlink[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                lowlink[node] = min(lowlink[node], lowlink[successor])
            elif successor in on_stack:
                lowlink[node] = min(lowlink[node], index[successor])
        if lowlink[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_recipes_have_no_import_cycle() -> None:
    sources = recipe_sources()
    assert len(sources) > 20, "the recipes folder was not found"
    assert cycles(import_graph(sources)) == []


def test_every_module_lives_in_a_recipe_folder_and_none_is_long() -> None:
    """No module in ``recipes/`` outside a recipe folder or ``common/`` (the package's own
    ``__init__`` and ``__main__`` aside), and no recipe file over 450 lines."""
    loose = sorted(p.name for p in RECIPES.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert loose == []
    long = {module_name(p): n for p in RECIPES.rglob("*.py") if (n := len(p.read_text().splitlines())) > 450}
    assert long == {}


def absolute_imports(source: str, package: str) -> set[str]:
    """Every module name ``source`` imports, at module level or inside functions, relative imports
    resolved against ``package`` (the importing module's package, ``recipes.common``); ``from a
    import b`` gives ``a.b``, which is ``a``'s submodule or a name defined in ``a``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
            parent = ".".join([*base, *([node.module] if node.module else [])])
            found |= {parent} | {f"{parent}.{alias.name}" for alias in node.names}
    return found


def recipe_imports_of_common(sources: dict[str, str]) -> dict[str, list[str]]:
    """Per module of ``recipes/common`` (dotted as ``common.cli``), the imports of a recipe package
    it makes: names under ``recipes.`` outside ``recipes.common``."""
    found = {}
    for name, text in sources.items():
        if name == "common" or name.startswith("common."):
            package = "recipes." + (name if name == "common" else name.rpartition(".")[0])
            outside = sorted(
                imported
                for imported in absolute_imports(text, package)
                if imported.startswith("recipes.")
                and imported != "recipes.common"
                and not imported.startswith("recipes.common.")
            )
            if outside:
                found[name] = outside
    return found


def test_common_imports_no_recipe() -> None:
    """``recipes/common`` holds the parts every recipe shares, so none of it may import a recipe:
    ``rl_metrics`` once took its IQM and bootstrap from ``recipes.dqn.stats``, tying every
    comparison of every recipe to the Atari statistics of one."""
    sources = recipe_sources()
    assert any(name.startswith("common.") for name in sources), "recipes/common was not found"
    assert recipe_imports_of_common(sources) == {}


def test_the_common_check_sees_every_form_of_import() -> None:
    sources = {
        "common.a": "from recipes.dqn.stats import iqm\n",
        "common.b": "def f():\n    import recipes.apex.run\n",
        "common.c": "from ..dqn import stats\n",
        "common.d": "from recipes import dqn, common\n",
        "common.e": "from recipes.common import outputs\nfrom . import cli\nfrom .outputs import figure\n",
        "dqn.x": "from recipes.apex import run\n",
    }
    assert recipe_imports_of_common(sources) == {
        "common.a": ["recipes.dqn.stats", "recipes.dqn.stats.iqm"],
        "common.b": ["recipes.apex.run"],
        "common.c": ["recipes.dqn", "recipes.dqn.stats"],
        "common.d": ["recipes.dqn"],
    }


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        # A cycle closed by an import inside a function, as apex_dqn -> apex_studies once was.
        (
            {
                "x.a": "from recipes.x.b import run\n",
                "x.b": "def main():\n    from recipes.x import a\n",
                "x.c": "import numpy\n",
            },
            [["x.a", "x.b"]],
        ),
        (
            {
                "x.a": "import recipes.x.b\n",
                "x.b": "import recipes.y.c\n",
                "y.c": "from recipes.x import a, numpy\n",
            },
            [["x.a", "x.b", "y.c"]],
        ),
        ({"x.a": "from recipes.x import b\n", "x.b": "from recipes.y.c import x\n", "y.c": ""}, []),
        ({"x": "from recipes.x.a import A\n", "x.a": "from recipes.x import B\n"}, [["x", "x.a"]]),
    ],
)
def test_the_cycle_finder_sees_cycles_at_any_depth(
    sources: dict[str, str], expected: list[list[str]]
) -> None:
    assert cycles(import_graph(sources)) == expected
