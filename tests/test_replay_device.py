"""Replay memories with ``device=``: torch batches equal numpy batches (n-step windows, extras, dict
observations, inferred obs_dtype, vector steps included), checkpoints cross devices, and
deduplication never reads the frame pool."""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from prisample.replay import PrioritizedReplay, ReplayMemory
from prisample.replay.device import TorchFrames
from tests.state_fuzz import states_equal
from tests.test_replay import FRAME, StackingEnv

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
FIELDS = ("obs", "action", "reward", "discount", "next_obs", "generation")


def host(value: Any) -> np.ndarray:
    return value.cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


LOG_PROB = {"log_prob": ((), np.float32), "mask": ((4,), np.bool_)}


def assert_same(want: Any, got: Any, device: str, key: str) -> None:
    """A numpy value (or dict of them, or None) and its torch twin on ``device``: same dtype,
    shape, values."""
    if want is None:
        assert got is None, key
        return
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), key
        for name in want:
            assert_same(want[name], got[name], device, f"{key}[{name!r}]")
        return
    assert isinstance(got, torch.Tensor), key
    assert got.device.type == device, key
    assert str(got.dtype) == f"torch.{want.dtype}", (key, got.dtype, want.dtype)
    assert tuple(got.shape) == want.shape, key
    np.testing.assert_array_equal(host(got), want, err_msg=key)


def assert_same_batch(numpy_batch: Any, torch_batch: Any, device: str) -> None:
    for key in (*FIELDS, "weights", "extras"):
        assert_same(getattr(numpy_batch, key), getattr(torch_batch, key), device, key)


class Driver:
    """Random streams of stacked frames, episode ends, single adds and vector steps (``add_many``, or
    ``add_vector_step`` when ``vector``), fed to several memories identically; with ``extras`` each
    transition carries :data:`LOG_PROB`'s extras."""

    def __init__(
        self, stack: int, streams: int, seed: int, *, extras: bool = False, vector: bool = False
    ) -> None:
        self.rng = np.random.default_rng(seed)
        self.envs = [StackingEnv(self.rng, stack) for _ in range(streams)]
        self.obs = [env.reset() for env in self.envs]
        self.extras, self.vector = extras, vector

    def _extras(self, n: int | None) -> dict[str, Any]:
        if not self.extras:
            return {}
        shape = () if n is None else (n,)
        log_prob = self.rng.normal(size=shape).astype(np.float32)
        return {"log_prob": log_prob, "mask": self.rng.random((*shape, 4)) < 0.5}

    def step(self, targets: list[Any]) -> None:
        n = len(self.envs)
        if self.rng.random() < 0.3:  # one vector step over every stream
            nxt = [env.step() for env in self.envs]
            end = self.rng.random(n) < 0.1
            terminated = end & (self.rng.random(n) < 0.5)
            obs, action, reward = np.stack(self.obs), self.rng.integers(4, size=n), self.rng.normal(size=n)
            extras = self._extras(n)
            truncated, discount = end & ~terminated, np.where(end, 0.0, 1.0)
            for target in targets:
                if self.vector:  # envs reset by hand below: the converter's Disabled mode
                    target.add_vector_step(
                        obs,
                        action,
                        reward,
                        terminated,
                        truncated,
                        np.stack(nxt),
                        {},
                        gamma=0.99,
                        autoreset_mode="Disabled",
                        **extras,
                    )
                else:
                    target.add_many(obs, action, reward, discount, np.stack(nxt), episode_end=end, **extras)
            self.obs = [env.reset() if e else o for env, e, o in zip(self.envs, end, nxt, strict=True)]
            return
        s = int(self.rng.integers(n))
        nxt = self.envs[s].step()
        end = bool(self.rng.random() < 0.1)
        action, reward = int(self.rng.integers(4)), float(self.rng.normal())
        extras = self._extras(None)
        for target in targets:
            target.add(
                self.obs[s], action, reward, 0.0 if end else 0.99, nxt, episode_end=end, stream=s, **extras
            )
        self.obs[s] = self.envs[s].reset() if end else nxt


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("stack", "streams"), [(1, 1), (1, 2), (4, 1), (4, 3)])
def test_torch_batches_equal_numpy_batches(device: str, stack: int, streams: int) -> None:
    """Same adds, same seed: the device path returns exactly the numpy path's values and dtypes,
    through several wrap-arounds, and priority updates from device tensors keep them in step."""
    kwargs: dict[str, Any] = {"frame_stack": stack, "num_streams": streams, "seed": 3, "alpha": 0.7}
    a = PrioritizedReplay(40, FRAME, **kwargs)
    b = PrioritizedReplay(40, FRAME, device=device, **kwargs)
    driver = Driver(stack, streams, seed=stack + 10 * streams)
    for t in range(250):
        driver.step([a, b])
        if t % 9 == 8:
            batch_a, draw_a = a.sample(16)
            batch_b, draw_b = b.sample(16)
            np.testing.assert_array_equal(draw_a.indices, draw_b.indices)
            assert_same_batch(batch_a, batch_b, device)
            td = torch.rand(16, device=device)
            a.update_priorities(draw_a.indices, host(td), generations=batch_a.generation)
            b.update_priorities(draw_b.indices, td, generations=batch_b.generation)
    np.testing.assert_array_equal(a.sampler.priorities, b.sampler.priorities)
    b.memory.check_valid()
    slots = np.flatnonzero(a.memory.valid(np.arange(40)))
    assert_same_batch(
        a.memory.get(slots, weights=np.ones(slots.shape[0])),
        b.memory.get(slots, weights=np.ones(slots.shape[0])),
        device,
    )


