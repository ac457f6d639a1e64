"""Replay features: n-step windows against a naive reference, extras, dict observations,
obs_dtype inference, vector-env adds, and their checkpoints."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from prisample.replay import PrioritizedReplay, ReplayBatch, ReplayMemory
from tests.state_fuzz import states_equal

LOG_PROB = {"log_prob": ((), np.float32), "mask": ((4,), np.bool_)}


# -- n-step windows against a naive reference ---------------------------------------------------------
class Driver:
    """``streams`` environments stepped in random turns; each observation frame is ``[stream, episode,
    step]`` (float32), stacked like Atari (a reset repeats its frame).  Logs every transition."""

    def __init__(self, stack: int, streams: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.stack, self.streams = stack, streams
        self.episode = [0] * streams
        self.step_ = [0] * streams
        self.frames = [self._reset(s) for s in range(streams)]
        self.log: list[dict[str, Any]] = []  # per generation

    def _frame(self, s: int) -> np.ndarray:
        return np.array([s, self.episode[s], self.step_[s]], np.float32)

    def _reset(self, s: int) -> list[np.ndarray]:
        self.step_[s] = 0
        return [self._frame(s)] * self.stack

    def _obs(self, frames: list[np.ndarray]) -> np.ndarray:
        return np.stack(frames) if self.stack > 1 else frames[0]

    def transition(self) -> dict[str, Any]:
        s = int(self.rng.integers(self.streams))
        obs = self._obs(self.frames[s])
        self.step_[s] += 1
        nxt = [*self.frames[s][1:], self._frame(s)] if self.stack > 1 else [self._frame(s)]
        end = bool(self.rng.random() < 0.2)
        terminated = end and bool(self.rng.random() < 0.5)
        t = {
            "obs": obs,
            "next_obs": self._obs(nxt),
            "stream": s,
            "end": end,
            "action": int(self.rng.integers(4)),
            "reward": float(self.rng.normal()),
            "discount": 0.0 if terminated else float(self.rng.choice([0.9, 0.5, 1.0])),
            "log_prob": np.float32(self.rng.normal()),
            "mask": self.rng.random(4) < 0.5,
        }
        if end:
            self.episode[s] += 1
            self.frames[s] = self._reset(s)
        else:
            self.frames[s] = nxt
        self.log.append(t)
        return t


def expected_windows(log: list[dict[str, Any]], n: int, tail: int) -> dict[int, dict[str, Any]]:
    """Per live generation whose window is complete: the window's reward, discount, next_obs."""
    out = {}
    for g in range(tail, len(log)):
        s, reward, discount, m = log[g]["stream"], 0.0, 1.0, 0
        last = g
        for h in range(g, len(log)):
            if log[h]["stream"] != s:
                continue
            reward += discount * log[h]["reward"]
            discount *= log[h]["discount"]
            m, last = m + 1, h
            if m == n or log[h]["end"]:
                break
        if m == n or log[last]["end"]:
            out[g] = {"reward": reward, "discount": discount, "next_obs": log[last]["next_obs"], "m": m}
    return out


