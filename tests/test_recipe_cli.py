"""The recipes as command-line tools (recipes/common/cli.py): comma lists, checks, one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("gymnasium")
pytest.importorskip("yaml")
pytest.importorskip("tqdm")
pytest.importorskip("cloudpickle")
pytest.importorskip("lightning")
pytest.importorskip("jsonargparse")

from recipes.cliffwalk.experiment import CliffwalkConfig
from recipes.common import cli
from recipes.dqn.config import DDQNConfig, load_config
from recipes.dqn.run import main
from recipes.dqn.sweep import PlotConfig, SweepConfig
from recipes.imbalanced_mnist.experiment import CompareConfig
from recipes.offpolicy.experiment import OffPolicyConfig

ROOT = Path(__file__).resolve().parent.parent


def run_module(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def error_line(capsys: pytest.CaptureFixture[str], cls: type, *args: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        cli.parse(cls, list(args), prog="recipe")
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("value", ["rank,oracle", "[rank,oracle]", "rank"])
def test_list_options_take_a_comma_list_a_single_value_or_brackets(value: str) -> None:
    """Bug: cliffwalk and offpolicy took lists only as '[a,b]' (``--agents rank`` was refused)
    while ``atari_ddqn sweep`` took ``--arms a,b``."""
    expected = ("rank",) if value == "rank" else ("rank", "oracle")
    assert tuple(cli.parse(CliffwalkConfig, ["--agents", value], prog="c").agents) == expected
    assert tuple(cli.parse(CliffwalkConfig, [f"--agents={value}"], prog="c").agents) == expected
    assert tuple(cli.parse(OffPolicyConfig, ["--arms", "weighted_is"], prog="o").arms) == ("weighted_is",)
    assert tuple(cli.parse(CompareConfig, ["--arms", "uniform,prioritized"], prog="m").arms) == (
        "uniform",
        "prioritized",
    )
    sweep = cli.parse(SweepConfig, ["--env", "CartPole-v1", "--arms", "rank"], prog="s")
    assert tuple(sweep.arms) == ("rank",)
    assert tuple(cli.parse(DDQNConfig, ["--env", "CartPole-v1", "--hidden", "64,32"], prog="d").hidden) == (
        64,
        32,
    )


def test_bad_values_fail_up_front_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    """Bugs: ``cliffwalk --step_size -1`` ran until ``priorities[3121]=nan``; ``offpolicy
    --beta0_rank 2`` was reported as ``beta.start``; ``--env Pendulum-v1`` raised AttributeError."""
    assert error_line(capsys, CliffwalkConfig, "--step_size", "-1") == (
        "error: --step_size should lie in (0, 1], but got -1"
    )
    assert error_line(capsys, CliffwalkConfig, "--agents", "rank,rank").startswith("error: --agents should")
    assert error_line(capsys, OffPolicyConfig, "--beta0_rank", "2") == (
        "error: --beta0_rank should lie in [0, 1], but got 2"
    )
    assert error_line(capsys, CompareConfig, "--max_steps", "10", "--eval_every", "20").startswith(
        "error: --eval_every should be <= max_steps=10"
    )
    pendulum = error_line(capsys, DDQNConfig, "--env", "Pendulum-v1")
    assert pendulum.startswith("error: --env should have discrete actions") and "Pendulum-v1" in pendulum
    assert error_line(capsys, DDQNConfig, "--env", "NoSuchEnv-v0").startswith("error: --env should be")
    assert (
        error_line(capsys, DDQNConfig, "--batch_size", "0") == "error: --batch_size should be >= 1, but got 0"
    )
    with pytest.raises(ValueError, match="step_size should lie in"):
        CliffwalkConfig(step_size=-1.0)  # the same check from Python, as a ValueError


def test_total_steps_below_learning_starts_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: ``--total_steps`` below ``--learning_starts`` finished 'done' with 0 updates, silently."""
    with pytest.raises(cli.ConfigError, match="total_steps should be > learning_starts=1000"):
        load_config("CartPole-v1", "proportional", total_steps=500)
    with pytest.raises(SystemExit) as exit_info:
        main(["--env", "CartPole-v1", "--total_steps", "500", "--progress", "false"])
    assert exit_info.value.code == 2
    message = "error: --total_steps should be > learning_starts=1000 (no update would run), but got 500"
    assert capsys.readouterr().err.strip() == message


def test_atari_ddqn_help_lists_the_options_and_errors_are_one_line() -> None:
    """Bug: ``python -m recipes.dqn train --help`` printed one usage line and no option; a config
    error was a traceback."""
    shown = run_module("recipes.dqn", "train", "--help")
    assert shown.returncode == 0
    assert "--total_steps" in shown.stdout and "--learning_starts" in shown.stdout and "sweep" in shown.stdout
    assert "--arms" in run_module("recipes.dqn", "sweep", "--help").stdout
    moved = run_module("recipes.atari_ddqn", "sweep", "--env", "CartPole-v1")
    assert moved.returncode == 2 and "python -m recipes.dqn train" in moved.stderr
    failed = run_module("recipes.cliffwalk", "run", "--step_size", "-1")
    assert failed.returncode == 2
    assert failed.stderr.strip() == "error: --step_size should lie in (0, 1], but got -1"


def test_outputs_default_to_runs_not_to_the_committed_results(capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: every recipe wrote to docs/results/ by default, so trying one overwrote the committed
    results."""
    assert CliffwalkConfig().out_dir == "runs/cliffwalk"
    assert OffPolicyConfig().out_dir == "runs/offpolicy"
    assert CompareConfig().out_dir == "runs/imbalanced_mnist"
    assert SweepConfig(env="CartPole-v1").out == "runs/atari_ddqn/sweep"
    assert error_line(capsys, PlotConfig).startswith("error:")  # the JSON to re-draw must be named
    makefile = (ROOT / "Makefile").read_text()
    assert "docs/results" not in makefile


def test_command_line_writes_lists_as_comma_lists() -> None:
    config = CliffwalkConfig(agents=("rank", "oracle"), out_dir="docs/results")
    line = cli.command_line("python -m recipes.cliffwalk run", config, CliffwalkConfig())
    assert line == "python -m recipes.cliffwalk run --agents rank,oracle --out_dir docs/results"


def test_subcommand_splits_the_command_from_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    commands = ("sweep", "plot")
    assert cli.subcommand(["plot", "--json", "x.json"], commands, prog="p") == ("plot", ["--json", "x.json"])
    with pytest.raises(SystemExit) as exit_:
        cli.subcommand(["--help"], commands, prog="python -m recipes.x", epilog="One run: y.")
    assert exit_.value.code == 0
    assert capsys.readouterr().out == "usage: python -m recipes.x {sweep,plot} [options]\nOne run: y.\n"
    for argv, got in (([], "nothing"), (["train", "--seed", "1"], "train")):
        with pytest.raises(SystemExit) as exit_:
            cli.subcommand(argv, commands, prog="p")
        assert exit_.value.code == 2
        assert capsys.readouterr().err == f"error: the command should be one of sweep, plot, but got {got}\n"
