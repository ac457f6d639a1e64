"""Replay memories with ``device=``: torch batches equal numpy batches, checkpoints cross devices,
and deduplication never reads the frame pool."""

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
from tests.test_replay import FRAME, StackingEnv

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
FIELDS = ("obs", "action", "reward", "discount", "next_obs", "generation")


def host(value: Any) -> np.ndarray:
    return value.cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def assert_same_batch(numpy_batch: Any, torch_batch: Any, device: str) -> None:
    for key in (*FIELDS, "weights"):
        want, got = getattr(numpy_batch, key), getattr(torch_batch, key)
        assert isinstance(got, torch.Tensor), key
        assert got.device.type == device, key
        assert str(got.dtype) == f"torch.{want.dtype}", (key, got.dtype, want.dtype)
        assert tuple(got.shape) == want.shape, key
        np.testing.assert_array_equal(host(got), want, err_msg=key)


class Driver:
    """Random streams of stacked frames, episode ends, single adds and vector steps, fed to several
    memories identically."""

    def __init__(self, stack: int, streams: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.envs = [StackingEnv(self.rng, stack) for _ in range(streams)]
        self.obs = [env.reset() for env in self.envs]

    def step(self, targets: list[Any]) -> None:
        n = len(self.envs)
        if self.rng.random() < 0.3:  # one vector step over every stream
            nxt = [env.step() for env in self.envs]
            end = self.rng.random(n) < 0.1
            args = (np.stack(self.obs), self.rng.integers(4, size=n), self.rng.normal(size=n),
                    np.where(end, 0.0, 1.0), np.stack(nxt))  # fmt: skip
            for target in targets:
                target.add_many(*args, episode_end=end)
            self.obs = [env.reset() if e else o for env, e, o in zip(self.envs, end, nxt, strict=True)]
            return
        s = int(self.rng.integers(n))
        nxt = self.envs[s].step()
        end = bool(self.rng.random() < 0.1)
        action, reward = int(self.rng.integers(4)), float(self.rng.normal())
        for target in targets:
            target.add(self.obs[s], action, reward, 0.0 if end else 0.99, nxt, episode_end=end, stream=s)
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
    assert_same_batch(a.memory.get(slots, weights=np.ones(slots.shape[0])),
                      b.memory.get(slots, weights=np.ones(slots.shape[0])), device)  # fmt: skip


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


@pytest.mark.parametrize("device", DEVICES)
def test_update_priorities_takes_device_tensors(device: str) -> None:
    replay = PrioritizedReplay(8, (2,), obs_dtype=np.float32, alpha=1.0, seed=0, device=device)
    for t in range(8):
        replay.add(np.full(2, t), 0, 1.0, 1.0, np.full(2, t + 1))
    batch, draw = replay.sample(4)
    assert batch.weights.device.type == device and batch.weights.dtype == torch.float32
    np.testing.assert_array_equal(host(batch.weights), draw.weights)
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
