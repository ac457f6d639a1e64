"""prisample.sb3: the prioritized ReplayBuffer and DQN for Stable-Baselines3.

The buffer's draws against the exact ``P(i)`` over ``(pos, env)`` slots, its weights against
``(N·P)^-β / max``, its batches against SB3's own ``ReplayBuffer`` for the same data and slots, and
``PrioritizedDQN.train`` against SB3's ``DQN.train`` on the same batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("stable_baselines3")

from gymnasium import spaces
from stable_baselines3 import DQN
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from prisample import LinearSchedule
from prisample.sb3 import PrioritizedDQN, PrioritizedReplayBuffer

OBS = spaces.Box(-10.0, 10.0, shape=(3,), dtype=np.float32)
ACT = spaces.Discrete(4)


def fill(buffers: list[ReplayBuffer], steps: int, n_envs: int, seed: int = 0) -> None:
    """The same vector steps into every buffer: obs encode (step, env), some dones and timeouts."""
    rng = np.random.default_rng(seed)
    for t in range(steps):
        obs = np.stack([np.full(3, 100 * t + e, dtype=np.float32) for e in range(n_envs)])
        next_obs = obs + 0.5
        action = rng.integers(0, 4, size=n_envs)
        reward = rng.normal(size=n_envs).astype(np.float32)
        done = rng.random(n_envs) < 0.3
        infos = [{"TimeLimit.truncated": bool(d and rng.random() < 0.5)} for d in done]
        for b in buffers:
            b.add(obs, next_obs, action, reward, done, infos)


def exact_probabilities(priorities: np.ndarray, alpha: float, eps: float) -> np.ndarray:
    """``P(i) = (p_i + ε)^α / Σ_k (p_k + ε)^α`` over valid (non-NaN) slots, 0 elsewhere."""
    mass = np.where(np.isnan(priorities), 0.0, (np.nan_to_num(priorities) + eps) ** alpha)
    return mass / mass.sum()


def test_draws_follow_p_over_pos_env_slots() -> None:
    """(a) Drawn (pos, env) slots follow ``P(i) = p_i^α / Σ p^α`` (brute-force counts), n_envs = 2,
    and each drawn slot's data is the transition stored at that (pos, env)."""
    n_envs, alpha, eps = 2, 0.7, 1e-6
    buf = PrioritizedReplayBuffer(16, OBS, ACT, "cpu", n_envs=n_envs, alpha=alpha, beta=0.5, eps=eps, seed=0)
    fill([buf], steps=6, n_envs=n_envs)  # rows 0..5 of 8: 12 slots
    slots = np.arange(12)
    buf.update_priorities(slots, np.linspace(0.1, 3.0, 12) * np.where(slots % 2, 1, -1))  # |δ| kept
    expected = exact_probabilities(buf.sampler.priorities, alpha, eps)
    counts = np.zeros(16)
    for _ in range(1500):
        batch = buf.sample(32)
        np.add.at(counts, batch.indices, 1)
        rows, envs = np.divmod(batch.indices, n_envs)
        assert torch.equal(batch.observations[:, 0], torch.from_numpy((100 * rows + envs).astype(np.float32)))
    empirical = counts / counts.sum()
    assert counts[12:].sum() == 0  # rows never written are never drawn
    assert 0.5 * np.abs(empirical - expected).sum() < 0.01
    np.testing.assert_allclose(buf.sampler.probabilities(slots), expected[:12], rtol=1e-9)


@pytest.mark.parametrize("backend", ["proportional", "rank"])
def test_weights_are_normalised_importance_weights(backend: str) -> None:
    """(b) ``w_i = (N·P(i))^-β / max_j (N·P(j))^-β`` over the memory, shape (k, 1) like rewards."""
    n_envs, alpha, beta = 2, 0.8, 0.6
    buf = PrioritizedReplayBuffer(
        20, OBS, ACT, "cpu", n_envs=n_envs, alpha=alpha, beta=beta, backend=backend, seed=1
    )
    fill([buf], steps=7, n_envs=n_envs)
    n = 14
    buf.update_priorities(np.arange(n), np.random.default_rng(2).exponential(size=n))
    if backend == "proportional":
        p = exact_probabilities(buf.sampler.priorities, alpha, buf.sampler.eps)[:n]
    else:  # rank 1 = largest priority
        ranks = np.empty(n)
        ranks[np.argsort(-buf.sampler.priorities[:n], kind="stable")] = np.arange(1, n + 1)
        p = ranks**-alpha / (np.arange(1, n + 1) ** -alpha).sum()
    w = (n * p) ** -beta
    w /= w.max()
    batch = buf.sample(64)
    assert batch.weights.shape == (64, 1) and batch.weights.dtype == torch.float32
    np.testing.assert_allclose(batch.weights[:, 0].numpy(), w[batch.indices], rtol=1e-5)


