"""What ``import prisample`` may import: the core dependencies (numpy, numba, torch) and no extra.

``python -m tests.core_only [--no-extras]`` imports every module of prisample except the adapters to other
libraries (``OPTIONAL_MODULES``) and exits 1 naming each optional dependency that got imported.  The
core dependencies import some packages themselves when they are installed (torch imports tqdm, numba
imports yaml and scipy), so what counts is what prisample adds to ``import numpy, numba, torch``.
``make test-core`` runs this in a virtual environment without the extras, where such an import
fails outright; ``tests/test_core_imports.py`` runs it in the test suite.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from collections.abc import Iterable

# prisample module -> the top-level modules its import needs beyond the core dependencies.  The root
# conftest.py leaves these out of doctest collection where they are missing.
OPTIONAL_MODULES: dict[str, tuple[str, ...]] = {
    "prisample.lightning": ("lightning",),
    "prisample.ray": ("ray",),
    "prisample.sb3": ("gymnasium", "stable_baselines3"),
    "prisample.torchrl": ("torchrl", "tensordict"),
}

# Top-level modules of the extras (pyproject's optional dependencies and what they pull in).
EXTRAS = (
    "ale_py",
    "cloudpickle",
    "cpprb",
    "cv2",
    "gymnasium",
    "jsonargparse",
    "lightning",
    "lightning_fabric",
    "lightning_utilities",
    "matplotlib",
    "minatar",
    "pandas",
    "pytorch_lightning",
    "ray",
    "scipy",
    "stable_baselines3",
    "tensorboard",
    "tensordict",
    "torchmetrics",
    "torchrl",
    "torchvision",
    "tqdm",
    "yaml",
)


def core_modules() -> list[str]:
    """Every module of the prisample package but the optional adapters."""
    import prisample

    names = ["prisample"]
    for info in pkgutil.walk_packages(prisample.__path__, "prisample."):
        if info.name not in OPTIONAL_MODULES:
            names.append(info.name)
    return sorted(names)


def imported_extras(modules: Iterable[str] | None = None) -> list[str]:
    """The extras that importing ``modules`` (every core module by default) adds to those that
    ``import numpy, numba, torch`` imports.

    Run it in a fresh process: a module imported before the call is not seen again.
    """
    assert "prisample" not in sys.modules, "run in a fresh process, before prisample is imported"
    for core in ("numpy", "numba", "torch", "torch.utils.data", "torch.distributed"):
        importlib.import_module(core)
    before = set(sys.modules)
    for name in core_modules() if modules is None else modules:
        importlib.import_module(name)
    added = {name.partition(".")[0] for name in set(sys.modules) - before}
    return sorted(added.intersection(EXTRAS))


def installed_extras() -> list[str]:
    """The extras installed in this environment (``make test-core`` wants none)."""
    return [name for name in EXTRAS if importlib.util.find_spec(name) is not None]


def main(argv: list[str] | None = None) -> int:
    """Check the imports; with ``--no-extras`` also that no extra is installed at all."""
    argv = sys.argv[1:] if argv is None else argv
    installed = installed_extras() if "--no-extras" in argv else []
    if installed:
        print(f"extras installed in a core-only environment: {', '.join(installed)}", file=sys.stderr)
        return 1
    found = imported_extras()
    if found:
        print(f"importing prisample's core modules imported extras: {', '.join(found)}", file=sys.stderr)
        return 1
    print(f"{len(core_modules())} prisample modules import no extra (only numpy, numba, torch)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
