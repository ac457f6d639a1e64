"""Before a long run starts, the recipe says what will run, for how long, and how to run a short one.

The trap this guards: ``python -m recipes.dqn train`` with no options started the paper's Atari
agent (``ALE/Pong-v5``, 50,000,000 agent steps, days on a CPU) and wrote ``runs/`` without a word;
only ``--help`` said what the defaults were.  Now one summary is printed before anything starts, and
on a terminal a run estimated over an hour asks ``y/N`` (default no; ``--yes`` skips the question).
Terminals are simulated: stdin is replaced by a stream whose ``isatty()`` answers as asked.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from recipes.common import launch
from recipes.common.launch import Measured, RunPlan


class Stdin(io.StringIO):
    """A stdin that holds ``answer`` and says whether it is a terminal."""

    def __init__(self, answer: str = "", tty: bool = True) -> None:
        super().__init__(answer)
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty

    @property
    def asked(self) -> bool:
        """Whether the answer was read."""
        return self.tell() > 0


def plan(steps: int, rate: float | None, exact: bool = True, budget: float | None = None) -> RunPlan:
    measured = None if rate is None else Measured(rate, "docs/results/x.json", "what was timed")
    return RunPlan(
        "python -m recipes.x run",
        "an agent",
        steps,
        "runs/x",
        "--steps 10",
        measured,
        exact,
        time_budget_s=budget,
    )


def test_the_summary_names_the_run_its_time_its_source_and_a_short_run() -> None:
    text = plan(7_200_000, 1000.0).summary()
    assert "python -m recipes.x run: an agent, 7,200,000 agent steps, writing runs/x" in text
    assert (
        "about 2.0 h at 1,000.0 agent steps/s, measured for this configuration in docs/results/x.json" in text
    )
    assert "a short run: --steps 10; --yes starts without asking" in text
    assert "estimated time: unknown" in plan(10, None).summary()
    assert "at least 2.0 h" in plan(7_200_000, 1000.0, exact=False).summary()
    assert "at most 10 min (--time_budget_s)" in plan(7_200_000, 1000.0, budget=600).summary()


@pytest.mark.parametrize(
    ("tty", "steps", "yes", "asks"),
    [
        (True, 7_200_000, False, True),  # a terminal, over an hour: asks
        (False, 7_200_000, False, False),  # a script or CI: goes on after the summary
        (True, 7_200_000, True, False),  # --yes
        (True, 1_000_000, False, False),  # under an hour
    ],
)
def test_it_asks_only_on_a_terminal_over_an_hour_without_yes(
    tty: bool, steps: int, yes: bool, asks: bool
) -> None:
    stdin, out = Stdin("y\n", tty=tty), io.StringIO()
    launch.confirm(plan(steps, 1000.0), yes, stdin=stdin, out=out)
    assert stdin.asked == asks and ("Start it? [y/N]" in out.getvalue()) == asks
    assert out.getvalue().startswith("python -m recipes.x run: an agent")


@pytest.mark.parametrize("answer", ["n\n", "\n", "", "nope\n"])
def test_anything_but_yes_does_not_start(answer: str) -> None:
    out = io.StringIO()
    with pytest.raises(SystemExit) as stopped:
        launch.confirm(plan(7_200_000, 1000.0), stdin=Stdin(answer), out=out)
    assert stopped.value.code == 1 and out.getvalue().rstrip().endswith("not started")


def test_take_yes() -> None:
    assert launch.take_yes(["--env", "CartPole-v1", "--yes"]) == (True, ["--env", "CartPole-v1"])
    assert launch.take_yes(["--env", "CartPole-v1"]) == (False, ["--env", "CartPole-v1"])


def test_a_missing_measurement_is_none_not_an_error() -> None:
    assert launch.measured("docs/results/no_such.json", "x", lambda d: d["rate"]) is None
    assert (
        launch.measured("docs/results/cartpole.json", "x", lambda d: d["no_such_arm"]["steps_per_s"]) is None
    )


# -- python -m recipes.dqn train ------------------------------------------------------------------


class StartedError(Exception):
    """Raised by the stub of ``train``: the run would have started here."""


@pytest.fixture
def dqn_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    """``recipes.dqn.run`` in an empty working directory, its ``train`` replaced by a stub that
    records the config it would have run."""
    pytest.importorskip("gymnasium")
    from recipes.dqn import run

    monkeypatch.chdir(tmp_path)
    started: list[object] = []

    def train(cfg: object) -> object:
        started.append(cfg)
        raise StartedError  # stands for the run: main goes no further

    monkeypatch.setattr(run, "train", train)
    monkeypatch.setattr(run, "started", started, raising=False)
    return run


def test_dqn_train_with_no_options_says_what_it_runs_and_no_aborts_before_runs(
    dqn_run: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", Stdin("n\n"))
    with pytest.raises(SystemExit) as stopped:
        dqn_run.main([])  # type: ignore[attr-defined]
    err = capsys.readouterr().err
    assert stopped.value.code == 1 and dqn_run.started == []  # type: ignore[attr-defined]
    assert "ALE/Pong-v5" in err and "50,000,000 agent steps" in err and "benchmarks/atari_loop.json" in err
    assert "--total_steps 100000, or --env CartPole-v1" in err and "Start it? [y/N]" in err
    assert not (tmp_path / "runs").exists() and list(tmp_path.iterdir()) == []


def test_dqn_train_off_a_terminal_prints_the_summary_and_starts(
    dqn_run: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", Stdin("n\n", tty=False))
    with pytest.raises(StartedError):
        dqn_run.main(["--env", "CartPole-v1", "--arm", "rank"])  # type: ignore[attr-defined]
    err = capsys.readouterr().err
    assert len(dqn_run.started) == 1 and "Start it?" not in err  # type: ignore[attr-defined]
    assert "CartPole-v1" in err and "docs/results/cartpole.json" in err


def test_dqn_train_yes_starts_without_asking(
    dqn_run: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stdin = Stdin("n\n")
    monkeypatch.setattr(sys, "stdin", stdin)
    with pytest.raises(StartedError):
        dqn_run.main(["--yes", "--total_steps", "60000000"])  # type: ignore[attr-defined]
    assert not stdin.asked and dqn_run.started[0].total_steps == 60_000_000  # type: ignore[attr-defined]
    assert "60,000,000 agent steps" in capsys.readouterr().err


def test_every_recorded_dqn_throughput_is_read() -> None:
    """Each ``(env, device, arm)`` the recipe claims a measurement for finds it in its JSON."""
    pytest.importorskip("gymnasium")
    from recipes.dqn.plan import MEASUREMENTS, measurement

    missing = [m for m in MEASUREMENTS if measurement(*m) is None]
    assert missing == []


# -- the other commands that start long runs -----------------------------------------------------


def _stub(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[object]:
    """Replace ``module.name`` by a stub that records its arguments and stops the command there."""
    started: list[object] = []

    def stub(*args: object, **kwargs: object) -> object:
        started.append(args)
        raise StartedError

    monkeypatch.setattr(module, name, stub)
    return started


def test_dqn_together_says_what_it_runs_and_no_aborts_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("gymnasium")
    from recipes.dqn import together

    monkeypatch.chdir(tmp_path)
    started = _stub(monkeypatch, together, "train_together")
    monkeypatch.setattr(sys, "stdin", Stdin("n\n"))
    with pytest.raises(SystemExit) as stopped:
        together.main(["--out", "runs/pong.json"])
    err = capsys.readouterr().err
    assert stopped.value.code == 1 and started == [] and list(tmp_path.iterdir()) == []
    assert "9 Double DQN agents" in err and "ALE/Pong-v5" in err and "runs/pong.json" in err
    assert "benchmarks/atari_loop.json" in err and "--seeds 1 --set total_steps=4000" in err

    monkeypatch.setattr(sys, "stdin", Stdin("n\n", tty=False))  # CI, make demo: no question
    with pytest.raises(StartedError):
        together.main(["--out", "runs/pong.json", "--seeds", "1"])
    assert "Start it?" not in capsys.readouterr().err and len(started) == 1


def test_dqn_sweep_summary_counts_every_run_and_no_aborts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("gymnasium")
    from recipes.dqn import sweep

    monkeypatch.chdir(tmp_path)
    started = _stub(monkeypatch, sweep, "sweep")
    monkeypatch.setattr(sys, "stdin", Stdin("n\n"))
    with pytest.raises(SystemExit) as stopped:
        sweep.main(["sweep", "--env", "ALE/Pong-v5", "--seeds", "2", "--jobs", "2"])
    err = capsys.readouterr().err
    assert stopped.value.code == 1 and started == [] and list(tmp_path.iterdir()) == []
    assert "6 Double DQN runs (uniform, proportional, rank x 2 seeds) on ALE/Pong-v5" in err
    assert "300,000,000 agent steps" in err and "Start it? [y/N]" in err

    monkeypatch.setattr(sys, "stdin", Stdin("", tty=False))
    with pytest.raises(StartedError):
        sweep.main(["sweep", "--env", "CartPole-v1", "--yes"])
    assert "docs/results/cartpole.json" in capsys.readouterr().err and len(started) == 1


def test_atari_sweep_asks_once_and_its_games_do_not_ask_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("yaml")  # the recipe's configs (the rl extra)
    pytest.importorskip("jsonargparse")
    from recipes.dqn import atari_sweep

    monkeypatch.chdir(tmp_path)
    started = _stub(monkeypatch, atari_sweep, "run_games")
    monkeypatch.setattr(sys, "stdin", Stdin("n\n"))
    with pytest.raises(SystemExit) as stopped:
        atari_sweep.main(["--device", "cpu"])
    err = capsys.readouterr().err
    assert stopped.value.code == 1 and started == [] and list(tmp_path.iterdir()) == []
    assert "3 games (ALE/Pong-v5, ALE/Breakout-v5, ALE/Boxing-v5), 27 agents in all" in err

    monkeypatch.setattr(sys, "stdin", Stdin("y\n"))
    with pytest.raises(StartedError):
        atari_sweep.main(["--device", "cpu"])
    commands: list[list[str]] = started[0][1]  # type: ignore[index]
    assert all(command[3] == "together" and "--yes" in command for command in commands)


def test_apex_train_says_what_it_runs_and_no_aborts_before_ray(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("ray")
    from recipes.apex import run

    monkeypatch.chdir(tmp_path)
    started = _stub(monkeypatch, run, "train")
    monkeypatch.setattr(sys, "stdin", Stdin("n\n"))
    with pytest.raises(SystemExit) as stopped:
        run.main(["train", "--time_budget_s", "7200"])
    err = capsys.readouterr().err
    assert stopped.value.code == 1 and started == [] and list(tmp_path.iterdir()) == []
    assert "Ape-X, arm proportional, 2 actors" in err and "50,000 env steps" in err
    assert "at most 2.0 h (--time_budget_s)" in err

    monkeypatch.setattr(sys, "stdin", Stdin("", tty=False))
    with pytest.raises(StartedError):
        run.main(["train"])
    assert "estimated time: unknown" in capsys.readouterr().err and len(started) == 1


def test_apex_compare_says_what_it_runs_from_its_recorded_rate_and_no_aborts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("ray")
    from recipes.apex import studies

    monkeypatch.chdir(tmp_path)
    started = _stub(monkeypatch, studies, "compare")
    monkeypatch.setattr(sys, "stdin", Stdin("n\n"))
    with pytest.raises(SystemExit) as stopped:
        studies.main(["compare", "--total_steps", "1000000"])
    err = capsys.readouterr().err
    assert stopped.value.code == 1 and started == [] and list(tmp_path.iterdir()) == []
    assert "9 runs on CartPole-v1 (3 seeds x Ape-X free, matched and one process)" in err
    assert "9,000,000 env steps" in err and "docs/results/apex_compare_cartpole.json" in err

    started = _stub(monkeypatch, studies, "scaling")
    monkeypatch.setattr(sys, "stdin", Stdin("", tty=False))
    with pytest.raises(StartedError):
        studies.main(["scaling", "--actors", "1,2"])
    err = capsys.readouterr().err
    assert "one 60 s run per actor count (1, 2)" in err and "at most 2 min (--seconds per run)" in err


def test_apex_ablate_and_actor_learner_say_what_they_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("ray")
    from recipes.apex import ablate, actor_learner

    monkeypatch.chdir(tmp_path)
    started = _stub(monkeypatch, ablate, "ablate")
    monkeypatch.setattr(sys, "stdin", Stdin("n\n"))
    with pytest.raises(SystemExit) as stopped:
        ablate.main(["--total_steps", "1000000"])
    err = capsys.readouterr().err
    assert stopped.value.code == 1 and started == [] and list(tmp_path.iterdir()) == []
    assert "40 runs (8 arms x 5 seeds)" in err and "docs/results/apex_matched_first.json" in err

    started = _stub(monkeypatch, actor_learner, "main")
    monkeypatch.setattr(sys, "stdin", Stdin("", tty=False))
    with pytest.raises(StartedError):
        actor_learner.command(["--updates", "500"])
    err = capsys.readouterr().err
    assert "500 learner updates" in err and "docs/results/actor_learner_limited.json" in err


@pytest.mark.parametrize(
    ("module", "argv", "said"),
    [
        ("cliffwalk", ["--seeds", "2"], "5 agents x 2 representations x n = 2..12 x 2 seeds, 220 runs"),
        ("offpolicy", ["--seeds", "1"], "28 runs (2 envs x 2 representations x 7 arms x 1 seeds)"),
    ],
)
def test_an_experiment_prints_one_line_and_never_blocks(
    module: str,
    argv: list[str],
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The Blind Cliffwalk and the off-policy recipe (``make demo`` runs the first without a terminal):
    one line, and no question (nothing recorded, so no estimate over an hour)."""
    import dataclasses
    import importlib

    pytest.importorskip("gymnasium")
    experiment = importlib.import_module(f"recipes.{module}.experiment").EXPERIMENT
    started: list[object] = []

    def run(config: object) -> object:
        started.append(config)
        raise StartedError

    monkeypatch.chdir(tmp_path)
    stdin = Stdin("n\n")
    monkeypatch.setattr(sys, "stdin", stdin)
    with pytest.raises(StartedError):
        dataclasses.replace(experiment, run=run).command(argv)
    err = capsys.readouterr().err
    assert len(started) == 1 and not stdin.asked and len(err.strip().splitlines()) == 1
    assert said in err and f"writing runs/{module}; estimated time: unknown" in err