@pytest.mark.parametrize(
    ("optimize", "timeouts", "steps"),
    [(False, True, 5), (False, True, 13), (True, False, 5), (True, False, 13), (False, False, 13)],
)
def test_batches_match_sb3_replay_buffer(optimize: bool, timeouts: bool, steps: int) -> None:
    """(c) For the same stored data and the same chosen (pos, env), the batch is SB3's own
    (``handle_timeout_termination``, ``optimize_memory_usage``, wrap-around), and the slots that
    can be drawn are the rows SB3 samples from."""
    n_envs, size = 3, 24  # 8 rows
    kwargs: dict[str, Any] = dict(
        device="cpu", n_envs=n_envs, optimize_memory_usage=optimize, handle_timeout_termination=timeouts
    )
    ours = PrioritizedReplayBuffer(size, OBS, ACT, seed=0, **kwargs)
    theirs = ReplayBuffer(size, OBS, ACT, **kwargs)
    fill([ours, theirs], steps=steps, n_envs=n_envs)
    assert (ours.pos, ours.full) == (theirs.pos, theirs.full)
    # SB3's ReplayBuffer.sample draws rows from [0, pos), or from every row but `pos` when full
    # with optimize_memory_usage, else from every row once full.
    if not theirs.full:
        rows = np.arange(theirs.pos)
    elif optimize:
        rows = np.setdiff1d(np.arange(theirs.buffer_size), [theirs.pos])
    else:
        rows = np.arange(theirs.buffer_size)
    valid = np.flatnonzero(~np.isnan(ours.sampler.priorities))
    np.testing.assert_array_equal(valid, np.sort((rows[:, None] * n_envs + np.arange(n_envs)).ravel()))
    batch_inds = np.random.default_rng(3).choice(rows, size=40)
    np.random.seed(7)  # SB3 draws the environments inside _get_samples with np.random
    expected = theirs._get_samples(batch_inds)
    np.random.seed(7)
    env_indices = np.random.randint(0, high=n_envs, size=(len(batch_inds),))
    got = ours.gather(batch_inds, env_indices)
    for name, a, b in zip(ReplayBufferSamples._fields, expected, got, strict=False):
        assert torch.equal(a, b), name
    if timeouts:  # the fixture stores timeouts: they must have cleared some dones
        assert (theirs.dones * theirs.timeouts).sum() > 0


def test_reset_empties_the_sampler() -> None:
    buf = PrioritizedReplayBuffer(8, OBS, ACT, "cpu", n_envs=2, seed=0)
    fill([buf], steps=3, n_envs=2)
    assert buf.sampler.size == 6
    buf.reset()
    assert buf.sampler.size == 0 and buf.pos == 0 and not buf.full
    with pytest.raises(ValueError, match="empty"):
        buf.sample(4)


@pytest.mark.parametrize("backend", ["proportional", "rank"])
def test_prioritized_dqn_learns_end_to_end(backend: str) -> None:
    """(d) ``learn`` runs on CartPole: priorities move away from the initial max, β is annealed
    to ``beta_final`` over the run, and the PER statistics reach SB3's logger."""
    model = PrioritizedDQN(
        "MlpPolicy",
        "CartPole-v1",
        learning_starts=50,
        buffer_size=1000,
        batch_size=32,
        target_update_interval=50,
        policy_kwargs={"net_arch": [32]},
        seed=0,
        device="cpu",
        replay_buffer_kwargs={"alpha": 0.6, "beta": 0.4, "backend": backend, "seed": 0},
    )
    buf = model.replay_buffer
    assert isinstance(buf, PrioritizedReplayBuffer)
    model.learn(300)
    stored = buf.sampler.priorities[:300]
    assert not np.isnan(stored).any()
    assert (stored != 1.0).sum() > 100  # |δ| written back for drawn slots
    assert model._n_updates > 50
    assert buf.beta == pytest.approx(0.4 + 0.6 * (1 - model._current_progress_remaining))
    assert buf.beta > 0.95
    model.train(gradient_steps=2, batch_size=16)
    logged = model.logger.name_to_value
    assert {"per/beta", "per/weight_mean", "per/max_priority", "train/loss"} <= set(logged)
    assert 0.0 < logged["per/weight_mean"] <= 1.0


