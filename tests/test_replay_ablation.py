"""The LAP and LaBER arms of the DQN recipe and the replay ablation (recipes/studies/replay_ablation.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("gymnasium")
pytest.importorskip("yaml")
pytest.importorskip("tqdm")
pytest.importorskip("cloudpickle")

import recipes.dqn.agent as ddqn
from prisample import LaBER
from prisample.methods.lap import lap_loss
from recipes.dqn.agent import LABER_EPS, double_dqn_td_error, laber_batch, td_loss, weighted_td_loss
from recipes.dqn.config import load_config
from recipes.dqn.run import train
from recipes.dqn.update import as_batch
from tests.test_atari_ddqn import (
    Table,  # Q(s, ·) read from a table
    _cartpole,  # the tiny CartPole run of the recipe's tests
)

torch.set_num_threads(1)


def test_arms_follow_their_papers() -> None:
    """LAP: proportional replay of max(|δ|, 0.01)^0.6, β = 0, step η (Fujimoto et al. 2020, their
    discrete-action settings; κ = 1 with rewards in {0, 1} is near-uniform); LaBER-mean: uniform
    replay, m = 4, step η (Lahire et al. 2022).  The paper's arms are unchanged."""
    lap = load_config("ALE/Pong-v5", "lap")
    assert (lap.replay, lap.priority_rule, lap.lap_kappa, lap.sampling) == (
        "proportional",
        "lap",
        0.01,
        "replay",
    )
    assert (lap.alpha, lap.alpha_end, lap.beta0, lap.beta_end, lap.lr_divisor) == (0.6, None, 0.0, 0.0, 1.0)
    laber = load_config("MinAtar/Breakout-v1", "laber")
    assert (laber.replay, laber.sampling, laber.laber_m, laber.priority_rule) == (
        "uniform",
        "laber",
        4,
        "abs_td",
    )
    assert (laber.alpha, laber.beta0, laber.beta_end, laber.lr_divisor) == (0.0, 0.0, 0.0, 1.0)
    for arm in ("uniform", "proportional", "rank", "dqn_uniform", "dqn_rank"):
        cfg = load_config("ALE/Pong-v5", arm)
        assert (cfg.priority_rule, cfg.sampling) == ("abs_td", "replay")
    with pytest.raises(ValueError, match="replay should be uniform"):
        load_config("CartPole-v1", "laber", replay="proportional")
    with pytest.raises(ValueError, match="replay should be proportional"):
        load_config("CartPole-v1", "lap", replay="rank")


def hand_made_batch() -> tuple[Table, Table, tuple[torch.Tensor, ...]]:
    """Online and target tables and a batch of 3 transitions whose Double DQN δ are 1.3, −1.5, 6.8."""
    online = Table([[0.5, 1.5], [3.0, 1.0], [0.0, 4.0]])
    target = Table([[9.0, 9.0], [2.0, 10.0], [-1.0, 7.0]])
    f64 = torch.float64
    batch = (
        torch.tensor([0, 0, 2]),
        torch.tensor([1, 0, 0]),
        torch.tensor([1.0, -1.0, 0.5], dtype=f64),
        torch.tensor([0.9, 0.0, 0.9], dtype=f64),
        torch.tensor([1, 1, 2]),
        torch.ones(3, dtype=f64),
    )
    return online, target, batch


def test_lap_loss_is_clip_td_huber_and_priorities_are_unclipped() -> None:
    """LAP's loss at κ = 1 is the recipe's clip_td Huber loss (value and gradient), and its priorities
    are max(|δ|, κ) of the *unclipped* δ.  Bug guarded: priorities taken from the clipped |δ| are
    max(|clip(δ)|, 1) = 1 for every transition, i.e. uniform replay."""
    delta = torch.tensor([0.3, -0.8, 2.5, -4.0], dtype=torch.float64)
    ones = torch.ones(4, dtype=torch.float64)
    huber = weighted_td_loss(delta, ones, clip_td=True, reduction="mean")
    torch.testing.assert_close(huber, lap_loss(delta, kappa=1.0))
    assert float(weighted_td_loss(delta, ones, True, "mean", kappa=0.5)) == pytest.approx(
        float(lap_loss(delta, kappa=0.5))
    )
    # the priorities the learner returns for a hand-made batch
    online, target, batch = hand_made_batch()
    delta = double_dqn_td_error(online, target, *batch[:5]).detach()  # 1.3, -1.5, 6.8
    cfg = load_config("CartPole-v1", "lap", lap_kappa=1.0)
    _, priorities = td_loss(online, target, cfg)(batch)
    torch.testing.assert_close(priorities, delta.abs().clamp(min=1.0))
    assert float(priorities.max()) == pytest.approx(6.8)
    _, unclipped = td_loss(online, target, load_config("CartPole-v1", "proportional"))(batch)
    torch.testing.assert_close(unclipped, delta.abs())  # the paper's arms write |δ| (DQN Zoo)
    _, clipped = td_loss(online, target, load_config("CartPole-v1", "proportional", clip_priority=True))(
        batch
    )
    assert float(clipped.max()) == 1.0  # clip_priority: |clip(δ)|, the recipe's before its profiles


