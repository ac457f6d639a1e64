"""Validation at the public boundary: errors name the argument, and a rejected call changes nothing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from prisample import PrioritizedSampler
from tests.reference import BACKENDS, assert_draws_equal, assert_same

# ------------------------------------------------------------------------------------------------
# constructor
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capacity", "kwargs", "error", "name"),
    [
        (0, {}, ValueError, "capacity"),
        (-3, {}, ValueError, "capacity"),
        (2.5, {}, TypeError, "capacity"),
        (True, {}, TypeError, "capacity"),
        ("4", {}, TypeError, "capacity"),
        (4, {"alpha": -0.1}, ValueError, "alpha"),
        (4, {"alpha": float("nan")}, ValueError, "alpha"),
        (4, {"alpha": float("inf")}, ValueError, "alpha"),
        (4, {"alpha": "0.6"}, TypeError, "alpha"),
        (4, {"alpha": 1e9}, ValueError, "alpha"),  # (p + ε)^α leaves float64's range
        (4, {"eps": -1e-6}, ValueError, "eps"),
        (4, {"eps": float("nan")}, ValueError, "eps"),
        (4, {"beta": -0.1}, ValueError, "beta"),
        (4, {"beta": 1.01}, ValueError, "beta"),
        (4, {"beta": float("nan")}, ValueError, "beta"),
        (4, {"beta": "0.4"}, TypeError, "beta"),
        (4, {"backend": "sumtree"}, ValueError, "backend"),
        (4, {"weight_norm": "max"}, ValueError, "weight_norm"),
        (4, {"size": -1}, ValueError, "size"),
        (4, {"size": 5}, ValueError, "size"),
        (4, {"size": 1.5}, TypeError, "size"),
        (4, {"batch_size": 0}, ValueError, "batch_size"),
        (4, {"batch_size": 2.0}, TypeError, "batch_size"),
        (4, {"num_samples": 0}, ValueError, "num_samples"),
    ],
)
def test_constructor_rejects_bad_arguments(capacity, kwargs, error, name):
    with pytest.raises(error, match=name):
        PrioritizedSampler(capacity, **kwargs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_constructor_defaults(backend):
    s = PrioritizedSampler(5, backend=backend, seed=0)
    assert s.size == 5 and len(s) == 5
    assert s.alpha == 0.6 and s.beta == 0.4 and s.eps == 1e-6
    assert s.max_priority == 1.0
    np.testing.assert_array_equal(s.priorities, np.ones(5))
    empty = PrioritizedSampler(5, backend=backend, size=0, seed=0)
    assert empty.size == 0 and len(empty) == 0
    assert np.all(np.isnan(empty.priorities))
    assert empty.max_priority == 1.0
    assert len(PrioritizedSampler(5, backend=backend, num_samples=12, seed=0)) == 12


# ------------------------------------------------------------------------------------------------
# methods
# ------------------------------------------------------------------------------------------------


def sampler(backend: str = "proportional", seed: int = 0) -> PrioritizedSampler:
    """Capacity 6 with slots 0..3 valid at priorities 0.5, 2, 1, 0; slots 4 and 5 never added."""
    s = PrioritizedSampler(6, backend=backend, alpha=0.7, size=4, seed=seed)
    s.update_priorities([0, 1, 2, 3], [0.5, 2.0, 1.0, 0.0])
    return s


BAD_CALLS = {
    "sample k=0": (ValueError, "k", lambda s: s.sample(0)),
    "sample k=-2": (ValueError, "k", lambda s: s.sample(-2)),
    "sample k=1.5": (TypeError, "k", lambda s: s.sample(1.5)),
    "sample k='2'": (TypeError, "k", lambda s: s.sample("2")),
    "sample k=True": (TypeError, "k", lambda s: s.sample(True)),
    "add out of range": (ValueError, "indices", lambda s: s.add([1, 6])),
    "add negative": (ValueError, "indices", lambda s: s.add([-1])),
    "add floats": (TypeError, "indices", lambda s: s.add([1.0])),
    "add bools": (TypeError, "indices", lambda s: s.add(np.array([True]))),
    "add 2-D": (ValueError, "indices", lambda s: s.add([[0, 1]])),
    "remove out of range": (ValueError, "indices", lambda s: s.remove([0, 99])),
    "update float indices": (TypeError, "indices", lambda s: s.update_priorities([0.0], [1.0])),
    "update out of range": (ValueError, "indices", lambda s: s.update_priorities([0, 6], [1.0, 1.0])),
    "update never added": (ValueError, "indices", lambda s: s.update_priorities([0, 4], [3.0, 3.0])),
    "update removed": (ValueError, "indices", lambda s: (s.remove([2]), s.update_priorities([2], [1.0]))),
    "update one NaN": (ValueError, "priorities", lambda s: s.update_priorities([0, 1, 2], [5, np.nan, 3])),
    "update inf": (ValueError, "priorities", lambda s: s.update_priorities([1], [np.inf])),
    "update negative": (ValueError, "priorities", lambda s: s.update_priorities([0, 1], [1.0, -0.5])),
    "update too few": (ValueError, "priorities", lambda s: s.update_priorities([0, 1], [1.0])),
    "update too many": (ValueError, "priorities", lambda s: s.update_priorities([0], [1.0, 2.0])),
    "update strings": (TypeError, "priorities", lambda s: s.update_priorities([0], ["a"])),
    "update torch NaN": (
        ValueError,
        "priorities",
        lambda s: s.update_priorities(torch.tensor([0, 1]), torch.tensor([1.0, float("nan")])),
    ),
    "probabilities never added": (ValueError, "indices", lambda s: s.probabilities([5])),
    "weights never added": (ValueError, "indices", lambda s: s.weights([0, 4])),
    "alpha negative": (ValueError, "alpha", lambda s: setattr(s, "alpha", -1.0)),
    "alpha NaN": (ValueError, "alpha", lambda s: setattr(s, "alpha", float("nan"))),
    "alpha string": (TypeError, "alpha", lambda s: setattr(s, "alpha", "1")),
    "beta too large": (ValueError, "beta", lambda s: setattr(s, "beta", 2.0)),
    "beta 0-d tensor too large": (ValueError, "beta", lambda s: setattr(s, "beta", torch.tensor(1.5))),
    "alpha 1-d tensor": (TypeError, "alpha", lambda s: setattr(s, "alpha", torch.tensor([0.5]))),
    "beta bool tensor": (TypeError, "beta", lambda s: setattr(s, "beta", torch.tensor(True))),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("call", list(BAD_CALLS))
def test_rejected_call_names_argument_and_changes_nothing(backend, call):
    """Bad input raises naming the argument; priorities, valid slots, RNG and later draws are as
    if the call had never been made."""
    error, name, bad = BAD_CALLS[call]
    s, twin = sampler(backend), sampler(backend)
    if call == "update removed":
        twin.remove([2])
    before = s.state_dict() if call != "update removed" else twin.state_dict()
    with pytest.raises(error, match=name):
        bad(s)
    assert_same(s.state_dict(), before)
    np.testing.assert_array_equal(s.priorities, twin.priorities)
    assert s.size == twin.size and s.max_priority == twin.max_priority
    for j in range(6):
        assert_draws_equal(s.sample(3), twin.sample(3))
        s.update_priorities([0], [float(j)])
        twin.update_priorities([0], [float(j)])
        assert_draws_equal(s.sample(2), twin.sample(2))


def test_alpha_and_beta_take_0d_tensors_and_arrays_as_torchrl_schedulers_set_them():
    """TorchRL's parameter schedulers set ``alpha`` and ``beta`` as 0-d tensors, which the setters
    (and the constructor) refused with ``TypeError``: they hold the number such a tensor or a 0-d
    array holds, as a float.  A ``β`` above 1 is refused by name, pointing at the cap."""
    s = PrioritizedSampler(4, alpha=torch.tensor(1.0), beta=torch.tensor(0.1), seed=0)
    assert (s.alpha, s.beta) == (1.0, pytest.approx(0.1))
    s.update_priorities([0, 1, 2, 3], [0.5, 1.0, 2.0, 4.0])
    s.alpha = torch.tensor(0.5, dtype=torch.float64)
    s.beta = torch.tensor(0.25)
    assert type(s.alpha) is float and type(s.beta) is float and (s.alpha, s.beta) == (0.5, 0.25)
    twin = PrioritizedSampler(4, alpha=0.5, beta=0.25, seed=0)
    twin.update_priorities([0, 1, 2, 3], [0.5, 1.0, 2.0, 4.0])
    np.testing.assert_array_equal(s.probabilities([0, 1, 2, 3]), twin.probabilities([0, 1, 2, 3]))
    assert_draws_equal(s.sample(3), twin.sample(3))
    s.alpha, s.beta = np.array(0.7), np.array(1)
    assert (s.alpha, s.beta) == (0.7, 1.0)
    with pytest.raises(
        ValueError, match=r"beta should be in \[0, 1\] \(.*max_value=1\.0\), but got beta=1\.5"
    ):
        s.beta = torch.tensor(1.5)
    assert s.beta == 1.0


def test_update_with_one_nan_changes_no_priority():
    s = sampler()
    before = s.priorities
    with pytest.raises(ValueError, match="priorities"):
        s.update_priorities([0, 1, 2, 3], [9.0, 9.0, np.nan, 9.0])
    np.testing.assert_array_equal(s.priorities, before)
    np.testing.assert_allclose(s.probabilities([0, 1, 2, 3]), sampler().probabilities([0, 1, 2, 3]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_sample_from_empty_sampler_raises(backend):
    s = PrioritizedSampler(3, backend=backend, size=0, seed=0)
    with pytest.raises(ValueError, match="empty"):
        s.sample(1)
    s.add([1])
    s.remove([1])
    with pytest.raises(ValueError, match="empty"):
        s.sample(1)


def test_sample_accepts_numpy_integers():
    s = sampler()
    assert len(s.sample(np.int64(3))) == 3
    assert len(s.sample(np.int32(1))) == 1


def test_overflowing_priority_is_rejected_and_changes_nothing():
    """``(p + ε)^α`` must stay a finite float: ``1e200^2`` is rejected, not stored as inf."""
    s = PrioritizedSampler(4, alpha=2.0, seed=0)
    before = s.state_dict()
    with pytest.raises(ValueError, match="priorities"):
        s.update_priorities([0, 1], [1.0, 1e200])
    assert_same(s.state_dict(), before)


def test_alpha_that_overflows_the_largest_priority_is_a_value_error():
    """Setting ``α`` so that ``(max p + ε)^α`` overflows raises ``ValueError`` naming alpha (not
    ``OverflowError``) and keeps the old ``α``."""
    s = PrioritizedSampler(4, alpha=0.5, eps=1.0, seed=0)
    s.update_priorities([0], [10.0])
    before = s.state_dict()
    with pytest.raises(ValueError, match="alpha"):
        s.alpha = 5000.0
    assert s.alpha == 0.5
    assert_same(s.state_dict(), before)


@pytest.mark.parametrize("backend", BACKENDS)
def test_update_accepts_numpy_torch_and_lists(backend):
    s = PrioritizedSampler(6, backend=backend, seed=0)
    s.update_priorities([0, 1], [0.5, 1.5])
    s.update_priorities(np.array([2, 3], dtype=np.int32), np.array([2.5, 3.5], dtype=np.float32))
    s.update_priorities(np.array([4], dtype=np.uint8), np.array([4.5]))
    loss = torch.tensor([5.5], dtype=torch.float32, requires_grad=True) * 1.0
    s.update_priorities(torch.tensor([5]), loss)
    s.update_priorities(np.int64(0), 0.25)  # scalars
    np.testing.assert_allclose(s.priorities, [0.25, 1.5, 2.5, 3.5, 4.5, 5.5])
    s.update_priorities([], [])  # empty update is a no-op
    s.update_priorities(np.array([], dtype=np.int64), np.array([]))
    np.testing.assert_allclose(s.priorities, [0.25, 1.5, 2.5, 3.5, 4.5, 5.5])


@pytest.mark.parametrize("backend", BACKENDS)
def test_duplicate_indices_last_write_wins(backend):
    s = PrioritizedSampler(4, backend=backend, alpha=1.0, seed=0)
    s.update_priorities([2, 1, 2, 2], [7.0, 3.0, 0.5, 4.0])
    np.testing.assert_array_equal(s.priorities, [1.0, 3.0, 4.0, 1.0])
    assert s.max_priority == 4.0
    if backend == "proportional":
        total = 1.0 + 3.0 + 4.0 + 1.0 + 4 * s.eps
        assert s.probabilities([2])[0] == pytest.approx((4.0 + s.eps) / total, rel=1e-9)
    s.add([3, 3])
    s.remove([1, 1])
    assert s.size == 3
    np.testing.assert_array_equal(s.priorities, [1.0, np.nan, 4.0, 4.0])


# ------------------------------------------------------------------------------------------------
# priorities of shape (k, 1): one behaviour at every update_priorities
# ------------------------------------------------------------------------------------------------


def _column_entry_points() -> dict[str, Any]:
    """Each entry point that takes new priorities, as ``update(indices, priorities) -> state``."""
    from prisample.device_sampler import DevicePrioritizedSampler
    from prisample.diagnostics import Diagnostics
    from prisample.methods import OnlineBatchSelection, StalenessBonus, predecessor_boost, pser_priorities
    from prisample.replay import PrioritizedReplay

    def on_sampler(idx: Any, p: Any) -> Any:
        s = sampler()
        s.update_priorities(idx, p)
        return s.priorities

    def on_replay(idx: Any, p: Any) -> Any:
        replay = PrioritizedReplay(4, (1,), obs_dtype=np.float32, seed=0)
        for t in range(4):
            replay.add([t], 0, 0.0, 1.0, [t + 1])
        replay.sample(4)
        replay.update_priorities(idx, p)
        return replay.sampler.priorities

    def on_device_sampler(idx: Any, p: Any) -> Any:
        s = DevicePrioritizedSampler(6, size=4, seed=0, device="cpu")
        s.update_priorities(idx, p)
        return s.priorities

    def on_diagnostics(idx: Any, p: Any) -> Any:
        diag = Diagnostics(6)
        diag.on_update(idx, p)
        return diag._last_error

    def on_staleness(idx: Any, p: Any) -> Any:
        return StalenessBonus(6, rate=0.5).update(idx, p)

    def on_online_selection(idx: Any, p: Any) -> Any:
        s = PrioritizedSampler(6, alpha=1.0, eps=0.0, beta=0.0, seed=0)
        OnlineBatchSelection(s, selection_pressure=4.0).update(idx, p)
        return s.priorities

    chain, current = np.array([-1, 0, 1, 2, 3, 4]), np.ones(6)

    def on_predecessor(idx: Any, p: Any) -> Any:
        return np.concatenate(predecessor_boost(idx, p, chain, current))

    def on_pser(idx: Any, p: Any) -> Any:
        return np.concatenate(pser_priorities(idx, p, chain, current, decay=0.5, window=2))

    return {
        "sampler": on_sampler,
        "replay": on_replay,
        "device sampler": on_device_sampler,
        "diagnostics": on_diagnostics,
        "staleness": on_staleness,
        "online selection": on_online_selection,
        "predecessor boost": on_predecessor,
        "pser": on_pser,
    }


@pytest.mark.parametrize("entry", list(_column_entry_points()))
def test_every_update_takes_a_column_of_priorities_and_refuses_other_shapes(entry: str) -> None:
    """Priorities of shape ``(k, 1)`` (what ``model(x)`` gives for one output per item) were refused
    by the sampler, the replay and the device sampler ("should be one-dimensional", no fix named)
    while the SB3 adapter and the methods took them: every entry point now reads them as ``(k,)``,
    through the one conversion, and refuses any other shape with the same message."""
    update = _column_entry_points()[entry]
    idx, flat = np.array([2, 0, 3]), np.array([0.25, 3.0, 1.5])
    expected = update(idx, flat)
    np.testing.assert_array_equal(update(idx, flat[:, None]), expected)
    np.testing.assert_array_equal(update(torch.from_numpy(idx), torch.from_numpy(flat)[:, None]), expected)
    for shape in ((3, 2), (1, 3), (3, 1, 1)):
        with pytest.raises(ValueError, match=r"should be one-dimensional, of shape \(k,\) or \(k, 1\)"):
            update(idx, np.ones(shape))
