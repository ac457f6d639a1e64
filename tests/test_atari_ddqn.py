"""Double DQN recipe (recipes/dqn/): Algorithm 1's update, clipping, scores, resume, smoke runs."""

from __future__ import annotations

import json
import math
import pickle
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("gymnasium")
pytest.importorskip("yaml")
pytest.importorskip("tqdm")
pytest.importorskip("cloudpickle")

from recipes.dqn.agent import double_dqn_td_error, dqn_td_error, transition_targets, weighted_td_loss
from recipes.dqn.config import DDQNConfig, load_config
from recipes.dqn.envs import EnvSpec, atari_rom, evaluate, load_atari_scores, make_env, normalized_score
from recipes.dqn.loop import Schedules
from recipes.dqn.networks import DQNRMSprop, QNetwork, make_optimizer
from recipes.dqn.parts import TIMED, Timer
from recipes.dqn.run import train

torch.set_num_threads(1)


class Table(nn.Module):
    """``Q(s, ·)`` read from a table, for hand-made batches (observations are state ids)."""

    def __init__(self, values: list[list[float]]) -> None:
        super().__init__()
        self.values = nn.Parameter(torch.tensor(values, dtype=torch.float64))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.values[obs.long()]


def test_double_dqn_target_is_algorithm_1_line_11() -> None:
    """δ = R + γ γ_t Q_target(S_t, argmax_a Q(S_t, a)) − Q(S_{t−1}, A_{t−1}), by hand on 3 transitions.

    In state 1 the online network prefers action 0 and the target network action 1, so Double
    DQN's bootstrap (Q_target(1, 0) = 2) differs from DQN's max (Q_target(1, 1) = 10).
    """
    online = Table([[0.5, 1.5], [3.0, 1.0], [0.0, 4.0]])
    target = Table([[9.0, 9.0], [2.0, 10.0], [-1.0, 7.0]])
    obs = torch.tensor([0, 0, 2])
    action = torch.tensor([1, 0, 0])
    reward = torch.tensor([1.0, -1.0, 0.5], dtype=torch.float64)
    discount = torch.tensor([0.9, 0.0, 0.9], dtype=torch.float64)  # γ_j: 0 at termination
    next_obs = torch.tensor([1, 1, 2])
    delta = double_dqn_td_error(online, target, obs, action, reward, discount, next_obs)
    expected = [
        1.0 + 0.9 * 2.0 - 1.5,  # argmax_a Q(1, a) = 0, Q_target(1, 0) = 2
        -1.0 + 0.0 - 0.5,  # terminal: no bootstrap
        0.5 + 0.9 * 7.0 - 0.0,  # argmax_a Q(2, a) = 1, Q_target(2, 1) = 7
    ]
    torch.testing.assert_close(delta, torch.tensor(expected, dtype=torch.float64))
    # Only Q(S_{t-1}, A_{t-1}) carries the gradient: the target is a constant.
    delta.sum().backward()
    assert online.values.grad is not None
    grad = online.values.grad.numpy()
    np.testing.assert_array_equal(grad, [[-1.0, -1.0], [0.0, 0.0], [-1.0, 0.0]])
    assert target.values.grad is None


def test_dqn_target_is_the_target_networks_max() -> None:
    """DQN (the paper's first experiment, Table 3): δ = R + γ_j max_a Q_target(S_j, a) − Q(S_{j−1}, A_{j−1});
    on the same transitions as above it bootstraps from 10 where Double DQN takes 2."""
    online = Table([[0.5, 1.5], [3.0, 1.0], [0.0, 4.0]])
    target = Table([[9.0, 9.0], [2.0, 10.0], [-1.0, 7.0]])
    f64 = torch.float64
    args = (
        torch.tensor([0, 0, 2]),
        torch.tensor([1, 0, 0]),
        torch.tensor([1.0, -1.0, 0.5], dtype=f64),
        torch.tensor([0.9, 0.0, 0.9], dtype=f64),
        torch.tensor([1, 1, 2]),
    )
    delta = dqn_td_error(online, target, *args)
    expected = [1.0 + 0.9 * 10.0 - 1.5, -1.0 - 0.5, 0.5 + 0.9 * 7.0]
    torch.testing.assert_close(delta, torch.tensor(expected, dtype=torch.float64))
    double = double_dqn_td_error(online, target, *args)
    assert float((delta[0] - double[0]).detach()) == pytest.approx(0.9 * (10.0 - 2.0))  # 10 vs 2


