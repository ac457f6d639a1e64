"""Several threads on one sampler: each public call is atomic (DESIGN.md, "Semantics to keep").

Actor threads add, remove, re-prioritise and re-weight slots while a learner thread draws and
updates, for a fixed number of operations each, with the interpreter switching threads as often as
it can (``sys.setswitchinterval(1e-6)``).  Afterwards the sampler must be exactly what its final
priorities say: ``P(i)`` and the weights of every filled slot equal the naive reference model's,
its structures equal those of a sampler rebuilt from its state (identical draws), and the β step
counter equals the number of draws made.  During the run no draw may name an empty slot or one of
probability 0, and no call may raise.  Without the lock the rank and greedy samplers corrupt their
order or raise within a few hundred operations.
"""

from __future__ import annotations

import copy
import pickle
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from prisample import CorrectedSampler, LinearSchedule, PrioritizedSampler
from prisample.ledger import DrawLedger
from tests.reference import BACKENDS, ReferenceSampler, assert_draws_equal, clone

CAPACITY = 64
STABLE = 16  # slots [0, STABLE) stay filled: anyone may update them
ACTORS = 3  # actor a owns slots STABLE + a*OWN .. STABLE + (a+1)*OWN - 1: adds and removes them
OWN = (CAPACITY - STABLE) // ACTORS
ACTOR_OPS = 600
LEARNER_OPS = 600
JOIN_TIMEOUT = 60.0  # seconds; a thread still alive after that is a deadlock


@contextmanager
def racy() -> Iterator[None]:
    """Switch threads as often as CPython allows, so that unguarded sequences interleave."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def run_threads(bodies: list[Callable[[], None]]) -> None:
    """Start ``bodies`` together, join each with a timeout, and re-raise the first failure."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(bodies))

    def wrap(body: Callable[[], None]) -> Callable[[], None]:
        def target() -> None:
            try:
                start.wait()
                body()
            except BaseException as error:  # reported by the main thread
                errors.append(error)

        return target

    threads = [threading.Thread(target=wrap(b), daemon=True) for b in bodies]
    with racy():
        for t in threads:
            t.start()
        for t in threads:
            t.join(JOIN_TIMEOUT)
    assert not any(t.is_alive() for t in threads), (
        f"a thread is still running after {JOIN_TIMEOUT} s: deadlock"
    )
    if errors:
        raise errors[0]


class Counter:
    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()

    def bump(self) -> None:
        with self._lock:
            self.value += 1


def check_draw(draw: Any, sampler: PrioritizedSampler, k: int) -> None:
    assert draw.indices.shape == (k,) and draw.weights.shape == (k,)
    assert np.all((draw.indices >= 0) & (draw.indices < sampler.capacity)), draw.indices
    if sampler.backend_name != "greedy":  # greedy takes the k largest, past the ties of P > 0
        assert np.all(draw.probabilities > 0.0), f"drew a slot of probability 0: {draw}"
    assert np.all(np.isfinite(draw.weights) & (draw.weights >= 0.0)), draw.weights


def actor(sampler: PrioritizedSampler, a: int, corrections: bool, draws: Counter) -> Callable[[], None]:
    rng = np.random.default_rng(100 + a)
    own = np.arange(STABLE + a * OWN, STABLE + (a + 1) * OWN)
    filled: set[int] = set()  # this actor's filled slots: nobody else writes them

    def body() -> None:
        for _ in range(ACTOR_OPS):
            op = rng.integers(8)
            if op <= 1:
                slots = rng.choice(own, size=int(rng.integers(1, 4)))
                if isinstance(sampler, CorrectedSampler):
                    sampler.add(slots, corrections=rng.uniform(0.0, 3.0, slots.shape[0]))
                else:
                    sampler.add(slots)
                filled.update(slots.tolist())
            elif op == 2:
                slots = rng.choice(own, size=int(rng.integers(1, 3)))
                sampler.remove(slots)
                filled.difference_update(slots.tolist())
            elif op <= 4:
                slots = np.concatenate([rng.integers(0, STABLE, 2), np.array(sorted(filled))[:3]])
                sampler.update_priorities(slots.astype(np.int64), rng.uniform(0.0, 10.0, slots.shape[0]))
            elif op == 5 and isinstance(sampler, CorrectedSampler):
                slots = rng.integers(0, STABLE, 3)
                sampler.set_corrections(slots, rng.uniform(0.0, 3.0, 3))
            elif op == 6:
                check_draw(sampler.sample(4), sampler, 4)
                draws.bump()
            else:
                stable = np.arange(STABLE)
                assert np.all(sampler.probabilities(stable) >= 0.0)
                assert np.all(np.isfinite(sampler.weights(stable)))
                assert sampler.max_priority >= 0.0 and 0 < sampler.size <= CAPACITY
        assert set(np.flatnonzero(~np.isnan(sampler.priorities[own])) + own[0]) == filled

    return body


