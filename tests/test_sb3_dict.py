"""prisample.sb3 with Dict observation spaces: ``PrioritizedDictReplayBuffer`` and ``PrioritizedDQN``.

Stable-Baselines3's own ``tests/test_dict_env.py`` (2.9), its DQN cases, with ``PrioritizedDQN``
substituted; then a batch's every key against the stored rows and against SB3's
``DictReplayBuffer`` for the same slots, the one priority path the three buffers share, a checkpoint
round trip and the refused arguments.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("stable_baselines3")

import gymnasium as gym
from gymnasium import spaces
from stable_baselines3.common.buffers import DictReplayBuffer
from stable_baselines3.common.envs import SimpleMultiObsEnv
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack, VecNormalize

from prisample.sb3 import (
    PrioritizedDictReplayBuffer,
    PrioritizedDQN,
    PrioritizedNStepReplayBuffer,
    PrioritizedReplayBuffer,
)


class DummyDictEnv(gym.Env[dict[str, Any], Any]):
    """SB3's test env: an image, a vector and a discrete observation (or the vector alone), random
    observations, reward 0, episodes ended by a ``TimeLimit``."""

    def __init__(self, channel_last: bool = False, vec_only: bool = False) -> None:
        super().__init__()
        self.action_space = spaces.Discrete(3)
        vec = spaces.Box(low=-1, high=1, shape=(2,), dtype=np.float32)
        if vec_only:
            self.observation_space = spaces.Dict({"vec": vec})
        else:
            shape = (36, 36, 1) if channel_last else (1, 36, 36)
            self.observation_space = spaces.Dict(
                {
                    "img": spaces.Box(0, 255, shape=shape, dtype=np.uint8),
                    "vec": vec,
                    "discrete": spaces.Discrete(4),
                }
            )

    def seed(self, seed: int) -> None:
        self.observation_space.seed(seed)

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        return self.observation_space.sample(), 0.0, False, False, {}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if seed is not None:
            self.observation_space.seed(seed)
        return self.observation_space.sample(), {}


SMALL_CNN = dict(net_arch=[16], features_extractor_kwargs=dict(cnn_output_dim=16))


def learned(model: PrioritizedDQN) -> PrioritizedDictReplayBuffer:
    """The model's buffer, checked to be the prioritized dict one with |δ| written back."""
    buffer = model.replay_buffer
    assert isinstance(buffer, PrioritizedDictReplayBuffer) and isinstance(buffer, DictReplayBuffer)
    assert model._n_updates > 0
    filled = buffer.sampler.priorities[: (buffer.buffer_size if buffer.full else buffer.pos) * buffer.n_envs]
    assert not np.isnan(filled).any() and (filled != filled.max()).any()
    return buffer


# -- SB3's tests/test_dict_env.py, DQN cases, with PrioritizedDQN ------------------------------------


def test_consistency() -> None:
    """SB3's ``test_consistency[DQN]``: a Dict observation holding one vector and the flattened
    vector give the same network and the same actions after the same learning (here the same
    prioritized draws too)."""
    dict_env = DummyDictEnv(vec_only=True)
    dict_env.seed(10)
    dict_env_limited = gym.wrappers.TimeLimit(dict_env, 100)
    env = gym.wrappers.FlattenObservation(dict_env_limited)
    obs, _ = dict_env_limited.reset()
    kwargs: dict[str, Any] = dict(buffer_size=100, train_freq=8, gradient_steps=1, learning_starts=0)
    kwargs["policy_kwargs"] = dict(net_arch=[8, 8])
    dict_model = PrioritizedDQN(
        "MultiInputPolicy", dict_env_limited, gamma=0.5, seed=1, device="cpu", **kwargs
    )
    before_1, _ = dict_model.predict(obs, deterministic=True)
    dict_model.learn(total_timesteps=128)
    normal_model = PrioritizedDQN("MlpPolicy", env, gamma=0.5, seed=1, device="cpu", **kwargs)
    before_2, _ = normal_model.predict(obs["vec"], deterministic=True)
    normal_model.learn(total_timesteps=128)
    after_1, _ = dict_model.predict(obs, deterministic=True)
    after_2, _ = normal_model.predict(obs["vec"], deterministic=True)
    assert np.allclose(before_1, before_2) and np.allclose(after_1, after_2)
    learned(dict_model)
    assert type(normal_model.replay_buffer) is PrioritizedReplayBuffer
    np.testing.assert_allclose(
        dict_model.replay_buffer.sampler.priorities, normal_model.replay_buffer.sampler.priorities
    )


