"""prisample.sb3 with n-step returns: ``PrioritizedNStepReplayBuffer`` and ``PrioritizedDQN(n_steps=...)``.

Stable-Baselines3's own ``tests/test_n_step_replay.py`` (2.9) with the prioritized classes
substituted: the DQN run and the buffer's returns at episode ends, truncations and the newest row.
Then every field of a drawn batch against SB3's ``NStepReplayBuffer`` on the same stored data and
the same (row, env) slots, ``PrioritizedDQN.train``'s target with the batch's ``discounts``, a
checkpoint round trip and the refused arguments.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("stable_baselines3")

import gymnasium as gym
from gymnasium import spaces
from stable_baselines3.common.buffers import NStepReplayBuffer, ReplayBuffer
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from prisample.sb3 import PrioritizedDQN, PrioritizedNStepReplayBuffer, PrioritizedReplayBuffer

OBS = spaces.Box(low=0, high=1, shape=(4,), dtype=np.float32)
ACT = spaces.Box(low=0, high=1, shape=(2,), dtype=np.float32)
ENV0 = np.array([0])


def nstep_buffer(
    size: int = 10, n_steps: int = 3, gamma: float = 0.99, **kwargs: Any
) -> PrioritizedNStepReplayBuffer:
    return PrioritizedNStepReplayBuffer(size, OBS, ACT, "cpu", n_steps=n_steps, gamma=gamma, seed=0, **kwargs)


def fill_counting(
    buffer: ReplayBuffer, length: int, done_at: int | None = None, truncated_at: int | None = None
) -> None:
    """SB3's test fixture: reward 1, observation ``i``, a done at ``done_at``, a truncation at
    ``truncated_at`` (one env)."""
    for i in range(length):
        infos = [{"TimeLimit.truncated": i == truncated_at}]
        buffer.add(
            np.full((1, 4), i, dtype=np.float32),
            np.full((1, 4), i + 1, dtype=np.float32),
            np.zeros((1, 2), dtype=np.float32),
            np.array([1.0]),
            np.array([1.0 if i == done_at else 0.0]),
            infos,
        )


def expected_return(gamma: float, n_steps: int, stop: int | None = None) -> float:
    """``Σ_{k≤m} γ^k`` for unit rewards, ``m`` the first step that ends the window (else n − 1)."""
    last = n_steps - 1 if stop is None or not 0 <= stop < n_steps else stop
    return float(sum(gamma**k for k in range(last + 1)))


def at(buffer: PrioritizedNStepReplayBuffer, row: int) -> ReplayBufferSamples:
    return buffer.samples_at(np.array([row]), ENV0)


# -- SB3's tests/test_n_step_replay.py, DQN cases, with the prioritized classes ----------------------


def test_run_dqn_with_n_steps_builds_the_prioritized_n_step_buffer() -> None:
    """SB3's ``test_run[DQN]``: ``n_steps=3`` picks the n-step buffer (here the prioritized one)
    with the model's ``n_steps`` and ``gamma``; ``learn`` trains and writes priorities back."""
    gamma = 0.989
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = PrioritizedDQN(
            "MlpPolicy",
            make_vec_env("CartPole-v1", n_envs=2, seed=0),
            train_freq=4,
            n_steps=3,
            policy_kwargs=dict(net_arch=[64]),
            learning_starts=100,
            buffer_size=int(2e4),
            gamma=gamma,
            device="cpu",
            seed=0,
        )
    # SB3's "n_steps is ignored with a custom replay_buffer_class" would be wrong here
    assert not [w for w in caught if "n_steps" in str(w.message)]
    buffer = model.replay_buffer
    assert isinstance(buffer, PrioritizedNStepReplayBuffer) and isinstance(buffer, NStepReplayBuffer)
    assert (buffer.n_steps, buffer.gamma) == (3, gamma)
    model.learn(total_timesteps=150)
    assert model._n_updates > 0
    stored = buffer.sampler.priorities[: buffer.pos * buffer.n_envs]
    assert not np.isnan(stored).any() and (stored != stored.max()).any()  # |δ| written back


@pytest.mark.parametrize("done_at", [1, 2])
@pytest.mark.parametrize("n_steps", [3, 5])
@pytest.mark.parametrize("base_idx", [0, 2])
def test_nstep_early_termination(done_at: int, n_steps: int, base_idx: int) -> None:
    gamma = 0.98
    buffer = nstep_buffer(n_steps=n_steps, gamma=gamma)
    fill_counting(buffer, 10, done_at=done_at)
    batch = at(buffer, base_idx)
    stop = done_at - base_idx
    np.testing.assert_allclose(batch.rewards.item(), expected_return(gamma, n_steps, stop), rtol=1e-6)
    assert batch.dones.item() == float(base_idx <= done_at)
    assert batch.discounts is not None
    kept = min(stop, n_steps - 1) + 1 if stop >= 0 else n_steps
    np.testing.assert_allclose(batch.discounts.item(), gamma**kept, rtol=1e-6)