@pytest.mark.parametrize("device", DEVICES)
def test_dtypes_float_frames_and_vector_actions(device: str) -> None:
    kwargs: dict[str, Any] = {"obs_dtype": np.float32, "action_shape": (2,), "action_dtype": np.float32}
    a, b = ReplayMemory(8, (3,), **kwargs), ReplayMemory(8, (3,), device=device, **kwargs)
    rng = np.random.default_rng(0)
    for _ in range(11):
        args = (rng.normal(size=3), rng.normal(size=2), 1.0, 1.0, rng.normal(size=3))
        a.add(*args, episode_end=True)
        b.add(*args, episode_end=True)
    batch_a, batch_b = a.get([3, 1, 1]), b.get([3, 1, 1])
    for key in FIELDS:
        assert (
            batch_b[key].dtype
            == {np.dtype(np.float32): torch.float32, np.dtype(np.int64): torch.int64}[batch_a[key].dtype]
        )
        np.testing.assert_array_equal(host(batch_b[key]), batch_a[key])
    assert batch_b.weights is None
    assert ReplayMemory(4, FRAME, device=device).get  # uint8 frames: checked in the test above


@pytest.mark.parametrize("device", DEVICES)
def test_state_round_trip_across_devices(device: str) -> None:
    """numpy memory → its state into a device memory → both continue identically → the device
    memory's state (host numpy arrays) into a fresh numpy memory equals the numpy memory's."""
    kwargs: dict[str, Any] = {"frame_stack": 4, "num_streams": 2, "seed": 5}
    a = PrioritizedReplay(30, FRAME, **kwargs)
    driver = Driver(4, 2, seed=1)
    for _ in range(70):
        driver.step([a])
    b = PrioritizedReplay(30, FRAME, device=device, **kwargs)
    b.load_state_dict(a.state_dict(include_memory=True))
    for t in range(60):  # continue: dedup against the loaded streams' stacks, wrap-around
        driver.step([a, b])
        if t % 10 == 0:
            batch_a, _ = a.sample(8)
            batch_b, _ = b.sample(8)
            assert_same_batch(batch_a, batch_b, device)
    assert a.memory.num_frames == b.memory.num_frames
    state = b.state_dict(include_memory=True)
    for key, value in state["memory"].items():
        assert not isinstance(value, torch.Tensor), key
    c = PrioritizedReplay(30, FRAME, **kwargs)
    c.load_state_dict(state)
    mine = a.state_dict(include_memory=True)["memory"]
    for key, value in c.state_dict(include_memory=True)["memory"].items():
        np.testing.assert_array_equal(value, mine[key], err_msg=key)
    b.memory.check_valid()


