"""One sampler interface, host or device: both samplers implement ``SlotSampler``; the registry
chooses one by backend name and device (``"device_*"`` names stay aliases); the replay takes its
sampler from the one factory or as ``sampler=``, keeps ``device=`` meaning where batches go, and
converts and checks an update's priorities once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import prisample.replay.steps as steps_module
import prisample.sampler as sampler_module
from prisample import LinearSchedule, PrioritizedReplay, PrioritizedSampler
from prisample.backends import backend_names, device_backend_names, sampler_choice
from prisample.device_sampler import DevicePrioritizedSampler
from prisample.methods import CorrectedSampler
from prisample.slot_sampler import SlotSampler, make_sampler


@pytest.mark.parametrize(
    "build",
    [
        lambda: PrioritizedSampler(8, size=0),
        lambda: CorrectedSampler(8, size=0),
        lambda: DevicePrioritizedSampler(8, device="cpu"),
        lambda: DevicePrioritizedSampler(8, backend="uniform"),
    ],
    ids=["host", "corrected", "device", "device-uniform"],
)
def test_every_sampler_implements_the_protocol(build: Callable[[], Any]) -> None:
    sampler = build()
    assert isinstance(sampler, SlotSampler)
    sampler.add(np.arange(4))
    sampler.update_priorities([0, 1], [2.0, 0.5])
    sampler.write([2, 5], [np.nan, 3.0])
    sampler.remove([3])
    draw = sampler.sample(3)
    assert len(draw) == 3 and set(np.asarray(draw.indices).tolist()) <= {0, 1, 5}
    assert sampler.size == 3 and sampler.step == 1
    other = build()
    other.load_state_dict(sampler.state_dict())
    np.testing.assert_array_equal(other.priorities, sampler.priorities)


def test_something_else_is_not_a_slot_sampler() -> None:
    assert not isinstance(object(), SlotSampler)
    assert not isinstance(torch.utils.data.RandomSampler(range(3)), SlotSampler)


def test_the_beta_schedule_is_written_once() -> None:
    """Both classes take β, its schedule, the step and the lock from one base."""
    for name in ("beta", "step", "lock"):
        assert getattr(PrioritizedSampler, name) is getattr(DevicePrioritizedSampler, name)
    for sampler in (PrioritizedSampler(4, size=4), DevicePrioritizedSampler(4, size=4)):
        sampler.beta = LinearSchedule(0.4, 1.0, 4)
        sampler.sample(2)
        sampler.sample(2)
        assert sampler.step == 2 and sampler.beta == pytest.approx(0.7)
        sampler.step = 4
        assert sampler.beta == 1.0
        with pytest.raises(ValueError, match="step"):
            sampler.step = -1
        assert sampler.step == 4


@pytest.mark.parametrize(
    ("backend", "device", "expected"),
    [
        ("proportional", None, ("proportional", False)),
        ("rank", None, ("rank", False)),
        ("proportional", "cpu", ("proportional", True)),
        ("uniform", torch.device("cpu"), ("uniform", True)),
        ("device_proportional", None, ("proportional", True)),
        ("device_uniform", "cpu", ("uniform", True)),
    ],
)
def test_the_registry_chooses_by_name_and_device(backend: str, device: Any, expected: Any) -> None:
    assert sampler_choice(backend, device) == expected
    sampler = make_sampler(16, backend=backend, device=device)
    assert type(sampler) is (DevicePrioritizedSampler if expected[1] else PrioritizedSampler)
    assert sampler.backend_name == expected[0]


def test_device_backends_are_the_registrys() -> None:
    assert set(device_backend_names()) <= set(backend_names())
    assert device_backend_names() == ("proportional", "uniform")


@pytest.mark.parametrize(
    ("backend", "device", "match"),
    [
        ("rank", "cpu", "backend='rank' keeps its priorities on the host"),
        ("greedy", torch.device("cpu"), "device=device\\(type='cpu'\\)"),
        ("device_rank", None, "backend='device_rank'"),
        ("nope", None, "backend='nope'"),
        (3, "cpu", "backend=3"),
    ],
)
def test_a_pair_that_names_no_sampler_is_refused(backend: Any, device: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sampler_choice(backend, device)
    with pytest.raises(ValueError, match=match):
        make_sampler(8, backend=backend, device=device)


def _replay(**kw: Any) -> PrioritizedReplay:
    return PrioritizedReplay(16, (2,), obs_dtype=np.float32, alpha=0.7, seed=3, **kw)


def _fill(replay: PrioritizedReplay, n: int = 12) -> None:
    for t in range(n):
        replay.add(np.full(2, t), 0, 1.0, 0.9, np.full(2, t + 1))


def test_device_keeps_meaning_where_batches_go() -> None:
    """``device=`` alone keeps the host sampler (as before); ``priorities_on=`` moves the
    priorities there, exactly as the ``"device_proportional"`` alias does."""
    assert type(_replay(device="cpu").sampler) is PrioritizedSampler
    assert not _replay(device="cpu").on_device
    on = _replay(device="cpu", priorities_on="cpu")
    alias = _replay(device="cpu", backend="device_proportional")
    for replay in (on, alias):
        assert type(replay.sampler) is DevicePrioritizedSampler and replay.on_device
        _fill(replay)
    for _ in range(3):
        (_, a), (_, b) = on.sample(4), alias.sample(4)
        torch.testing.assert_close(a.indices, b.indices)
        torch.testing.assert_close(a.weights, b.weights)
        on.update_priorities(a.indices, torch.rand(4, generator=torch.Generator().manual_seed(1)))
        alias.update_priorities(b.indices, torch.rand(4, generator=torch.Generator().manual_seed(1)))
    np.testing.assert_array_equal(on.sampler.priorities, alias.sampler.priorities)
    assert _replay(device="cpu", backend="uniform", priorities_on="cpu").sampler.backend_name == "uniform"


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"priorities_on": "cpu"}, "needs device= set"),
        ({"device": "cpu", "priorities_on": "cpu", "eviction": "priority"}, "eviction='fifo'"),
        ({"device": "cpu", "priorities_on": "meta"}, "priorities_on should be None or the memory's device"),
        ({"device": "cpu", "priorities_on": 7}, "priorities_on=7"),
        ({"device": "cpu", "priorities_on": "cpu", "backend": "rank"}, "backend='rank'"),
    ],
)
def test_priorities_on_is_checked(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _replay(**kw)


def test_a_given_sampler_is_the_replays() -> None:
    sampler = PrioritizedSampler(16, alpha=1.0, size=0, seed=0)
    replay = PrioritizedReplay(16, (2,), obs_dtype=np.float32, sampler=sampler)
    assert replay.sampler is sampler and replay.lock is sampler.lock
    _fill(replay)
    assert sampler.size == 12
    _, draw = replay.sample(4)
    replay.update_priorities(draw.indices, np.full(4, 3.0))
    assert set(np.flatnonzero(sampler.priorities == 3.0)) == set(draw.indices.tolist())
    replay.check_valid()

    device = DevicePrioritizedSampler(16, device="cpu", seed=0)
    replay = PrioritizedReplay(16, (2,), obs_dtype=np.float32, device="cpu", sampler=device)
    assert replay.on_device and replay.sampler is device
    _fill(replay)
    _, on_device = replay.sample(4)
    assert isinstance(on_device.indices, torch.Tensor)


@pytest.mark.parametrize(
    ("make", "kw", "error", "match"),
    [
        (lambda: object(), {}, TypeError, "sampler should implement"),
        (lambda: PrioritizedSampler(8, size=0), {}, ValueError, "capacity 8"),
        (lambda: PrioritizedSampler(16, size=2), {}, ValueError, "holding 2 slots"),
        (lambda: PrioritizedSampler(16, size=0), {"alpha": 1.0}, ValueError, "alpha=1.0"),
        (lambda: PrioritizedSampler(16, size=0), {"priorities_on": "cpu"}, ValueError, "priorities_on='cpu'"),
        (lambda: DevicePrioritizedSampler(16), {}, ValueError, "on the memory's device"),
    ],
)
def test_a_bad_given_sampler_is_refused(
    make: Callable[[], Any], kw: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        PrioritizedReplay(16, (2,), obs_dtype=np.float32, sampler=make(), **kw)


def test_an_update_converts_and_checks_its_priorities_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: ``PrioritizedReplay.update_priorities`` converted and checked the priorities,
    then its sampler converted and checked them again."""
    conversions: list[int] = []
    value_checks: list[int] = []

    def spy(module: Any, name: str, calls: list[int], counts: Callable[..., bool]) -> None:
        real = getattr(module, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            if counts(*args, **kwargs):
                calls.append(1)
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)

    def always(*args: Any, **kwargs: Any) -> bool:
        return True

    def with_values(raw: Any, slots: Any, priorities: Any = (), **kwargs: Any) -> bool:
        return len(priorities) > 0

    replay = _replay()
    _fill(replay)
    _, draw = replay.sample(4)
    for module in (steps_module, sampler_module):
        spy(module, "as_priorities", conversions, always)
    spy(steps_module, "check_finite_priorities", value_checks, always)
    spy(sampler_module, "check_slots", value_checks, with_values)
    spy(sampler_module, "check_write", value_checks, always)
    values = [0.5, 1.0, 2.0, 4.0]
    replay.update_priorities(draw.indices, torch.tensor(values))
    assert (len(conversions), len(value_checks)) == (1, 1)
    last = dict(zip(draw.indices.tolist(), values, strict=True))  # the last of duplicates wins
    assert replay.sampler.priorities[list(last)].tolist() == list(last.values())