@pytest.mark.parametrize("truncated_at", [1, 2])
@pytest.mark.parametrize("n_steps", [2, 5])
@pytest.mark.parametrize("base_idx", [0, 1])
def test_nstep_early_truncation(truncated_at: int, n_steps: int, base_idx: int) -> None:
    buffer = nstep_buffer(n_steps=n_steps)
    fill_counting(buffer, 10, truncated_at=truncated_at)
    batch = at(buffer, base_idx)
    expected = expected_return(0.99, n_steps, truncated_at - base_idx)
    np.testing.assert_allclose(batch.rewards.item(), expected, rtol=1e-6)
    assert batch.dones.item() == 0.0


@pytest.mark.parametrize("n_steps", [3, 5])
def test_nstep_no_terminations_and_the_newest_row_ends_a_window(n_steps: int) -> None:
    """No episode end: ``γ^n``.  Once the buffer wrapped, the newest row (``pos − 1``) ends every
    window that reaches it as a truncation would (the row after it is older data), unless it is a
    done, which then counts as one."""
    gamma = 0.99
    buffer = nstep_buffer(n_steps=n_steps)
    fill_counting(buffer, 10)
    batch = at(buffer, 3)
    assert batch.discounts is not None
    np.testing.assert_allclose(batch.discounts.item(), gamma**n_steps)
    np.testing.assert_allclose(batch.rewards.item(), expected_return(gamma, n_steps), rtol=1e-6)
    assert batch.dones.item() == 0.0

    fill_counting(buffer, 2)  # rows 0 and 1 overwritten: pos = 2, row 1 the newest
    batch = at(buffer, 0)
    assert batch.discounts is not None
    np.testing.assert_allclose(
        batch.rewards.item(), expected_return(gamma, n_steps, buffer.pos - 1), rtol=1e-6
    )
    np.testing.assert_allclose(batch.discounts.item(), gamma**2)
    assert batch.dones.item() == 0.0
    np.testing.assert_array_equal(batch.next_observations.numpy(), np.full((1, 4), 2.0))

    buffer.dones[buffer.pos - 1, :] = True
    batch = at(buffer, 0)
    np.testing.assert_allclose(
        batch.rewards.item(), expected_return(gamma, n_steps, buffer.pos - 1), rtol=1e-6
    )
    assert batch.dones.item() == 1.0
    assert not buffer.timeouts.any()  # reading a window writes nothing to the storage


def test_one_step_matches_the_one_step_buffer() -> None:
    """SB3's ``test_match_normal_buffer``: ``n_steps=1`` gives ``PrioritizedReplayBuffer``'s batch."""
    buffer = nstep_buffer(n_steps=1)
    reference = PrioritizedReplayBuffer(10, OBS, ACT, "cpu", seed=0)
    fill_counting(buffer, 10)
    fill_counting(reference, 10)
    got, expected = at(buffer, 3), reference.samples_at(np.array([3]), ENV0)
    np.testing.assert_allclose(got.rewards.item(), expected_return(0.99, 1), rtol=1e-6)
    for name in ("observations", "actions", "next_observations", "dones", "rewards"):
        assert torch.equal(getattr(got, name), getattr(expected, name)), name
    assert got.discounts is not None and got.discounts.item() == pytest.approx(0.99)


# -- against SB3's NStepReplayBuffer as the naive reference ------------------------------------------


def fill_random(buffers: list[ReplayBuffer], steps: int, n_envs: int, seed: int = 0) -> None:
    """The same vector steps into every buffer: observations encode (step, env); dones and timeouts
    at random, each on its own (a timeout without a done, as in SB3's own fixture, too)."""
    rng = np.random.default_rng(seed)
    for t in range(steps):
        obs = (100 * t + np.arange(n_envs, dtype=np.float32))[:, None].repeat(4, axis=1)
        done = rng.random(n_envs) < 0.25
        infos = [{"TimeLimit.truncated": bool(rng.random() < (0.6 if d else 0.15))} for d in done]
        reward = rng.normal(size=n_envs).astype(np.float32)
        action = rng.random((n_envs, 2)).astype(np.float32)
        for b in buffers:
            b.add(obs, obs + 0.5, action, reward, done, infos)


