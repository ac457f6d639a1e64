"""Reads of slots drawn on the device: ``ReplayMemory.read_on_device`` and
``live_generations_on_device`` against the host reads, on CPU tensors, and with no host
synchronisation (the calls that would wait for a device raise inside :func:`no_host_sync`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from prisample.replay import ReplayMemory
from tests.host_sync import HostSyncError, no_host_sync


def _filled(stack: int, dict_obs: bool, n_step: int = 1) -> ReplayMemory:
    rng = np.random.default_rng(stack)
    extras = {"lp": ((), np.float32)}
    if dict_obs:
        memory = ReplayMemory(
            16,
            {"x": (3,), "y": (2,)},
            obs_dtype=np.float32,
            num_streams=2,
            extras=extras,
            device="cpu",
            n_step=n_step,
        )
    else:
        memory = ReplayMemory(
            16,
            (3, 3),
            obs_dtype=np.uint8,
            frame_stack=stack,
            num_streams=2,
            extras=extras,
            device="cpu",
            n_step=n_step,
        )
    last: dict[int, Any] = {}
    obs: Any
    nxt: Any
    for t in range(40):  # past the capacity: the ring wraps, slots are rewritten
        s = t % 2
        if dict_obs:
            obs = last.get(s, {"x": rng.normal(size=3), "y": rng.normal(size=2)})
            nxt = {"x": rng.normal(size=3), "y": rng.normal(size=2)}
        else:
            shape = (stack, 3, 3) if stack > 1 else (3, 3)
            obs = last.get(s, rng.integers(0, 255, shape, dtype=np.uint8))
            new = rng.integers(0, 255, (1, 3, 3), dtype=np.uint8)
            nxt = np.concatenate([obs[1:], new]) if stack > 1 else new[0]
        end = t % 11 == 10
        memory.add(obs, t % 3, float(t), 0.9, nxt, stream=s, episode_end=end, lp=float(-t))
        last[s] = nxt
        if end:
            del last[s]
    return memory


def _host(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _host(v) for k, v in value.items()}
    return np.asarray(value.numpy()) if isinstance(value, torch.Tensor) else np.asarray(value)


@pytest.mark.parametrize(("stack", "dict_obs"), [(1, False), (4, False), (1, True)])
def test_read_on_device_equals_the_host_read(stack: int, dict_obs: bool) -> None:
    memory = _filled(stack, dict_obs)
    slots = np.array([3, 7, 0, 15, 9, 3])
    weights = torch.linspace(0.5, 1.0, 6)
    expected = memory.get(slots)
    with no_host_sync():
        got = memory.read_on_device(torch.from_numpy(slots), weights)
    for field in ("obs", "next_obs", "action", "reward", "discount", "generation"):
        a, b = _host(expected[field]), _host(got[field])
        if isinstance(a, dict):
            assert a.keys() == b.keys()
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg=f"{field}[{key}]")
        else:
            np.testing.assert_array_equal(a, b, err_msg=field)
    np.testing.assert_array_equal(_host(expected.extras["lp"]), _host(got.extras["lp"]))
    assert got.weights is weights


def test_live_generations_on_device_equal_the_host_ones() -> None:
    memory = _filled(4, False)
    slots = np.arange(16)
    with no_host_sync():
        got = memory.live_generations_on_device(torch.from_numpy(slots))
    np.testing.assert_array_equal(got.numpy(), memory.live_generations(slots))


@pytest.mark.filterwarnings("ignore:obs does not continue")
def test_rows_added_after_a_read_reach_the_next_read() -> None:
    memory = _filled(4, False)
    slots = torch.arange(16)
    memory.read_on_device(slots)  # mirrors in step
    obs = np.full((4, 3, 3), 7, np.uint8)
    nxt = np.concatenate([obs[1:], np.full((1, 3, 3), 8, np.uint8)])
    memory.add(obs, 1, 2.0, 0.5, nxt, stream=1, lp=0.0)
    got = memory.read_on_device(slots)
    np.testing.assert_array_equal(got["obs"].numpy(), _host(memory.get(np.arange(16))["obs"]))


def test_no_host_sync_catches_a_read_of_a_value() -> None:
    """The guard itself: a value read on the host inside it raises."""
    with no_host_sync(), pytest.raises(HostSyncError):
        torch.arange(3).sum().item()


def test_read_on_device_refuses_a_host_memory() -> None:
    host = ReplayMemory(4, (2,), obs_dtype=np.float32)
    with pytest.raises(ValueError, match="read_on_device needs a device"):
        host.read_on_device(torch.zeros(1, dtype=torch.int64))


@pytest.mark.parametrize(("stack", "dict_obs"), [(1, False), (4, False), (1, True)])
def test_n_step_windows_read_on_device_equal_the_host_read(stack: int, dict_obs: bool) -> None:
    """The windows' return, discount and ``next_obs`` at the last slot, sent as they complete."""
    memory = _filled(stack, dict_obs, n_step=3)
    slots = np.flatnonzero(memory.drawable(np.arange(16)))
    assert slots.shape[0] > 4
    expected = memory.get(slots)
    with no_host_sync():
        got = memory.read_on_device(torch.from_numpy(slots))
    for field in ("obs", "next_obs", "reward", "discount", "generation"):
        a, b = _host(expected[field]), _host(got[field])
        if isinstance(a, dict):
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg=f"{field}[{key}]")
        else:
            np.testing.assert_array_equal(a, b, err_msg=field)


def test_n_step_windows_reach_the_device_after_a_load() -> None:
    memory = _filled(4, False, n_step=3)
    fresh = ReplayMemory(
        16, (3, 3), obs_dtype=np.uint8, frame_stack=4, num_streams=2, n_step=3, device="cpu",
        extras={"lp": ((), np.float32)},
    )  # fmt: skip
    fresh.load_state_dict(memory.state_dict())
    slots = np.flatnonzero(fresh.drawable(np.arange(16)))
    got, expected = fresh.read_on_device(torch.from_numpy(slots)), fresh.get(slots)
    np.testing.assert_array_equal(_host(got["reward"]), _host(expected["reward"]))
    np.testing.assert_array_equal(_host(got["next_obs"]), _host(expected["next_obs"]))
