"""DistributedPrioritizedSampler under a world size that changes or is misdeclared.

A checkpoint saved by ``R`` ranks resumes under ``R'``: the resumed run trains on the global
indices the old world had drawn (its per-rank batches in update order), then draws the epoch's
remaining global indices, ``k · R'`` per batch.  "Exactly" is checked against an oracle built from a
plain ``PrioritizedSampler`` loaded with the checkpoint's sampler state, and against the
uninterrupted old world: after the batches in hand are trained on, the priorities are bitwise equal.

Ranks are simulated in one process (explicit ``num_replicas``/``rank``, no process group: every
rank's update applied on every rank in rank order stands in for the all-gather); the last tests run
two gloo processes.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import pickle
from collections import deque
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader

from prisample import IndexedDataset, LinearSchedule, PrioritizedSampler
from prisample.distributed import DistributedPrioritizedSampler
from tests.state_fuzz import states_equal

N, K = 20, 2  # the sampler: 20 slots, 2 indices per rank per batch
Batch = list[tuple[np.ndarray, np.ndarray]]  # one training step: (indices, weights) per rank


def make(replicas: int, rank: int = 0, size: int = N, beta: Any = 0.5) -> DistributedPrioritizedSampler:
    base = PrioritizedSampler(size, alpha=0.8, beta=beta, batch_size=K, seed=0)
    return DistributedPrioritizedSampler(base, num_replicas=replicas, rank=rank)


def loss_of(indices: np.ndarray, offset: int) -> np.ndarray:
    """A 'loss' for the ``offset``-th update onwards: the same values whether the updates of one
    global batch arrive in one step (all ranks) or in several (one rank each), in the same order."""
    position = offset + np.arange(indices.shape[0])
    return ((indices * 7 + position * 3) % 11) / 4.0 + 0.01


class Ranks:
    """``replicas`` ranks in one process, each fed by a 'DataLoader' that collects ``K`` indices."""

    def __init__(self, replicas: int, state: Any = None, applied: int = 0, **kwargs: Any) -> None:
        self.samplers = [make(replicas, r, **kwargs) for r in range(replicas)]
        if state is not None:
            for s in self.samplers:
                s.load_state_dict(copy.deepcopy(state))
        self.iters = [iter(s) for s in self.samplers]
        self.hand: deque[list[np.ndarray]] = deque()
        self.applied = applied  # updates written so far (loss_of's offset)

    def fetch(self) -> bool:
        batch = [np.asarray(list(itertools.islice(it, K)), dtype=np.int64) for it in self.iters]
        if batch[0].shape[0] == 0:
            return False
        self.hand.append(batch)
        return True

    def step(self) -> Batch:
        batch = self.hand.popleft()
        draws = [s.take(b) for s, b in zip(self.samplers, batch, strict=True)]
        indices = np.concatenate(batch)
        values = loss_of(indices, self.applied)
        for s in self.samplers:  # the all-gather: every rank's pairs, in rank order, everywhere
            s.update_priorities(indices, values)
        self.applied += indices.shape[0]
        return [(d.indices, d.weights) for d in draws]

    def run(self, ahead: int) -> list[Batch]:
        """Train to the end of the epoch, ``ahead`` batches prefetched."""
        steps: list[Batch] = []
        while True:
            while len(self.hand) <= ahead and self.fetch():
                pass
            if not self.hand:
                return steps
            steps.append(self.step())

    @property
    def priorities(self) -> np.ndarray:
        ranks = [s.sampler.priorities for s in self.samplers]
        for other in ranks[1:]:
            np.testing.assert_array_equal(other, ranks[0])
        return ranks[0]


def oracle(
    sampler_state: Any, in_hand: list[Batch], left: int, replicas: int, ahead: int, applied: int
) -> tuple[list[Batch], np.ndarray]:
    """What ``replicas`` ranks train on when they continue from ``sampler_state``: the global
    batches ``in_hand``, then ``left`` more global indices drawn ``k · R`` at a time."""
    ref = PrioritizedSampler(N, seed=123)
    ref.load_state_dict(copy.deepcopy(sampler_state))
    assert left % replicas == 0
    queue, hand, per_rank = deque(in_hand), deque[Batch](), left // replicas
    steps: list[Batch] = []

    def fetch() -> bool:
        nonlocal per_rank
        if queue:
            hand.append(queue.popleft())
        elif per_rank:
            k = min(K, per_rank)
            per_rank -= k
            d = ref.sample(k * replicas)
            hand.append([(d.indices[r::replicas], d.weights[r::replicas]) for r in range(replicas)])
        else:
            return False
        return True

    while True:
        while len(hand) <= ahead and fetch():
            pass
        if not hand:
            return steps, ref.priorities
        batch = hand.popleft()
        indices = np.concatenate([i for i, _ in batch])
        ref.update_priorities(indices, loss_of(indices, applied))
        applied += indices.shape[0]
        steps.append(batch)


def assert_same_steps(got: list[Batch], want: list[Batch]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert len(g) == len(w)
        for (gi, gw), (wi, ww) in zip(g, w, strict=True):
            np.testing.assert_array_equal(gi, wi)
            np.testing.assert_array_equal(gw, np.asarray(ww, dtype=np.float32))


def per_rank(pending: dict[str, Any], replicas: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(pending["indices"][r::replicas], pending["weights"][r::replicas]) for r in range(replicas)]


# -- re-sharding ----------------------------------------------------------------------------------
@pytest.mark.parametrize("in_hand", [0, 1])
def test_two_ranks_resume_in_one_process(in_hand: int) -> None:
    """Bug: the 1-process resume yielded 16 indices where 12 were left (8 trained of 20), and
    with a batch in hand it raised about pending sizes without naming the world size."""
    world = Ranks(2)
    for _ in range(2):
        world.fetch()
        world.step()
    for _ in range(in_hand):
        world.fetch()
    state = world.samplers[0].state_dict()
    assert states_equal(state, world.samplers[1].state_dict())  # rank 0's checkpoint is everyone's
    assert state["num_replicas"] == 2 and len(state["pending"]) == in_hand

    resumed = Ranks(1, state, applied=world.applied)
    got = resumed.run(ahead=1)
    assert sum(i.shape[0] for batch in got for i, _ in batch) == 12  # exactly what was left
    # The batch in hand: rank 0's slice, then rank 1's (the order the all-gather applies them).
    in_hand_steps = [[pair] for p in state["pending"] for pair in per_rank(p, 2)]
    want, priorities = oracle(state["sampler"], in_hand_steps, 12 - 4 * in_hand, 1, 1, world.applied)
    assert_same_steps(got, want)
    np.testing.assert_array_equal(resumed.priorities, priorities)

    if in_hand:  # the uninterrupted 2-rank run trains on that batch: the same priorities, bitwise
        again = Ranks(1, state, applied=world.applied)
        again.fetch()
        again.fetch()
        again.step()
        again.step()
        world.step()
        np.testing.assert_array_equal(again.priorities, world.priorities)


@pytest.mark.parametrize("in_hand", [0, 2])
def test_one_process_resumes_in_two_ranks(in_hand: int) -> None:
    """Bug: at a batch boundary 2 ranks drew 4 global indices where 10 were left; with batches in
    hand the first take failed with a message about IndexedDataset and batch sizes."""
    world = Ranks(1)
    for _ in range(5):
        world.fetch()
        world.step()
    for _ in range(in_hand):
        world.fetch()
    state = world.samplers[0].state_dict()
    assert state["num_replicas"] == 1 and len(state["pending"]) == in_hand

    resumed = Ranks(2, state, applied=world.applied)
    got = resumed.run(ahead=1)
    assert sum(i.shape[0] for batch in got for i, _ in batch) == 10
    # Two 1-process batches in hand make one global batch: rank 0 trains the first, rank 1 the second.
    pairs = [pair for p in state["pending"] for pair in per_rank(p, 1)]
    in_hand_steps = [pairs[s : s + 2] for s in range(0, len(pairs), 2)]
    want, priorities = oracle(state["sampler"], in_hand_steps, 10 - 2 * in_hand, 2, 1, world.applied)
    assert_same_steps(got, want)
    np.testing.assert_array_equal(resumed.priorities, priorities)

    if in_hand:
        again = Ranks(2, state, applied=world.applied)
        again.fetch()
        again.step()
        world.step()
        world.step()
        np.testing.assert_array_equal(again.priorities, world.priorities)


@pytest.mark.parametrize(
    ("saved", "loaded", "size"), [(2, 1, 20), (1, 2, 20), (2, 4, 20), (2, 1, 21), (1, 2, 21)]
)
def test_a_state_between_epochs_starts_the_new_worlds_epoch(saved: int, loaded: int, size: int) -> None:
    """Before the first batch or after the last one, any world size resumes (21 slots: 2 ranks draw
    22 an epoch, 1 process 21, so an epoch's global length is the world's own)."""
    for finished in (False, True):
        source = make(saved, size=size)
        if finished:  # every batch trained on
            it = iter(source)
            while batch := list(itertools.islice(it, K)):
                source.take(batch)
        target = mid_epoch(loaded, size=size)
        target.load_state_dict(source.state_dict())
        assert len(list(target)) == len(target) == math.ceil(size / loaded)  # a whole new epoch
        np.testing.assert_array_equal(target.sampler.priorities, source.sampler.priorities)


def refused(target: DistributedPrioritizedSampler, state: Any, *needles: str) -> None:
    before = copy.deepcopy(target.state_dict())
    with pytest.raises(ValueError) as error:
        target.load_state_dict(state)
    for needle in needles:
        assert needle in str(error.value)
    assert states_equal(before, target.state_dict())  # the wrapper and the wrapped sampler


def mid_epoch(replicas: int, size: int = N) -> DistributedPrioritizedSampler:
    """A target with something to lose: a batch trained on, updated, and one in hand."""
    target = make(replicas, size=size)
    it = iter(target)
    batch = list(itertools.islice(it, K))
    target.take(batch)
    target.update_priorities(batch, [3.0, 0.25])
    list(itertools.islice(it, K))
    return target


def saved_by(replicas: int, steps: int, in_hand: int, **kwargs: Any) -> dict[str, Any]:
    world = Ranks(replicas, **kwargs)
    for _ in range(steps):
        world.fetch()
        world.step()
    for _ in range(in_hand):
        world.fetch()
    return world.samplers[0].state_dict()


def test_states_that_cannot_be_resharded_are_refused_unchanged() -> None:
    both = ("num_replicas=1", "num_replicas=2")
    # One 1-process batch in hand cannot be split between two ranks.
    refused(mid_epoch(2), saved_by(1, 2, 1), *both, "shared evenly")
    # A 2-rank global batch in hand holds two per-rank batches: not three.
    refused(mid_epoch(3), saved_by(2, 1, 1), "num_replicas=2", "num_replicas=3", "shared evenly")
    # Two batches drawn at different β (an annealed schedule) cannot make one global draw.
    annealed = saved_by(1, 1, 2, beta=LinearSchedule(0.4, 1.0, 10))
    refused(mid_epoch(2), annealed, *both, "β")
    # 21 slots: 19 global indices left cannot be shared by two ranks.
    refused(mid_epoch(2, size=21), saved_by(1, 1, 0, size=21), *both, "whole per-rank shares")
    # 2 ranks over 21 slots draw 22 an epoch; with nothing trained yet, more is left than 1 process's 21.
    refused(mid_epoch(1, size=21), saved_by(2, 0, 1, size=21), *both, "whole per-rank shares")
    # A global draw in hand that is not one batch per rank (corrupted), in the same world or another.
    torn = saved_by(2, 1, 1)
    torn["pending"][0] = {k: v[:3] if isinstance(v, np.ndarray) else v for k, v in torn["pending"][0].items()}
    refused(mid_epoch(2), torn, "pending[0]", "num_replicas=2")
    refused(mid_epoch(1), torn, "pending[0]", *both)


def test_state_round_trips_and_old_states_load_as_this_world() -> None:
    """Bug: a state loaded and saved again before the next iteration had lost its batches in hand
    (the resumed epoch then skipped them: 16 indices left instead of 18)."""
    for replicas in (1, 2):
        source = mid_epoch(replicas)
        state = source.state_dict()
        target = make(replicas)
        target.load_state_dict(copy.deepcopy(state))
        assert states_equal(target.state_dict(), state)
        again = make(replicas)
        again.load_state_dict(target.state_dict())
        assert len(list(again)) == N // replicas - K  # one batch trained of the epoch
        # A state written before the world size was recorded counts as saved by this world.
        legacy = {k: v for k, v in copy.deepcopy(state).items() if k != "num_replicas"}
        old = make(replicas)
        old.load_state_dict(legacy)
        assert states_equal(old.state_dict(), state)
        assert list(old) == list(target)


@pytest.mark.parametrize("bad", [0, -2, True, 1.0, "2", None])
def test_bad_recorded_world_size_is_refused_unchanged(bad: Any) -> None:
    target = mid_epoch(1)
    state = {**mid_epoch(1).state_dict(), "num_replicas": bad}
    refused(target, state, f"num_replicas={bad!r}")


# -- set_epoch ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("bad", "error"), [(2.5, TypeError), (-1, ValueError), ("3", TypeError)])
def test_set_epoch_validates_before_changing_anything(bad: Any, error: type[Exception]) -> None:
    """Bug: set_epoch(2.5) raised after setting the wrapper's epoch; set_epoch(-1) was accepted,
    and then the sampler's own state_dict could not be loaded."""
    sampler = make(1)
    sampler.set_epoch(4)
    with pytest.raises(error, match="epoch"):
        sampler.set_epoch(bad)
    assert sampler.epoch == sampler.sampler.epoch == 4
    sampler.set_epoch(np.int64(5))  # type: ignore[arg-type]
    assert sampler.epoch == sampler.sampler.epoch == 5 and type(sampler.epoch) is int
    make(1).load_state_dict(sampler.state_dict())


