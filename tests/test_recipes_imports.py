"""The recipes import each other without cycles (issue 15: "no import cycle in recipes/").

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
    """Issue 22: no module in ``recipes/`` outside a recipe folder or ``common/`` (the package's own
    ``__init__`` and ``__main__`` aside), and no recipe file over 450 lines."""
    loose = sorted(p.name for p in RECIPES.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert loose == []
    long = {module_name(p): n for p in RECIPES.rglob("*.py") if (n := len(p.read_text().splitlines())) > 450}
    assert long == {}


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
