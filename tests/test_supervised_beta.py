"""recipes/studies/supervised_beta.py with tiny arguments: the JSON it writes, and the same numbers twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("tqdm")

from recipes.studies import supervised_beta as rec


def test_recipe_json_structure_and_determinism(tmp_path: Path) -> None:
    args = ["--seeds", "2", "--steps", "30", "--common_count", "40", "--rare_count", "3"]
    args += ["--test_per_class", "10"]
    outputs = []
    for run in ("a", "b"):
        rec.main([*args, "--out_dir", str(tmp_path / run)])
        outputs.append(json.loads((tmp_path / run / "supervised_beta.json").read_text()))
    first, second = outputs
    assert first["arms"] == second["arms"]  # the same command gives the same numbers
    assert set(first["arms"]) == {"uniform", "prioritized_beta0", "prioritized_annealed"}
    assert first["config"]["seeds"] == 2 and first["config"]["steps"] == 30
    assert first["test_examples"] == 100
    for arm in first["arms"].values():
        errors = arm["test_errors"]
        assert len(errors) == 2 and all(isinstance(e, int) and 0 <= e <= 100 for e in errors)
        assert arm["mean_test_errors"] == round(sum(errors) / 2, 1)
    assert rec.Config().out_dir == "runs/supervised_beta"  # docs/results only when asked