@pytest.mark.parametrize("bad", [-1.0, np.inf, np.nan])
def test_the_one_check_still_refuses_a_bad_priority(bad: float) -> None:
    replay = _replay()
    _fill(replay)
    _, draw = replay.sample(3)
    before = replay.sampler.priorities
    with pytest.raises(ValueError, match="priorities should be finite and >= 0"):
        replay.update_priorities(draw.indices, [1.0, bad, 1.0])
    np.testing.assert_array_equal(replay.sampler.priorities, before)


def test_the_trusted_update_still_refuses_an_empty_slot() -> None:
    """Under n-step a slot holds a transition before its window completes: an update naming it
    with its generation is refused by the sampler, as before."""
    replay = PrioritizedReplay(8, (2,), obs_dtype=np.float32, n_step=3, seed=0)
    for t in range(2):
        replay.add(np.full(2, t), 0, 1.0, 0.9, np.full(2, t + 1))
    with pytest.raises(ValueError, match="slots that were added"):
        replay.update_priorities([0], [1.0], generations=[0])


@pytest.mark.parametrize("build", [PrioritizedSampler, DevicePrioritizedSampler], ids=["host", "device"])
def test_setting_alpha_rebuilds_the_distribution(build: Callable[..., Any]) -> None:
    """Both samplers take a new ``α`` (the DQN recipe anneals it through ``replay.sampler``)."""
    sampler = build(4, alpha=0.5, eps=0.0, size=0, seed=0)
    sampler.add([0, 1, 2, 3])
    sampler.update_priorities([0, 1, 2, 3], [1.0, 2.0, 3.0, 4.0])
    sampler.alpha = 1.0
    assert sampler.alpha == 1.0
    np.testing.assert_allclose(np.asarray(sampler.probabilities([0, 1, 2, 3])), [0.1, 0.2, 0.3, 0.4])
    with pytest.raises(ValueError, match="alpha"):
        sampler.alpha = 1e6  # 4.0 ** 1e6 overflows
    assert sampler.alpha == 1.0
    np.testing.assert_allclose(np.asarray(sampler.probabilities([3])), [0.4])
