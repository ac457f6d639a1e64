"""The README's Lightning snippet runs as written (on its own tiny generated data)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lightning")

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_lightning_snippet_runs_and_feeds_priorities_back() -> None:
    """Bug: the README's plain PrioritizedSampler with the callback raised "TypeError: wrap the
    PrioritizedSampler in prisample.distributed.DistributedPrioritizedSampler"."""
    section = README.read_text().split("### Lightning", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    namespace: dict[str, object] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(code.group(1), "README.md", "exec"), namespace)
    trainer, data = namespace["trainer"], namespace["data"]
    assert trainer.global_step == 2 * 512 // 32  # type: ignore[attr-defined]
    priorities = data.sampler.priorities  # type: ignore[attr-defined]
    assert np.isfinite(priorities).all() and not np.all(priorities == 1.0)  # losses came back