def test_update_is_sum_of_weighted_clipped_td_errors() -> None:
    """∂loss/∂Q_j = −w_j clip(δ_j, −1, 1) with 'sum' (Algorithm 1's Δ, Sec. 4's TD clipping)."""
    q_taken = torch.tensor([0.0, 0.0, 0.0, 0.0], requires_grad=True)
    targets = torch.tensor([0.3, -0.8, 2.5, -4.0])
    weights = torch.tensor([1.0, 0.5, 0.25, 0.1])
    loss = weighted_td_loss(targets - q_taken, weights, clip_td=True, reduction="sum")
    loss.backward()
    assert q_taken.grad is not None
    torch.testing.assert_close(q_taken.grad, -weights * torch.tensor([0.3, -0.8, 1.0, -1.0]))
    q_taken.grad = None
    weighted_td_loss(targets - q_taken, weights, clip_td=False, reduction="mean").backward()
    torch.testing.assert_close(q_taken.grad, -weights * targets / 4)


def test_rewards_clipped_and_discount_zero_at_termination_or_life_loss() -> None:
    reward = np.array([5.0, -3.0, 0.5, 1.0])
    terminated = np.array([False, True, False, False])
    life_lost = np.array([False, False, True, False])
    clipped, discount = transition_targets(reward, terminated, life_lost, clip_reward=True, gamma=0.9)
    np.testing.assert_array_equal(clipped, [1.0, -1.0, 0.5, 1.0])
    np.testing.assert_array_equal(discount, [0.9, 0.0, 0.0, 0.9])
    raw, _ = transition_targets(reward, terminated, life_lost, clip_reward=False, gamma=0.9)
    np.testing.assert_array_equal(raw, reward)


@pytest.mark.parametrize(
    ("game", "ddqn", "rank", "proportional"),
    [  # the paper's normalised-score table (human starts), in per cent
        ("pong", 111, 110, 110),
        ("breakout", 1397, 1298, 1407),
        ("alien", 14, 19, 12),
        ("double_dunk", 981, 2000, 1169),
        ("video_pinball", 7221, 5727, 7367),  # random > human: the |·| in the denominator
        ("seaquest", 36, 63, 97),
    ],
)
def test_normalized_score_reproduces_the_papers_table(
    game: str, ddqn: int, rank: int, proportional: int
) -> None:
    """(agent − random) / |human − random| on the paper's raw scores gives its normalised table."""
    row = load_atari_scores()[game]
    random, human = float(row["random"]), float(row["human"])
    for column, percent in (("ddqn", ddqn), ("ddqn_rank", rank), ("ddqn_proportional", proportional)):
        value = 100 * float(normalized_score(float(row[column]), random, human))
        assert round(value) == percent, (game, column, value)


def test_atari_score_table_is_complete() -> None:
    scores = load_atari_scores()
    assert len(scores) == 57
    assert all(math.isfinite(float(r["random"]) + float(r["human"])) for r in scores.values())
    assert math.isnan(float(scores["berzerk"]["dqn"]))  # not reported in the paper
    assert atari_rom("ALE/SpaceInvaders-v5") == "space_invaders" and atari_rom("ALE/Pong-v5") == "pong"
    with pytest.raises(ValueError, match="env"):
        atari_rom("Pong")
    with pytest.raises(ValueError, match="human"):
        normalized_score(1.0, 2.0, 2.0)


