"""The sequence replay with its priorities on the device, run on CPU tensors (the same tensor
operations as on CUDA): batches equal the host replay's gather of the same items, ``P(i)`` equal
the host sampler's, stale write-backs dropped and counted on the device, no host synchronisation
in the learner's step, checkpoints round trip, and the step's tensor operations within a budget."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from prisample.replay.sequence import SequenceReplay
from prisample.replay.sequence_device import device_rows
from tests.host_sync import HostSyncError, no_host_sync

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
"""Where the device path runs: CPU tensors here (the same operations as on CUDA), CUDA as well
where there is one (the GPU session's ``replay`` stage runs those: ``-k cuda``)."""

FIELDS = ("obs", "action", "reward", "discount", "valid", "learn", "generation", "length")

CONFIGS = {
    "frames": {
        "obs_shape": (3,),
        "obs_dtype": np.uint8,
        "frame_stack": 2,
        "state": {"h": ((2,), np.float32), "c": ((2, 2), np.float64)},
        "extras": {"logp": ((), np.float32)},
    },
    "single_state": {"obs_shape": (3,), "obs_dtype": np.float32, "state": ((4,), np.float32)},
    "dict_obs": {
        "obs_shape": {"a": (2,), "b": ()},
        "obs_dtype": {"a": np.float32, "b": np.int64},
        "state": None,
    },
}


def build(
    config: str, *, device: str | None, capacity: int = 90, streams: int = 3, **kwargs: Any
) -> SequenceReplay:
    args: dict[str, Any] = dict(CONFIGS[config])
    obs_shape = args.pop("obs_shape")
    args.update(burn_in=2, length=4, period=3, bootstrap=1, num_streams=streams, seed=0, alpha=0.7)
    args.update(kwargs)
    if device is not None:
        args.update(device=device, priorities_on=device)
    return SequenceReplay(capacity, obs_shape, **args)


class Feed:
    """The same random steps for every replay given: ``streams`` streams stepping together
    (``add_many``), episodes ending at random, frame stacks continuing within an episode, the
    actor's priorities on some steps."""

    def __init__(self, config: str, streams: int, seed: int) -> None:
        self.config, self.streams = config, streams
        self.rng = np.random.default_rng(seed)
        self.frames = self.rng.integers(0, 255, (streams, 2, 3), dtype=np.uint8)
        self.t = 0

    def _obs(self, frames: np.ndarray) -> Any:
        cfg = CONFIGS[self.config]
        if self.config == "dict_obs":
            return {"a": frames[:, -1, :2].astype(np.float32), "b": frames[:, -1, 2].astype(np.int64)}
        if cfg.get("frame_stack", 1) == 2:
            return frames.copy()
        return frames[:, -1].astype(np.float32)


def feed(replays: list[SequenceReplay], config: str, steps: int, streams: int = 3, seed: int = 0) -> Feed:
    """``steps`` vector steps of the same data into every replay."""
    f = Feed(config, streams, seed)
    more(f, replays, steps)
    return f


def _step_same(f: Feed, replays: list[SequenceReplay], actions: np.ndarray, rewards: np.ndarray) -> None:
    """One vector step: the same arrays to every replay."""
    s, rng = f.streams, f.rng
    new = rng.integers(0, 255, (s, 1, 3), dtype=np.uint8)
    after = np.concatenate([f.frames[:, 1:], new], axis=1)
    ends = rng.random(s) < 0.12
    state_spec = CONFIGS[f.config]["state"]
    kwargs: dict[str, Any] = {}
    if isinstance(state_spec, dict):
        kwargs["state"] = {
            name: rng.normal(size=(s, *shape)).astype(dtype) for name, (shape, dtype) in state_spec.items()
        }
    elif state_spec is not None:
        kwargs["state"] = rng.normal(size=(s, 4)).astype(np.float32)
    if "extras" in CONFIGS[f.config]:
        kwargs["logp"] = rng.normal(size=s).astype(np.float32)
    if rng.random() < 0.5:
        kwargs["priorities"] = rng.random(s) * 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for replay in replays:
            replay.add_many(
                f._obs(f.frames),
                actions,
                rewards,
                np.where(ends, 0.0, 0.99),
                f._obs(after),
                episode_end=ends,
                **kwargs,
            )
    f.frames = after
    fresh = rng.integers(0, 255, (s, 2, 3), dtype=np.uint8)
    f.frames[ends] = fresh[ends]


def more(f: Feed, replays: list[SequenceReplay], steps: int) -> None:
    """``steps`` more vector steps of ``f`` into every replay."""
    for _ in range(steps):
        _step_same(f, replays, f.rng.integers(0, 4, f.streams), f.rng.normal(size=f.streams))


def as_numpy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: as_numpy(v) for k, v in value.items()}
    return value.cpu().numpy() if isinstance(value, torch.Tensor) else value