def test_imbalanced_mnist_compare_and_lr_sweep_say_what_they_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("jsonargparse")  # the recipes' command lines (the lightning extra)
    from recipes.imbalanced_mnist import config

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdin", Stdin("n\n"))
    with pytest.raises(SystemExit) as stopped:
        config.start_compare(["compare", "--max_steps", "200000"])
    err = capsys.readouterr().err
    assert stopped.value.code == 1 and list(tmp_path.iterdir()) == []
    assert "9 runs (3 arms x 3 seeds), 1,800,000 updates" in err
    assert "docs/results/imbalanced_mnist.json" in err

    monkeypatch.setattr(sys, "stdin", Stdin("", tty=False))  # make demo: one line, no question
    assert config.start_compare(["compare", "--seeds", "1"]).seeds == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Start it?" not in err

    plan = config.sweep_plan(config.parse_sweep(["--max_steps", "100000"]))
    seconds = plan.estimate_s()
    assert plan.steps == 45 * 100_000 and seconds is not None and seconds > launch.ASK_ABOVE_S
    assert "docs/results/imbalanced_mnist_lr_sweep.json" in plan.summary()


# -- the studies --------------------------------------------------------------------------------


def test_per_vs_uniform_run_says_what_it_trains_and_no_aborts_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``run`` prints its plan from the benchmark's one-agent rate (and asks: over an hour); ``--yes``
    given to the command reaches the run without a question; ``report`` runs nothing and says nothing."""
    for extra in ("gymnasium", "tqdm", "matplotlib"):
        pytest.importorskip(extra)
    from recipes.common.cli import dispatch
    from recipes.studies import COMMANDS, per_vs_uniform

    monkeypatch.chdir(tmp_path)
    started = _stub(monkeypatch, per_vs_uniform, "run")
    monkeypatch.setattr(sys, "stdin", Stdin("n\n"))
    with pytest.raises(SystemExit) as stopped:
        per_vs_uniform.main(["run", "--envs", "CartPole-v1"])
    err = capsys.readouterr().err
    assert stopped.value.code == 1 and started == [] and list(tmp_path.iterdir()) == []
    # amended protocol: 4 arms × 20 seeds + proportional at η × 10 seeds, 50,000 steps each
    assert "90 Double DQN runs (90 on CartPole-v1;" in err and "4,500,000 agent steps" in err
    assert "benchmarks/cartpole_stack.json (1 agent in one process on CartPole-v1" in err
    assert "Start it? [y/N]" in err

    stdin = Stdin("n\n")
    monkeypatch.setattr(sys, "stdin", stdin)
    with pytest.raises(StartedError):
        dispatch("studies", "", COMMANDS, ["per-vs-uniform", "run", "--envs", "CartPole-v1", "--yes"])
    assert not stdin.asked and "90 Double DQN runs" in capsys.readouterr().err and len(started) == 1

    reported = _stub(monkeypatch, per_vs_uniform, "write_report")
    with pytest.raises(StartedError):
        per_vs_uniform.main(["report"])
    assert capsys.readouterr().err == "" and len(reported) == 1


def test_sb3_cartpole_says_what_it_runs_from_the_committed_run_times_and_no_aborts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("stable_baselines3")
    from recipes.studies import sb3_cartpole

    monkeypatch.chdir(tmp_path)
    started = _stub(monkeypatch, sb3_cartpole, "run")
    monkeypatch.setattr(sys, "stdin", Stdin("n\n"))
    with pytest.raises(SystemExit) as stopped:
        sb3_cartpole.main(["--run"])
    err = capsys.readouterr().err
    assert stopped.value.code == 1 and started == [] and list(tmp_path.iterdir()) == []
    assert "30 SB3 DQN runs on CartPole-v1 (uniform, proportional, rank x 10 seeds)" in err
    assert "measured for this configuration in docs/results/sb3_cartpole_fixed.json" in err

    monkeypatch.setattr(sys, "stdin", Stdin("", tty=False))
    with pytest.raises(StartedError):
        sb3_cartpole.main(["--seeds", "1", "--timesteps", "512"])
    assert "3 SB3 DQN runs" in capsys.readouterr().err and len(started) == 1


def test_supervised_beta_says_what_it_runs_and_asks_once_a_time_is_recorded(
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No time recorded yet: the summary says "unknown" and nothing is asked; with a recorded time
    (the ``wall_s`` the command now writes), a run over an hour asks and "n" starts nothing."""
    pytest.importorskip("jsonargparse")  # the recipes' command lines (an extra)
    from recipes.studies import supervised_beta

    monkeypatch.chdir(tmp_path)
    started = _stub(monkeypatch, supervised_beta, "run")
    stdin = Stdin("n\n")
    monkeypatch.setattr(sys, "stdin", stdin)
    with pytest.raises(StartedError):
        supervised_beta.main(["--seeds", "2"])
    err = capsys.readouterr().err
    assert "6 MLP trainings (3 arms x 2 seeds), 12,000 SGD steps" in err and not stdin.asked
    assert "estimated time: unknown" in err and len(started) == 1

    from recipes.studies import supervised_beta_config

    recorded = tmp_path_factory.mktemp("recorded") / "supervised_beta.json"
    recorded.write_text('{"config": {"seeds": 1, "steps": 1000}, "wall_s": 1.0}')  # 3,000 steps/s
    monkeypatch.setattr(supervised_beta_config, "RESULT", str(recorded))
    with pytest.raises(SystemExit) as stopped:
        supervised_beta.main(["--seeds", "1", "--steps", "4000000"])  # 12,000,000 steps: 67 min
    err = capsys.readouterr().err
    assert stopped.value.code == 1 and len(started) == 1 and list(tmp_path.iterdir()) == []
    assert "about 67 min at 3,000.0 SGD steps/s" in err and "Start it? [y/N]" in err