def test_presets_follow_the_paper() -> None:
    """Atari defaults are the paper's; α, β0 per arm; η / 4 for the prioritized arms (Sec. 4).
    The dataclass's defaults and atari.yaml + arms/proportional.yaml are the same config."""
    atari = load_config("ALE/Pong-v5", "proportional")
    assert atari == DDQNConfig()
    assert (atari.memory_size, atari.batch_size, atari.replay_period) == (1_000_000, 32, 4)
    assert (atari.alpha, atari.beta0, atari.beta_end) == (0.6, 0.4, 1.0)
    assert atari.clip_reward and atari.clip_td and atari.network == "nature_cnn"
    # one unit, agent steps, for every schedule (the DQN release): replay start, target, ε, evaluation
    assert (atari.learning_starts, atari.target_update_period, atari.eps_decay_steps) == (
        50_000,
        30_000,
        10**6,
    )
    assert (atari.eval_every, atari.eval_steps, atari.total_steps) == (250_000, 125_000, 50_000_000)
    rank = load_config("ALE/Breakout-v5", "rank")
    assert (rank.replay, rank.alpha, rank.beta0) == ("rank", 0.7, 0.5)
    uniform = load_config("ALE/Breakout-v5", "uniform")
    assert (uniform.replay, uniform.alpha, uniform.beta0, uniform.beta_end) == ("uniform", 0.0, 0.0, 0.0)
    params = [nn.Parameter(torch.zeros(1))]
    assert make_optimizer(uniform, params).param_groups[0]["lr"] == 0.00025
    assert make_optimizer(rank, params).param_groups[0]["lr"] == 0.00025 / 4
    assert load_config("CartPole-v1", "rank", lr=0.5).lr == 0.5  # explicit values win
    assert load_config("MinAtar/Breakout-v1", "rank").network == "minatar_cnn"
    with pytest.raises(ValueError, match="arm"):
        DDQNConfig(arm="greedy")
    with pytest.raises(ValueError, match="memory_size"):
        load_config("CartPole-v1", "rank", memory_size=8)


def test_dqn_rank_arm_follows_table_3() -> None:
    """The paper's first experiment (Table 3, "DQN, rank-based"): DQN's max target, rank-based
    replay, α annealed linearly 0.5 → 0 by the end of training, β = 0 throughout, η/4, ε = 0.05 in
    evaluation; α and β count agent steps from the first update, like ε."""
    cfg = load_config(
        "ALE/Pong-v5", "dqn_rank", total_steps=1_050_000, schedule_horizon=1_050_000, learning_starts=50_000
    )
    assert (cfg.algorithm, cfg.replay, cfg.eval_epsilon, cfg.lr_divisor) == ("dqn", "rank", 0.05, 4.0)
    schedules = Schedules.of(cfg)
    for t, alpha in ((0, 0.5), (50_000, 0.5), (550_000, 0.25), (1_050_000, 0.0), (2_000_000, 0.0)):
        assert schedules.at(t)[1] == alpha and schedules.at(t)[2] == 0.0
    assert schedules.at(302_000)[1] == 0.37  # α moves in steps of 0.01 (0.374 → 0.37)
    eps = [schedules.at(t)[0] for t in (0, 50_000, 550_000, 1_050_000, 1_049_999 + 10**6)]
    assert eps == pytest.approx([1.0, 1.0, 0.505, 0.01, 0.01])
    rank = Schedules.of(
        load_config(
            "ALE/Pong-v5", "rank", total_steps=1_050_000, schedule_horizon=None, learning_starts=50_000
        )
    )
    assert [rank.at(t)[1:] for t in (50_000, 550_000, 1_050_000)] == [(0.7, 0.5), (0.7, 0.75), (0.7, 1.0)]
    assert load_config("ALE/Pong-v5", "dqn_uniform").algorithm == "dqn"


def test_evaluation_without_a_finished_episode_scores_nan() -> None:
    """Bug: an untrained Pong agent with --eval_steps 500 reported normalized_best 0.478, the
    return of unfinished episodes; now no finished episode means no score."""
    env, spec = make_env("CartPole-v1", 2)
    q = QNetwork("mlp", spec, (8,), shared_bias=False)
    rng = np.random.default_rng(0)
    short = evaluate(
        q, env, epsilon=0.0, max_steps=4, max_episodes=10, rng=rng, device=torch.device("cpu"), seed=0
    )
    assert short.episodes == 0 and math.isnan(short.score)
    env.close()


