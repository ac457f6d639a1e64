"""Correction factors as their own piece (prisample/methods/offpolicy_corrections.py) over
the core sampler.

Checkpoints written before the split load into today's classes and continue bit for bit; the
public backend methods the piece reads (rank segments, the proportional minimum priority, the
shared raw array) agree with brute force; and the core sampler knows nothing of the factors.
"""

from __future__ import annotations

import ast
import copy
import itertools
import pickle
from pathlib import Path

import numpy as np
import pytest

from prisample import CorrectedSampler, PrioritizedSampler
from prisample.backends import ProportionalBackend
from prisample.rank import RankBackend
from tests.reference import BACKENDS, assert_draws_equal, assert_same, power_law
from tests.sampler_states import CAPACITY, CASES, build, continuation, load

ROOT = Path(__file__).resolve().parent.parent
SAVED = load()
ULPS = 1e-13
"""Relative tolerance of recorded floating-point values: a few units in the last place of a float64."""


def assert_continues(sampler: PrioritizedSampler, name: str) -> None:
    """``sampler`` draws, weighs and ends exactly as the saved sampler did after its checkpoint: the
    same slots; probabilities and weights to a few ulps, the last bit of ``x**α`` and of a sum being
    the CPU's and its math library's (the recording's Intel Xeon and an AMD EPYC differ there)."""
    expected = SAVED[name][1]
    got = continuation(sampler, CASES[name][5])
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert got[key].dtype == value.dtype, key
        if value.dtype.kind == "f":
            np.testing.assert_allclose(got[key], value, rtol=ULPS, atol=0, err_msg=f"{name}: {key}")
        else:
            np.testing.assert_array_equal(got[key], value, err_msg=f"{name}: {key}")


# ------------------------------------------------------------------------------------------------
# checkpoints written before the split
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CASES))
def test_old_checkpoints_continue_bit_for_bit(name):
    """A state saved by ``PrioritizedSampler`` before the split (commit ee0da2f; version 3, with
    and without factors) loads into a :class:`CorrectedSampler`, and one without factors into a
    :class:`PrioritizedSampler` too; both then draw, weigh and write exactly as the saved one did."""
    state, _ = SAVED[name]
    backend, corrected = CASES[name][0], CASES[name][5]
    classes = [CorrectedSampler] if corrected else [PrioritizedSampler, CorrectedSampler]
    for cls in classes:
        target = cls(CAPACITY, backend=backend, seed=99)
        target.check_state_dict(copy.deepcopy(state))
        target.load_state_dict(copy.deepcopy(state))
        assert_same(target.state_dict(), state)
        assert_continues(target, name)


@pytest.mark.parametrize("name", list(CASES))
def test_today_writes_the_same_checkpoints(name):
    """The same operations today give the very states saved before the split (one format)."""
    assert_same(build(name).state_dict(), SAVED[name][0])


@pytest.mark.parametrize("name", [n for n in CASES if CASES[n][5]])
def test_core_sampler_refuses_factors_and_changes_nothing(name):
    """Factors are the corrected sampler's: the core refuses them by name and stays as it was."""
    state, _ = SAVED[name]
    target = PrioritizedSampler(CAPACITY, backend=CASES[name][0], alpha=0.5, size=5, seed=3)
    target.update_priorities([0, 1], [2.0, 0.5])
    before, twin = target.state_dict(), copy.deepcopy(target)
    for call in (target.check_state_dict, target.load_state_dict):
        with pytest.raises(ValueError, match=r"corrections.*CorrectedSampler"):
            call(copy.deepcopy(state))
    assert_same(target.state_dict(), before)
    assert_draws_equal(target.sample(4), twin.sample(4))