@pytest.mark.parametrize(
    ("n_steps", "steps", "timeouts"),
    [(3, 5, True), (3, 13, True), (5, 21, True), (4, 13, False), (1, 13, True), (12, 13, True)],
)
def test_batches_match_sb3_n_step_buffer_at_alpha0_beta0(
    n_steps: int, steps: int, timeouts: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With α = 0 and β = 0 (uniform, unit weights) every field of a drawn batch (n-step return,
    ``discounts``, the window's last next observation, done without timeout) is SB3's
    ``NStepReplayBuffer._get_samples`` for the same stored data and the same (row, env) slots:
    before the wrap-around, after it (windows crossing the end of the arrays and stopped at the
    newest row), with and without ``handle_timeout_termination``, and windows longer than the
    buffer."""
    n_envs, size, gamma = 3, 24, 0.9  # 8 rows
    kwargs: dict[str, Any] = dict(device="cpu", n_envs=n_envs, handle_timeout_termination=timeouts)
    ours = PrioritizedNStepReplayBuffer(
        size, OBS, ACT, n_steps=n_steps, gamma=gamma, alpha=0.0, beta=0.0, seed=0, **kwargs
    )
    theirs = NStepReplayBuffer(size, OBS, ACT, n_steps=n_steps, gamma=gamma, **kwargs)
    fill_random([ours, theirs], steps=steps, n_envs=n_envs)
    batch = ours.sample(256)
    rows, envs = np.divmod(batch.indices, n_envs)
    assert torch.equal(batch.weights, torch.ones(256, 1))
    assert len(np.unique(batch.indices)) == min(steps, 8) * n_envs  # every slot drawn at least once
    # SB3 chooses the environments inside _get_samples with np.random.randint: make it take ours.
    monkeypatch.setattr(np.random, "randint", lambda *args, **kw: envs)
    expected = theirs._get_samples(rows)
    monkeypatch.undo()
    for name in ReplayBufferSamples._fields:
        a, b = getattr(expected, name), getattr(batch, name)
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert torch.equal(b, a), name
    if timeouts:  # the fixture stored timeouts without a done, and (longer runs) on a done
        assert ((1 - theirs.dones) * theirs.timeouts).sum() > 0
        assert steps < 8 or (theirs.dones * theirs.timeouts).sum() > 0
    if steps > 8:  # and windows that reach the newest row
        newest = (ours.pos - 1) % 8
        assert ((rows[:, None] + np.arange(min(n_steps, 8))) % 8 == newest).any()


# -- PrioritizedDQN with n-step returns --------------------------------------------------------------


def nstep_model(**kwargs: Any) -> PrioritizedDQN:
    model = PrioritizedDQN(
        "MlpPolicy",
        "CartPole-v1",
        learning_starts=0,
        buffer_size=256,
        policy_kwargs={"net_arch": [16]},
        device="cpu",
        seed=0,
        n_steps=3,
        gamma=0.9,
        **kwargs,
    )
    model.set_logger(Logger(folder=None, output_formats=[]))  # train() without learn()
    return model


def test_train_bootstraps_with_the_batch_discounts() -> None:
    """``train``'s target is ``R + (1 − done) · discounts · max_a Q_target(s', a)`` with the
    batch's per-sample ``discounts`` (``γ^m``, shorter windows at episode ends), the loss
    ``mean_i w_i · Huber(δ_i)``, and ``|δ_i|`` is written back to the window's first slot."""
    model = nstep_model(replay_buffer_kwargs={"alpha": 1.0, "beta": 1.0, "seed": 0}, beta_final=None)
    buf = model.replay_buffer
    rng = np.random.default_rng(0)
    for _ in range(120):
        obs = rng.normal(size=(1, 4)).astype(np.float32)
        done = rng.random(1) < 0.2
        buf.add(obs, obs + 0.1, rng.integers(0, 2, size=1), rng.normal(size=1).astype(np.float32), done, [{}])
    buf.update_priorities(np.arange(120), rng.exponential(size=120))
    batch = buf.sample(64)
    assert batch.discounts is not None
    assert len(np.unique(batch.discounts.numpy().round(6))) > 1  # windows of different lengths drawn
    buf.sample = lambda *a, **k: batch  # type: ignore[method-assign]
    with torch.no_grad():
        q = model.q_net(batch.observations).gather(1, batch.actions.long())
        next_q = model.q_net_target(batch.next_observations).max(dim=1).values.reshape(-1, 1)
        target = batch.rewards + (1 - batch.dones) * batch.discounts * next_q
        huber = torch.nn.functional.smooth_l1_loss(q, target, reduction="none")
        expected_loss = float((batch.weights * huber).mean())
        delta = (target - q).abs()[:, 0].numpy()
    model.train(gradient_steps=1, batch_size=64)
    assert model.logger.name_to_value["train/loss"] == pytest.approx(expected_loss, rel=1e-6)
    last = dict(zip(batch.indices.tolist(), delta.tolist(), strict=True))
    np.testing.assert_allclose(buf.sampler.priorities[list(last)], list(last.values()), rtol=1e-6)


def test_save_load_round_trip_keeps_the_n_step_buffer_and_its_priorities(tmp_path: Any) -> None:
    """SB3's ``save``/``load`` and ``save_replay_buffer``/``load_replay_buffer``: the n-step buffer
    comes back with its ``n_steps``, ``gamma``, priorities and next draws."""
    model = PrioritizedDQN(
        "MlpPolicy",
        "CartPole-v1",
        learning_starts=50,
        buffer_size=500,
        n_steps=4,
        gamma=0.95,
        device="cpu",
        seed=0,
        policy_kwargs={"net_arch": [16]},
        replay_buffer_kwargs={"backend": "rank", "seed": 0},
    )
    model.learn(150)
    model.save(tmp_path / "model.zip")
    model.save_replay_buffer(tmp_path / "replay.pkl")
    loaded = PrioritizedDQN.load(tmp_path / "model.zip", env=gym.make("CartPole-v1"), device="cpu")
    loaded.load_replay_buffer(tmp_path / "replay.pkl")
    a, b = model.replay_buffer, loaded.replay_buffer
    assert isinstance(b, PrioritizedNStepReplayBuffer) and (b.n_steps, b.gamma) == (4, 0.95)
    assert loaded.n_steps == 4
    assert (a.sampler.priorities[:150] != 1.0).any()
    np.testing.assert_array_equal(a.sampler.priorities, b.sampler.priorities)
    first, second = a.sample(16), b.sample(16)
    np.testing.assert_array_equal(first.indices, second.indices)
    for name in ("weights", "observations", "rewards", "discounts", "next_observations", "dones"):
        assert torch.equal(getattr(first, name), getattr(second, name)), name


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"n_steps": 0}, "n_steps"),
        ({"n_steps": 2.5}, "n_steps"),
        ({"gamma": 1.5}, "gamma"),
        ({"optimize_memory_usage": True, "handle_timeout_termination": False}, "optimize_memory_usage"),
        ({"observation_space": spaces.Dict({"x": OBS})}, "observation_space"),
        ({"alpha": -1.0}, "alpha"),
    ],
)
def test_bad_n_step_buffer_arguments_name_them(kwargs: dict[str, Any], name: str) -> None:
    args: dict[str, Any] = {"buffer_size": 8, "observation_space": OBS, "action_space": ACT, "device": "cpu"}
    with pytest.raises((ValueError, TypeError), match=name):
        PrioritizedNStepReplayBuffer(**{**args, **kwargs})


