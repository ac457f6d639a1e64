"""``recipes/apex/run.py`` and its studies (``recipes/apex/studies.py``): ε_i's defaults, the actors' n-step
transitions, the config checks, the command lines, and CI-sized end-to-end runs on CartPole and
MinAtar Breakout (one local Ray for the module)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("ray")
pytest.importorskip("gymnasium")

from recipes.apex import run as apex_dqn
from recipes.apex import studies as apex_studies
from recipes.apex.config import ApexConfig, rate_limit
from recipes.apex.exploration import EPSILON, EPSILON_EXPONENT, actor_epsilon
from recipes.apex.nstep import NStepBuilder
from recipes.apex.run import train
from recipes.common.cli import ConfigError


def test_the_ray_run_defaults_to_the_one_epsilon_schedule() -> None:
    """ApexConfig once wrote ε and α of ε_i again beside run.py's own defaults."""
    assert (ApexConfig().epsilon, ApexConfig().epsilon_exponent) == (EPSILON, EPSILON_EXPONENT)
    assert apex_dqn.actor_epsilon is actor_epsilon


def _episode(builder: NStepBuilder, env: int, rewards: list[float], gamma: float, terminated: bool) -> None:
    """Observations 10·env + t, actions t; the last step ends the episode."""
    for t, r in enumerate(rewards):
        last = t == len(rewards) - 1
        discount = 0.0 if (last and terminated) else gamma
        builder.add(env, np.array([10 * env + t]), t, r, discount, np.array([10 * env + t + 1]), last)


def test_nstep_builder_against_a_hand_computed_episode() -> None:
    """n = 3, γ = 0.5, rewards 1, 2, 4, 8; env 0 terminates, env 1 is truncated (same rewards)."""
    builder = NStepBuilder(3, 2)
    _episode(builder, 0, [1.0, 2.0, 4.0, 8.0], 0.5, terminated=True)
    _episode(builder, 1, [1.0, 2.0, 4.0, 8.0], 0.5, terminated=False)
    out = builder.take()
    assert builder.ready == 0 and builder.pending == 0
    # t=0: 1 + .5·2 + .25·4 = 3, Γ = .125, s_3; t=1: 2 + .5·4 + .25·8 = 6; t=2: 4 + .5·8 = 8; t=3: 8
    np.testing.assert_allclose(out["reward"], [3, 6, 8, 8, 3, 6, 8, 8])
    # termination ends the bootstrap (Γ = 0); truncation keeps Γ = γ^m from the last observation
    np.testing.assert_allclose(out["discount"], [0.125, 0, 0, 0, 0.125, 0.125, 0.25, 0.5])
    assert out["obs"][:, 0].tolist() == [0, 1, 2, 3, 10, 11, 12, 13]
    assert out["next_obs"][:, 0].tolist() == [3, 4, 4, 4, 13, 14, 14, 14]
    assert out["action"].tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    assert out["reward"].dtype == np.float32 and out["action"].dtype == np.int64


def test_nstep_builder_interleaves_environments_and_flushes_open_windows() -> None:
    builder = NStepBuilder(3, 2)
    for t in range(4):  # env 0 steps 4 times, env 1 twice, in turn; no episode ends
        for env in (0, 1) if t < 2 else (0,):
            builder.add(env, np.array([t]), env, float(t + 1), 0.9, np.array([t + 1]), False)
    assert builder.ready == 2 and builder.pending == 4  # env 0: t=0, 1 complete
    builder.flush()
    out = builder.take()
    # env 0: t=0 (1 + .9·2 + .81·3), t=1 (2 + .9·3 + .81·4) complete; flushed: t=2 (3 + .9·4), t=3 (4)
    # env 1: t=0 (1 + .9·2), t=1 (2), both flushed, bootstrapping from s_2
    np.testing.assert_allclose(out["reward"], [5.23, 7.94, 6.6, 4.0, 2.8, 2.0], rtol=1e-6)
    np.testing.assert_allclose(out["discount"], [0.729, 0.729, 0.81, 0.9, 0.81, 0.9], rtol=1e-6)
    assert out["next_obs"][:, 0].tolist() == [3, 4, 4, 4, 2, 2]