def sample_both(a: PrioritizedReplay, b: PrioritizedReplay, device: str, k: int = 16) -> None:
    """Same draw from twins fed identically, equal batches; priorities updated from a device tensor."""
    batch_a, draw_a = a.sample(k)
    batch_b, draw_b = b.sample(k)
    np.testing.assert_array_equal(draw_a.indices, draw_b.indices)
    assert_same_batch(batch_a, batch_b, device)
    td = torch.rand(k, device=device)
    a.update_priorities(draw_a.indices, host(td), generations=batch_a.generation)
    b.update_priorities(draw_b.indices, td, generations=batch_b.generation)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("stack", "streams", "vector"), [(1, 2, True), (4, 3, False), (4, 3, True)])
def test_nstep_extras_inferred_dtype_torch_equals_numpy(
    device: str, stack: int, streams: int, vector: bool
) -> None:
    """n_step=3 with extras, obs_dtype inferred at the first add (the device storage is made then),
    vector steps through add_vector_step: the device path returns the numpy path's windows (reward,
    discount, next_obs at the window's last slot) and extras, dtypes included."""
    kwargs: dict[str, Any] = {
        "frame_stack": stack,
        "num_streams": streams,
        "seed": 4,
        "n_step": 3,
        "extras": LOG_PROB,
    }
    a = PrioritizedReplay(40, FRAME, **kwargs)
    b = PrioritizedReplay(40, FRAME, device=device, **kwargs)
    assert b.memory.obs_dtype is None and b.memory.frame_pool is None  # nothing allocated yet
    driver = Driver(stack, streams, seed=stack + 10 * streams, extras=True, vector=vector)
    driver.step([a, b])
    assert b.memory.obs_dtype == np.uint8
    assert b.memory.frame_pool is not None and isinstance(b.memory.frame_pool.storage, TorchFrames)
    for t in range(250):
        driver.step([a, b])
        if t % 9 == 8 and a.sampler.size:
            sample_both(a, b, device)
    np.testing.assert_array_equal(a.sampler.priorities, b.sampler.priorities)
    assert len(a) > a.sampler.size  # windows still open
    b.memory.check_valid()
    slots = np.flatnonzero(a.memory.drawable(np.arange(40)))
    assert_same_batch(a.memory.get(slots), b.memory.get(slots), device)
    assert states_equal(a.state_dict(include_memory=True), b.state_dict(include_memory=True))
    assert b.memory.nbytes > a.memory.nbytes  # the device mirror of the columns counts


@pytest.mark.parametrize("device", DEVICES)
def test_nstep_state_round_trip_across_devices(device: str) -> None:
    """A numpy memory saved with n-step windows open loads into a device memory built with
    obs_dtype=None (the load makes its device storage); both continue identically; the device
    memory's state loads back into a numpy memory equal to the numpy one's."""
    kwargs: dict[str, Any] = {"frame_stack": 4, "num_streams": 2, "seed": 5, "n_step": 3, "extras": LOG_PROB}
    a = PrioritizedReplay(30, FRAME, **kwargs)
    driver = Driver(4, 2, seed=1, extras=True, vector=True)
    for _ in range(70):
        driver.step([a])
    while len(a) == a.sampler.size:  # save with windows open
        driver.step([a])
    b = PrioritizedReplay(30, FRAME, device=device, **kwargs)
    assert b.memory.frame_pool is None
    b.load_state_dict(a.state_dict(include_memory=True))
    assert b.memory.frame_pool is not None and isinstance(b.memory.frame_pool.storage, TorchFrames)
    slots = np.flatnonzero(a.memory.drawable(np.arange(30)))
    assert_same_batch(a.memory.get(slots), b.memory.get(slots), device)  # read right after the load
    for t in range(60):  # the open windows complete on both sides, dedup against loaded stacks
        driver.step([a, b])
        if t % 10 == 0:
            sample_both(a, b, device, k=8)
    state = b.state_dict(include_memory=True)
    for key, value in state["memory"].items():
        assert not isinstance(value, torch.Tensor), key
    c = PrioritizedReplay(30, FRAME, **kwargs)
    c.load_state_dict(state)
    assert states_equal(c.state_dict(include_memory=True), a.state_dict(include_memory=True))
    b.memory.check_valid()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [1, 3])