def test_dqn_rmsprop_step_matches_its_formula() -> None:
    p = nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    opt = DQNRMSprop([p], lr=0.1, decay=0.95, eps=0.01)
    grads = [torch.tensor([0.5, -1.0], dtype=torch.float64), torch.tensor([0.2, 3.0], dtype=torch.float64)]
    expected = p.detach().clone()
    g, n = torch.zeros(2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64)
    for grad in grads:
        p.grad = grad.clone()
        opt.step()
        g = 0.95 * g + 0.05 * grad
        n = 0.95 * n + 0.05 * grad**2
        expected = expected - 0.1 * grad / torch.sqrt(n - g**2 + 0.01)
    torch.testing.assert_close(p.detach(), expected)


def test_networks_shapes_and_shared_bias() -> None:
    nature = QNetwork("nature_cnn", EnvSpec((4, 84, 84), 4, np.uint8, 6), (512,), shared_bias=True)
    assert nature(torch.zeros(2, 4, 84, 84, dtype=torch.uint8)).shape == (2, 6)
    assert nature.out.bias.shape == (1,)  # one bias for all actions (tuned Double DQN)
    minatar = QNetwork("minatar_cnn", EnvSpec((10, 10, 4), 1, np.uint8, 3), (128,), shared_bias=False)
    assert minatar(torch.zeros(5, 10, 10, 4, dtype=torch.uint8)).shape == (5, 3)
    mlp = QNetwork("mlp", EnvSpec((4,), 1, np.float32, 2), (16, 8), shared_bias=False)
    assert mlp(torch.zeros(3, 4)).shape == (3, 2)


def _cartpole(tmp_path: Path, **overrides: object) -> DDQNConfig:
    settings: dict[str, object] = dict(
        env="CartPole-v1",
        arm="proportional",
        total_steps=600,
        learning_starts=100,
        eps_decay_steps=300,
        target_update_period=100,
        eval_every=300,
        eval_steps=300,
        eval_episodes=2,
        eval_envs=2,
        log_every=100,
        log_dir=str(tmp_path),
        progress=False,
        tensorboard=False,
        checkpoint_memory=True,
    )
    settings.update(overrides)
    arm = str(settings.pop("arm"))
    return load_config(str(settings.pop("env")), arm, **settings)


@pytest.mark.parametrize(("arm", "n_step"), [("proportional", 1), ("rank", 1), ("proportional", 3)])
def test_resume_continues_identically(tmp_path: Path, arm: str, n_step: int) -> None:
    """Stop at step 300 and resume: networks, optimiser, sampler, memory (with its n-step windows
    still open) and env pick up exactly."""
    straight = train(_cartpole(tmp_path, arm=arm, n_step=n_step, run_name="straight"))
    first = train(_cartpole(tmp_path, arm=arm, n_step=n_step, run_name="split", stop_after=300))
    assert first.stopped == "stop_after" and first.steps == 300
    resumed = train(_cartpole(tmp_path, arm=arm, n_step=n_step, run_name="split", resume=True))
    assert resumed.steps == straight.steps == 600 and resumed.updates == straight.updates
    assert resumed.eval_scores == straight.eval_scores
    a = torch.load(tmp_path / "straight" / "checkpoint.pt", weights_only=False)
    b = torch.load(tmp_path / "split" / "checkpoint.pt", weights_only=False)
    for key in a["q"]:
        torch.testing.assert_close(a["q"][key], b["q"][key], rtol=0, atol=0)
    np.testing.assert_array_equal(a["replay"]["sampler"]["priorities"], b["replay"]["sampler"]["priorities"])


def test_resume_refuses_a_checkpoint_of_another_config_and_writes_nothing(tmp_path: Path) -> None:
    """A run resumed with a config that changes what it learns is refused, naming the field,
    before its directory is touched; where and when it stops may change."""
    train(_cartpole(tmp_path, run_name="kept", stop_after=300))
    before = {p: p.read_bytes() for p in (tmp_path / "kept").glob("**/*") if p.is_file()}
    with pytest.raises(ValueError, match=r"lr=0\.001"):
        train(_cartpole(tmp_path, run_name="kept", resume=True, lr=1e-3))
    assert {p: p.read_bytes() for p in (tmp_path / "kept").glob("**/*") if p.is_file()} == before
    resumed = train(_cartpole(tmp_path, run_name="kept", resume=True, time_budget_s=600.0))
    assert resumed.steps == 600 and resumed.resumes == 1