@pytest.mark.parametrize(
    ("changes", "option"),
    [
        ({"total_steps": 602}, "total_steps should be a multiple of envs_per_actor=4"),
        ({"actor_sync_every": 10}, "actor_sync_every should be a multiple"),
        ({"arm": "lap"}, "arm should be one of"),
        ({"learner": {"seed": 3}}, "learner should name fields"),
        ({"learner": {"lr": -1.0}}, "lr should be > 0"),
        ({"max_replay_ratio": 0.0}, "max_replay_ratio should be > 0"),
        ({"epsilon": 1.5}, "epsilon should lie in"),
        ({"samples_per_insert": 0.0}, "samples_per_insert should be > 0"),
        (
            {"samples_per_insert": 16.0, "max_replay_ratio": 0.5},
            "max_replay_ratio should be unset with samples_per_insert",
        ),
        ({"rate_error_buffer": 500.0}, "rate_error_buffer should come with samples_per_insert"),
        ({"rate_timeout": 5.0}, "rate_timeout should come with samples_per_insert"),
        ({"samples_per_insert": 16.0, "rate_timeout": 0.0}, "rate_timeout should be > 0"),
        (
            {"samples_per_insert": 16.0, "rate_error_buffer": 100.0},
            r"rate_error_buffer should be at least 448: its width must hold one actor's send",
        ),
    ],
)
def test_config_errors_name_the_option(changes: dict[str, Any], option: str) -> None:
    with pytest.raises(ConfigError, match=option):
        ApexConfig(**changes)


@pytest.mark.parametrize(
    ("main", "argv", "message"),
    [
        (apex_dqn.main, ["train", "--actors", "0"], "error: --actors should be > 0, but got 0"),
        (apex_dqn.main, ["sweep"], "error: the command should be one of train, but got sweep"),
        (apex_dqn.main, ["scaling"], "error: scaling is a study: python -m recipes.apex scaling"),
        (
            apex_studies.main,
            ["scaling", "--actors", "0,2"],
            "error: --actors should be a comma list of counts >= 1",
        ),
        (
            apex_studies.main,
            ["compare", "--ratios", "fast"],
            "error: --ratios should be a comma list of distinct",
        ),
        (
            apex_studies.main,
            ["compare", "--apex", '{"seed": 1}'],
            "error: --apex should name fields of ApexConfig",
        ),
        (apex_studies.main, ["train"], "error: the command should be one of scaling, compare, but got train"),
    ],
)
def test_command_line_errors_are_one_line(main: Any, argv: list[str], message: str, capsys: Any) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("main", "usage"),
    [
        (apex_dqn.main, "usage: python -m recipes.apex {train} [options]"),
        (apex_studies.main, "usage: python -m recipes.apex {scaling,compare} [options]"),
    ],
)
def test_help_names_the_commands(main: Any, usage: str, capsys: Any) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith(usage)


SMALL = {
    "learning_starts": 200,
    "batch_size": 16,
    "memory_size": 4000,
    "eval_steps": 200,
    "eval_episodes": 2,
    "eval_envs": 2,
    "log_every": 200,
}
RATE_TIMEOUT_S = 120.0  # a side stalled in the limiter fails the test (TimeoutError), not hangs it
ACTOR_CPUS = 0.5  # the session's Ray has 2 CPUs, and another module's test may still hold one


def cartpole(tmp_path: Path, **changes: Any) -> ApexConfig:
    """A CI-sized CartPole run: 2 actors of 2 environments, 800 env steps, the learner on the CPU."""
    return ApexConfig(
        env="CartPole-v1",
        actors=2,
        envs_per_actor=2,
        total_steps=800,
        actor_sync_every=100,
        actor_batch=16,
        publish_every=5,
        actor_cpus=ACTOR_CPUS,
        device="cpu",
        out=str(tmp_path),
        progress=False,
        learner=SMALL,
        **changes,
    )


