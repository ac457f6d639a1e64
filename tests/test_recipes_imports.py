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
    """Names of the recipe modules that ``source`` imports, at module level or inside functions."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            if node.module == "recipes":
                found |= {alias.name for alias in node.names if alias.name in modules}
            elif node.module.startswith("recipes."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module is None:
                found |= {alias.name for alias in node.names if alias.name in modules}
            else:
                found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found |= {alias.name.split(".")[1] for alias in node.names if alias.name.startswith("recipes.")}
    return found & modules


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
    sources = {path.stem: path.read_text() for path in sorted(RECIPES.glob("*.py"))}
    assert len(sources) > 20, "the recipes folder was not found"
    assert cycles(import_graph(sources)) == []


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        # A cycle closed by an import inside a function, as apex_dqn -> apex_studies once was.
        (
            {
                "a": "from recipes.b import run\n",
                "b": "def main():\n    from recipes import a\n",
                "c": "import numpy\n",
            },
            [["a", "b"]],
        ),
        (
            {"a": "import recipes.b\n", "b": "import recipes.c\n", "c": "from recipes import a, numpy\n"},
            [["a", "b", "c"]],
        ),
        ({"a": "from recipes import b\n", "b": "from recipes.c import x\n", "c": ""}, []),
    ],
)
def test_the_cycle_finder_sees_cycles_at_any_depth(
    sources: dict[str, str], expected: list[list[str]]
) -> None:
    assert cycles(import_graph(sources)) == expected