@pytest.mark.parametrize("channel_last", [False, True])
def test_dict_spaces(channel_last: bool) -> None:
    """SB3's ``test_dict_spaces[DQN]``: image, vector and discrete observations."""
    env = gym.wrappers.TimeLimit(DummyDictEnv(channel_last=channel_last), 100)
    kwargs: dict[str, Any] = dict(buffer_size=250, policy_kwargs=SMALL_CNN, train_freq=8, gradient_steps=1)
    model = PrioritizedDQN(
        "MultiInputPolicy", env, gamma=0.5, seed=1, learning_starts=0, device="cpu", **kwargs
    )
    model.learn(total_timesteps=128)
    learned(model)
    evaluate_policy(model, env, n_eval_episodes=5, warn=False)


def test_two_envs() -> None:
    """SB3's ``test_multiprocessing[DQN]`` with two environments (in-process here, to spare the
    test run the subprocesses; the buffer sees the same ``n_envs = 2`` rows)."""
    env = DummyVecEnv([lambda: gym.wrappers.TimeLimit(DummyDictEnv(), 50)] * 2)
    model = PrioritizedDQN(
        "MultiInputPolicy",
        env,
        gamma=0.5,
        seed=1,
        buffer_size=500,
        policy_kwargs=SMALL_CNN,
        train_freq=5,
        device="cpu",
    )
    model.learn(total_timesteps=128)
    assert model.replay_buffer.n_envs == 2
    # learning_starts is SB3's default (100): a few updates only, but priorities written back
    learned(model)


@pytest.mark.parametrize("channel_last", [False, True])
def test_dict_vec_framestack(channel_last: bool) -> None:
    """SB3's ``test_dict_vec_framestack[DQN]``: Dict observations through ``VecFrameStack``."""
    env = DummyVecEnv(
        [lambda: SimpleMultiObsEnv(random_start=True, discrete_actions=True, channel_last=channel_last)]
    )
    env = VecFrameStack(
        env, n_stack=3, channels_order={"vec": None, "img": "last" if channel_last else "first"}
    )
    small = dict(net_arch=[8], features_extractor_kwargs=dict(cnn_output_dim=8))
    model = PrioritizedDQN(
        "MultiInputPolicy",
        env,
        gamma=0.5,
        seed=1,
        buffer_size=64,
        policy_kwargs=small,
        train_freq=8,
        gradient_steps=1,
        learning_starts=0,
        device="cpu",
    )
    model.learn(total_timesteps=128)
    learned(model)
    evaluate_policy(model, env, n_eval_episodes=5, warn=False)


def test_vec_normalize() -> None:
    """SB3's ``test_vec_normalize[DQN]``: ``VecNormalize`` on one key; the batch's observations are
    normalised as SB3's ``DictReplayBuffer`` normalises them."""
    env = VecNormalize(
        DummyVecEnv([lambda: gym.wrappers.TimeLimit(DummyDictEnv(), 100)]), norm_obs_keys=["vec"]
    )
    model = PrioritizedDQN(
        "MultiInputPolicy",
        env,
        gamma=0.5,
        seed=1,
        buffer_size=100,
        train_freq=8,
        gradient_steps=1,
        learning_starts=0,
        device="cpu",
    )
    model.learn(total_timesteps=128)
    buffer = learned(model)
    batch = buffer.sample(8, env=env)
    rows, envs = np.divmod(batch.indices, 1)
    raw = buffer.observations["vec"][rows, envs]
    np.testing.assert_allclose(
        batch.observations["vec"].numpy(), env.normalize_obs({"vec": raw})["vec"], rtol=1e-6
    )
    assert not np.allclose(batch.observations["vec"].numpy(), raw)
    evaluate_policy(model, env, n_eval_episodes=5, warn=False)