def test_resume_without_memory_refills_before_learning(tmp_path: Path) -> None:
    first = train(_cartpole(tmp_path, run_name="lean", stop_after=300, checkpoint_memory=False))
    assert "memory" not in torch.load(tmp_path / "lean" / "checkpoint.pt", weights_only=False)["replay"]
    resumed = train(_cartpole(tmp_path, run_name="lean", resume=True, checkpoint_memory=False))
    # 300 steps: 100 refill the memory, then one update per 2 steps (K = 2) plus the step carried over
    assert resumed.steps == 600 and resumed.updates - first.updates == (600 - 400) // 2 + 1


def test_timer_banks_its_wall_time_in_a_checkpoint_and_knows_none_from_an_older_one() -> None:
    """Pickled (a checkpoint), a timer keeps the seconds so far; one unpickled from a checkpoint
    written before they were kept (no ``wall_before``; ``clock`` was another process's
    ``perf_counter``) reports no wall time rather than a wrong one."""
    banked = pickle.loads(pickle.dumps(Timer(since=time.perf_counter() - 5.0)))
    before, wall = banked.wall_before, banked.wall()
    assert before is not None and wall is not None and 5.0 <= before <= wall < 60.0
    older = Timer.__new__(Timer)
    learning = {"step": 5, "totals": dict.fromkeys(TIMED, 0.0), "clock": 12.0}
    older.__setstate__({"totals": dict.fromkeys(TIMED, 1.0), "learning_from": learning})
    assert older.wall() is None and older.resumes == 0
    phase = older.learning_phase(10, 3)
    assert phase is not None and phase["wall_s"] is None and phase["steps"] == 5


def test_resumed_run_counts_the_wall_time_of_every_process(tmp_path: Path) -> None:
    """A run stopped and resumed reports its wall time and speed over both processes."""
    first = train(_cartpole(tmp_path, run_name="twice", stop_after=300))
    assert first.resumes == 0 and first.wall_s is not None
    outside = time.perf_counter()
    resumed = train(_cartpole(tmp_path, run_name="twice", resume=True))
    outside = time.perf_counter() - outside
    assert resumed.resumes == 1 and resumed.wall_s is not None and resumed.wall_s > outside
    assert resumed.steps_per_s == resumed.steps / resumed.wall_s
    phase = resumed.learning_phase
    assert phase is not None and phase["wall_s"] is not None and outside < phase["wall_s"] < resumed.wall_s


def test_cartpole_smoke_writes_logs_and_reevaluates_the_best_policy(tmp_path: Path) -> None:
    """The best policy is kept and re-evaluated on fresh episodes before it is reported
    (App. B.2.3); the maximum of the selecting evaluations is recorded beside it."""
    result = train(_cartpole(tmp_path, arm="rank", run_name="smoke", tensorboard=True))
    run = tmp_path / "smoke"
    assert result.eval_steps == [300, 600] and len(result.eval_scores) == 2
    assert result.best_score == max(result.eval_scores) and (run / "best_q.pt").exists()
    assert result.best_step == result.eval_steps[result.eval_scores.index(result.best_score)]
    # the reported score is the kept network played again from other starts
    env, spec = make_env("CartPole-v1", 2)
    best = QNetwork("mlp", spec, (256, 256), shared_bias=False)
    best.load_state_dict(torch.load(run / "best_q.pt"))
    rng = np.random.default_rng([0, 3])
    again = evaluate(
        best,
        env,
        epsilon=0.01,
        max_steps=300,
        max_episodes=2,
        rng=rng,
        device=torch.device("cpu"),
        seed=20_000,
    )
    assert result.best_policy_score == again.score and result.best_policy_episodes == again.episodes > 0
    assert (run / "eval.csv").read_text().splitlines()[-1].startswith("best,")
    header, *rows = (run / "metrics.csv").read_text().splitlines()
    assert "per/beta" in header and "per/alpha" in header and "per/max_priority" in header and len(rows) == 6
    last = dict(zip(header.split(","), rows[-1].split(","), strict=True))
    assert 0.5 < float(last["per/beta"]) <= 1.0 and float(last["per/weight_mean"]) <= 1.0
    assert any(p.name.startswith("events") for p in (run / "tensorboard").iterdir())
    assert json.loads((run / "result.json").read_text())["steps"] == 600