def assert_same(device_value: Any, host_value: Any, name: str) -> None:
    a, b = as_numpy(device_value), host_value
    if isinstance(b, dict):
        assert set(a) == set(b), name
        for key in b:
            assert_same(a[key], b[key], f"{name}[{key}]")
        return
    assert a.dtype == b.dtype and a.shape == b.shape, (name, a.dtype, b.dtype, a.shape, b.shape)
    np.testing.assert_array_equal(a, b, err_msg=name)


@contextlib.contextmanager
def _sync_debug(device: str) -> Iterator[None]:
    """On CUDA, also the driver's own check: a synchronising call raises."""
    if device != "cuda":
        yield
        return
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def assert_batch_is_host_gather(batch: Any, draw: Any, host: SequenceReplay) -> None:
    items = draw.indices.cpu().numpy()
    expected = host.gather(items)
    for name in (*FIELDS, "state"):
        if getattr(expected, name) is None:
            assert getattr(batch, name) is None
        else:
            assert_same(getattr(batch, name), getattr(expected, name), name)
    assert set(batch.extras) == set(expected.extras)
    for name in expected.extras:
        assert_same(batch.extras[name], expected.extras[name], name)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_device_batches_equal_the_host_gather_of_the_same_items(config: str, device: str) -> None:
    host, dev = build(config, device=None), build(config, device=device)
    f = feed([host, dev], config, 10)
    for round_ in range(12):  # the ring wraps several times (capacity 90, 3 streams)
        assert len(dev) == len(host) > 0
        batch, draw = dev.sample(16)
        assert isinstance(draw.indices, torch.Tensor)
        assert_batch_is_host_gather(batch, draw, host)
        assert batch.weights is draw.weights and batch.weights.dtype == torch.float32
        td = torch.rand(16, dev.window, dtype=torch.float64, generator=torch.Generator().manual_seed(round_))
        dev.update_from_td(draw.indices, td.to(device), batch.learn, generations=batch.generation)
        host.update_from_td(
            as_numpy(draw.indices), td.numpy(), as_numpy(batch.learn), generations=as_numpy(batch.generation)
        )
        more(f, [host, dev], 7)
        dev.check_valid()  # the device tables equal what the host's index says
    assert dev.num_steps == host.num_steps == 90
    assert dev.memory.num_evicted > 2 * dev.capacity


@pytest.mark.parametrize("backend", ["device_proportional", "device_uniform"])
def test_probabilities_equal_the_host_samplers(backend: str) -> None:
    host = build("frames", device=None, backend=backend.removeprefix("device_"))
    dev = SequenceReplay(
        90, (3,), obs_dtype=np.uint8, frame_stack=2, burn_in=2, length=4, period=3, bootstrap=1,
        num_streams=3, seed=0, alpha=0.7, backend=backend, device="cpu",
        state=CONFIGS["frames"]["state"], extras=CONFIGS["frames"]["extras"],
    )  # fmt: skip
    f = feed([host, dev], "frames", 10)
    for round_ in range(10):
        batch, draw = dev.sample(12)
        rng = np.random.default_rng(round_)
        prios = rng.random(12) * 5
        dev.update_priorities(draw.indices, torch.from_numpy(prios), generations=batch.generation)
        host.update_priorities(draw.indices.numpy(), prios, generations=batch.generation.numpy())
        # the oldest item at the top: new items enter at the maximum of those left once it leaves
        live = np.flatnonzero(~np.isnan(host.sampler.priorities))
        oldest = live[np.argmin(host.items.item_gen[live])][None]
        for replay in (host, dev):
            replay.update_priorities(oldest, [50.0 + round_], generations=host.items.item_gen[oldest])
        more(f, [host, dev], 5)  # evictions, items at the actor's mix and at the maximum
        np.testing.assert_array_equal(np.isnan(dev.sampler.priorities), np.isnan(host.sampler.priorities))
        items = np.flatnonzero(~np.isnan(host.sampler.priorities))
        p_dev = dev.sampler.probabilities(items).numpy()
        p_host = np.asarray(host.sampler.probabilities(items))
        np.testing.assert_allclose(p_dev, p_host, rtol=1e-12, atol=0)
        np.testing.assert_allclose(dev.sampler.priorities[items], host.sampler.priorities[items], rtol=1e-12)
    assert dev.dropped_updates == host.dropped_updates