# -- batches against the stored rows and SB3's DictReplayBuffer --------------------------------------

SPACE = spaces.Dict(
    {
        "img": spaces.Box(0, 255, shape=(1, 6, 6), dtype=np.uint8),
        "vec": spaces.Box(-1e6, 1e6, shape=(3,), dtype=np.float32),
        "discrete": spaces.Discrete(500),
    }
)
ACT = spaces.Discrete(4)


def fill_dict(buffers: list[Any], steps: int, n_envs: int, seed: int = 0) -> None:
    """The same vector steps into every buffer: each key's observation encodes (step, env)."""
    rng = np.random.default_rng(seed)
    for t in range(steps):
        code = 10 * t + np.arange(n_envs)
        obs = {
            "img": np.broadcast_to((code % 256).astype(np.uint8)[:, None, None, None], (n_envs, 1, 6, 6)),
            "vec": np.stack([code, code + 0.25, -code], axis=1).astype(np.float32),
            "discrete": code,
        }
        next_obs = {key: value + 1 for key, value in obs.items()}
        action = rng.integers(0, 4, size=n_envs)
        reward = rng.normal(size=n_envs).astype(np.float32)
        done = rng.random(n_envs) < 0.3
        infos = [{"TimeLimit.truncated": bool(d and rng.random() < 0.5)} for d in done]
        for b in buffers:
            b.add(dict(obs), dict(next_obs), action, reward, done, infos)