def test_dict_observations_on_the_device(device: str, n: int) -> None:
    """Dict observations (a gymnasium Dict space through add_vector_step): each key's obs and
    next_obs columns are mirrored on the device (made at the first add), next_obs read at the
    window's last slot; copies and pickles keep them mirrored; states cross devices."""
    AutoresetMode = pytest.importorskip("gymnasium.vector").AutoresetMode
    from tests.test_vector_env import GAMMA, NUM_ENVS, make_envs

    shape = {"pos": (2,), "parity": ()}
    kwargs: dict[str, Any] = {
        "num_streams": NUM_ENVS,
        "n_step": n,
        "extras": {"tag": ((), np.int64)},
        "seed": 0,
    }
    a = PrioritizedReplay(32, shape, **kwargs)
    b = PrioritizedReplay(32, shape, device=device, **kwargs)
    envs = make_envs(AutoresetMode.SAME_STEP, dict_obs=True)
    rng = np.random.default_rng(0)
    obs, _ = envs.reset(seed=0)

    def step(targets: list[PrioritizedReplay], i: int) -> None:
        nonlocal obs
        action = rng.integers(0, 3, NUM_ENVS)
        next_obs, reward, terminated, truncated, infos = envs.step(action)
        for target in targets:
            target.add_vector_step(
                obs,
                action,
                reward,
                terminated,
                truncated,
                next_obs,
                infos,
                gamma=GAMMA,
                tag=np.arange(NUM_ENVS) + 10 * i,
            )
        obs = next_obs

    for i in range(80):
        step([a, b], i)
        if i % 7 == 6 and a.sampler.size:
            sample_both(a, b, device)
    assert b.memory.obs_dtype == {"pos": np.dtype(np.float32), "parity": np.dtype(np.int64)}
    for clone in (copy.deepcopy, lambda r: pickle.loads(pickle.dumps(r))):
        twin_a, twin = clone(a), clone(b)
        for i in range(10):
            step([a, b, twin_a, twin], 100 + i)
        sample_both(twin_a, twin, device)
        slots = np.flatnonzero(a.memory.drawable(np.arange(32)))
        assert_same_batch(a.memory.get(slots), twin.memory.get(slots), device)
        twin.memory.check_valid()
    c = PrioritizedReplay(32, shape, **kwargs)
    c.load_state_dict(b.state_dict(include_memory=True))
    d = PrioritizedReplay(32, shape, device=device, **kwargs)
    d.load_state_dict(a.state_dict(include_memory=True))
    slots = np.flatnonzero(a.memory.drawable(np.arange(32)))
    assert_same_batch(c.memory.get(slots), d.memory.get(slots), device)


@pytest.mark.parametrize("device", DEVICES)
def test_update_priorities_takes_device_tensors(device: str) -> None:
    replay = PrioritizedReplay(8, (2,), obs_dtype=np.float32, alpha=1.0, seed=0, device=device)
    for t in range(8):
        replay.add(np.full(2, t), 0, 1.0, 1.0, np.full(2, t + 1))
    batch, draw = replay.sample(4)
    assert batch.weights.device.type == device and batch.weights.dtype == torch.float32
    # importance weights arrive as a tensor on the same device: the draw's too
    assert isinstance(draw.weights, torch.Tensor) and draw.weights.device.type == device
    assert isinstance(draw.indices, np.ndarray)
    np.testing.assert_array_equal(host(batch.weights), host(draw.weights))
    td = torch.arange(4, dtype=torch.float32, device=device) + 1  # no .cpu() by the caller
    replay.update_priorities(draw.indices, td, generations=batch.generation)
    last = {int(i): float(v) for i, v in zip(draw.indices, host(td), strict=True)}
    for slot, value in last.items():
        assert replay.sampler.priorities[slot] == value
    assert replay.dropped_updates == 0