def learner(sampler: PrioritizedSampler, draws: Counter) -> Callable[[], None]:
    rng = np.random.default_rng(7)

    def body() -> None:
        for i in range(LEARNER_OPS):
            if i % 4 == 0:  # a composite step: draw, read what was drawn, update it, atomically
                with sampler.lock:
                    draw = sampler.sample(8)
                    check_draw(draw, sampler, 8)
                    raw = sampler.priorities
                    assert not np.isnan(raw[draw.indices]).any(), f"drew an empty slot: {draw}"
                    if sampler.backend_name == "greedy":
                        rest = np.delete(raw, draw.indices)
                        assert raw[draw.indices].min() >= np.nanmax(rest, initial=-1.0), "not the k largest"
                    np.testing.assert_allclose(
                        sampler.probabilities(draw.indices), draw.probabilities, rtol=1e-12
                    )
                    sampler.update_priorities(draw.indices, rng.uniform(0.0, 10.0, 8))
            else:
                draw = sampler.sample(8)
                check_draw(draw, sampler, 8)
                stable = draw.indices[draw.indices < STABLE]  # the others may be gone already
                sampler.update_priorities(stable, rng.uniform(0.0, 10.0, stable.shape[0]))
            draws.bump()
            if i % 50 == 25:
                sampler.alpha = 0.5 if sampler.alpha != 0.5 else 0.7
            _ = sampler.beta, sampler.nbytes, len(sampler), getattr(sampler, "corrections", None)

    return body


def reference_of(sampler: PrioritizedSampler) -> ReferenceSampler:
    """The naive model holding the sampler's final priorities, corrections, rank ties and step."""
    state = sampler.state_dict()
    model = ReferenceSampler(
        sampler.capacity,
        alpha=sampler.alpha,
        beta=state["beta"] if isinstance(state["beta"], float) else LinearSchedule(**state["beta"]),
        eps=sampler.eps,
        backend=sampler.backend_name,
        weight_norm=sampler.weight_norm,
        size=0,
    )
    raw = state["priorities"]
    factors = sampler.corrections if isinstance(sampler, CorrectedSampler) else np.ones_like(raw)
    stamps = state["backend_state"].get("stamps")
    for slot in np.flatnonzero(~np.isnan(raw)).tolist():
        model.raw[slot] = float(raw[slot])
        model.corrections[slot] = float(factors[slot])
        model.written[slot] = int(stamps[slot]) if stamps is not None else 0
    model.step = state["step"]
    return model