@pytest.mark.parametrize("steps", [5, 13])
def test_dict_batches_are_the_stored_rows_and_sb3s(steps: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each key of a drawn batch is the observation stored at the drawn (row, env) slot, and every
    field equals SB3's ``DictReplayBuffer._get_samples`` for the same stored data and slots
    (timeouts clear dones, wrap-around); the slots that can be drawn are the rows written."""
    n_envs = 3
    ours = PrioritizedDictReplayBuffer(24, SPACE, ACT, "cpu", n_envs=n_envs, alpha=0.7, beta=0.5, seed=0)
    theirs = DictReplayBuffer(24, SPACE, ACT, "cpu", n_envs=n_envs)
    fill_dict([ours, theirs], steps, n_envs)
    valid = np.flatnonzero(~np.isnan(ours.sampler.priorities))
    np.testing.assert_array_equal(valid, np.arange(min(steps, 8) * n_envs))
    ours.update_priorities(valid, np.random.default_rng(1).exponential(size=valid.size))
    batch = ours.sample(128)
    rows, envs = np.divmod(batch.indices, n_envs)
    # the step that wrote each row: rows were overwritten in order once the 8 rows filled up
    step = np.where(rows < steps - 8, rows + 8, rows) if steps > 8 else rows
    code = 10 * step + envs
    assert torch.equal(batch.observations["discrete"][:, 0], torch.from_numpy(code.astype(np.int64)))
    assert torch.equal(batch.observations["vec"][:, 2], torch.from_numpy(-code.astype(np.float32)))
    assert torch.equal(batch.observations["img"][:, 0, 3, 3], torch.from_numpy((code % 256).astype(np.uint8)))
    assert torch.equal(batch.next_observations["vec"][:, 0], torch.from_numpy(code.astype(np.float32) + 1))
    monkeypatch.setattr(np.random, "randint", lambda *args, **kw: envs)
    expected = theirs._get_samples(rows)
    monkeypatch.undo()
    for name in ("observations", "next_observations"):
        for key in SPACE.spaces:
            assert torch.equal(getattr(batch, name)[key], getattr(expected, name)[key]), (name, key)
    for name in ("actions", "dones", "rewards"):
        assert torch.equal(getattr(batch, name), getattr(expected, name)), name
    assert batch.discounts is None and (theirs.dones * theirs.timeouts).sum() > 0


def test_the_three_buffers_share_one_priority_path() -> None:
    """The plain, dict and n-step buffers draw the same slots with the same weights from the same
    priorities and seed (one piece of code holds the priorities, the draw and the weights)."""
    box = spaces.Box(-1e6, 1e6, shape=(3,), dtype=np.float32)
    common: dict[str, Any] = dict(n_envs=2, alpha=0.8, beta=0.7, backend="rank", seed=4)
    buffers: list[Any] = [
        PrioritizedReplayBuffer(20, box, ACT, "cpu", **common),
        PrioritizedDictReplayBuffer(20, spaces.Dict({"x": box}), ACT, "cpu", **common),
        PrioritizedNStepReplayBuffer(20, box, ACT, "cpu", n_steps=3, **common),
    ]
    errors = np.random.default_rng(2).exponential(size=14)
    for buf in buffers:
        for t in range(7):
            obs = np.full((2, 3), t, dtype=np.float32)
            wrap = (lambda o: {"x": o}) if isinstance(buf, PrioritizedDictReplayBuffer) else (lambda o: o)
            buf.add(
                wrap(obs), wrap(obs + 1), np.zeros(2), np.ones(2, dtype=np.float32), np.zeros(2), [{}, {}]
            )
        buf.update_priorities(np.arange(14), errors)
    draws = [buf.sample(32) for buf in buffers]
    for draw in draws[1:]:
        np.testing.assert_array_equal(draw.indices, draws[0].indices)
        assert torch.equal(draw.weights, draws[0].weights)
    assert draws[0].weights.min() < 1.0  # the priorities are unequal


def test_save_load_round_trip_keeps_the_dict_buffer_and_its_priorities(tmp_path: Any) -> None:
    """SB3's ``save``/``load`` and ``save_replay_buffer``/``load_replay_buffer`` on a Dict
    observation space: the same buffer class, priorities and next draws."""
    env = gym.wrappers.TimeLimit(DummyDictEnv(vec_only=True), 30)
    model = PrioritizedDQN(
        "MultiInputPolicy",
        env,
        buffer_size=300,
        learning_starts=20,
        train_freq=4,
        policy_kwargs=dict(net_arch=[8]),
        seed=0,
        device="cpu",
        replay_buffer_kwargs={"seed": 0},
    )
    model.learn(100)
    learned(model)
    model.save(tmp_path / "model.zip")
    model.save_replay_buffer(tmp_path / "replay.pkl")
    loaded = PrioritizedDQN.load(tmp_path / "model.zip", env=env, device="cpu")
    loaded.load_replay_buffer(tmp_path / "replay.pkl")
    a, b = model.replay_buffer, loaded.replay_buffer
    assert isinstance(b, PrioritizedDictReplayBuffer)
    np.testing.assert_array_equal(a.sampler.priorities, b.sampler.priorities)
    first, second = a.sample(16), b.sample(16)
    np.testing.assert_array_equal(first.indices, second.indices)
    assert torch.equal(first.weights, second.weights)
    assert torch.equal(first.observations["vec"], second.observations["vec"])


def test_bad_dict_arguments_name_them() -> None:
    box = spaces.Box(-1, 1, shape=(3,), dtype=np.float32)
    with pytest.raises(ValueError, match="observation_space"):
        PrioritizedDictReplayBuffer(8, box, ACT, "cpu")
    with pytest.raises(ValueError, match="optimize_memory_usage"):
        PrioritizedDictReplayBuffer(
            8, SPACE, ACT, "cpu", optimize_memory_usage=True, handle_timeout_termination=False
        )
    with pytest.raises(ValueError, match="observation_space"):
        PrioritizedReplayBuffer(8, SPACE, ACT, "cpu")
    env = gym.wrappers.TimeLimit(DummyDictEnv(vec_only=True), 30)
    with pytest.raises(ValueError, match="n_steps"):  # as SB3: no n-step returns over Dict observations
        PrioritizedDQN("MultiInputPolicy", env, n_steps=3, device="cpu")
    with pytest.raises(ValueError, match="observation_space"):
        PrioritizedDQN("MultiInputPolicy", env, replay_buffer_class=PrioritizedReplayBuffer, device="cpu")
