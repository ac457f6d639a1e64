"""The DQN step's compiled floor (``benchmarks.compiled_floor``) and its place in ``make bench``.

The floor must do the step's whole work (a stratified draw from the sum tree, the weights over
the memory's ``P_min``, the write of 32 leaves with every ancestor recomputed), exactly, or the
target "prisample ≤ 1.5× the compiled floor" would compare against less than a step: its slots,
weights and tree are checked against a naive numpy reference (inverse CDF over the leaves, P(i)
from Eq. 1, every node recomputed from the leaves), against prisample's own ``PriorityTree`` over
the same priorities, and its draw frequencies by a chi-square test.  The smoke run
times the quick configuration of ``benchmarks.run_all`` for one small N and checks that the floor
is timed in the DQN step and reaches the DQN table and the targets.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from benchmarks import results_tables, run_all
from benchmarks.compiled_floor import CompiledFloor
from benchmarks.peers import ALPHA, BETA, EPS
from benchmarks.speed import run_speed
from prisample.trees import PriorityTree
from tests.reference import assert_frequencies


def _cells(line: str) -> list[str]:
    """A markdown table row's cells (``\\|`` inside a cell is no separator)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def _reference_tree(masses: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every internal node's sum and min of the leaf masses below it, computed level by level in
    numpy from the leaves alone (sums added child by child, left to right, as the tree does), laid
    out at ``offsets`` as the floor's arrays are."""
    depth = offsets.shape[0] - 1
    sums = np.zeros(int(offsets[-1]))
    mins = np.full(int(offsets[-1]), np.inf)
    level_sums = np.zeros(8**depth)
    level_sums[: masses.shape[0]] = masses
    level_mins = np.full(8**depth, np.inf)
    level_mins[: masses.shape[0]] = masses
    for d in range(depth - 1, -1, -1):
        children = level_sums.reshape(-1, 8)
        level_sums = np.zeros(children.shape[0])
        for c in range(8):
            level_sums = level_sums + children[:, c]
        level_mins = level_mins.reshape(-1, 8).min(axis=1)
        sums[offsets[d] : offsets[d] + 8**d] = level_sums
        mins[offsets[d] : offsets[d] + 8**d] = level_mins
    return sums, mins


def _masses(priorities: np.ndarray) -> np.ndarray:
    """``(p + ε)^α`` with CPython's float power (the C ``pow`` the compiled code calls)."""
    return np.array([(float(p) + EPS) ** ALPHA for p in priorities])


@pytest.mark.parametrize("n", [5, 1000, 4096])  # one level; padding leaves; a full last level
def test_the_floor_draws_weighs_and_writes_the_whole_step(n: int) -> None:
    rng = np.random.default_rng(3)
    raw = np.abs(rng.standard_normal(n))
    floor = CompiledFloor(n, seed=5)
    floor.fill(raw)
    uniforms = np.random.RandomState(5)  # numba's generator: the same Mersenne twister and seeding
    internal = np.concatenate(
        [np.arange(floor.offsets[d], floor.offsets[d] + 8**d) for d in range(floor.offsets.shape[0] - 1)]
    )
    high = raw.max()
    for step in range(20):
        m = _masses(raw)
        np.testing.assert_array_equal(floor.masses[:n], m)
        assert np.all(floor.masses[n:] == 0.0)  # padding: never drawn
        new = np.abs(rng.standard_normal(32))
        floor.dqn_step(new)
        slots = floor.slots.copy()
        # the draw: target j of 32 is (j + u_j) · Σm / 32, and the slot whose prefix interval
        # holds it (inverse CDF over the leaves in slot order), with the floor's own uniforms
        cumulative = np.cumsum(m)
        targets = (np.arange(32) + uniforms.random_sample(32)) * cumulative[-1] / 32
        np.testing.assert_array_equal(slots, np.searchsorted(cumulative, targets, side="right"), str(step))
        p = m / m.sum()  # P(i), Eq. 1
        w = (p.min() / p[slots]) ** BETA  # (N · P(i))^-β / max_j (N · P(j))^-β, Sec. 3.4
        np.testing.assert_allclose(floor.weights, w, rtol=1e-6)
        # the write: the last of a duplicate slot wins, every ancestor recomputed
        raw[slots] = new
        high = max(high, new.max())
        assert floor.high[0] == high
        sums, mins = _reference_tree(_masses(raw), floor.offsets)
        np.testing.assert_array_equal(floor.sums[internal], sums[internal], str(step))
        np.testing.assert_array_equal(floor.mins[internal], mins[internal], str(step))
    # prisample's own tree over the same priorities: the same layout and the same sums, bit for bit
    tree = PriorityTree(raw.copy(), alpha=ALPHA, eps=EPS)
    np.testing.assert_array_equal(floor.offsets, tree.offsets)
    np.testing.assert_array_equal(floor.masses, tree.masses)
    np.testing.assert_array_equal(floor.sums[internal], tree.sums[internal])
    np.testing.assert_array_equal(floor.mins[internal], _masses(tree.mins[internal]))