def _dedup_run(device: str | None, poison: bool) -> ReplayMemory:
    memory = ReplayMemory(60, FRAME, frame_stack=4, num_streams=3, device=device)
    driver = Driver(4, 3, seed=7)
    for _ in range(200):
        driver.step([memory])
        if poison:  # every frame in the pool overwritten right after it was written
            storage = memory.frame_pool.storage
            if device is None:
                storage.frames.fill(0xAB)  # type: ignore[union-attr]
            else:
                storage.data.fill_(0xAB)  # type: ignore[union-attr]
    return memory


@pytest.mark.parametrize("device", [None, *DEVICES])
def test_dedup_never_reads_the_pool(device: str | None) -> None:
    """Regression guard for the pool-reading dedup kernel (it compared a new stack with the
    pool's rows of the stream's last stacks, which cannot live on a GPU): with the pool poisoned
    after every add, deduplication shares exactly the frames it shares with a clean pool."""
    clean, poisoned = _dedup_run(device, poison=False), _dedup_run(device, poison=True)
    assert poisoned.num_frames == clean.num_frames < 2 * 4 * len(clean)
    for key in ("obs_rows", "next_rows", "refs", "free", "stream_obs", "stream_next"):
        np.testing.assert_array_equal(poisoned.state_dict()[key], clean.state_dict()[key], err_msg=key)


def test_check_valid_finds_a_stale_dedup_cache() -> None:
    memory = _dedup_run(None, poison=False)
    memory.check_valid()
    memory.frame_pool._cache[0] ^= 1
    with pytest.raises(ValueError, match="cache"):
        memory.check_valid()


@pytest.mark.parametrize("device", DEVICES)
def test_copies_and_pickles_keep_their_device_columns(device: str) -> None:
    memory = ReplayMemory(16, FRAME, frame_stack=4, num_streams=2, device=device)
    driver = Driver(4, 2, seed=2)
    for _ in range(30):
        driver.step([memory])
    for clone in (copy.deepcopy, lambda m: pickle.loads(pickle.dumps(m))):
        twin = clone(memory)
        for _ in range(10):
            driver.step([memory, twin])
        slots = np.flatnonzero(memory.valid(np.arange(16)))
        want, got = memory.get(slots), twin.get(slots)
        for key in FIELDS:
            np.testing.assert_array_equal(host(got[key]), host(want[key]), err_msg=key)
        twin.check_valid()


def test_device_argument_is_checked() -> None:
    with pytest.raises(TypeError, match="device"):
        ReplayMemory(4, (2,), device=3)
    with pytest.raises(ValueError, match="device"):
        ReplayMemory(4, (2,), device="not-a-device")
    with pytest.raises(TypeError, match="obs_dtype should be a dtype torch supports"):
        ReplayMemory(4, (2,), obs_dtype=np.longdouble, device="cpu")  # numpy's, not torch's
    assert ReplayMemory(4, (2,), obs_dtype=np.longdouble).get  # fine without a device


def test_benchmark_smoke_on_cpu(tmp_path: Path) -> None:
    from benchmarks import replay_device

    out = tmp_path / "replay_device.json"
    replay_device.main(["--device", "cpu", "--n", "4096", "--steps", "20", "--out", str(out)])
    results = json.loads(out.read_text())
    assert results["device"] == "cpu" and results["n"] == 4096
    assert results["equal_to_numpy"] is True
    assert results["step_ms"]["median"] > 0