def _large_sample(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        "obs": rng.integers(0, 3, n),
        "action": rng.integers(0, 2, n),
        "reward": rng.normal(size=n).astype(np.float32),
        "discount": np.full(n, 0.9, dtype=np.float32),
        "next_obs": rng.integers(0, 3, n),
    }


@pytest.mark.parametrize("m", [1, 4])
def test_laber_keeps_rows_of_its_large_batch_weighted_mean_over_score(m: int) -> None:
    """The kept batch is k rows of the m·k uniform draw (m = 1: a resample of it, with replacement),
    each row's columns those of its candidate, and the weights passed on are mean(s) / s_i with
    s = |δ| + eps of the large batch.  Bugs guarded: weights 1/s_i (LaBER-lazy) or s_i/mean(s)."""
    online = Table([[0.5, 1.5], [3.0, 1.0], [0.0, 4.0]])
    target = Table([[9.0, 9.0], [2.0, 10.0], [-1.0, 7.0]])
    cfg = load_config("CartPole-v1", "laber", batch_size=8, laber_m=m, clip_td=False)
    laber = LaBER(8, m, eps=LABER_EPS, seed=0)
    candidates = laber.candidates(50)
    sample = _large_sample(len(candidates))
    batch, kept = laber_batch(sample, candidates, laber, online, target, cfg, torch.device("cpu"))
    assert batch.obs.shape == (8,) and kept.shape == (8,)
    assert set(kept.tolist()) <= set(candidates.tolist())
    large = [torch.as_tensor(sample[k]) for k in ("obs", "action", "reward", "discount", "next_obs")]
    scores = double_dqn_td_error(online, target, *large).detach().abs().numpy() + LABER_EPS
    # each kept row is one position of the large batch: find it by its candidate slot and its columns
    for i in range(8):
        rows = [
            j
            for j in np.flatnonzero(candidates == kept[i])
            if all(float(large[c][j]) == float(batch[c][i]) for c in range(5))
        ]
        assert rows, f"kept row {i} is no row of the large batch"
        assert float(batch.weights[i]) == pytest.approx(scores.mean() / scores[rows[0]], rel=1e-5)
    assert batch.weights.dtype == torch.float32