def test_the_floor_draws_each_slot_in_proportion_to_its_mass() -> None:
    n, steps = 20, 2000  # 20 leaves, 4 of padding: two levels
    raw = np.abs(np.random.default_rng(7).standard_normal(n)) + 0.05
    floor = CompiledFloor(n, seed=11)
    floor.fill(raw)
    saved = [a.copy() for a in (floor.masses, floor.sums, floor.mins)]
    counts = np.zeros(n, dtype=np.int64)
    new = np.ones(32)
    for _ in range(steps):
        floor.dqn_step(new)
        counts += np.bincount(floor.slots, minlength=n)
        for array, copy in zip((floor.masses, floor.sums, floor.mins), saved, strict=True):
            array[:] = copy  # undo the write: every step draws from the same distribution
    m = _masses(raw)
    assert_frequencies(counts, m / m.sum())


def test_quick_speed_run_times_the_floor_in_the_dqn_step_and_reports_it() -> None:
    quick: dict[str, Any] = run_all.QUICK
    n = quick["sizes"][0]
    result = run_speed(
        n,
        quick["ks"][:1],
        ["prisample", "prisample-rank"],
        reps=1,
        block_s=quick["block_s"],
        log=lambda _: None,
    )
    assert not result.errors
    dqn = result.times[("DQN step", 32)]
    assert set(dqn) == {"prisample", "prisample-rank", "prisample (torch |δ|)", "compiled floor"}
    assert all(t > 0 for t in dqn.values())
    assert all("compiled floor" not in t for key, t in result.times.items() if key[0] != "DQN step")

    block = run_all.speed_block(result)
    (row,) = run_all.dqn_step_summary([block])
    assert row["prisample_over_floor"] == dqn["prisample"] / dqn["compiled floor"]
    results = {"speed": [block], "dqn_step": [row]}
    table = results_tables.dqn_step(results).splitlines()
    header, _, row_cells = (_cells(line) for line in table[:3])
    cells = dict(zip(header, row_cells, strict=True))
    assert cells["compiled floor"] == results_tables.us(dqn["compiled floor"])
    assert cells["prisample / floor"] == results_tables.times_x(dqn["prisample"] / dqn["compiled floor"])
    targets = {r["target"]: r for r in results_tables.target_rows(results)}
    floor_row = targets[f"DQN step at N = {results_tables.pow2(n)} ≤ 1.5× the compiled floor"]
    assert floor_row["met"] == (dqn["prisample"] / dqn["compiled floor"] <= 1.5)
    assert floor_row["measured"].startswith(f"{dqn['prisample'] / dqn['compiled floor']:.2f}×")
    rank_row = targets["rank ≤ 2× proportional (DQN step)"]
    assert rank_row["met"] == (dqn["prisample-rank"] / dqn["prisample"] <= 2.0)