def test_a_write_evicting_many_items_keeps_the_host_priorities() -> None:
    # items at every step: one long write evicts more items than the maximum is read around
    kwargs: dict[str, Any] = dict(burn_in=0, length=2, period=1, seed=0, alpha=0.8)
    host = SequenceReplay(600, (1,), **kwargs)
    dev = SequenceReplay(600, (1,), device="cpu", backend="device_proportional", **kwargs)
    rng = np.random.default_rng(3)
    for round_ in range(4):
        n = 300
        obs = rng.normal(size=(n, 1)).astype(np.float32)
        args = (obs, np.zeros(n, np.int64), rng.normal(size=n), np.full(n, 0.9), obs)
        given = rng.random(n) * 4 if round_ % 2 else None
        for replay in (host, dev):
            replay.add_many(*args, streams=np.zeros(n, np.int64), priorities=given)
        live = np.flatnonzero(~np.isnan(host.sampler.priorities))
        prios = rng.random(live.shape[0]) * 9
        for replay in (host, dev):
            replay.update_priorities(live, prios, generations=host.items.item_gen[live])
        np.testing.assert_array_equal(np.isnan(dev.sampler.priorities), np.isnan(host.sampler.priorities))
    items = np.flatnonzero(~np.isnan(host.sampler.priorities))
    np.testing.assert_allclose(
        dev.sampler.probabilities(items).numpy(), host.sampler.probabilities(items), rtol=1e-12, atol=0
    )
    dev.check_valid()


def test_stale_write_backs_are_dropped_and_counted_on_the_device() -> None:
    host, dev = build("single_state", device=None), build("single_state", device="cpu")
    f = feed([host, dev], "single_state", 40)
    batch, draw = dev.sample(32)
    more(f, [host, dev], 12)  # some drawn items left; new ones may start at their slots
    items = draw.indices.numpy()
    stale = host.items.live_generations(items) != batch.generation.numpy()
    assert stale.any() and not stale.all()
    before = dev.sampler.priorities.copy()
    dropped_on_device = dev.guard.dropped_on_device.clone()
    values = torch.full((32,), 7.5, dtype=torch.float64)
    dev.update_priorities(draw.indices, values, generations=batch.generation)
    host.update_priorities(items, values.numpy(), generations=batch.generation.numpy())
    assert int(dev.guard.dropped_on_device - dropped_on_device) == int(stale.sum())  # counted there
    assert dev.dropped_updates == host.dropped_updates == int(stale.sum())
    after = dev.sampler.priorities
    np.testing.assert_array_equal(after[items[~stale]], 7.5)
    untouched = np.setdiff1d(np.arange(dev.capacity), items[~stale])
    np.testing.assert_array_equal(
        np.nan_to_num(after[untouched], nan=-1), np.nan_to_num(before[untouched], nan=-1)
    )
    np.testing.assert_array_equal(
        np.nan_to_num(after, nan=-1), np.nan_to_num(host.sampler.priorities, nan=-1)
    )
    # without generations: the draw record, on the device
    batch, draw = dev.sample(8)
    more(f, [host, dev], 12)
    stale = host.items.live_generations(draw.indices.numpy()) != batch.generation.numpy()
    n = dev.dropped_updates
    dev.update_priorities(draw.indices, torch.ones(8, dtype=torch.float64))
    assert dev.dropped_updates - n == int(stale.sum())