@pytest.mark.parametrize("corrections", [False, True], ids=["plain", "corrections"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_actors_and_learner_leave_an_exact_sampler(backend: str, corrections: bool) -> None:
    """Regression: rank and greedy samplers (and proportional ones, more rarely) raised or corrupted
    their order under concurrent add/update/sample before every public call held the lock."""
    sampler = (CorrectedSampler if corrections else PrioritizedSampler)(
        CAPACITY,
        alpha=0.6,
        beta=LinearSchedule(0.4, 1.0, 10_000),
        backend=backend,
        size=STABLE,
        seed=0,
    )
    if isinstance(sampler, CorrectedSampler):
        sampler.set_corrections(np.arange(STABLE), np.linspace(0.5, 2.0, STABLE))
    draws = Counter()
    run_threads([actor(sampler, a, corrections, draws) for a in range(ACTORS)] + [learner(sampler, draws)])

    assert sampler.state_dict()["step"] == draws.value, "a draw's β step was lost"
    model = reference_of(sampler)
    slots = model.valid
    assert sampler.size == len(slots)
    assert sampler.max_priority == model.max_priority
    np.testing.assert_allclose(sampler.probabilities(slots), model.probabilities(slots), rtol=1e-9, atol=0)
    np.testing.assert_allclose(sampler.weights(slots), model.weights(slots), rtol=1e-5)
    rebuilt = clone(sampler)  # built from the priorities alone: structures must match exactly
    for k in (1, 8, 32):
        assert_draws_equal(sampler.sample(k), rebuilt.sample(k))


def test_ledger_iteration_with_concurrent_writers_and_snapshots() -> None:
    """A DataLoader-style iteration of a ``DrawLedger`` (draw, claim, update) while an actor adds
    and re-prioritises and two threads checkpoint: every snapshot is one consistent state (its
    pending draws match its epoch position, so a fresh ledger accepts it).  Epochs of one batch
    make every draw the first of its epoch, where a torn snapshot (draw recorded, position not yet
    advanced) is refused by the check."""
    sampler = PrioritizedSampler(
        CAPACITY, alpha=0.7, beta=0.5, backend="rank", size=STABLE, batch_size=4, num_samples=4, seed=1
    )
    ledger = DrawLedger(sampler)
    check = DrawLedger(PrioritizedSampler(CAPACITY, backend="rank", size=0, seed=2))
    rng = np.random.default_rng(3)
    errors = np.random.default_rng(4).uniform(0.0, 5.0, 4)

    def train() -> None:
        for _ in range(2 * LEARNER_OPS):  # epochs of one batch
            batch = list(ledger)
            draw = ledger.take(batch)
            assert np.array_equal(draw.indices, batch) and ledger.yielded == len(batch)
            ledger.update_priorities(batch, errors)

    def write() -> None:
        for _ in range(ACTOR_OPS // 2):
            sampler.add(rng.integers(STABLE, CAPACITY, 2))
            sampler.update_priorities(rng.integers(0, STABLE, 3), rng.uniform(0.0, 5.0, 3))

    def snapshot() -> None:
        for _ in range(2 * LEARNER_OPS):
            check.parse(ledger.state_dict())
            assert 0 <= ledger.pending <= 1

    run_threads([train, write, snapshot, snapshot])
    assert ledger.pending == 0


def test_ledger_draws_from_two_threads_record_their_own_beta() -> None:
    """``DrawLedger.sample`` reads β, draws and records the draw as one step: with a β schedule
    the recorded βs are exactly the schedule's values at draws 0, 1, 2, ... (none read twice), and
    each draw's weights are ``(P_min / P(i))^β`` at its own recorded β."""
    draws = 400  # per thread: every draw stays pending (at most ledger.MAX_PENDING = 1024)
    schedule = LinearSchedule(0.0, 1.0, 4 * draws)
    sampler = PrioritizedSampler(CAPACITY, alpha=0.7, beta=schedule, backend="rank", seed=5)
    sampler.update_priorities(np.arange(CAPACITY), np.random.default_rng(6).uniform(0.0, 5.0, CAPACITY))
    ledger = DrawLedger(sampler)
    p_min = float(sampler.probabilities(np.arange(CAPACITY)).min())

    def draw() -> None:
        for _ in range(draws):
            ledger.sample(2)

    run_threads([draw, draw])
    pending = ledger.state_dict()["pending"]
    assert len(pending) == 2 * draws
    betas = sorted(entry["beta"] for entry in pending)
    assert betas == [schedule(j) for j in range(2 * draws)], "a β was read twice"
    for entry in pending:
        expected = (p_min / entry["probabilities"]) ** entry["beta"]
        np.testing.assert_allclose(entry["weights"], expected, rtol=1e-5)


def test_lock_argument_is_shared_and_checked() -> None:
    lock = threading.RLock()
    sampler = PrioritizedSampler(4, lock=lock, seed=0)
    assert sampler.lock is lock
    with lock:  # reentrant: the holder may call the sampler
        sampler.update_priorities([0], [2.0])
    with pytest.raises(TypeError, match=r"lock should be a threading\.RLock"):
        PrioritizedSampler(4, lock=threading.Lock())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "duplicate", [copy.deepcopy, lambda s: pickle.loads(pickle.dumps(s))], ids=["deepcopy", "pickle"]
)
def test_copies_get_their_own_lock(duplicate: Callable[[PrioritizedSampler], PrioritizedSampler]) -> None:
    sampler = PrioritizedSampler(8, backend="rank", seed=0)
    sampler.update_priorities(np.arange(8), np.arange(8.0))
    other = duplicate(sampler)
    assert other.lock is not sampler.lock
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with sampler.lock:
            held.set()
            release.wait(10)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    held.wait(10)
    try:
        twin = copy.deepcopy(other)  # neither is blocked by the original's lock
        assert_draws_equal(other.sample(4), twin.sample(4))
    finally:
        release.set()
        thread.join(10)
    twin = duplicate(sampler)
    assert_draws_equal(sampler.sample(4), twin.sample(4))


def test_lock_overhead_benchmark_runs(tmp_path: Any) -> None:
    """Smoke run of ``benchmarks.lock_overhead`` (its JSON's structure, not its timings)."""
    from benchmarks.lock_overhead import LockFreeSampler, main

    out = tmp_path / "lock.json"
    results = main(["--n", "1024", "--passes", "2", "--block-s", "0.001", "--out", str(out)])
    assert out.exists() and set(results["backends"]) == {"proportional", "rank"}
    assert {"locked_us", "lock_free_us", "overhead"} <= set(results["backends"]["rank"])
    free = LockFreeSampler(4, seed=0)
    with free.lock:  # the no-op still works as a context manager, and exceptions pass through
        free.update_priorities([0], [2.0])
    with pytest.raises(ValueError), free.lock:
        free.update_priorities([9], [1.0])