def test_linear_schedule_beta_is_counted_in_gradient_steps() -> None:
    model = PrioritizedDQN(
        "MlpPolicy",
        "CartPole-v1",
        learning_starts=10**6,
        buffer_size=500,
        device="cpu",
        seed=0,
        replay_buffer_kwargs={"beta": LinearSchedule(0.2, 1.0, 10)},
    )
    model.learn(100)  # fills the buffer, no training yet
    model.train(gradient_steps=5, batch_size=8)
    assert model.replay_buffer.beta == pytest.approx(0.2 + 0.8 * 5 / 10)
    assert model.logger.name_to_value["per/beta"] == pytest.approx(0.2 + 0.8 * 4 / 10)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"alpha": -0.5}, "alpha"),
        ({"beta": 1.5}, "beta"),
        ({"eps": -1.0}, "eps"),
        ({"backend": "greedy"}, "backend"),
        ({"weight_norm": "max"}, "weight_norm"),
        ({"buffer_size": 0}, "buffer_size"),
        ({"n_envs": 0}, "n_envs"),
        ({"seed": -3}, "seed"),
        ({"optimize_memory_usage": True, "handle_timeout_termination": True}, "optimize_memory_usage"),
        ({"observation_space": spaces.Dict({"x": OBS})}, "observation_space"),
    ],
)
def test_bad_buffer_arguments_raise_value_error_naming_them(kwargs: dict[str, Any], name: str) -> None:
    """(e) Each bad argument is refused with a ValueError that names it."""
    args: dict[str, Any] = {"buffer_size": 8, "observation_space": OBS, "action_space": ACT, "device": "cpu"}
    with pytest.raises(ValueError, match=name):
        PrioritizedReplayBuffer(**{**args, **kwargs})


def test_bad_dqn_and_update_arguments_raise_value_error_naming_them() -> None:
    with pytest.raises(ValueError, match="replay_buffer_class"):
        PrioritizedDQN("MlpPolicy", "CartPole-v1", replay_buffer_class=ReplayBuffer)
    with pytest.raises(ValueError, match="n_steps"):
        PrioritizedDQN("MlpPolicy", "CartPole-v1", n_steps=3)
    with pytest.raises(ValueError, match="beta_final"):
        PrioritizedDQN("MlpPolicy", "CartPole-v1", beta_final=2.0)
    buf = PrioritizedReplayBuffer(8, OBS, ACT, "cpu", seed=0)
    fill([buf], steps=4, n_envs=1)
    before = buf.sampler.priorities
    with pytest.raises(ValueError, match="priorities"):
        buf.update_priorities([0, 1], [0.5, np.nan])
    with pytest.raises(ValueError, match="one value per index"):
        buf.update_priorities([0, 1], [0.5, 1.0, 2.0])
    with pytest.raises(ValueError, match="k"):
        buf.sample(0)
    np.testing.assert_array_equal(buf.sampler.priorities, before)  # a rejected call changes nothing


def _model(cls: type[DQN], **kwargs: Any) -> DQN:
    model = cls(
        "MlpPolicy",
        "CartPole-v1",
        learning_starts=0,
        buffer_size=256,
        policy_kwargs={"net_arch": [16]},
        device="cpu",
        seed=0,
        learning_rate=1e-2,
        **kwargs,
    )
    model.set_logger(Logger(folder=None, output_formats=[]))  # train() without learn()
    return model


def _cartpole_batch_buffer(model: PrioritizedDQN, steps: int = 120) -> None:
    rng = np.random.default_rng(0)
    for _ in range(steps):
        obs = rng.normal(size=(1, 4)).astype(np.float32)
        model.replay_buffer.add(
            obs,
            obs + 0.1,
            rng.integers(0, 2, size=1),
            rng.normal(size=1).astype(np.float32),
            rng.random(1) < 0.1,
            [{}],
        )


def test_loss_and_update_equal_sb3_dqn_at_alpha0_beta0() -> None:
    """(f) With α = 0 and β = 0 (unit weights) one ``train`` step of ``PrioritizedDQN`` is SB3's
    ``DQN.train`` on the same batch: the same loss and the same parameters afterwards."""
    unit = {"alpha": 0.0, "beta": 0.0, "seed": 0}
    ours = _model(PrioritizedDQN, replay_buffer_kwargs=unit, beta_final=None)
    assert isinstance(ours, PrioritizedDQN)
    theirs = _model(DQN)
    theirs.policy.load_state_dict(ours.policy.state_dict())
    _cartpole_batch_buffer(ours)
    batch = ours.replay_buffer.sample(64)
    assert torch.equal(batch.weights, torch.ones(64, 1))
    ours.replay_buffer.sample = lambda *a, **k: batch  # type: ignore[method-assign]
    theirs.replay_buffer.sample = lambda *a, **k: ReplayBufferSamples(*batch[:6])  # type: ignore[method-assign,union-attr]
    ours.train(gradient_steps=1, batch_size=64)
    theirs.train(gradient_steps=1, batch_size=64)
    assert ours.logger.name_to_value["train/loss"] == theirs.logger.name_to_value["train/loss"]
    theirs_state = theirs.policy.state_dict()
    for name, value in ours.policy.state_dict().items():
        assert torch.equal(value, theirs_state[name]), name