def check_against_reference(replay: PrioritizedReplay, driver: Driver, n: int) -> None:
    memory = replay.memory
    tail = memory.num_evicted
    want = expected_windows(driver.log, n, tail)
    slots = np.arange(memory.capacity)
    generation = memory.generations(slots)
    drawable = memory.drawable(slots)
    assert sorted(generation[drawable].tolist()) == sorted(want)  # incomplete windows are not drawable
    np.testing.assert_array_equal(~np.isnan(replay.sampler.priorities), drawable)
    if not drawable.any():
        with pytest.raises(ValueError, match="no transition can be drawn yet"):
            replay.sample(4)
        return
    batch, draw = replay.sample(16)
    assert isinstance(batch, ReplayBatch)
    for i, g in enumerate(batch.generation.tolist()):
        t, w = driver.log[g], want[g]
        np.testing.assert_array_equal(batch.obs[i], t["obs"])
        np.testing.assert_array_equal(batch.next_obs[i], w["next_obs"])
        assert batch.action[i] == t["action"]
        np.testing.assert_allclose(batch.reward[i], w["reward"], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(batch.discount[i], w["discount"], rtol=1e-6)
        assert batch.extras["log_prob"][i] == t["log_prob"] and batch["log_prob"][i] == t["log_prob"]
        np.testing.assert_array_equal(batch["mask"][i], t["mask"])
        # next_obs is s_{t+m}: same stream and episode, m steps on (never across an episode end)
        last_frame = batch.next_obs[i][-1] if driver.stack > 1 else batch.next_obs[i]
        first_frame = batch.obs[i][-1] if driver.stack > 1 else batch.obs[i]
        assert last_frame[0] == first_frame[0] and last_frame[1] == first_frame[1]
        assert last_frame[2] - first_frame[2] == w["m"] <= n
    replay.update_priorities(draw.indices, np.arange(16.0), generations=batch.generation)


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize(("stack", "streams"), [(1, 1), (1, 3), (4, 1), (4, 3)])
def test_n_step_windows_match_a_naive_reference(n: int, stack: int, streams: int) -> None:
    """Random episodes (terminated and truncated), interleaved streams, many wrap-arounds, single
    adds and add_many, through PrioritizedReplay's public API."""
    replay = PrioritizedReplay(
        13, (3,), frame_stack=stack, num_streams=streams, n_step=n, extras=LOG_PROB, seed=stack + streams
    )
    driver = Driver(stack, streams, seed=10 * n + stack + streams)
    rng = np.random.default_rng(n)
    for step in range(150):
        if rng.random() < 0.5:
            t = driver.transition()
            replay.add(
                t["obs"],
                t["action"],
                t["reward"],
                t["discount"],
                t["next_obs"],
                episode_end=t["end"],
                stream=t["stream"],
                log_prob=t["log_prob"],
                mask=t["mask"],
            )
        else:
            ts = [driver.transition() for _ in range(int(rng.integers(0, 4)))]

            def col(key: str, ts: list[dict[str, Any]] = ts) -> np.ndarray:
                return np.array([t[key] for t in ts])

            shape = (0, *((stack,) if stack > 1 else ()), 3)
            replay.add_many(
                col("obs") if ts else np.zeros(shape, np.float32),
                col("action").astype(np.int64),
                col("reward").astype(np.float64),
                col("discount").astype(np.float64),
                col("next_obs") if ts else np.zeros(shape, np.float32),
                episode_end=col("end").astype(bool),
                streams=col("stream").astype(np.int64),
                log_prob=col("log_prob").astype(np.float32),
                mask=col("mask").reshape(-1, 4).astype(bool),
            )
        if step % 5 == 0 or step > 140:
            check_against_reference(replay, driver, n)
            replay.memory.check_valid()
    assert replay.memory.num_evicted > 5 * replay.capacity


def test_n_step_one_costs_no_accumulator_and_equals_n_step_one_transitions() -> None:
    memory = ReplayMemory(8, (3,), n_step=1)
    assert memory.state_dict()["nstep"] is None
    memory.add(np.zeros(3, np.float32), 0, 1.5, 0.5, np.ones(3, np.float32))
    batch = memory.get([0])
    assert batch.reward.tolist() == [1.5] and batch.discount.tolist() == [0.5]


def test_sample_before_any_window_completes_raises() -> None:
    replay = PrioritizedReplay(8, (2,), n_step=3)
    replay.add([0.0, 0.0], 0, 1.0, 0.9, [1.0, 1.0])
    with pytest.raises(ValueError, match="n_step=3 a transition is drawn once its window is complete"):
        replay.sample(2)
    with pytest.raises(ValueError, match="window is complete"):
        replay.memory.get([0])
    replay.add([1.0, 1.0], 0, 1.0, 0.9, [2.0, 2.0], episode_end=True)  # the episode end completes both
    batch, _ = replay.sample(2)
    assert set(batch.generation.tolist()) <= {0, 1}


# -- extras ----------------------------------------------------------------------------------------------
def test_extras_are_stored_and_bad_ones_rejected_naming_them() -> None:
    memory = ReplayMemory(4, (2,), extras=LOG_PROB)
    good = {"log_prob": 0.25, "mask": [True, False, True, False]}
    memory.add([0.0, 1.0], 1, 0.0, 1.0, [1.0, 2.0], **good)
    before = copy.deepcopy(memory.state_dict())
    bad = [
        (TypeError, "the extra 'mask' is missing", {"log_prob": 0.5}),
        (TypeError, "unexpected extra 'value'", {**good, "value": 1.0}),
        (ValueError, "mask should have shape", {**good, "mask": [True]}),
        (TypeError, "mask should have dtype bool", {**good, "mask": [1, 0, 1, 0]}),
        (ValueError, "log_prob should be finite", {**good, "log_prob": np.nan}),
    ]
    for error, match, extras in bad:
        with pytest.raises(error, match=match):
            memory.add([0.0, 1.0], 1, 0.0, 1.0, [1.0, 2.0], **extras)
        with pytest.raises(error, match=match):
            many = {k: np.asarray(v)[None] for k, v in extras.items()}
            memory.add_many(np.zeros((1, 2)), [1], [0.0], [1.0], np.zeros((1, 2)), **many)
        assert states_equal(memory.state_dict(), before)
    memory.add_many(
        np.zeros((2, 2)),
        [1, 2],
        [0.0, 0.0],
        [1.0, 1.0],
        np.zeros((2, 2)),
        streams=[0, 0],
        log_prob=[0.5, 0.75],
        mask=np.ones((2, 4), bool),
    )
    batch = memory.get([0, 1, 2])
    assert batch["log_prob"].tolist() == [0.25, 0.5, 0.75] and batch.extras["mask"].dtype == np.bool_
    assert list(batch) == [
        "obs",
        "action",
        "reward",
        "discount",
        "next_obs",
        "generation",
        "log_prob",
        "mask",
    ]
    with pytest.raises(ValueError, match="extras names should be identifiers"):
        ReplayMemory(4, (2,), extras={"reward": ((), np.float32)})


# -- observations: dtype inference, dict spaces ---------------------------------------------------------
def test_obs_dtype_is_inferred_at_the_first_add() -> None:
    """Bug guarded: the uint8 default truncated CartPole's float observations (a TypeError at best)."""
    memory = ReplayMemory(4, (4,))
    assert memory.obs_dtype is None and memory.frame_pool is None and memory.num_frames == 0
    with pytest.raises(ValueError, match="next_obs should have shape"):
        memory.add(np.zeros(4, np.float32), 0, 0.0, 1.0, np.zeros(3, np.float32))
    assert memory.obs_dtype is None  # a rejected first add infers nothing
    memory.add(np.array([0.1, -0.2, 0.3, 1e-3], np.float32), 0, 0.0, 1.0, np.zeros(4, np.float32))
    assert memory.obs_dtype == np.float32
    assert memory.get([0]).obs.tolist() == np.array([[0.1, -0.2, 0.3, 1e-3]], np.float32).tolist()
    explicit = ReplayMemory(4, (2,), obs_dtype=np.uint8)
    explicit.add([1, 2], 0, 0.0, 1.0, [3, 4])
    assert explicit.get([0]).obs.dtype == np.uint8
    fresh = ReplayMemory(4, (4,))
    fresh.load_state_dict(memory.state_dict())  # takes the state's dtype
    assert fresh.obs_dtype == np.float32 and states_equal(fresh.state_dict(), memory.state_dict())
    empty = ReplayMemory(4, (4,)).state_dict()
    fresh.load_state_dict(empty)  # back to nothing added, dtype unknown
    assert fresh.obs_dtype is None and len(fresh) == 0
    with pytest.raises(ValueError, match=r"obs_dtype should be '\|u1'"):
        ReplayMemory(4, (4,), obs_dtype=np.uint8).load_state_dict(memory.state_dict())


@pytest.mark.parametrize("n", [1, 3])
def test_dict_observations(n: int) -> None:
    shape = {"pos": (2,), "parity": ()}
    memory = ReplayMemory(6, shape, obs_dtype={"pos": np.float32, "parity": None}, n_step=n)
    assert memory.obs_dtype is None
    for t in range(10):
        obs = {"pos": np.array([t, t], np.float32), "parity": np.int64(t % 2)}
        nxt = {"pos": np.array([t + 1, t + 1], np.float32), "parity": np.int64((t + 1) % 2)}
        memory.add(obs, 0, 1.0, 0.5, nxt, episode_end=t == 6)
    assert memory.obs_dtype == {"pos": np.dtype(np.float32), "parity": np.dtype(np.int64)}
    slots = np.flatnonzero(memory.drawable(np.arange(6)))
    batch = memory.get(slots)
    assert isinstance(batch.obs, dict) and set(batch.next_obs) == {"pos", "parity"}
    start = batch.obs["pos"][:, 0]
    end = batch.next_obs["pos"][:, 0]
    assert ((end - start >= 1) & (end - start <= n)).all() and (end <= 7).sum() == (start < 7).sum()
    np.testing.assert_array_equal(batch.next_obs["parity"], end.astype(np.int64) % 2)
    with pytest.raises(ValueError, match=r"obs\['pos'\] should have shape"):
        memory.add({"pos": np.zeros(3), "parity": 0}, 0, 0.0, 1.0, {"pos": np.zeros(2), "parity": 0})
    with pytest.raises(ValueError, match="frame_stack should be 1 for dict observations"):
        ReplayMemory(6, shape, frame_stack=4)
    twin = ReplayMemory(6, shape, obs_dtype={"pos": np.float32, "parity": None}, n_step=n)
    twin.load_state_dict(memory.state_dict())
    assert states_equal(twin.state_dict(), memory.state_dict())
    memory.check_valid()


# -- vector envs ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("mode_name", ["NextStep", "SameStep"])  # AutoresetMode values
def test_add_vector_step_through_prioritized_replay(mode_name: str, n: int) -> None:
    """Every sampled transition is real: obs and next_obs of one episode, next_obs m ≤ n steps on,
    discount γ^m unless the episode terminated inside the window."""
    mode = pytest.importorskip("gymnasium.vector").AutoresetMode(mode_name)
    from tests.test_vector_env import GAMMA, NUM_ENVS, make_envs

    envs = make_envs(mode)
    replay = PrioritizedReplay(
        64, (2,), num_streams=NUM_ENVS, n_step=n, extras={"tag": ((), np.int64)}, seed=0
    )
    rng = np.random.default_rng(0)
    obs, _ = envs.reset(seed=0)
    for step in range(200):
        action = rng.integers(0, 3, NUM_ENVS)
        next_obs, reward, terminated, truncated, infos = envs.step(action)
        replay.add_vector_step(
            obs,
            action,
            reward,
            terminated,
            truncated,
            next_obs,
            infos,
            gamma=GAMMA,
            tag=np.arange(NUM_ENVS) + 10 * step,
        )
        obs = next_obs
        if step > 10 and step % 7 == 0:
            batch, draw = replay.sample(32)
            m = batch.next_obs[:, 1] - batch.obs[:, 1]
            assert (batch.next_obs[:, 0] == batch.obs[:, 0]).all()
            assert ((m >= 1) & (m <= n)).all()
            bootstrap = batch.discount > 0
            np.testing.assert_allclose(batch.discount[bootstrap], GAMMA ** m[bootstrap], rtol=1e-5)
            assert (batch["tag"] % 10 < NUM_ENVS).all()
            replay.update_priorities(draw.indices, rng.random(32), generations=batch.generation)
    assert replay.memory.vector_converter is not None
    assert replay.memory.vector_converter.autoreset_mode == mode.value
    twin = PrioritizedReplay(64, (2,), num_streams=NUM_ENVS, n_step=n, extras={"tag": ((), np.int64)}, seed=0)
    twin.load_state_dict(replay.state_dict(include_memory=True))
    assert states_equal(twin.state_dict(include_memory=True), replay.state_dict(include_memory=True))


def test_rejected_vector_step_changes_nothing() -> None:
    replay = PrioritizedReplay(16, (2,), num_streams=2, extras={"tag": ((), np.int64)})
    obs = np.zeros((2, 2), np.float32)
    args = (obs, [0, 1], [1.0, 1.0], np.array([True, False]), np.array([False, False]), obs + 1, {})
    with pytest.raises(ValueError, match="tag should have shape"):
        replay.add_vector_step(*args, gamma=0.9, tag=np.zeros((2, 3), np.int64))
    assert replay.memory.vector_converter is None and len(replay) == 0
    replay.add_vector_step(*args, gamma=0.9, tag=[1, 2])
    before = copy.deepcopy(replay.state_dict(include_memory=True))
    with pytest.raises(TypeError, match="the extra 'tag' is missing"):
        replay.add_vector_step(
            obs + 1,
            [0, 1],
            [1.0, 1.0],
            np.array([False, False]),
            np.array([False, False]),
            obs + 2,
            {},
            gamma=0.9,
        )
    assert states_equal(replay.state_dict(include_memory=True), before)  # converter flags included
    with pytest.raises(ValueError, match="num_envs should be at most num_streams=2"):
        PrioritizedReplay(16, (2,), num_streams=2).add_vector_step(
            np.zeros((3, 2)),
            [0, 0, 0],
            [0.0] * 3,
            np.zeros(3, bool),
            np.zeros(3, bool),
            np.zeros((3, 2)),
            {},
            gamma=0.9,
        )


def test_add_many_accepts_zero_rows() -> None:
    """Bug: add_many with no rows (a vector step where every env reset) raised 'cannot reshape array
    of size 0'."""
    for stack in (1, 4):
        shape = (0, stack, 3) if stack > 1 else (0, 3)
        replay = PrioritizedReplay(8, (3,), frame_stack=stack, obs_dtype=np.uint8)
        slots = replay.add_many(np.zeros(shape, np.uint8), [], [], [], np.zeros(shape, np.uint8))
        assert slots.shape == (0,) and len(replay) == 0


# -- checkpoints ------------------------------------------------------------------------------------------
def test_version_1_states_still_load() -> None:
    memory = ReplayMemory(6, (2,), obs_dtype=np.float32, frame_stack=2)
    for t in range(9):
        memory.add(
            np.array([[t, t], [t + 1, t + 1]], np.float32),
            0,
            1.0,
            1.0,
            np.array([[t + 1, t + 1], [t + 2, t + 2]], np.float32),
        )
    state = memory.state_dict()
    v1 = {k: v for k, v in state.items() if k not in ("nstep", "vector")}
    v1["version"] = 1
    v1["config"] = {k: v for k, v in state["config"].items() if k not in ("n_step", "extras")}
    fresh = ReplayMemory(6, (2,), frame_stack=2)
    fresh.load_state_dict(v1)
    assert states_equal(fresh.state_dict(), state)
    with pytest.raises(ValueError, match="config n_step should be 3"):
        ReplayMemory(6, (2,), frame_stack=2, n_step=3).load_state_dict(v1)


def test_n_step_state_round_trip_continues_exactly() -> None:
    def build() -> PrioritizedReplay:
        return PrioritizedReplay(10, (3,), frame_stack=4, num_streams=2, n_step=3, extras=LOG_PROB, seed=1)

    replay, driver = build(), Driver(4, 2, seed=3)

    def step(r: PrioritizedReplay, t: dict[str, Any]) -> None:
        r.add(
            t["obs"],
            t["action"],
            t["reward"],
            t["discount"],
            t["next_obs"],
            episode_end=t["end"],
            stream=t["stream"],
            log_prob=t["log_prob"],
            mask=t["mask"],
        )

    for _ in range(27):
        step(replay, driver.transition())
    twin = build()
    twin.load_state_dict(copy.deepcopy(replay.state_dict(include_memory=True)))
    for _ in range(20):
        t = driver.transition()
        step(replay, t)
        step(twin, t)
        a, da = replay.sample(4)
        b, db = twin.sample(4)
        np.testing.assert_array_equal(da.indices, db.indices)
        np.testing.assert_array_equal(a.reward, b.reward)
        replay.update_priorities(da.indices, np.arange(4.0))
        twin.update_priorities(db.indices, np.arange(4.0))
    assert states_equal(replay.state_dict(include_memory=True), twin.state_dict(include_memory=True))
    state = replay.state_dict(include_memory=True)
    state["memory"]["nstep"]["generation"][0] += 1  # a window for a transition the memory lacks
    with pytest.raises(ValueError, match="state_dict nstep"):
        twin.load_state_dict(state)


def test_add_vector_step_takes_gamma_positionally_with_the_design_default() -> None:
    """The DESIGN.md signature ``add_vector_step(obs, action, reward, terminated, truncated,
    next_obs, infos, gamma=0.99)``: gamma may be passed positionally, and defaults to 0.99."""
    replay = PrioritizedReplay(8, (1,), obs_dtype=np.float32, num_streams=2, seed=0)
    obs = np.zeros((2, 1), np.float32)
    no = np.array([False, False])
    replay.add_vector_step(obs, np.array([0, 1]), np.array([1.0, 2.0]), no, no, obs + 1, {})
    replay.add_vector_step(obs + 1, np.array([0, 1]), np.array([1.0, 2.0]), no, no, obs + 2, {}, 0.5)
    np.testing.assert_allclose(replay.memory.get([0, 1, 2, 3]).discount, [0.99, 0.99, 0.5, 0.5], rtol=1e-6)
