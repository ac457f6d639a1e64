"""A prioritized replay whose priorities live on the device (issue 24, part 2), on CPU tensors:
the same admissions, updates and stale drops as the host replay, and a replay step (add, draw,
gather, priority write) with no host synchronisation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from prisample.replay import PrioritizedReplay
from tests.host_sync import no_host_sync

CAPACITY = 24


def _replay(backend: str, **kw: Any) -> PrioritizedReplay:
    return PrioritizedReplay(
        CAPACITY,
        (3, 3),
        obs_dtype=np.uint8,
        frame_stack=4,
        num_streams=2,
        device="cpu",
        backend=backend,
        alpha=0.7,
        beta=0.5,
        seed=0,
        **kw,
    )


class Stream:
    """Two environments' frame stacks, each ``next_obs`` its ``obs`` moved on by one frame."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.last = self.rng.integers(0, 255, (2, 4, 3, 3), dtype=np.uint8)

    def step(self) -> dict[str, Any]:
        obs = self.last
        nxt = np.concatenate([obs[:, 1:], self.rng.integers(0, 255, (2, 1, 3, 3), dtype=np.uint8)], axis=1)
        self.last = nxt
        reward = self.rng.normal(size=2).astype(np.float32)
        return {
            "obs": obs,
            "action": np.array([1, 2]),
            "reward": reward,
            "discount": np.full(2, 0.9),
            "next_obs": nxt,
        }


def _same_update(
    host: PrioritizedReplay, device: PrioritizedReplay, slots: np.ndarray, rng: np.random.Generator
) -> None:
    """The same priorities for the same slots: numpy to the host replay, tensors to the device's."""
    values = rng.exponential(size=slots.shape[0])
    host.update_priorities(slots, values, generations=host.generations(slots))
    device.update_priorities(
        torch.from_numpy(slots),
        torch.from_numpy(values),
        generations=torch.from_numpy(device.generations(slots)),
    )


@pytest.mark.parametrize("backend", ["proportional", "uniform"])
def test_device_replay_keeps_the_host_replays_priorities(backend: str) -> None:
    """Same adds (past the capacity: evictions), same updates: the same raw priorities, the new
    transitions entering at the maximum of the memory they join."""
    host, device = _replay(backend), _replay(f"device_{backend}")
    stream, rng = Stream(1), np.random.default_rng(2)
    for t in range(40):
        step = stream.step()
        host.add_many(**step)
        device.add_many(**step)
        if t % 3 == 2:
            _same_update(host, device, rng.choice(len(host), 5, replace=False), rng)
        np.testing.assert_array_equal(device.sampler.priorities, host.sampler.priorities)
    device.check_valid()
    # the device's tree and its draw record (int64 per slot) are counted beside the memory
    assert device.sampler.nbytes > 0
    assert device.nbytes == host.nbytes - host.sampler.nbytes + device.sampler.nbytes + 8 * CAPACITY


def test_a_stale_update_is_dropped_on_the_device() -> None:
    replay = _replay("device_proportional")
    stream = Stream(3)
    for _ in range(CAPACITY // 2):
        replay.add_many(**stream.step())
    batch, draw = replay.sample(8)
    for _ in range(CAPACITY // 2):  # every drawn slot rewritten
        replay.add_many(**stream.step())
    rewritten = replay.sampler.priorities.copy()
    replay.update_priorities(
        draw.indices, torch.full((8,), 123.0, dtype=torch.float64), generations=batch.generation
    )
    assert replay.dropped_updates == 8
    np.testing.assert_array_equal(replay.sampler.priorities, rewritten)  # not 123: nothing landed


def test_a_fresh_update_lands_and_the_draw_record_is_the_default() -> None:
    replay = _replay("device_proportional")
    stream = Stream(4)
    for _ in range(6):
        replay.add_many(**stream.step())
    _, draw = replay.sample(4)
    replay.update_priorities(draw.indices, torch.full((4,), 7.0, dtype=torch.float64))  # no generations=
    assert replay.dropped_updates == 0
    np.testing.assert_array_equal(replay.sampler.priorities[torch.as_tensor(draw.indices).numpy()], 7.0)


def test_host_indices_update_a_device_replay_against_its_draw_record() -> None:
    """The host path (numpy indices, checked, one synchronisation) reads the device's record."""
    replay = _replay("device_proportional")
    stream = Stream(9)
    for _ in range(6):
        replay.add_many(**stream.step())
    _, draw = replay.sample(4)
    slots = torch.as_tensor(draw.indices).numpy()
    replay.update_priorities(slots, np.full(4, 5.0))
    assert replay.dropped_updates == 0
    np.testing.assert_array_equal(replay.sampler.priorities[slots], 5.0)


def test_the_replay_step_makes_no_host_synchronisation() -> None:
    replay = _replay("device_proportional")
    stream = Stream(5)
    for _ in range(CAPACITY):
        replay.add_many(**stream.step())
    with no_host_sync():
        for _ in range(20):
            replay.add_many(**stream.step())
            batch, draw = replay.sample(8)
            td = (torch.as_tensor(batch.reward).double() - 0.5).abs()  # a learner's |δ|, on the device
            replay.update_priorities(draw.indices, td, generations=batch.generation)
    replay.check_valid()


def test_device_replay_checkpoints_round_trip() -> None:
    replay = _replay("device_proportional")
    stream = Stream(6)
    for _ in range(CAPACITY):
        replay.add_many(**stream.step())
    batch, draw = replay.sample(8)
    replay.update_priorities(draw.indices, torch.rand(8, dtype=torch.float64), generations=batch.generation)
    state = replay.state_dict(include_memory=True)
    again = _replay("device_proportional")
    again.load_state_dict(state)
    np.testing.assert_array_equal(again.sampler.priorities, replay.sampler.priorities)
    np.testing.assert_array_equal(again.state_dict()["drawn"], state["drawn"])
    again.check_valid()


def test_a_device_backend_refuses_what_it_cannot_do() -> None:
    with pytest.raises(ValueError, match="eviction"):
        _replay("device_proportional", eviction="priority")
    with pytest.raises(ValueError, match="device="):
        PrioritizedReplay(4, (2,), backend="device_proportional")


def test_n_step_device_replay_keeps_the_host_replays_priorities() -> None:
    """Under n-step the windows enter the device sampler as they complete, at its maximum."""
    host, device = _replay("proportional", n_step=3), _replay("device_proportional", n_step=3)
    stream, rng = Stream(7), np.random.default_rng(8)
    with pytest.raises(ValueError, match="none has completed"):
        device.add_many(**stream.step())
        device.sample(2)
    host.add_many(**Stream(7).step())
    for t in range(40):
        step = stream.step()
        host.add_many(**step)
        device.add_many(**step)
        if t % 4 == 3:
            _same_update(host, device, np.flatnonzero(host.memory.drawable(np.arange(CAPACITY)))[:5], rng)
        np.testing.assert_array_equal(device.sampler.priorities, host.sampler.priorities)
    batch, draw = device.sample(8)
    expected = host.memory.get(torch.as_tensor(draw.indices).numpy())
    np.testing.assert_array_equal(torch.as_tensor(batch.reward).numpy(), expected["reward"])
    device.check_valid()
