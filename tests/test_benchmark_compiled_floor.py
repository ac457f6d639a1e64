"""The DQN step's compiled floor (``benchmarks.compiled_floor``) and its place in ``make bench``.

The floor must do the step's whole work (a stratified draw from the sum tree, the weights over
the memory's ``P_min``, the write of 32 leaves with every ancestor recomputed), or the target
"prisample ≤ 1.5× the compiled floor" would compare against less than a step.  The smoke run
times the quick configuration of ``benchmarks.run_all`` for one small N and checks that the floor
is timed in the DQN step and reaches the DQN table and the targets.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from benchmarks import results_tables, run_all
from benchmarks.compiled_floor import CompiledFloor
from benchmarks.peers import ALPHA, BETA, EPS
from benchmarks.speed import run_speed


def _cells(line: str) -> list[str]:
    """A markdown table row's cells (``\\|`` inside a cell is no separator)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def _assert_tree(tree: np.ndarray, reduce: np.ufunc) -> None:
    size = tree.shape[0] // 2
    parents = np.arange(1, size)
    np.testing.assert_array_equal(tree[parents], reduce(tree[2 * parents], tree[2 * parents + 1]))


def test_the_floor_draws_weighs_and_writes_the_whole_step() -> None:
    n = 1000  # not a power of two: leaves n .. 1023 stay empty
    rng = np.random.default_rng(3)
    floor = CompiledFloor(n, seed=5)
    floor.fill(np.abs(rng.standard_normal(n)))
    size = floor.sums.shape[0] // 2
    for step in range(20):
        leaves = floor.sums[size : size + n].copy()
        new = np.abs(rng.standard_normal(32))
        floor.dqn_step(new)
        slots = floor.slots.copy()
        assert np.all((slots >= 0) & (slots < n)) and np.all(np.diff(slots) >= 0), step  # stratified
        # draw j lands in stratum j: its leaf's prefix interval meets [j, j + 1) · total / 32
        cumulative = np.concatenate(([0.0], np.cumsum(leaves)))
        width = cumulative[-1] / 32
        strata = np.arange(32)
        assert np.all(cumulative[slots] < (strata + 1) * width * (1 + 1e-12)), step
        assert np.all(cumulative[slots + 1] > strata * width * (1 - 1e-12)), step
        expected = (leaves.min() / leaves[slots]) ** BETA  # (N · P(i))^-β / (N · P_min)^-β
        np.testing.assert_allclose(floor.weights, expected, rtol=1e-6)
        last = {int(s): float(v) for s, v in zip(slots, new, strict=True)}  # the last duplicate wins
        for s, v in last.items():
            assert floor.sums[size + s] == floor.mins[size + s] == (v + EPS) ** ALPHA
        _assert_tree(floor.sums, np.add)
        _assert_tree(floor.mins, np.minimum)


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
