"""A prioritized replay whose priorities live on the device, on CPU tensors:
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
    # the device's tree and its draw record (int64 per slot, on the device in place of the
    # host's) are counted beside the memory
    assert device.sampler.nbytes > 0
    assert device.guard.nbytes == host.guard.nbytes == 8 * CAPACITY
    assert device.nbytes == host.nbytes - host.sampler.nbytes + device.sampler.nbytes


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


def _small(backend: str, device: str = "cpu", **kw: Any) -> PrioritizedReplay:
    return PrioritizedReplay(
        4, (3,), obs_dtype=np.float32, alpha=1.0, beta=1.0, seed=0, device=device, backend=backend, **kw
    )


def _add(replay: PrioritizedReplay, t: int) -> None:
    replay.add(np.full(3, t), t % 2, 1.0, 0.99, np.full(3, t + 1))


def test_a_stale_duplicate_does_not_undo_a_fresh_update_on_the_device() -> None:
    """Regression: on the device a stale entry wrote its slot's current priority back, and when it
    came after a fresh entry for the same slot it undid the fresh one (slot 1 ended at 1.0, where
    the host kept 5.0).  Stale entries now change nothing: the last *live* entry wins."""
    results = []
    for backend, as_tensor in (
        ("proportional", False),
        ("device_proportional", False),
        ("device_proportional", True),
    ):
        replay = _small(backend)
        for t in range(6):  # slot 1 rewritten: it holds transition 5, not 1
            _add(replay, t)
        new, old = int(replay.generations([1])[0]), 1
        args: list[Any] = [[1, 1], [5.0, 9.0], [new, old]]
        if as_tensor:
            args = [torch.tensor(a) for a in args]
        replay.update_priorities(args[0], args[1], generations=args[2])
        results.append((replay.sampler.priorities[1], replay.dropped_updates))
    assert results == [(5.0, 1)] * 3


def test_device_updates_with_duplicates_and_stale_entries_equal_the_host_ones() -> None:
    """Random updates naming slots several times, some entries stale (an older generation), with
    and without ``generations=``: the same priorities and dropped counts as the host replay."""
    host, device = _replay("proportional"), _replay("device_proportional")
    stream, rng = Stream(11), np.random.default_rng(12)
    for t in range(60):
        step = stream.step()
        host.add_many(**step)
        device.add_many(**step)
        if t % 2:
            slots = rng.integers(0, len(host), 10)
            values = rng.exponential(size=10)
            generations = host.generations(slots) - CAPACITY * (rng.random(10) < 0.4)
            host.update_priorities(slots, values, generations=generations)
            device.update_priorities(
                torch.from_numpy(slots), torch.from_numpy(values), generations=torch.from_numpy(generations)
            )
        if t % 5 == 4:  # the device against its draw record, the host given the same generations
            batch, draw = device.sample(6)
            host.add_many(**(step := stream.step()))  # some drawn slots rewritten
            device.add_many(**step)
            slots_d = torch.cat([draw.indices, draw.indices.flip(0)])
            drawn = torch.cat([batch.generation, batch.generation.flip(0)])
            values = torch.from_numpy(rng.exponential(size=12))
            device.update_priorities(slots_d, values)
            host.update_priorities(slots_d.numpy(), values.numpy(), generations=drawn.numpy())
        np.testing.assert_array_equal(device.sampler.priorities, host.sampler.priorities)
        assert device.dropped_updates == host.dropped_updates
    assert host.dropped_updates > 0  # stale entries were tried
    device.check_valid()


@pytest.mark.parametrize("device", ["cpu", "cpu:0", torch.device("cpu", 0)])
def test_a_draws_tensors_take_the_device_path_whatever_the_devices_spelling(
    device: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the device path was taken only when ``indices.device == memory.device``, and
    ``torch.device("cpu:0") != torch.device("cpu")`` (as ``"cuda"`` against the ``cuda:0`` a draw
    reports on a GPU), so every update was copied to the host.  The memory now holds the device
    its tensors report."""
    replay = _small("device_proportional", device)
    assert replay.memory.device == replay.sampler.device == torch.device("cpu")
    calls = []
    original = replay.steps.update_on_device  # type: ignore[attr-defined]

    def spied(*args: Any) -> None:
        calls.append(1)
        original(*args)

    monkeypatch.setattr(replay.steps, "update_on_device", spied)
    for t in range(6):
        _add(replay, t)
    batch, draw = replay.sample(2)
    assert draw.indices.device == replay.memory.device
    with no_host_sync():
        replay.update_priorities(draw.indices, torch.full((2,), 3.0), generations=batch.generation)
    assert calls == [1]
    assert np.all(replay.sampler.priorities[draw.indices.numpy()] == 3.0)