@pytest.mark.parametrize("device", DEVICES)
def test_the_learner_step_makes_no_host_synchronisation(device: str) -> None:
    dev = build("frames", device=device)
    f = feed([dev], "frames", 30)
    batch, draw = dev.sample(8)  # first calls allocate what later ones reuse
    for _ in range(10):
        with no_host_sync(), _sync_debug(device):
            batch, draw = dev.sample(8)
            td = batch.reward.double() - 0.5  # a learner's TD errors, on the device
            dev.update_from_td(draw.indices, td, batch.learn, generations=batch.generation)
            dev.update_priorities(draw.indices, td.abs().amax(dim=1), generations=batch.generation)
        with no_host_sync():  # the actor's adds: no value read back either (CUDA may wait on copies)
            more(f, [dev], 1)
    dev.check_valid()
    with no_host_sync(), pytest.raises(HostSyncError):  # the guard sees a read
        _ = dev.dropped_updates


def test_checkpoints_round_trip_and_go_on_exactly() -> None:
    dev = build("frames", device="cpu")
    f = feed([dev], "frames", 45)
    for _ in range(3):
        batch, draw = dev.sample(8)
        dev.update_priorities(draw.indices, torch.rand(8, dtype=torch.float64), generations=batch.generation)
    more(f, [dev], 6)  # some drawn items stale
    dev.update_priorities(draw.indices, torch.rand(8, dtype=torch.float64), generations=batch.generation)
    state = dev.state_dict(include_memory=True)
    again = build("frames", device="cpu")
    again.load_state_dict(state)
    again.check_valid()
    assert again.dropped_updates == dev.dropped_updates and len(again) == len(dev)
    for _ in range(3):
        (b1, d1), (b2, d2) = dev.sample(8), again.sample(8)
        assert torch.equal(d1.indices, d2.indices) and torch.equal(d1.weights, d2.weights)
        for name in FIELDS:
            assert torch.equal(getattr(b1, name), getattr(b2, name)), name
        for name in b1.state:
            assert torch.equal(b1.state[name], b2.state[name])
    # the sampler's format is the host's: a host replay takes the device replay's state
    host = build("frames", device=None)
    host.load_state_dict(state)
    host.check_valid()
    batch, draw = again.sample(8)
    assert_batch_is_host_gather(batch, draw, host)


def test_the_item_table_holds_the_most_items_drawable() -> None:
    # many short episodes: each of min_steps steps holds one item, the worst case of the bound
    dev = SequenceReplay(60, (1,), burn_in=1, length=2, period=3, device="cpu", priorities_on="cpu", seed=0)
    assert dev.device_steps is not None and dev.device_steps.rows == device_rows(60, 3, 2)
    for t in range(200):
        dev.add(np.zeros(1, np.float32), 0, 0.0, 0.9, np.zeros(1, np.float32), episode_end=t % 2 == 1)
    assert len(dev) == 30
    dev.check_valid()


def test_a_device_sequence_replay_refuses_what_it_cannot_do() -> None:
    with pytest.raises(ValueError, match="device"):
        SequenceReplay(64, (2,), burn_in=1, length=2, period=2, backend="device_proportional")
    with pytest.raises(ValueError, match="rank"):
        SequenceReplay(
            64, (2,), burn_in=1, length=2, period=2, backend="rank", device="cpu", priorities_on="cpu"
        )
    dev = SequenceReplay(64, (2,), burn_in=1, length=2, period=2, backend="device_proportional", device="cpu")
    with pytest.raises(ValueError, match="no item"):
        dev.sample(4)


@pytest.mark.parametrize("fused", [False, True])
def test_the_step_counts_stay_within_their_budget(fused: bool) -> None:
    from benchmarks.op_count import sequence_step_counts

    counts = sequence_step_counts(capacity=4096, batch=64, fused=fused)
    budget = SEQUENCE_BUDGETS["fused" if fused else "tensor_ops"]
    assert 0 < counts["sample_update"]["kernels"] <= budget, counts


SEQUENCE_BUDGETS = {"tensor_ops": 185, "fused": 55}
"""Kernels of a device sequence replay's ``sample(64)`` + ``update_from_td(64)`` at capacity
4096 (R2D2's items, frame stacks of 4, a two-array state).  Counted when set: 104 + 67 on the
tensor path (171), 53 on the fused one (two more since padding reads the final stack moved on)."""
