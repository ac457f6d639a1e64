"""The imbalanced-MNIST step-size sweep: the selection rule, its table, and a tiny end-to-end run on
the generated IDX files of ``tests/test_imbalanced_mnist.py``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lightning")
pytest.importorskip("torchvision")
pytest.importorskip("jsonargparse")

from recipes.imbalanced_mnist import lr_sweep as sweep
from tests.test_imbalanced_mnist import make_idx_dir

ROOT = Path(__file__).resolve().parent.parent


def run(arm: str, lr: float, errors: float, spread: float = 0.0) -> dict[str, object]:
    per_seed = [errors - spread, errors, errors + spread]
    return {"arm": arm, "lr": lr, "val_errors_median": errors, "val_errors_final": per_seed}


def test_each_arm_keeps_its_step_size_of_fewest_median_validation_errors() -> None:
    runs = [run("uniform", 0.3, 415), run("uniform", 0.1, 416), run("prioritized", 0.3, 293)]
    runs += [run("prioritized", 0.1, 359), run("informed", 0.3, 900), run("informed", 0.01, 284)]
    assert sweep.best_step_sizes(runs, (0.3, 0.1, 0.01)) == {
        "uniform": 0.3,
        "prioritized": 0.3,
        "informed": 0.01,
    }


def test_a_tie_goes_to_the_step_size_listed_first() -> None:
    runs = [run("uniform", 0.1, 400), run("uniform", 0.3, 400), run("uniform", 0.03, 500)]
    assert sweep.best_step_sizes(runs, (0.3, 0.1, 0.03)) == {"uniform": 0.3}
    assert sweep.best_step_sizes(runs, (0.1, 0.3, 0.03)) == {"uniform": 0.1}


def test_the_table_bolds_the_best_and_shows_the_configured_step_size() -> None:
    results = {
        "runs": [run("prioritized", 0.3, 293, spread=5), run("prioritized", 0.1, 359)],
        "best": {"prioritized": 0.3},
        "configured": {"prioritized": 0.1},
    }
    row = "| prioritized | **293 (288-298)** | 359 (359-359) | 0.1 |"
    assert sweep.table(results, (0.3, 0.1)).splitlines()[2] == row


def test_the_arm_configs_use_the_step_sizes_the_committed_sweep_chose() -> None:
    # A config changed without rerunning the sweep (or a sweep committed without the config) fails here.
    committed = json.loads((ROOT / "docs" / "results" / "imbalanced_mnist_lr_sweep.json").read_text())
    assert set(committed["best"]) == set(sweep.ARMS)
    assert {arm: sweep.configured_step_size(arm) for arm in sweep.ARMS} == committed["best"]
    assert committed["best"] == sweep.best_step_sizes(committed["runs"], (0.3, 0.1, 0.03, 0.01, 0.003))


@pytest.mark.parametrize(
    ("field", "value"), [("step_sizes", ()), ("step_sizes", (0.1, -0.3)), ("arms", ("greedy",))]
)
def test_bad_settings_are_refused_naming_the_field(field: str, value: object) -> None:
    with pytest.raises((ValueError, TypeError), match=field):
        sweep.SweepConfig(**{field: value})  # type: ignore[arg-type]


def test_a_tiny_sweep_writes_every_run_and_the_choice(tmp_path: Path) -> None:
    make_idx_dir(tmp_path / "data" / "MNIST" / "raw")
    out = tmp_path / "out"
    options = {
        "step_sizes": "0.3,0.01",
        "arms": "uniform,prioritized",
        "seeds": "2",
        "max_steps": "4",
        "eval_every": "2",
        "root": str(tmp_path / "data"),
        "dataset": "mnist",
        "workers": "1",
        "overrides": "--data.keep_fraction,0.1,--data.val_per_class,5",
        "out_dir": str(out),
    }
    results = sweep.main([item for name, value in options.items() for item in (f"--{name}", value)])
    written = json.loads((out / "imbalanced_mnist_lr_sweep.json").read_text())
    assert written["best"] == results["best"]
    assert sorted((r["arm"], r["lr"]) for r in written["runs"]) == [
        ("prioritized", 0.01),
        ("prioritized", 0.3),
        ("uniform", 0.01),
        ("uniform", 0.3),
    ]
    errors = {(r["arm"], r["lr"]): r["val_errors_final"] for r in written["runs"]}
    assert all(len(per_seed) == 2 for per_seed in errors.values())
    for arm, lr in written["best"].items():
        assert np.median(errors[arm, lr]) == min(np.median(errors[arm, other]) for other in (0.3, 0.01))
    assert "| uniform |" in (out / "imbalanced_mnist_lr_sweep.md").read_text()
