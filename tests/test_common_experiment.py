"""The one command block of the recipes whose run is one experiment and one report
(``recipes/common/experiment.py``): the Blind Cliffwalk and the off-policy recipes each once wrote
``command_line``, ``main`` and ``command`` again, differing only in their names."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

import pytest

from recipes.common import cli
from recipes.common.experiment import Experiment


@dataclass(frozen=True)
class ToyConfig:
    """A toy experiment."""

    steps: int = 3
    """How many steps."""
    out_dir: str = "runs/toy"
    """Where the report goes."""

    def __post_init__(self) -> None:
        cli.positive(self, "steps")


def test_an_experiment_parses_runs_and_writes_its_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("jsonargparse")  # the recipes' command lines (the rl extra)
    written: list[tuple[list[int], ToyConfig, str]] = []

    def write(results: list[int], config: ToyConfig, runtime_s: float, command: str) -> list[Path]:
        assert runtime_s >= 0.0
        written.append((results, config, command))
        return [Path(config.out_dir) / name for name in ("toy.md", "toy.json", "a.png", "b.png")]

    toy = Experiment("toy", ToyConfig, lambda config: list(range(config.steps)), write)
    assert toy.prog == "python -m recipes.toy run"
    out = str(tmp_path)
    assert toy.command(["--steps", "2", "--out_dir", out]) == [0, 1]
    command = f"python -m recipes.toy run --steps 2 --out_dir {out}"
    assert written == [([0, 1], ToyConfig(2, out), command)]
    assert capsys.readouterr().out.startswith(f"wrote {out}/toy.md, toy.json and 2 plot(s) in ")
    assert toy.command_line(ToyConfig()) == "python -m recipes.toy run"  # defaults are not repeated
    assert toy.main() == [0, 1, 2] and written[-1][1] == ToyConfig()
    with pytest.raises(SystemExit) as exit_:
        toy.command(["--steps", "0"])
    assert exit_.value.code == 2 and len(written) == 2  # a rejected option runs nothing


@pytest.mark.parametrize("recipe", ["cliffwalk", "offpolicy"])
def test_the_tabular_recipes_run_through_the_one_command_block(recipe: str) -> None:
    pytest.importorskip("tqdm")
    module = importlib.import_module(f"recipes.{recipe}.experiment")
    experiment = module.EXPERIMENT
    assert isinstance(experiment, Experiment) and experiment.name == recipe
    report = importlib.import_module(f"recipes.{recipe}.report")
    assert experiment.run is module.run_experiment and experiment.write is report.write
    for name in ("command_line", "main", "command"):
        assert getattr(module, name) == getattr(experiment, name), name