def test_laber_loop_passes_laber_weights_to_the_loss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every update of a LaBER run learns from laber_batch's batch (its rows and its weights), the
    replay draws m·k per update, and no priority is written back."""
    made: list[Any] = []
    learned: list[Any] = []
    drawn: list[int] = []
    original_batch, original_learner = ddqn.laber_batch, ddqn.make_learner

    def recording_batch(*args: Any, **kwargs: Any) -> Any:
        sample, candidates, _, q, q_target, _, device = args
        large = as_batch(sample, np.ones(len(candidates), dtype=np.float32), device)
        with torch.no_grad():
            scores = double_dqn_td_error(q, q_target, *large[:5]).clamp(-1.0, 1.0).abs().numpy() + LABER_EPS
        made.append(original_batch(*args, **kwargs))
        batch, kept = made[-1]
        for i, slot in enumerate(kept):  # w_i = mean(s) / s_j for a position j that holds the slot
            ratios = scores.mean() / scores[candidates == slot]
            assert np.isclose(ratios, float(batch.weights[i]), rtol=1e-4).any()
        return made[-1]

    def recording_learner(*args: Any, **kwargs: Any) -> Any:
        step = original_learner(*args, **kwargs)

        def learn(batch: Any) -> Any:
            learned.append(batch)
            return step(batch)

        return learn

    from prisample.replay import PrioritizedReplay

    sample = PrioritizedReplay.sample
    monkeypatch.setattr("recipes.dqn.run.laber_batch", recording_batch)  # the names train looks up
    monkeypatch.setattr("recipes.dqn.run.make_learner", recording_learner)
    monkeypatch.setattr(PrioritizedReplay, "sample", lambda self, k: (drawn.append(k), sample(self, k))[1])
    monkeypatch.setattr(
        PrioritizedReplay, "update_priorities", lambda *a, **k: pytest.fail("priority written")
    )
    result = train(_cartpole(tmp_path, arm="laber", total_steps=300, run_name="laber"))
    assert result.updates == len(made) == len(learned) == len(drawn) > 0
    assert set(drawn) == {4 * 32}
    for (batch, _), seen in zip(made, learned, strict=True):
        assert seen is batch
    weights = torch.cat([b.weights for b, _ in made])
    assert float(weights.min()) < 1.0 < float(weights.max())  # not uniform weights


@pytest.mark.parametrize("arm", ["lap", "laber"])
def test_new_arms_train_on_cartpole_and_resume(tmp_path: Path, arm: str) -> None:
    """A tiny CartPole run of each new arm completes; stopping and resuming gives the same run
    (LaBER's generator is checkpointed); LAP's stored priorities are all >= κ = 0.01."""
    straight = train(_cartpole(tmp_path, arm=arm, run_name="straight"))
    assert straight.steps == 600 and straight.updates > 0 and straight.stopped == "done"
    train(_cartpole(tmp_path, arm=arm, run_name="split", stop_after=300))
    resumed = train(_cartpole(tmp_path, arm=arm, run_name="split", resume=True))
    assert resumed.eval_scores == straight.eval_scores and resumed.updates == straight.updates
    a = torch.load(tmp_path / "straight" / "checkpoint.pt", weights_only=False)
    b = torch.load(tmp_path / "split" / "checkpoint.pt", weights_only=False)
    for key in a["q"]:
        torch.testing.assert_close(a["q"][key], b["q"][key], rtol=0, atol=0)
    if arm == "lap":
        priorities = np.asarray(a["replay"]["sampler"]["priorities"])
        live = priorities[np.isfinite(priorities)]
        kappa = np.float32(0.01)  # the floor as the float32 network computes it
        assert live.min() >= kappa and live.max() > kappa and a["replay"]["sampler"]["eps"] == 0.0
    else:
        assert a["laber"] is not None and a["laber"]["rng"] == b["laber"]["rng"]


def test_ablation_writes_a_table_and_plot_per_env(tmp_path: Path) -> None:
    """The ablation command at tiny scale: both environments, all five arms, one seed."""
    from recipes.studies.replay_ablation import main

    out = tmp_path / "ablation"
    main(
        [
            "--out",
            str(out),
            "--log_dir",
            str(tmp_path / "runs"),
            "--cartpole_steps",
            "300",
            "--minatar_steps",
            "260",
            "--cartpole_seeds",
            "1",
            "--minatar_seeds",
            "1",
            "--jobs",
            "1",
            "--overrides",
            '{"learning_starts": 200, "eval_every": 260, "eval_steps": 50, "eval_episodes": 1}',
        ]
    )
    for env in ("CartPole-v1", "MinAtar_Breakout-v1"):
        data = json.loads((out / f"{env}.json").read_text())
        assert list(data) == ["uniform", "proportional", "rank", "lap", "laber"]
        table = (out / f"{env}.md").read_text()
        assert "| lap |" in table and "| laber |" in table
        assert (out / f"{env}.png").stat().st_size > 0


def test_default_scale_builds_with_each_familys_replay_start() -> None:
    """The default 50,000 CartPole steps used to be refused against the Atari replay start (50,000)."""
    from recipes.studies.replay_ablation import AblationConfig, sweep_configs

    sweeps = {s.env: s for s in sweep_configs(AblationConfig())}
    assert sweeps["CartPole-v1"].learning_starts == 1000
    assert sweeps["MinAtar/Breakout-v1"].learning_starts == 5000