def test_weighted_loss_and_priorities_written_back() -> None:
    """With α = 1, β = 1 and unequal priorities: the loss is ``mean_i w_i · Huber(δ_i)`` and each
    drawn slot's new priority is ``|δ_i|`` from before the gradient step (the last duplicate wins)."""
    full = {"alpha": 1.0, "beta": 1.0, "seed": 0}
    model = _model(PrioritizedDQN, replay_buffer_kwargs=full, beta_final=None)
    assert isinstance(model, PrioritizedDQN)
    _cartpole_batch_buffer(model)
    buf = model.replay_buffer
    buf.update_priorities(np.arange(120), np.random.default_rng(1).exponential(size=120))
    batch = buf.sample(64)
    assert batch.weights.min() < 0.9  # the test needs unequal weights
    buf.sample = lambda *a, **k: batch  # type: ignore[method-assign]
    with torch.no_grad():
        q = model.q_net(batch.observations).gather(1, batch.actions.long())
        next_q = model.q_net_target(batch.next_observations).max(dim=1).values.reshape(-1, 1)
        target = batch.rewards + (1 - batch.dones) * model.gamma * next_q
        huber = torch.nn.functional.smooth_l1_loss(q, target, reduction="none")
        expected_loss = float((batch.weights * huber).mean())
        delta = (target - q).abs()[:, 0].numpy()
    model.train(gradient_steps=1, batch_size=64)
    assert model.logger.name_to_value["train/loss"] == pytest.approx(expected_loss, rel=1e-6)
    assert model.logger.name_to_value["per/weight_mean"] == pytest.approx(float(batch.weights.mean()))
    last = dict(zip(batch.indices.tolist(), delta.tolist(), strict=True))
    np.testing.assert_allclose(buf.sampler.priorities[list(last)], list(last.values()), rtol=1e-6)


def test_cartpole_recipe_tiny(tmp_path: Any) -> None:
    """recipes/sb3_cartpole.py with tiny arguments writes its JSON, PNG and Markdown table."""
    from recipes import sb3_cartpole as rec

    out = tmp_path / "cp"
    result = rec.main(
        [
            "--seeds",
            "1",
            "--timesteps",
            "1100",
            "--eval_episodes",
            "1",
            "--curve_points",
            "4",
            "--arms",
            "uniform,rank",
            "--out",
            str(out),
        ]
    )
    assert set(result["arms"]) == {"uniform", "rank"}
    for suffix in ("json", "png", "md"):
        assert (tmp_path / f"cp.{suffix}").stat().st_size > 0
    run = result["arms"]["rank"]["runs"][0]
    assert len(run["curve"]) == 4 and 0 < run["eval_mean_return"] <= 500
    assert rec.Config().out == "runs/sb3_cartpole" and rec.Config().timesteps == 50_000
    with pytest.raises(SystemExit):
        rec.main(["--arms", "greedy"])


def test_save_load_round_trip_keeps_priorities_and_draws(tmp_path: Any) -> None:
    """SB3's ``save``/``load`` and ``save_replay_buffer``/``load_replay_buffer``: the same model
    class, ``beta_final``, priorities and next draws (the sampler's RNG travels in the pickle)."""
    import gymnasium as gym

    model = PrioritizedDQN(
        "MlpPolicy",
        "CartPole-v1",
        learning_starts=50,
        buffer_size=500,
        device="cpu",
        seed=0,
        policy_kwargs={"net_arch": [16]},
        replay_buffer_kwargs={"backend": "rank", "seed": 0},
        beta_final=0.9,
    )
    model.learn(150)
    model.save(tmp_path / "model.zip")
    model.save_replay_buffer(tmp_path / "replay.pkl")
    loaded = PrioritizedDQN.load(tmp_path / "model.zip", env=gym.make("CartPole-v1"), device="cpu")
    loaded.load_replay_buffer(tmp_path / "replay.pkl")
    assert isinstance(loaded, PrioritizedDQN) and loaded.beta_final == 0.9
    a, b = model.replay_buffer, loaded.replay_buffer
    np.testing.assert_array_equal(a.sampler.priorities, b.sampler.priorities)
    first, second = a.sample(16), b.sample(16)
    np.testing.assert_array_equal(first.indices, second.indices)
    assert torch.equal(first.weights, second.weights) and torch.equal(first.observations, second.observations)