def test_explicit_rank_outside_ddp_must_fit() -> None:
    with pytest.raises(ValueError, match="rank=1"):
        DistributedPrioritizedSampler(PrioritizedSampler(4, seed=0), rank=1)


# -- two gloo processes ---------------------------------------------------------------------------
WORLD = 2


def _raised(build: Any) -> str:
    try:
        build()
    except ValueError as error:
        return str(error)
    return "no error"


def _worker(rank: int, tmp: str) -> None:
    torch.set_num_threads(1)
    early = make(1)  # built before the process group, like a sampler in a DataModule's __init__
    # A planted bug can leave the ranks in different collectives: fail after 30 s, do not hang.
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp}/init", rank=rank, world_size=WORLD, timeout=timedelta(seconds=30)
    )
    record: dict[str, Any] = {}
    try:
        base = PrioritizedSampler(N, seed=0)
        record["errors"] = [
            _raised(lambda: DistributedPrioritizedSampler(base, num_replicas=1)),
            _raised(lambda: DistributedPrioritizedSampler(base, num_replicas=3)),
            _raised(lambda: DistributedPrioritizedSampler(base, rank=1 - rank)),
            _raised(lambda: next(iter(early))),
            _raised(lambda: early.update_priorities([0], [1.0])),  # before any communication
        ]
        # A 1-process checkpoint with two batches in hand, resumed by two real DDP ranks.
        sampler = make(WORLD, rank)
        sampler.load_state_dict(pickle.loads(Path(tmp, "one.pkl").read_bytes()))
        applied, steps = 10, []
        for indices, _ in DataLoader(IndexedDataset(list(range(N))), batch_size=K, sampler=sampler):
            draw = sampler.take(indices)
            steps.append((draw.indices.tolist(), draw.weights.tolist()))
            gathered = [torch.empty_like(indices) for _ in range(WORLD)]
            dist.all_gather(gathered, indices)  # the loss needs the update's position (loss_of)
            mine = applied + sum(g.shape[0] for g in gathered[:rank])
            sampler.update_priorities(indices, loss_of(indices.numpy(), mine))
            applied += sum(g.shape[0] for g in gathered)
        record["steps"], record["priorities"] = steps, sampler.sampler.priorities.tolist()
        # A 2-rank checkpoint: two steps trained, one batch in hand.
        sampler = make(WORLD, rank)
        it = iter(sampler)
        for step in range(3):
            batch = list(itertools.islice(it, K))
            if step < 2:
                sampler.take(batch)
                sampler.update_priorities(batch, np.full(K, 0.5 + step + rank))
        Path(tmp, f"two{rank}.pkl").write_bytes(pickle.dumps(sampler.state_dict()))
        Path(tmp, f"rank{rank}.json").write_text(json.dumps(record))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def gloo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("world")
    Path(tmp, "one.pkl").write_bytes(pickle.dumps(saved_by(1, 5, 2)))
    mp.start_processes(  # type: ignore[attr-defined,no-untyped-call]
        _worker, args=(str(tmp),), nprocs=WORLD, start_method="fork"
    )
    return tmp