def test_cartpole_end_to_end(ray_local: Any, tmp_path: Path) -> None:
    config = cartpole(tmp_path, eval_every=400, max_replay_ratio=0.5, min_replay_ratio=0.5, seed=3)
    result = train(config)
    saved = json.loads((tmp_path / "apex_dqn.json").read_text())
    assert saved["steps"] == result["steps"] == 800 and saved["config"]["actors"] == 2
    for key in ("command", "machine", "device", "actor_steps_per_s", "learner_updates_per_s", "wall_s"):
        assert saved[key], key
    actors = saved["actors"]
    # every env step of every actor is counted once, and every transition sent reached the memory
    assert sum(a["steps"] for a in actors) == 800
    assert saved["transitions_added"] == saved["transitions_sent"] == sum(a["stored"] for a in actors)
    for a in actors:  # an n-step transition per step, except the autoreset steps (open windows flushed)
        assert a["steps"] == a["transitions"] + a["reset_steps"]
    assert [a["epsilon"] for a in actors] == pytest.approx([0.4, 0.4**8])
    # min = max = 0.5: one update per 2 env steps once learning started, as the recipe on CartPole
    assert saved["updates"] == math.ceil(0.5 * saved["learning_env_steps"]) > 0
    assert saved["replay_ratio"]["updates_per_env_step"] == pytest.approx(saved["updates"] / 800)
    assert saved["dropped_updates"] >= 0 and saved["weights"]["pulls"] >= 2
    assert saved["eval_steps"] == [400, 800] and len(saved["eval_scores"]) == 2
    assert saved["learner_config"]["n_step"] == 3 and saved["learner_config"]["learning_starts"] == 200
    assert (tmp_path / "eval.csv").exists() and (tmp_path / "metrics.csv").exists()


def test_cartpole_held_to_samples_per_insert_by_the_memorys_rate_limiter(
    ray_local: Any, tmp_path: Path
) -> None:
    """``samples_per_insert=8`` with batches of 16 is the recipe's 0.5 updates per env step: the
    memory's limiter counts every transition sent and every item drawn, and holds inserts ·
    spi − samples within ± the default buffer ((actor_batch + envs_per_actor) · spi + batch_size)
    of spi · learning_starts, so the learner makes its share of updates and no more."""
    spi, batch, starts = 8.0, SMALL["batch_size"], SMALL["learning_starts"]
    config = cartpole(tmp_path, eval_every=0, samples_per_insert=spi, rate_timeout=RATE_TIMEOUT_S, seed=4)
    buffer = (16 + 2) * spi + batch
    assert rate_limit(config, batch, starts) == {
        "samples_per_insert": spi,
        "min_size_to_sample": starts,
        "error_buffer": buffer,
        "rate_timeout": RATE_TIMEOUT_S,
    }
    saved = train(config)
    ratio = saved["replay_ratio"]
    limiter = ratio["rate_limiter"]
    assert ratio["samples_per_insert"] == spi
    assert limiter["inserts"] == saved["transitions_added"] == saved["transitions_sent"]
    # the prefetcher draws ahead of the learner: up to prefetch_depth + 1 batches not trained on
    assert saved["updates"] * batch <= limiter["samples"] <= (saved["updates"] + 2) * batch
    assert abs(limiter["inserts"] * spi - limiter["samples"] - spi * starts) <= buffer
    assert saved["updates"] > 0.5 * (limiter["inserts"] - starts) - buffer / batch - 2


def test_minatar_breakout_tiny(ray_local: Any, tmp_path: Path) -> None:
    pytest.importorskip("minatar")
    config = ApexConfig(
        env="MinAtar/Breakout-v1",
        actors=1,
        envs_per_actor=2,
        total_steps=300,
        actor_sync_every=50,
        actor_batch=20,
        eval_every=0,
        actor_cpus=ACTOR_CPUS,
        device="cpu",
        out=str(tmp_path),
        progress=False,
        learner={**SMALL, "learning_starts": 100},
    )
    saved = train(config)
    assert saved["steps"] == 300 and saved["updates"] > 0
    assert saved["transitions_added"] == saved["actors"][0]["stored"] > 0
    assert saved["eval_steps"] == [] and saved["learner_config"]["network"] == "minatar_cnn"