def test_atari_pong_smoke(tmp_path: Path) -> None:
    """A few hundred steps of the full Atari agent: Nature CNN, frame stacks, life loss, evaluation."""
    config = load_config(
        "ALE/Pong-v5",
        "dqn_rank",
        total_steps=400,
        num_envs=2,
        memory_size=1_000,
        learning_starts=320,
        eval_every=400,
        eval_steps=64,
        eval_envs=2,
        log_every=200,
        log_dir=str(tmp_path),
        progress=False,
        tensorboard=False,
        run_name="pong",
    )
    result = train(config)
    assert result.steps == 400 and result.updates == 20
    # 64 steps finish no Pong episode: no score, no normalised score (it used to report 0.478 here)
    assert result.eval_steps == [400] and math.isnan(result.eval_scores[0])
    assert result.normalized_best is None and result.normalized_best_selecting is None
    assert math.isnan(result.best_policy_score) and result.best_step is None
    assert all(t >= 0 for t in result.timing_s.values())


def test_minatar_smoke(tmp_path: Path) -> None:
    """MinAtar's boolean 10×10×C grids stored as uint8 and read by the MinAtar CNN."""
    config = load_config(
        "MinAtar/Breakout-v1",
        "rank",
        total_steps=260,
        learning_starts=200,
        eval_every=260,
        eval_steps=50,
        eval_envs=2,
        log_every=100,
        log_dir=str(tmp_path),
        progress=False,
        tensorboard=False,
        run_name="minatar",
    )
    result = train(config)
    assert result.steps == 260 and result.updates == 61 and result.eval_steps == [260]
    assert config.network == "minatar_cnn"


def test_time_budget_stops_cleanly_and_sweep_writes_json_and_png(tmp_path: Path) -> None:
    from recipes.dqn.sweep import PlotConfig, SweepConfig, replot, sweep

    out = tmp_path / "cartpole"
    config = SweepConfig(
        env="CartPole-v1",
        arms="uniform,rank",
        seeds=2,
        jobs=1,
        total_steps=400,
        learning_starts=100,
        eval_every=200,
        eval_steps=100,
        eval_episodes=1,
        eval_envs=1,
        log_every=100,
        log_dir=str(tmp_path / "runs"),
        tensorboard=False,
        out=str(out),
    )
    curves = sweep(config)
    data = json.loads(out.with_suffix(".json").read_text())
    assert data == json.loads(json.dumps(curves))
    assert set(data) == {"uniform", "rank"}
    assert data["rank"]["steps"] == [200, 400] and [len(r) for r in data["rank"]["returns"]] == [2, 2]
    assert out.with_suffix(".png").stat().st_size > 0 and "| rank |" in out.with_suffix(".md").read_text()
    png = replot(PlotConfig(json=str(out.with_suffix(".json")), out=str(tmp_path / "again.png")))
    assert png.stat().st_size > 0
    assert data["rank"]["best"] and len(data["rank"]["weight_mean"]) == len(data["rank"]["log_steps"]) > 0
    budget = train(_cartpole(tmp_path, run_name="budget", total_steps=10**6, time_budget_s=0.0))
    assert budget.stopped == "time_budget" and budget.steps == 0
    with pytest.raises(ValueError, match="env should be a Gymnasium id"):
        replace(config, env="NoSuchEnv-v0")  # refused up front, not run by run
    (tmp_path / "a_file").write_text("")
    broken = replace(
        config, arms="uniform", seeds=1, log_dir=str(tmp_path / "a_file"), out=str(tmp_path / "broken")
    )
    with pytest.raises(RuntimeError, match="every run of the sweep failed"):
        sweep(broken)
