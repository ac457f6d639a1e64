"""prisample.sb3: the prioritized ReplayBuffer and DQN for Stable-Baselines3.

The buffer's draws against the exact ``P(i)`` over ``(pos, env)`` slots, its weights against
``(N·P)^-β / max``, its batches against SB3's own ``ReplayBuffer`` for the same data and slots, and
``PrioritizedDQN.train`` against SB3's ``DQN.train`` on the same batch.  The defaults (ε = 0.01,
batch normalisation) against the weight collapse of the former ones (ε = 1e-6, memory maximum),
``per/weight_mean`` and the weight monitor, and the CartPole recipe's outputs.
"""

from __future__ import annotations

import inspect
import json
import warnings
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("stable_baselines3")

from gymnasium import spaces
from stable_baselines3 import DQN
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.logger import KVWriter, Logger
from stable_baselines3.common.save_util import load_from_zip_file
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from prisample import LinearSchedule
from prisample.diagnostics import WeightMonitor
from prisample.sb3 import PrioritizedDQN, PrioritizedReplayBuffer
from prisample.weights import WeightNorm

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


@pytest.mark.parametrize("weight_norm", ["memory", "batch"])
@pytest.mark.parametrize("backend", ["proportional", "rank"])
def test_weights_are_normalised_importance_weights(backend: str, weight_norm: WeightNorm) -> None:
    """(b) ``w_i = (N·P(i))^-β / max_j (N·P(j))^-β``, the maximum over the memory or over the
    batch, shape (k, 1) like rewards."""
    n_envs, alpha, beta = 2, 0.8, 0.6
    buf = PrioritizedReplayBuffer(
        20,
        OBS,
        ACT,
        "cpu",
        n_envs=n_envs,
        alpha=alpha,
        beta=beta,
        backend=backend,
        seed=1,
        weight_norm=weight_norm,
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
    batch = buf.sample(64)
    expected = w[batch.indices] / (w.max() if weight_norm == "memory" else w[batch.indices].max())
    assert batch.weights.shape == (64, 1) and batch.weights.dtype == torch.float32
    np.testing.assert_allclose(batch.weights[:, 0].numpy(), expected, rtol=1e-5)
    if weight_norm == "batch":
        assert float(batch.weights.max()) == 1.0


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


def small_cartpole_dqn(buffer_kwargs: dict[str, Any], **kwargs: Any) -> PrioritizedDQN:
    """A PrioritizedDQN on CartPole small enough to learn a few hundred steps in a test."""
    return PrioritizedDQN(
        "MlpPolicy",
        "CartPole-v1",
        learning_starts=50,
        buffer_size=1000,
        batch_size=32,
        policy_kwargs={"net_arch": [32]},
        seed=0,
        device="cpu",
        replay_buffer_kwargs=buffer_kwargs,
        **kwargs,
    )


@pytest.mark.parametrize("backend", ["proportional", "rank"])
def test_prioritized_dqn_learns_end_to_end(backend: str) -> None:
    """(d) ``learn`` runs on CartPole: priorities move away from the initial max, β is annealed
    to ``beta_final`` over the run, and the PER statistics reach SB3's logger."""
    model = small_cartpole_dqn(
        {"alpha": 0.6, "beta": 0.4, "backend": backend, "seed": 0}, target_update_interval=50
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
    with pytest.raises(ValueError, match="n_steps"):  # n-step returns need an n-step buffer class
        PrioritizedDQN("MlpPolicy", "CartPole-v1", n_steps=3, replay_buffer_class=PrioritizedReplayBuffer)
    with pytest.raises(ValueError, match="beta_final"):
        PrioritizedDQN("MlpPolicy", "CartPole-v1", beta_final=2.0)
    buf = PrioritizedReplayBuffer(8, OBS, ACT, "cpu", seed=0)
    fill([buf], steps=4, n_envs=1)
    before = buf.sampler.priorities
    with pytest.raises(ValueError, match="td_errors"):
        buf.update_priorities([0, 1], [0.5, np.nan])
    with pytest.raises(ValueError, match="one value per index"):
        buf.update_priorities([0, 1], [0.5, 1.0, 2.0])
    with pytest.raises(ValueError, match="batch_size"):
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
    # The weight monitor is run-time bookkeeping: not in the saved data (as in models saved before
    # it existed), and a loaded model starts a fresh one.
    data, _, _ = load_from_zip_file(tmp_path / "model.zip", device="cpu")
    assert data is not None and "weight_monitor" not in data
    assert model.weight_monitor.batches > 0 and loaded.weight_monitor.batches == 0


# -- defaults, weight collapse and the weight monitor -------------------------------------------------

OLD_DEFAULTS: dict[str, Any] = {"eps": 1e-6, "weight_norm": "memory"}
"""prisample.sb3's defaults before ``eps=0.01, weight_norm="batch"``, under which the weights collapsed."""


def test_buffer_defaults_are_eps_001_and_batch_normalisation() -> None:
    """Pinned: ε = 0.01 (the DQN recipe's weight ablation) and the batch maximum (DQN Zoo,
    Dopamine), in the signature, in a buffer built without them and in PrioritizedDQN's buffer;
    the CartPole recipe's prioritized arms state the same values."""
    from recipes.studies import sb3_cartpole

    params = inspect.signature(PrioritizedReplayBuffer.__init__).parameters
    defaults = (params["eps"].default, params["weight_norm"].default)
    assert defaults == (0.01, "batch")
    buf = PrioritizedReplayBuffer(8, OBS, ACT, "cpu")
    assert (buf.sampler.eps, buf.sampler.weight_norm) == (0.01, "batch")
    model = PrioritizedDQN("MlpPolicy", "CartPole-v1", buffer_size=64, device="cpu")
    assert (model.replay_buffer.sampler.eps, model.replay_buffer.sampler.weight_norm) == (0.01, "batch")
    for arm in ("proportional", "rank"):
        kwargs = sb3_cartpole.ARMS[arm][1]
        assert kwargs is not None
        assert (kwargs["eps"], kwargs["weight_norm"]) == defaults


def _mean_weight(buffer_kwargs: dict[str, Any], plant_zero: bool) -> tuple[float, list[Any]]:
    """Mean weight of 150 batches of 64 (β = 1) from 512 slots with |δ| ~ U(0.5, 2), one of them
    planted at |δ| = 0 when asked, through a WeightMonitor; and the warnings it issued."""
    buf = PrioritizedReplayBuffer(512, OBS, ACT, "cpu", alpha=0.6, beta=1.0, seed=0, **buffer_kwargs)
    fill([buf], steps=512, n_envs=1)
    errors = np.random.default_rng(0).uniform(0.5, 2.0, size=512)
    if plant_zero:
        errors[7] = 0.0
    buf.update_priorities(np.arange(512), errors)
    monitor = WeightMonitor()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(150):
            monitor.update(buf.sample(64).weights)
    return monitor.weight_mean, [w for w in caught if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize(
    ("buffer_kwargs", "plant_zero", "collapses"),
    [
        (OLD_DEFAULTS, True, True),  # the bug: one |δ| = 0 slot sets the memory's maximum weight
        (OLD_DEFAULTS, False, False),  # control: without it the old defaults are fine
        ({}, True, False),  # the new defaults
        ({"eps": 0.01, "weight_norm": "memory"}, True, False),  # each change alone is enough
        ({"eps": 1e-6, "weight_norm": "batch"}, True, False),
    ],
)
def test_a_zero_td_slot_collapses_the_weights_only_under_the_old_defaults(
    buffer_kwargs: dict[str, Any], plant_zero: bool, collapses: bool
) -> None:
    """The weights' collapse: with ε = 1e-6 and the memory's maximum, one slot with |δ| ≈ 0 has
    P(i) ≈ 0 and the largest weight, which divides every other: the mean weight falls below the
    monitor's threshold (and it warns, once).  With the defaults, or either change alone, it stays
    above."""
    mean, warned = _mean_weight(buffer_kwargs, plant_zero)
    threshold = WeightMonitor().threshold
    if collapses:
        assert mean < threshold / 10
        assert len(warned) == 1 and "eps" in str(warned[0].message)
    else:
        assert mean > 2 * threshold  # ε = 0.01 with the memory maximum: about 0.05; batch maximum: 0.6
        assert warned == []


def test_an_old_buffer_state_loads_and_keeps_its_eps_and_weight_norm(tmp_path: Any) -> None:
    """A sampler state or a saved replay buffer made with the former defaults keeps ε = 1e-6 and
    the memory maximum when loaded where the new defaults apply, and draws the same weights."""
    old = PrioritizedReplayBuffer(64, OBS, ACT, "cpu", seed=3, **OLD_DEFAULTS)
    fill([old], steps=40, n_envs=1)
    old.update_priorities(np.arange(40), np.random.default_rng(1).exponential(size=40))
    new = PrioritizedReplayBuffer(64, OBS, ACT, "cpu")
    fill([new], steps=40, n_envs=1)
    new.sampler.load_state_dict(old.sampler.state_dict())
    assert (new.sampler.eps, new.sampler.weight_norm) == (1e-6, "memory")
    a, b = old.sample(32), new.sample(32)
    np.testing.assert_array_equal(a.indices, b.indices)
    assert torch.equal(a.weights, b.weights)

    kwargs: dict[str, Any] = dict(learning_starts=20, buffer_size=200, device="cpu", seed=0)
    model = PrioritizedDQN("MlpPolicy", "CartPole-v1", replay_buffer_kwargs=dict(OLD_DEFAULTS), **kwargs)
    model.learn(60)
    model.save_replay_buffer(tmp_path / "replay.pkl")
    fresh = PrioritizedDQN("MlpPolicy", "CartPole-v1", **kwargs)
    assert fresh.replay_buffer.sampler.eps == 0.01
    fresh.load_replay_buffer(tmp_path / "replay.pkl")
    assert (fresh.replay_buffer.sampler.eps, fresh.replay_buffer.sampler.weight_norm) == (1e-6, "memory")


class _Capture(KVWriter):
    """Keeps every dump of SB3's logger."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0) -> None:
        self.rows.append(dict(key_values))


def test_learn_logs_per_weight_mean_and_feeds_every_batch_to_the_monitor() -> None:
    model = small_cartpole_dqn({"alpha": 0.6, "beta": 0.4, "seed": 0})
    capture = _Capture()
    model.set_logger(Logger(folder=None, output_formats=[capture]))
    model.learn(400, log_interval=1)
    logged = [row["per/weight_mean"] for row in capture.rows if "per/weight_mean" in row]
    assert logged and all(0.0 < w <= 1.0 for w in logged)
    assert model._n_updates > 50 and model.weight_monitor.batches == model._n_updates
    assert model.weight_mean == model.weight_monitor.weight_mean and 0.0 < model.weight_mean <= 1.0


@pytest.mark.parametrize(("buffer_kwargs", "warns"), [(OLD_DEFAULTS, True), ({}, False)])
def test_train_warns_once_when_the_weights_collapse(buffer_kwargs: dict[str, Any], warns: bool) -> None:
    """``train`` feeds the monitor: one warning naming ε and the normalisation under the former
    defaults with a |δ| = 0 slot, none with the defaults."""
    kwargs = {"alpha": 0.6, "beta": 1.0, "seed": 0, **buffer_kwargs}
    model = _model(PrioritizedDQN, replay_buffer_kwargs=kwargs, beta_final=None)
    assert isinstance(model, PrioritizedDQN)
    _cartpole_batch_buffer(model)
    errors = np.random.default_rng(2).uniform(0.5, 2.0, size=120)
    errors[0] = 0.0
    model.replay_buffer.update_priorities(np.arange(120), errors)
    model.weight_monitor = WeightMonitor(window=5, min_batches=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            model.train(gradient_steps=5, batch_size=16)
    found = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(found) == (1 if warns else 0)
    if warns:
        text = str(found[0].message)
        assert "eps=0.01" in text and 'weight_norm="batch"' in text and '"memory"' in text
    assert model.weight_monitor.batches == 15


# -- the CartPole recipe ----------------------------------------------------------------------------

TINY = ["--seeds", "1", "--timesteps", "1100", "--eval_every", "400", "--eval_episodes", "1"]
TINY += ["--curve_points", "4", "--arms", "uniform,proportional"]


def test_cartpole_recipe_writes_the_per_seed_metrics(tmp_path: Any) -> None:
    """A tiny comparison (1 seed, 2 arms, one training rollout): the JSON holds per arm one ``auc``,
    ``final`` and ``weight_mean_last`` per seed, the evaluation steps and curves; the PNG and the
    table are written; ``--jobs 2`` (spawned processes) gives the same numbers."""
    from recipes.studies import sb3_cartpole as rec

    rec.main([*TINY, "--out", str(tmp_path / "cp")])
    for suffix in ("json", "png", "md"):
        assert (tmp_path / f"cp.{suffix}").stat().st_size > 0
    result = json.loads((tmp_path / "cp.json").read_text())
    assert set(result["arms"]) == {"uniform", "proportional"}
    for arm in result["arms"].values():
        assert arm["seeds"] == [0]
        assert all(len(arm[key]) == 1 for key in ("auc", "final", "weight_mean_last", "eval_curves"))
        assert arm["eval_steps"] == [400, 800, 1280]  # every 400 steps, then the end (5 rollouts of 256)
        (curve,) = arm["eval_curves"]
        assert len(curve) == 3 and all(0 < v <= 500 for v in curve)
        assert arm["auc"] == [pytest.approx(np.mean(curve))] and arm["final"] == [curve[-1]]
        assert len(arm["auc_iqm"]) == 3
    assert result["arms"]["uniform"]["weight_mean_last"] == [1.0]
    (w,) = result["arms"]["proportional"]["weight_mean_last"]
    assert 0.0 < w <= 1.0  # one train call of 128 batches ran
    assert "AUC" in (tmp_path / "cp.md").read_text()

    rec.main([*TINY, "--jobs", "2", "--out", str(tmp_path / "cp2")])
    parallel = json.loads((tmp_path / "cp2.json").read_text())
    for name, arm in result["arms"].items():
        for key in ("auc", "final", "weight_mean_last", "eval_curves"):
            assert parallel["arms"][name][key] == arm[key], (name, key)


def test_cartpole_recipe_without_arguments_prints_its_usage_and_runs_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from recipes.studies import sb3_cartpole as rec

    def no_run(cfg: Any) -> dict[str, Any]:
        raise AssertionError("a run started")

    monkeypatch.setattr(rec, "run", no_run)
    with pytest.raises(SystemExit) as exit_info:
        rec.main([])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m recipes.studies sb3-cartpole") and "--run" in err
    with pytest.raises(SystemExit) as exit_info:
        rec.main(["--help"])
    assert exit_info.value.code == 0
    shown = capsys.readouterr().out
    assert "--eval_every" in shown and "--jobs" in shown and "--run" in shown
    assert rec.parse(["--run"]) == rec.Config()
    assert rec.Config().out == "runs/sb3_cartpole" and rec.Config().timesteps == 50_000
    assert rec.Config().eval_every == 5_000 and rec.Config().jobs == 1
    for bad in (["--arms", "greedy"], ["--eval_every", "0"], ["--jobs", "0"]):
        with pytest.raises(SystemExit):
            rec.main(bad)


def _recorded_run(seed: int, scores: list[float]) -> dict[str, Any]:
    return {
        "seed": seed,
        "auc": float(np.mean(scores)),
        "final": scores[-1],
        "weight_mean_last": 1.0,
        "eval_steps": [400, 800],
        "eval_curve": scores,
        "train_seconds": 1.0,
        "curve_steps": [400, 800],
        "curve": [None, 10.0],
    }


def test_cartpole_comparison_tests_each_arm_against_uniform_with_the_protocols_statistics(
    tmp_path: Any,
) -> None:
    """Recorded runs (no training): every interval is ``rl_metrics.iqm_interval`` (the protocol's
    5,000 resamples), each prioritized arm has the difference and the equivalence test against
    uniform within ±10 % of uniform's AUC IQM, and Holm over the two; ``--report`` recomputes all
    of it from a JSON's runs and keeps the command that ran them."""
    from recipes.common import rl_metrics
    from recipes.studies import sb3_cartpole as rec

    rng = np.random.default_rng(4)
    means = {"uniform": 200.0, "proportional": 201.0, "rank": 400.0}
    runs = {
        arm: [_recorded_run(s, list(rng.normal(mean, 1.0, 2))) for s in range(6)]
        for arm, mean in means.items()
    }
    result = rec.summarize(
        {"timesteps": 800, "eval_every": 400, "eval_episodes": 1, "curve_window": 10}, runs
    )
    for arm, data in result["arms"].items():
        assert data["auc_iqm"] == rl_metrics.iqm_interval(data["auc"]), arm
        assert data["final_iqm"] == rl_metrics.iqm_interval(data["final"]), arm
    tests = result["comparisons"]
    assert set(tests) == {"proportional", "rank"} and {t["baseline"] for t in tests.values()} == {"uniform"}
    margin = 0.1 * result["arms"]["uniform"]["auc_iqm"][0]
    assert tests["proportional"]["equivalence"]["margin"] == pytest.approx(margin)
    assert tests["proportional"]["verdict"] == "no difference detected"
    assert tests["proportional"]["equivalence"]["verdict"] == "equivalent within ±m"
    assert tests["rank"]["verdict"] == "better"
    assert tests["rank"]["equivalence"]["verdict"] == "not shown equivalent"
    expected = rl_metrics.holm({arm: t["welch_p"] for arm, t in tests.items()})
    assert result["holm"] == expected and result["holm"]["survives"]["rank"]
    # every run of these records has no "code": none names a commit; one that does is counted
    assert result["sources"] == {"runs": 18, "commits": {}, "all_clean": True, "unrecorded": 18}
    runs["rank"][0]["code"] = {"commit": "cd" * 20, "clean": True}
    with_code = rec.summarize(
        {"timesteps": 800, "eval_every": 400, "eval_episodes": 1, "curve_window": 10}, runs
    )
    assert with_code["sources"] == {
        "runs": 18,
        "commits": {"cd" * 20: 1},
        "all_clean": True,
        "unrecorded": 17,
    }

    recorded = {**json.loads(json.dumps(result)), "command": "the command that ran them"}
    recorded["arms"]["uniform"]["auc_iqm"] = [0.0, 0.0, 0.0]  # a stale interval the report replaces
    (tmp_path / "old.json").write_text(json.dumps(recorded))
    again = rec.main(["--report", str(tmp_path / "old.json"), "--out", str(tmp_path / "new")])
    assert again["arms"]["uniform"]["auc_iqm"] == result["arms"]["uniform"]["auc_iqm"]
    assert again["comparisons"] == json.loads(json.dumps(tests))
    assert again["command"] == "the command that ran them" and "--report" in again["rendered_by"]
    table = (tmp_path / "new.md").read_text()
    assert "Holm-adjusted p" in table and "not shown equivalent" in table
    assert "Code: `cdcdcdcdcd` (1 runs); every start from a clean tree; 17 runs without a record." in table
    (tmp_path / "bad.json").write_text("[]")
    with pytest.raises(ValueError, match="report="):
        rec.main(["--report", str(tmp_path / "bad.json"), "--out", str(tmp_path / "never")])
    assert not (tmp_path / "never.json").exists()


def test_cartpole_comparison_keeps_each_run_and_continues_where_it_stopped(
    tmp_path: Any, monkeypatch: Any
) -> None:
    """Every finished run is kept at once; the same command reads the kept runs and trains only the
    rest; a run kept with other settings is trained again."""
    from recipes.studies import sb3_cartpole as rec

    trained: list[tuple[str, int]] = []
    stop_at = [3]  # the session ends during the third run

    def fake_train(cfg: Any, arm: str, seed: int, bar: Any = None) -> dict[str, Any]:
        trained.append((arm, seed))
        if len(trained) == stop_at[0]:
            raise KeyboardInterrupt
        return _recorded_run(seed, [100.0 + seed, 270.0])

    monkeypatch.setattr(rec, "train_one", fake_train)
    out = str(tmp_path / "c")
    cfg = rec.Config(seeds=2, timesteps=800, eval_every=400, arms="uniform,rank", jobs=1, out=out)
    with pytest.raises(KeyboardInterrupt):
        rec.run(cfg)
    kept = sorted(p.name for p in (tmp_path / "c_runs").iterdir())
    assert kept == ["uniform_seed0.json", "uniform_seed1.json"]
    trained.clear()
    stop_at[0] = 0
    result = rec.run(cfg)
    assert trained == [("rank", 0), ("rank", 1)]  # only the runs not kept
    assert result["arms"]["uniform"]["auc"] == [185.0, 185.5] == result["arms"]["rank"]["auc"]
    trained.clear()
    rec.run(rec.Config(seeds=2, timesteps=1200, eval_every=400, arms="uniform,rank", jobs=1, out=out))
    assert len(trained) == 4  # other settings: nothing kept applies
