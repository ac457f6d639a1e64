"""A prioritized replay made of parts (``prisample/replay/replay_parts.py``): a memory and a sampler
passed in or built by the one factory, the host or device steps chosen with the sampler, the
checkpoint a part of its own; mismatched parts refused by name with nothing built."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import prisample.replay.replay_parts as parts_module
from prisample import PrioritizedSampler
from prisample.device_sampler import DevicePrioritizedSampler
from prisample.replay import PrioritizedReplay, ReplayMemory
from prisample.replay.device_steps import DeviceSteps
from prisample.replay.replay_checkpoint import ReplayCheckpoint
from prisample.replay.replay_parts import build_replay_parts
from prisample.replay.steps import HostSteps
from prisample.replay.write_back import DeviceWriteBackGuard, HostWriteBackGuard
from prisample.slot_sampler import make_sampler


def _memory(capacity: int = 8, **kw: Any) -> ReplayMemory:
    return ReplayMemory(capacity, (2,), obs_dtype=np.float32, **kw)


def _fill(replay: PrioritizedReplay, n: int = 12) -> None:
    for t in range(n):
        replay.add(np.full(2, t, np.float32), 0, 1.0, 0.9, np.full(2, t + 1, np.float32))


def _run(replay: PrioritizedReplay) -> list[Any]:
    """Adds, draws and updates; what they gave."""
    out: list[Any] = []
    _fill(replay)
    for step in range(5):
        _, draw = replay.sample(4)
        indices = np.asarray(draw.indices)
        out.append(indices.copy())
        replay.update_priorities(indices, np.arange(4.0) + step)
        replay.add(np.zeros(2, np.float32), 1, 0.0, 0.9, np.ones(2, np.float32))
    out.append(replay.sampler.priorities)
    return out


def test_a_memory_and_a_sampler_passed_in_are_the_replays_parts_and_draw_as_built_ones() -> None:
    built = PrioritizedReplay(8, (2,), obs_dtype=np.float32, alpha=0.7, seed=3)
    memory, sampler = _memory(), PrioritizedSampler(8, alpha=0.7, seed=3, size=0)
    given = PrioritizedReplay(memory=memory, sampler=sampler)
    assert given.memory is memory and given.sampler is sampler and given.capacity == 8
    own_memory = PrioritizedReplay(memory=_memory(), alpha=0.7, seed=3)
    own_sampler = PrioritizedReplay(
        8, (2,), obs_dtype=np.float32, sampler=PrioritizedSampler(8, alpha=0.7, seed=3, size=0)
    )
    reference = _run(built)
    for replay in (given, own_memory, own_sampler):
        for a, b in zip(_run(replay), reference, strict=True):
            np.testing.assert_array_equal(a, b)
        replay.check_valid()


def test_the_memory_passed_in_sets_the_sampler_built_capacity_device_and_n_step() -> None:
    replay = PrioritizedReplay(memory=_memory(5, n_step=3, device="cpu"), backend="device_proportional")
    assert isinstance(replay.sampler, DevicePrioritizedSampler) and replay.sampler.capacity == 5
    assert isinstance(replay.steps, DeviceSteps) and replay.on_device
    with pytest.raises(ValueError, match=r"eviction='priority' needs n_step=1.*n_step=3"):
        PrioritizedReplay(memory=_memory(5, n_step=3), eviction="priority")


def test_the_steps_and_guard_follow_the_sampler() -> None:
    host = build_replay_parts(8, (2,), obs_dtype=np.float32)
    assert type(host.steps) is HostSteps and type(host.guard) is HostWriteBackGuard
    device = build_replay_parts(8, (2,), obs_dtype=np.float32, device="cpu", priorities_on="cpu")
    assert type(device.steps) is DeviceSteps and type(device.guard) is DeviceWriteBackGuard
    assert device.guard.device == device.memory.device
    replay = PrioritizedReplay(8, (2,), obs_dtype=np.float32)
    assert not replay.on_device
    with pytest.raises(AttributeError):
        replay.on_device = True  # type: ignore[misc]
    with pytest.raises(ValueError, match="needs the priorities on the device"):
        replay.stage_device_step()


@pytest.mark.parametrize(
    ("kw", "error", "match"),
    [
        ({"memory": "nope"}, TypeError, r"memory should be a ReplayMemory, but got memory='nope'"),
        ({"obs_shape": (2,)}, ValueError, r"obs_shape should be left unset, but got obs_shape=\(2,\)"),
        (
            {"frame_stack": 2, "n_step": 3},
            ValueError,
            r"memory= replaces .*: frame_stack, n_step should be left unset, but got frame_stack=2, n_step=3",
        ),
        ({"device": "cpu"}, ValueError, r"device should be left unset, but got device='cpu'"),
        (
            {"capacity": 9},
            ValueError,
            r"capacity should be None or the memory's capacity \(8\), but got capacity=9",
        ),
        (
            {"sampler": PrioritizedSampler(9, size=0)},
            ValueError,
            r"sampler should be empty and of the memory's capacity \(8\), but got a sampler of capacity 9",
        ),
        (
            {"sampler": DevicePrioritizedSampler(8, device="cpu")},
            ValueError,
            r"a DevicePrioritizedSampler should be on the memory's device .* device=None",
        ),
        ({"sampler": PrioritizedSampler(8, size=0), "alpha": 0.5}, ValueError, r"alpha should be left unset"),
    ],
)
def test_mismatched_parts_are_refused_by_name_and_nothing_is_built(
    kw: dict[str, Any], error: type[Exception], match: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = _memory()
    built: list[str] = []
    real_sampler, real_memory = make_sampler, ReplayMemory.__init__

    def counted_sampler(*args: Any, **kwargs: Any) -> Any:
        built.append("sampler")
        return real_sampler(*args, **kwargs)

    def counted_memory(self: ReplayMemory, *args: Any, **kwargs: Any) -> None:
        built.append("memory")
        real_memory(self, *args, **kwargs)

    monkeypatch.setattr(parts_module, "make_sampler", counted_sampler)
    monkeypatch.setattr(ReplayMemory, "__init__", counted_memory)
    kw = {"memory": memory, **kw}
    with pytest.raises(error, match=match):
        PrioritizedReplay(**kw)
    assert built == []
    assert memory.num_added == 0


def test_a_memory_that_was_written_is_refused() -> None:
    memory = _memory()
    memory.add(np.zeros(2, np.float32), 0, 0.0, 0.9, np.ones(2, np.float32))
    with pytest.raises(
        ValueError, match=r"memory should be empty \(nothing ever added\).* 1 transitions added"
    ):
        PrioritizedReplay(memory=memory)
    with pytest.raises(TypeError, match="obs_shape should be given"):
        PrioritizedReplay(8)


def test_the_checkpoint_part_alone_round_trips_a_replays_state() -> None:
    """The checkpoint is a part given the memory, sampler, guard and eviction strategy: one built
    over another replay's parts writes the replay's state, and loads it all or nothing."""
    replay = PrioritizedReplay(8, (2,), obs_dtype=np.float32, seed=0, eviction="priority")
    _run(replay)
    checkpoint = ReplayCheckpoint(replay.memory, replay.sampler, replay.guard, replay.eviction_strategy)
    state = checkpoint.state_dict(include_memory=True)
    assert state["eviction"] == "priority" and state["dropped_updates"] == replay.dropped_updates
    np.testing.assert_array_equal(state["drawn"], replay.guard.record_state())
    fresh = PrioritizedReplay(8, (2,), obs_dtype=np.float32, seed=1, eviction="priority")
    bad = {**state, "drawn": np.zeros(7, dtype=np.int64)}
    before = fresh.state_dict(include_memory=True)
    with pytest.raises(ValueError, match=r"state_dict drawn should be int64\[8\]"):
        fresh.checkpointer.load_state_dict(bad)
    assert fresh.state_dict(include_memory=True)["memory"]["head"] == before["memory"]["head"] == 0
    fresh.checkpointer.load_state_dict(state)
    fresh.check_valid()
    np.testing.assert_array_equal(fresh.sampler.priorities, replay.sampler.priorities)
    np.testing.assert_array_equal(fresh.guard.record_state(), replay.guard.record_state())


def test_a_device_replay_loaded_with_complete_windows_can_draw() -> None:
    """The device steps learn that windows completed from the host's record, also when they
    completed before a load (the state's memory), not only from the writes they saw."""
    kw: dict[str, Any] = {
        "obs_dtype": np.float32,
        "n_step": 3,
        "device": "cpu",
        "backend": "device_proportional",
    }
    source = PrioritizedReplay(8, (2,), **kw)
    _fill(source, 6)
    target = PrioritizedReplay(8, (2,), **kw)
    target.load_state_dict(source.state_dict(include_memory=True))
    _, draw = target.sample(2)
    assert isinstance(draw.indices, torch.Tensor) and draw.indices.shape == (2,)
    empty = PrioritizedReplay(8, (2,), **kw)
    empty.add(np.zeros(2, np.float32), 0, 0.0, 0.9, np.ones(2, np.float32))
    with pytest.raises(ValueError, match="none has completed its window"):
        empty.sample(1)
