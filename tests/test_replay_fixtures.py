"""Replay checkpoints written before ``prisample.replay``'s redesign load and continue bit for bit;
draws are unchanged.

``tests/data/replay_fixtures/<case>.npz`` was written by ``python -m tests.make_replay_fixtures``
before ``prisample.replay`` was redesigned (the memory's storage as strategies, one
write path, eviction as a strategy).  Per configuration (:data:`CASES`) it holds the
``state_dict(include_memory=True)`` of a :class:`~prisample.replay.PrioritizedReplay` after part of
a script of writes, draws and priority updates, and what the replay returned for every operation
before and after that point (slots, draws with their gathered batches, stale-update counts, and at
the end its priorities and generations).  The scripts are imported from the generator, so the
operations replayed here are the ones recorded.

* A replay built as the case builds it loads the state, writes it back unchanged, and continues
  the script returning exactly what was recorded.
* A replay built fresh with the same seed and driven by the whole script returns the recorded
  draws throughout, and writes the same checkpoint at the save point.

Indices, slots, batches and counters are compared bit for bit; probabilities and weights to a
relative 1e-13 (the last bit of ``p**α`` is the CPU's; see ``tests/test_order_draws.py``).  The two
state comparisons pin today's checkpoint format too: a change that is meant to write a new state
version must still load these files and reproduce the draws.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from prisample.replay import PrioritizedReplay
from tests.make_replay_fixtures import (
    CASES,
    DATA,
    FORMAT,
    Fixture,
    History,
    digest,
    history_of,
    load,
    observe,
    run,
    script,
)

NAMES = list(CASES)
RTOL = 1e-13  # probabilities and weights: float last bits can differ between CPUs


def first_difference(got: Any, want: Any, path: str = "state") -> str | None:
    """Where two states differ (types exactly, arrays by dtype, shape and bytes), or ``None``."""
    if isinstance(want, np.ndarray):
        if not isinstance(got, np.ndarray):
            return f"{path}: {type(got).__name__}, want an array"
        if got.dtype != want.dtype or got.shape != want.shape:
            return f"{path}: {got.dtype}{list(got.shape)}, want {want.dtype}{list(want.shape)}"
        if np.ascontiguousarray(got).tobytes() != np.ascontiguousarray(want).tobytes():
            return f"{path}: values differ at {_where(got, want)}"
        return None
    if type(got) is not type(want):
        return f"{path}: {type(got).__name__} {got!r:.60}, want {type(want).__name__} {want!r:.60}"
    if isinstance(want, dict):
        if got.keys() != want.keys():
            return f"{path}: keys {sorted(got)}, want {sorted(want)}"
        for key in want:
            found = first_difference(got[key], want[key], f"{path}/{key}")
            if found is not None:
                return found
        return None
    if isinstance(want, (tuple, list)):
        if len(got) != len(want):
            return f"{path}: length {len(got)}, want {len(want)}"
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            found = first_difference(a, b, f"{path}/{i}")
            if found is not None:
                return found
        return None
    if isinstance(want, float) and want != want:
        return None if got != got else f"{path}: {got!r}, want nan"
    return None if got == want else f"{path}: {got!r}, want {want!r}"


def _where(got: npt.NDArray[Any], want: npt.NDArray[Any]) -> str:
    differs = got != want
    if want.dtype.kind in "fc":
        differs &= ~(np.isnan(got) & np.isnan(want))
    first = np.argwhere(differs)
    if not first.shape[0]:  # equal values, other bytes (e.g. another NaN)
        return "bytes"
    at = tuple(int(i) for i in first[0])
    return f"{at} ({int(differs.sum())} of {want.size}): got {got[at]!r}, want {want[at]!r}"


def assert_same_record(
    got: dict[str, npt.NDArray[Any]], want: dict[str, npt.NDArray[Any]], name: str
) -> None:
    """Every recorded value returned again: bit for bit, probabilities and weights to ``RTOL``."""
    assert got.keys() == want.keys(), (
        f"{name}: records differ in what was returned: "
        f"missing {sorted(want.keys() - got.keys())[:6]}, extra {sorted(got.keys() - want.keys())[:6]}"
    )
    ops = script(name).ops
    problems = []
    for key in sorted(want):
        a, b = got[key], want[key]
        op, _, what = key.partition("/")
        where = f"{name} op {op} ({ops[int(op)].kind})" if op.isdigit() else f"{name} {op}"
        if a.dtype != b.dtype or a.shape != b.shape:
            problems.append(f"{where} {what}: {a.dtype}{list(a.shape)}, want {b.dtype}{list(b.shape)}")
        elif what in ("probabilities", "weights", "batch.weights"):
            if not np.allclose(a, b, rtol=RTOL, atol=0.0):
                problems.append(f"{where} {what}: {a.tolist()}, want {b.tolist()}")
        elif a.tobytes() != b.tobytes():
            problems.append(f"{where} {what}: differ at {_where(a, b)}")
    assert not problems, f"{len(problems)} recorded values differ; first ones:\n" + "\n".join(problems[:8])


@pytest.fixture(scope="module", params=NAMES)
def case(request: pytest.FixtureRequest) -> tuple[str, Fixture]:
    name: str = request.param
    fixture = load(name)
    s = script(name)
    assert fixture.meta["format"] == FORMAT and fixture.meta["case"] == name
    assert (fixture.meta["save_at"], fixture.meta["num_ops"]) == (s.save_at, len(s.ops))
    # The script must be the one recorded: a failure here is a changed script, not a changed replay.
    assert fixture.meta["script_sha256"] == digest(s.ops), f"the script of {name} is not the one recorded"
    return name, fixture


def loaded(name: str, fixture: Fixture) -> PrioritizedReplay:
    replay = CASES[name].build()
    replay.load_state_dict(copy.deepcopy(fixture.state))
    return replay


def test_checkpoint_loads_and_writes_back_unchanged(case: tuple[str, Fixture]) -> None:
    name, fixture = case
    replay = loaded(name, fixture)
    replay.check_valid()
    difference = first_difference(replay.state_dict(include_memory=True), fixture.state)
    assert difference is None, f"{name}: the loaded checkpoint writes back differently: {difference}"
    assert_same_record(observe(replay, "save"), _part(fixture.before, "save/"), name)


def test_checkpoint_continues_bit_for_bit(case: tuple[str, Fixture]) -> None:
    """The rest of the script on the loaded replay: every slot, draw, batch and update as recorded
    (the draws before the save are the lagging updates' targets, as in the run that saved)."""
    name, fixture = case
    replay = loaded(name, fixture)
    s = script(name)
    got = run(replay, s.ops[s.save_at :], s.save_at, history_of(fixture.before))
    got.update(observe(replay, "end"))
    replay.check_valid()
    assert_same_record(got, fixture.after, name)


def test_same_seed_draws_the_same(case: tuple[str, Fixture]) -> None:
    """A fresh replay with the case's seed, driven by the whole script, returns the recorded draws
    throughout and writes the recorded checkpoint at the save point."""
    name, fixture = case
    replay = CASES[name].build()
    s = script(name)
    history: History = []
    before = run(replay, s.ops[: s.save_at], 0, history)
    before.update(observe(replay, "save"))
    assert_same_record(before, fixture.before, name)
    difference = first_difference(replay.state_dict(include_memory=True), fixture.state)
    assert difference is None, f"{name}: the checkpoint written at the save point differs: {difference}"
    after = run(replay, s.ops[s.save_at :], s.save_at, history)
    after.update(observe(replay, "end"))
    assert_same_record(after, fixture.after, name)


def _part(record: dict[str, npt.NDArray[Any]], prefix: str) -> dict[str, npt.NDArray[Any]]:
    return {key: value for key, value in record.items() if key.startswith(prefix)}


def test_the_cases_cover_the_storage_modes_and_write_paths() -> None:
    """What the fixtures are for: if they are ever regenerated, they must still exercise these."""
    fixtures = {name: load(name) for name in NAMES}
    kinds = {op.kind for name in NAMES for op in script(name).ops}
    assert {"add", "add_many", "vector", "sample", "update"} <= kinds
    for name, f in fixtures.items():
        assert f.state["memory_tail"] > 0, f"{name}: the memory never wrapped around before the save"
    assert any(
        f.after["end/dropped_updates"][0] > f.before["save/dropped_updates"][0] for f in fixtures.values()
    )
    memories = {name: f.state["memory"] for name, f in fixtures.items()}
    configs = {name: m["config"] for name, m in memories.items()}
    assert any(c["frame_stack"] == 4 and c["obs_dtype"] == "|u1" for c in configs.values())
    assert any(isinstance(c["obs_dtype"], dict) for c in configs.values())
    assert any(c["frame_stack"] == 1 and c["obs_dtype"] == "<f4" for c in configs.values())
    assert any(m["nstep"] is not None and m["nstep"]["q_count"].sum() > 0 for m in memories.values())
    assert any(c["extras"] for c in configs.values())
    assert {m["vector"]["converter"]["autoreset_mode"] for m in memories.values() if m["vector"]} == {
        "NextStep",
        "SameStep",
    }
    assert {f.state["sampler"]["backend"] for f in fixtures.values()} >= {"proportional", "rank"}
    assert {f.state["eviction"] for f in fixtures.values()} == {"fifo", "priority"}
    short = fixtures["pool_short"]
    lengths = int(short.before["save/len"][0]), int(short.after["end/len"][0])
    assert min(lengths) < configs["pool_short"]["capacity"], "the frame pool never ran short"
    assert sum(path.stat().st_size for path in DATA.glob("*.npz")) < 500_000
