"""Collection without the extras: ``import prisample`` needs only numpy, numba and torch.

The doctests are collected from every module of ``prisample/`` (``--doctest-modules``); the modules
that adapt prisample to another library import that library at import time, so they are left out of
collection where it is not installed (``make test-core`` runs the suite so).  Test modules that need
an extra skip themselves with ``pytest.importorskip``.
"""

from __future__ import annotations

import importlib.util

from tests.core_only import OPTIONAL_MODULES


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


collect_ignore = [
    module.replace(".", "/") + ".py"
    for module, needs in OPTIONAL_MODULES.items()
    if not all(map(_installed, needs))
]
