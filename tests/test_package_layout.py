"""The package root shows its layers: every public module declares ``__all__`` of public
names, ``prisample.methods`` re-exports each of its modules, the moved modules are gone from the
root, and backends are found by the registry and told apart by their capability attributes."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
from pathlib import Path

import numpy as np
import pytest

import prisample
import prisample.methods
from prisample import CorrectedSampler, PrioritizedSampler
from prisample.backends import (
    _REGISTRY,
    Backend,
    UniformBackend,
    backend_class,
    backend_names,
    register_backend,
)
from tests.core_only import OPTIONAL_MODULES

PACKAGE = Path(prisample.__file__).resolve().parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def public_modules(root: Path = PACKAGE) -> list[Path]:
    """Every module of the package whose own name does not start with ``_``, and every package."""
    return sorted(p for p in root.rglob("*.py") if p.name == "__init__.py" or not p.name.startswith("_"))


def declared_all(path: Path) -> list[str] | None:
    """The literal ``__all__`` a module assigns at top level (read, not imported), or None."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            value = ast.literal_eval(node.value)
            assert isinstance(value, list) and all(isinstance(n, str) for n in value), path
            return value
    return None


def missing_all(root: Path) -> list[str]:
    """The public modules under ``root`` (paths relative to it) that declare no ``__all__``."""
    return [p.relative_to(root).as_posix() for p in public_modules(root) if declared_all(p) is None]


def test_every_public_module_declares_all() -> None:
    assert missing_all(PACKAGE) == []


def test_the_check_catches_a_module_without_all(tmp_path: Path) -> None:
    (tmp_path / "__init__.py").write_text('__all__ = ["x"]\nx = 1\n')
    (tmp_path / "_private.py").write_text("y = 1\n")  # private: needs none
    (tmp_path / "public.py").write_text('"""No __all__ here."""\n\nz = 1\n')
    assert missing_all(tmp_path) == ["public.py"]


@pytest.mark.parametrize("path", public_modules(), ids=module_name)
def test_all_names_public_and_defined(path: Path) -> None:
    names = declared_all(path) or []
    assert not [n for n in names if n.startswith("_")], "__all__ should export no private name"
    assert len(set(names)) == len(names)
    name = module_name(path)
    if name in OPTIONAL_MODULES:
        needs = OPTIONAL_MODULES[name]
        if not all(importlib.util.find_spec(n) is not None for n in needs):
            pytest.skip(f"{name} needs {needs}")
    module = importlib.import_module(name)
    assert [n for n in names if not hasattr(module, n)] == []


def test_methods_reexports_every_public_name_of_its_modules() -> None:
    exported = set(prisample.methods.__all__)
    for path in public_modules(PACKAGE / "methods"):
        if path.name == "__init__.py":
            continue
        module = importlib.import_module(module_name(path))
        for name in module.__all__:
            assert name in exported, f"{module.__name__}.{name}"
            assert getattr(prisample.methods, name) is getattr(module, name)


@pytest.mark.parametrize(
    "old",
    [
        "prisample.rules",
        "prisample.variants",
        "prisample.losses",
        "prisample.laber",
        "prisample.selection",
        "prisample.corrections",
        "prisample.nstep",
        "prisample.vector_env",
        "prisample._prefetch",
    ],
)
def test_moved_modules_left_the_root(old: str) -> None:
    # An editable install of another checkout may still find the old file; none is in this package.
    spec = importlib.util.find_spec(old)
    assert spec is None or not Path(str(spec.origin)).resolve().is_relative_to(PACKAGE)
    assert not (PACKAGE / (old.split(".")[1] + ".py")).exists()


def test_top_level_names_unchanged() -> None:
    assert sorted(prisample.__all__) == sorted(
        [
            "CorrectedSampler",
            "DeviceDraw",
            "DevicePrioritizedSampler",
            "Draw",
            "IndexedDataset",
            "LaBER",
            "LargeBatchDraw",
            "LinearSchedule",
            "OnlineBatchSelection",
            "PrioritizedReplay",
            "PrioritizedSampler",
            "ReplayMemory",
            "SequenceBatch",
            "SequenceReplay",
            "StalenessBonus",
            "asymmetric_priorities",
            "importance_weights",
            "lap_loss",
            "lap_priorities",
            "loshchilov_hutter_priorities",
            "loshchilov_hutter_probabilities",
            "pal_loss",
            "predecessor_boost",
            "pser_priorities",
            "ring_predecessors",
            "sequence_priority",
        ]
    )
    assert all(hasattr(prisample, name) for name in prisample.__all__)


# ------------------------------------------------------------------------------------------------
# backend registry
# ------------------------------------------------------------------------------------------------


def test_registry_names_and_capabilities() -> None:
    assert backend_names() == ("proportional", "rank", "greedy", "uniform")
    capabilities = {
        name: (backend_class(name).importance_sampling, backend_class(name).priority_masses)
        for name in backend_names()
    }
    assert capabilities == {
        "proportional": (True, True),
        "rank": (True, False),
        "greedy": (False, False),
        "uniform": (True, False),
    }
    for name in backend_names():
        assert backend_class(name).name == name


def test_one_from_state_signature() -> None:
    signatures = {name: inspect.signature(backend_class(name).from_state) for name in backend_names()}
    parameters = {name: list(sig.parameters) for name, sig in signatures.items()}
    assert all(p == ["raw", "alpha", "eps", "state", "legacy"] for p in parameters.values()), parameters


@pytest.mark.parametrize("cls", [PrioritizedSampler, CorrectedSampler])
@pytest.mark.parametrize("bad", ["sumtree", "", 3, None])
def test_unknown_backend_names_the_argument_and_the_registered_names(cls: type, bad: object) -> None:
    with pytest.raises(
        ValueError, match=r"backend should be one of \('proportional', 'rank', 'greedy', 'uniform'\)"
    ):
        cls(4, backend=bad)
    with pytest.raises(ValueError, match=r"but got backend="):
        backend_class(bad)


def test_a_name_registers_once() -> None:
    with pytest.raises(ValueError, match="backend name should be new"):
        register_backend(UniformBackend)


def test_a_registered_backend_is_drawn_saved_and_loaded() -> None:
    """A new backend is one registered class; the sampler reads its capabilities, not its name."""

    class TopOnlyUniform(UniformBackend):
        name = "test-unweighted-uniform"
        importance_sampling = False

    register_backend(TopOnlyUniform)
    try:
        s = PrioritizedSampler(6, backend="test-unweighted-uniform", size=4, seed=0)
        assert isinstance(s.backend, TopOnlyUniform)
        draw = s.sample(3)
        assert np.array_equal(draw.weights, np.ones(3, dtype=np.float32))  # no importance sampling
        state = s.state_dict()
        assert state["backend"] == "test-unweighted-uniform"
        twin = PrioritizedSampler(6, backend="test-unweighted-uniform", seed=1)
        twin.load_state_dict(state)
        assert np.array_equal(twin.sample(5).indices, s.sample(5).indices)
    finally:
        del _REGISTRY["test-unweighted-uniform"]
    assert "test-unweighted-uniform" not in backend_names()


def test_backend_protocol_lists_the_capabilities() -> None:
    hints = Backend.__annotations__
    assert {"name", "importance_sampling", "priority_masses"} <= set(hints)