def test_devices_are_named_as_their_tensors_report_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from prisample.replay.device import as_device, concrete_device

    for name in ("cpu", "cpu:0", torch.device("cpu", 0)):
        assert concrete_device(name) == torch.empty(0, device=name).device == torch.device("cpu")
        assert as_device(name) == torch.device("cpu")
    assert as_device(None) is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert concrete_device("cuda") == torch.device("cuda", 1)  # the current device's index
    assert concrete_device("cuda:0") == torch.device("cuda", 0)


def test_the_recipes_device_option_names_the_device_as_its_tensors_report_it() -> None:
    pytest.importorskip("yaml")  # recipes.dqn reads its configs (the rl extra)
    from recipes.dqn.networks import resolve_device

    assert resolve_device("cpu:0") == torch.device("cpu") == torch.empty(0, device="cpu:0").device


def _count_writes(replay: PrioritizedReplay, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Spies on the device tree's writes and the sampler's removals."""
    sampler = replay.steps.sampler_on_device()
    counts = {"tree_writes": 0, "removes": 0}
    write, remove = sampler.tree.write, sampler.remove

    def counted_write(*a: Any, **kw: Any) -> None:
        counts["tree_writes"] += 1
        write(*a, **kw)

    def counted_remove(*a: Any, **kw: Any) -> None:
        counts["removes"] += 1
        remove(*a, **kw)

    monkeypatch.setattr(sampler.tree, "write", counted_write)
    monkeypatch.setattr(sampler, "remove", counted_remove)
    return counts


@pytest.mark.parametrize("n_step", [1, 3])
def test_an_add_is_one_tree_write_and_issues_no_empty_removal(
    n_step: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: an add to a full device replay issued a removal and then a write (each a pass
    up the tree), and under n-step a removal with nothing to remove.  Now an add that evicts and
    enters is one write (the maximum read without writing the evictions first), and an add with
    nothing to evict or enter writes nothing; the priorities stay the host's."""
    host, device = _replay("proportional", n_step=n_step), _replay("device_proportional", n_step=n_step)
    counts = _count_writes(device, monkeypatch)
    stream, rng = Stream(13), np.random.default_rng(14)
    for t in range(3 * CAPACITY // 2):  # past the capacity: every later add evicts
        step = stream.step()
        host.add_many(**step)
        before = dict(counts)
        device.add_many(**step)
        writes = counts["tree_writes"] - before["tree_writes"]
        if n_step > 1 and t < n_step - 1:  # no window complete, nothing evicted: nothing to write
            assert writes == 0
        else:
            assert writes == 1
        if t % 4 == 3:
            _same_update(host, device, np.flatnonzero(host.memory.drawable(np.arange(CAPACITY)))[:5], rng)
        np.testing.assert_array_equal(device.sampler.priorities, host.sampler.priorities)
    assert counts["removes"] == 0
    assert len(device) == CAPACITY


def test_a_device_max_priority_is_logged_as_a_float() -> None:
    """Regression: ``metrics.csv`` received the repr of a 0-d tensor for ``per/max_priority``."""
    pytest.importorskip("gymnasium")
    from recipes.dqn.loop import LoopState, metrics_row

    replay = _replay("device_proportional")
    stream = Stream(15)
    for _ in range(4):
        replay.add_many(**stream.step())
    state = LoopState(0, 0, 0, 0, None, np.zeros(1), np.zeros(1, bool), np.zeros(1), np.zeros(1))
    row = metrics_row(state, 0.1, replay, 1.0)
    assert type(row["per/max_priority"]) is float and row["per/max_priority"] == 1.0


def test_a_step_evicting_many_transitions_keeps_the_host_replays_priorities(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past 64 evictions in one write, the maximum is read after a removal of their own (reading
    around them costs k² per level): the same priorities as the host either way."""
    streams = 80
    kw: dict[str, Any] = {"num_streams": streams, "n_step": 2, "alpha": 0.7, "beta": 0.5, "seed": 0}
    host = PrioritizedReplay(96, (2,), obs_dtype=np.float32, **kw)
    device = PrioritizedReplay(
        96, (2,), obs_dtype=np.float32, device="cpu", backend="device_proportional", **kw
    )
    counts = _count_writes(device, monkeypatch)
    rng = np.random.default_rng(16)
    for t in range(6):
        obs = rng.normal(size=(streams, 2)).astype(np.float32)
        step = {"obs": obs, "action": np.zeros(streams, dtype=np.int64), "reward": rng.normal(size=streams),
                "discount": np.full(streams, 0.9), "next_obs": obs + 1}  # fmt: skip
        host.add_many(**step)
        device.add_many(**step)
        if t % 2:
            _same_update(host, device, np.flatnonzero(host.memory.drawable(np.arange(96)))[:20], rng)
        np.testing.assert_array_equal(device.sampler.priorities, host.sampler.priorities)
    assert counts["removes"] > 0  # the many-evictions path was taken
    device.check_valid()