def test_misdeclared_world_is_refused_naming_both_values(gloo: Path) -> None:
    """Bug: num_replicas=1 on both ranks of a 2-process world was accepted (the ranks trained on
    the same batch and their priorities diverged); num_replicas=3 failed in gloo's all-gather."""
    for rank in range(WORLD):
        errors = json.loads((gloo / f"rank{rank}.json").read_text())["errors"]
        assert "num_replicas=1" in errors[0] and "world size 2" in errors[0]
        assert "num_replicas=3" in errors[1] and "world size 2" in errors[1]
        assert f"rank={1 - rank}" in errors[2] and f"rank {rank}" in errors[2]
        for late in errors[3:]:  # built before init_process_group: refused at first use
            assert "num_replicas=1" in late and "world size 2" in late


def test_ddp_resumes_a_one_process_state_exactly(gloo: Path) -> None:
    state = saved_by(1, 5, 2)
    ranks = [json.loads((gloo / f"rank{r}.json").read_text()) for r in range(WORLD)]
    got = [[(np.asarray(r["steps"][s][0]), np.asarray(r["steps"][s][1])) for r in ranks] for s in range(3)]
    assert len(ranks[0]["steps"]) == len(ranks[1]["steps"]) == 3  # 10 global indices left: 2 + 2 + 1 each
    in_hand = [[pair for p in state["pending"] for pair in per_rank(p, 1)]]
    want, priorities = oracle(state["sampler"], in_hand, 6, WORLD, 0, 10)
    assert_same_steps(got, want)
    np.testing.assert_array_equal(ranks[0]["priorities"], priorities)
    np.testing.assert_array_equal(ranks[1]["priorities"], priorities)


def test_one_process_resumes_a_ddp_state_exactly(gloo: Path) -> None:
    states = [pickle.loads((gloo / f"two{r}.pkl").read_bytes()) for r in range(WORLD)]
    assert states_equal(states[0], states[1]) and len(states[0]["pending"]) == 1
    resumed = Ranks(1, states[0], applied=8)
    got = resumed.run(ahead=0)
    assert sum(i.shape[0] for batch in got for i, _ in batch) == 12
    in_hand = [[pair] for pair in per_rank(states[0]["pending"][0], 2)]
    want, priorities = oracle(states[0]["sampler"], in_hand, 8, 1, 0, 8)
    assert_same_steps(got, want)
    np.testing.assert_array_equal(resumed.priorities, priorities)
