"""The write-back guard alone (``prisample/replay/write_back.py``): the draw record, stale entries
dropped and counted, the exact path of ``generations=``, its state; the host guard (numpy) and the
device guard (tensors, here on the CPU) give the same answers on the same sequence."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from prisample.replay.write_back import DeviceWriteBackGuard, HostWriteBackGuard, WriteBackGuard


def _keep(guard: WriteBackGuard, items: Any, current: Any, generations: Any = None) -> np.ndarray:
    """``guard.keep`` of numpy input, in the guard's own arrays, as a numpy mask."""
    if isinstance(guard, DeviceWriteBackGuard):
        gen = None if generations is None else torch.as_tensor(generations)
        return guard.keep(torch.as_tensor(items), torch.as_tensor(current), gen).numpy()
    return np.asarray(guard.keep(np.asarray(items), np.asarray(current), generations))


def _record(guard: WriteBackGuard, items: Any, generations: Any) -> None:
    if isinstance(guard, DeviceWriteBackGuard):
        guard.record(torch.as_tensor(items), torch.as_tensor(generations))
    else:
        guard.record(np.asarray(items), np.asarray(generations))


def _guards() -> list[WriteBackGuard]:
    return [HostWriteBackGuard(6), DeviceWriteBackGuard(6, torch.device("cpu"))]


@pytest.mark.parametrize("guard", _guards(), ids=["host", "device"])
def test_an_update_lands_only_where_the_item_still_holds_the_generation_drawn(guard: WriteBackGuard) -> None:
    _record(guard, [0, 1, 2], [10, 11, 12])
    # item 0 unchanged, item 1 rewritten (generation 17), item 2 emptied (-1), item 3 never
    # drawn, item 5 never drawn and empty (its -1 equals the record's -1: still no item to update)
    keep = _keep(guard, [0, 1, 2, 3, 5], [10, 17, -1, 3, -1])
    assert keep.tolist() == [True, False, False, False, False]
    assert guard.dropped == 4
    np.testing.assert_array_equal(guard.last_drawn(np.array([0, 1, 2, 3])), [10, 11, 12, -1])


@pytest.mark.parametrize("guard", _guards(), ids=["host", "device"])
def test_generations_passed_in_decide_instead_of_the_record(guard: WriteBackGuard) -> None:
    """The exact path: an update that lags behind a later draw of the rewritten slot is told
    apart by the generation it came with, not by the record (which names the newer draw)."""
    _record(guard, [4], [4])
    _record(guard, [4], [10])  # the slot rewritten and drawn again: the record says 10
    assert _keep(guard, [4], [10]).tolist() == [True]  # by the record: looks fresh
    assert _keep(guard, [4], [10], generations=np.array([4])).tolist() == [False]  # exact: stale
    assert guard.dropped == 1
    with pytest.raises(ValueError, match=r"generations should have one value per index \(1\), but got 2"):
        _keep(guard, [4], [10], generations=np.array([4, 4]))
    assert guard.dropped == 1  # a rejected update counts nothing


@pytest.mark.parametrize("guard", _guards(), ids=["host", "device"])
def test_the_state_round_trips_and_is_checked(guard: WriteBackGuard) -> None:
    _record(guard, [1, 5], [7, 9])
    _keep(guard, [1], [8])
    drawn, dropped = guard.record_state(), guard.dropped
    assert drawn.tolist() == [-1, 7, -1, -1, -1, 9] and dropped == 1
    drawn[0] = 123  # a copy: the guard's record unchanged
    assert guard.last_drawn(np.array([0])).tolist() == [-1]
    other = (
        type(guard)(6)
        if isinstance(guard, HostWriteBackGuard)
        else DeviceWriteBackGuard(6, torch.device("cpu"))
    )
    other.load(other.check_record(guard.record_state()), guard.dropped)
    assert other.record_state().tolist() == guard.record_state().tolist() and other.dropped == 1
    with pytest.raises(ValueError, match=r"state_dict drawn should be int64\[6\], but got int32\[6\]"):
        other.check_record(np.zeros(6, dtype=np.int32))
    with pytest.raises(ValueError, match=r"should be int64\[6\], but got int64\[5\]"):
        other.check_record(np.zeros(5, dtype=np.int64))
    other.dropped = 0
    assert other.dropped == 0


def test_the_host_and_device_guards_agree_on_a_random_sequence() -> None:
    rng = np.random.default_rng(0)
    host, device = _guards()
    assert isinstance(device, DeviceWriteBackGuard)
    generation = np.arange(6, dtype=np.int64)  # what each item holds now
    for _ in range(300):
        op = rng.random()
        items = rng.integers(0, 6, int(rng.integers(1, 5)))
        if op < 0.3:
            _record(host, items, generation[items])
            _record(device, items, generation[items])
        elif op < 0.5:
            rewritten = rng.integers(0, 6)
            generation[rewritten] = -1 if rng.random() < 0.2 else generation.max() + 1
        else:
            expected = None
            if rng.random() < 0.4:
                expected = generation[items] - rng.integers(0, 2, items.shape[0])
            current = generation[items]
            assert (
                _keep(host, items, current, expected).tolist()
                == _keep(device, items, current, expected).tolist()
            )
            # the device guard's host path (host indices on a device replay) answers alike
            assert (
                host.keep_host(items, current, expected).tolist()
                == device.keep_host(items, current, expected).tolist()
            )
        assert host.dropped == device.dropped
        np.testing.assert_array_equal(host.record_state(), device.record_state())
    assert host.dropped > 0


def test_the_device_guard_records_and_checks_with_tensor_operations_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its draw-time record and its update-time check never read a value back to the host (a
    CUDA graph captures them): ``item()``, ``tolist()``, ``numpy()`` and ``bool()`` of a tensor
    are refused while they run."""
    guard = DeviceWriteBackGuard(6, torch.device("cpu"))

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a host read")

    for name in ("item", "tolist", "numpy", "__bool__"):
        monkeypatch.setattr(torch.Tensor, name, refused)
    items = torch.tensor([0, 3])
    guard.record(items, torch.tensor([5, 6]))
    keep = guard.keep(items, torch.tensor([5, 7]))
    monkeypatch.undo()
    assert keep.tolist() == [True, False] and guard.dropped == 1