def test_diagnostics_figures_says_what_it_runs_and_no_aborts_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("jsonargparse")
    from recipes.studies import diagnostics_figures

    monkeypatch.chdir(tmp_path)
    started = _stub(monkeypatch, diagnostics_figures, "run_dqn")
    monkeypatch.setattr(sys, "stdin", Stdin("n\n"))
    with pytest.raises(SystemExit) as stopped:
        diagnostics_figures.main(["--steps", "4000000"])
    err = capsys.readouterr().err
    assert stopped.value.code == 1 and started == [] and list(tmp_path.iterdir()) == []
    assert "3 Double DQN runs on MinAtar/Breakout-v1 (uniform, proportional, rank;" in err
    assert "and 1 imbalanced-MNIST run (2,000 updates)" in err and "Start it? [y/N]" in err
    assert "docs/results/diagnostics/diagnostics_figures.json" in err

    monkeypatch.setattr(sys, "stdin", Stdin("", tty=False))
    with pytest.raises(StartedError):
        diagnostics_figures.main(["--parts", "dqn"])
    err = capsys.readouterr().err
    assert "3 Double DQN runs" in err and "MNIST" not in err and "estimated time: about" in err


def test_replay_ablation_says_what_its_sweeps_run_and_no_aborts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("jsonargparse")
    from recipes.studies import replay_ablation

    monkeypatch.chdir(tmp_path)
    started: list[object] = []

    def sweep(config: object) -> dict[str, object]:
        started.append(config)
        return {}

    monkeypatch.setattr("recipes.dqn.sweep.sweep", sweep)
    monkeypatch.setattr(sys, "stdin", Stdin("n\n"))
    with pytest.raises(SystemExit) as stopped:
        replay_ablation.main(["--cartpole_steps", "5000000"])
    err = capsys.readouterr().err
    assert stopped.value.code == 1 and started == [] and list(tmp_path.iterdir()) == []
    assert "25 Double DQN runs (uniform, proportional, rank, lap, laber x 5 seeds) on CartPole-v1;" in err
    assert "15 Double DQN runs" in err and "MinAtar/Breakout-v1" in err and "Start it? [y/N]" in err

    monkeypatch.setattr(sys, "stdin", Stdin("", tty=False))
    replay_ablation.main(["--envs", "CartPole-v1", "--cartpole_seeds", "1", "--cartpole_steps", "2000"])
    assert "5 Double DQN runs" in capsys.readouterr().err and len(started) == 1