@pytest.mark.parametrize("backend", BACKENDS)
def test_plain_state_drops_factors_of_a_corrected_sampler(backend):
    """Loading a state without factors (``corrections=None``, or version 1) into a corrected
    sampler that holds some leaves it without: weights as the core sampler's."""
    plain = PrioritizedSampler(6, backend=backend, alpha=0.7, beta=0.6, seed=1)
    plain.update_priorities(np.arange(6), [3.0, 1.0, 0.5, 2.0, 0.25, 1.5])
    old = {k: v for k, v in copy.deepcopy(plain.state_dict()).items() if k != "corrections"}
    old["version"] = 1
    if backend == "rank":
        old["backend_state"] = {}
    for state in (plain.state_dict(), old):
        target = CorrectedSampler(6, backend=backend, seed=4)
        target.set_corrections([0, 1], [5.0, 0.0])
        target.load_state_dict(copy.deepcopy(state))
        assert target.state_dict()["corrections"] is None
        np.testing.assert_array_equal(target.corrections, np.ones(6))
        np.testing.assert_array_equal(target.weights(np.arange(6)), plain.weights(np.arange(6)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_copies_and_pickles_keep_the_factors(backend):
    s = CorrectedSampler(10, backend=backend, alpha=0.8, beta=0.7, size=8, seed=2)
    s.update_priorities(np.arange(8), np.linspace(0.1, 3.0, 8))
    s.set_corrections(np.arange(8), np.linspace(2.0, 0.2, 8))
    s.sample(3)
    twins = [copy.deepcopy(s), pickle.loads(pickle.dumps(s))]
    for twin in twins:
        assert twin.lock is not s.lock
    for k in (1, 5, 9):
        draws = [s.sample(k)] + [t.sample(k) for t in twins]
        for draw in draws[1:]:
            assert_draws_equal(draws[0], draw)


def test_factors_cost_nothing_until_set_and_are_counted_after():
    s = CorrectedSampler(64, alpha=0.6, seed=0)
    plain = PrioritizedSampler(64, alpha=0.6, seed=0)
    assert s.nbytes == plain.nbytes
    assert s.state_dict()["corrections"] is None
    assert_same(s.state_dict(), plain.state_dict())
    s.set_corrections([0], [2.0])
    # factors, log factors, log(p + ε) (float64 each) and the arg-max index (int32 per node)
    assert s.nbytes - plain.nbytes >= 3 * 64 * 8 + 64 * 4


# ------------------------------------------------------------------------------------------------
# the public backend methods the piece reads, against brute force
# ------------------------------------------------------------------------------------------------


def brute_rank_order(raw: np.ndarray, stamps: np.ndarray) -> list[int]:
    """Filled slots by priority descending, ties to the newest write (the largest stamp)."""
    filled = [int(i) for i in np.flatnonzero(~np.isnan(raw))]
    return sorted(filled, key=lambda i: (-raw[i], -stamps[i]))


@pytest.mark.parametrize("n", [1, 2, 7, 300, 1500, 5000])
@pytest.mark.parametrize("alpha", [0.0, 0.7, 1.0])
def test_rank_segments_against_brute_force(n, alpha):
    """``RankBackend.segments()``: contiguous rank ranges covering ``0..N``, a density per
    segment that does not grow (but for rounding), is what ``probabilities`` reports for every
    slot of the segment, and gives each segment its exact power-law mass ``Σ_{r∈seg} r^-α /
    Σ_{r≤N} r^-α``; the slots of a segment's ranks are those of the brute-force order."""
    rng = np.random.default_rng(n)
    s = PrioritizedSampler(n + 3, backend="rank", alpha=alpha, size=n, seed=0)
    s.update_priorities(np.arange(n), rng.choice([0.5, 1.0, 2.0, 7.5], size=n))  # many ties
    s.remove(np.arange(min(2, n - 1)))  # holes
    backend = s.backend
    assert isinstance(backend, RankBackend)
    starts, density = backend.segments()
    count = s.size
    assert starts[0] == 0 and starts[-1] == count and np.all(np.diff(starts) > 0)
    assert density.shape[0] == starts.shape[0] - 1 and np.all(np.diff(density) <= 1e-12 * density[1:])
    law = power_law(count, alpha)
    masses = np.array([law[a:b].sum() for a, b in itertools.pairwise(starts)])
    np.testing.assert_allclose(density * np.diff(starts), masses, rtol=1e-9)
    order = brute_rank_order(s.priorities, backend.stamps)
    for segment in range(density.shape[0]):
        ranks = np.arange(starts[segment], starts[segment + 1])
        slots = backend.order.select(ranks)
        assert slots.tolist() == order[starts[segment] : starts[segment + 1]]
        np.testing.assert_array_equal(s.probabilities(slots), density[segment])
    starts[0], density[0] = 99, -1.0  # copies: the backend's partition is untouched
    assert backend.segments()[0][0] == 0 and backend.segments()[1][0] > 0


def test_rank_segments_follow_the_memory():
    """The segments are those of the current ``N`` and ``α`` (the cut is refreshed on demand)."""
    s = PrioritizedSampler(4000, backend="rank", alpha=0.7, size=0, seed=0)
    backend = s.backend
    assert isinstance(backend, RankBackend)
    assert backend.segments()[0].tolist() == [0]
    for size in (1, 10, 1025, 2600, 4000):
        s.add(np.arange(s.size, size))
        starts, density = backend.segments()
        assert starts[-1] == size
        np.testing.assert_allclose(float((density * np.diff(starts)).sum()), 1.0, rtol=1e-12)
    s.alpha = 0.3
    np.testing.assert_allclose(backend.segments()[1][0], s.probabilities([s.size - 1]), rtol=0)


@pytest.mark.parametrize("eps", [0.0, 1e-6])
def test_proportional_min_priority_against_brute_force(eps):
    """``ProportionalBackend.min_priority()``: the smallest raw priority of a filled slot (NaN
    when none is), through random adds, updates (zeros included) and removals."""
    rng = np.random.default_rng(5)
    n = 37
    s = PrioritizedSampler(n, alpha=0.9, eps=eps, size=0, seed=0)
    backend = s.backend
    assert isinstance(backend, ProportionalBackend)
    assert np.isnan(backend.min_priority())
    for _ in range(300):
        op = rng.integers(3)
        slots = rng.integers(0, n, size=int(rng.integers(1, 6)))
        if op == 0:
            s.add(slots)
        elif op == 1 and s.size:
            filled = np.flatnonzero(~np.isnan(s.priorities))
            chosen = rng.choice(filled, size=min(4, filled.shape[0]))
            s.update_priorities(chosen, rng.choice([0.0, 0.3, 1.0, 4.0], size=chosen.shape[0]))
        elif op == 2:
            s.remove(slots)
        raw = s.priorities
        if s.size:
            assert backend.min_priority() == np.nanmin(raw)
            assert backend.max_priority() == np.nanmax(raw)
        else:
            assert np.isnan(backend.min_priority())


@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_raw_is_the_samplers_priorities(backend):
    """``Backend.raw``: the sampler's raw priorities, shared (NaN on empty slots), also after a load."""
    s = PrioritizedSampler(6, backend=backend, size=4, seed=0)
    s.update_priorities([0, 3], [2.5, 0.0])
    np.testing.assert_array_equal(s.backend.raw, s.priorities)
    other = PrioritizedSampler(6, backend=backend, seed=1)
    other.load_state_dict(s.state_dict())
    other.remove([1])
    np.testing.assert_array_equal(other.backend.raw, other.priorities)


@pytest.mark.parametrize("backend", ["proportional", "rank", "uniform"])
def test_memory_normaliser_with_zero_priorities_against_brute_force(backend):
    """ε = 0 with zero priorities (probability 0 under proportional draws): the corrected weights
    equal ``c_i (N·P(i))^-β / max_j c_j (N·P(j))^-β`` over the slots with ``P(j) > 0``."""
    rng = np.random.default_rng(11)
    n = 200
    s = CorrectedSampler(n, alpha=0.8, beta=0.6, eps=0.0, backend=backend, seed=0)
    priorities = np.where(rng.random(n) < 0.3, 0.0, rng.exponential(size=n))
    c = rng.uniform(0.0, 3.0, size=n)
    c[np.argmax(priorities == 0.0)] = 50.0  # the largest factor on a slot that is never drawn
    s.update_priorities(np.arange(n), priorities)
    s.set_corrections(np.arange(n), c)
    p = s.probabilities(np.arange(n))
    drawable = p > 0.0
    raw = np.zeros(n)
    raw[drawable] = c[drawable] * (n * p[drawable]) ** -0.6
    np.testing.assert_allclose(s.weights(np.arange(n)), raw / raw.max(), rtol=1e-5)


# ------------------------------------------------------------------------------------------------
# the seams
# ------------------------------------------------------------------------------------------------


def _prisample_imports(module: str) -> set[str]:
    tree = ast.parse((ROOT / "prisample" / f"{module}.py").read_text())
    return {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("prisample")
    }


def test_core_sampler_knows_no_backend_internals() -> None:
    """``sampler.py`` imports only the backends, the weights and the validation (directly, or
    through its checkpoint format, ``_sampler_state.py``, which imports nothing else), and no
    module reads a backend's private structures (the rank partition, the proportional tree)."""
    core = {"prisample._validation", "prisample.backends", "prisample.weights"}
    assert _prisample_imports("sampler") == core | {"prisample._sampler_state"}
    assert _prisample_imports("_sampler_state") == core
    for path in (ROOT / "prisample").rglob("*.py"):
        if path.name in ("rank.py", "backends.py", "trees.py"):
            continue
        text = path.read_text()
        for private in ("_backend.tree", "._density", "._starts", "._anchor_"):
            assert private not in text, f"{path.name} reads {private}"