def test_bad_n_step_dqn_arguments_name_them() -> None:
    """``n_steps`` must be a positive integer, and ``n_steps > 1`` needs an n-step buffer class
    (SB3's DQN would use a one-step class given explicitly and ignore ``n_steps``)."""
    with pytest.raises(ValueError, match="n_steps"):
        PrioritizedDQN("MlpPolicy", "CartPole-v1", n_steps=0)
    with pytest.raises(ValueError, match="n_steps"):
        PrioritizedDQN("MlpPolicy", "CartPole-v1", n_steps=3, replay_buffer_class=PrioritizedReplayBuffer)
    model = PrioritizedDQN(
        "MlpPolicy",
        "CartPole-v1",
        n_steps=2,
        gamma=0.8,
        buffer_size=64,
        device="cpu",
        replay_buffer_class=PrioritizedNStepReplayBuffer,
    )
    assert (model.replay_buffer.n_steps, model.replay_buffer.gamma) == (2, 0.8)  # type: ignore[attr-defined]


@pytest.mark.parametrize("cls", [PrioritizedReplayBuffer, PrioritizedNStepReplayBuffer])
def test_sb3s_own_read_path_reads_through_samples_at(cls: type[PrioritizedReplayBuffer]) -> None:
    """SB3's ``_get_samples`` (its uniform ``sample`` and its tests) draws the environments with
    ``np.random`` as SB3 does and reads the transitions with this class's ``samples_at``, so that
    SB3's own buffer tests, run on these classes, test this code and not SB3's parent class."""
    buffer = cls(24, OBS, ACT, "cpu", n_envs=3, seed=0)
    fill_random([buffer], steps=11, n_envs=3)
    calls: list[int] = []
    read = buffer.samples_at
    buffer.samples_at = lambda rows, envs, env=None: calls.append(len(rows)) or read(rows, envs, env)  # type: ignore[method-assign]
    rows = np.array([0, 3, 5, 7, 7])
    np.random.seed(5)
    got = buffer._get_samples(rows)
    np.random.seed(5)
    envs = np.random.randint(0, high=3, size=(5,))
    assert calls == [5]
    for a, b in zip(got, read(rows, envs), strict=True):
        assert (a is None and b is None) or torch.equal(a, b)
