"""prisample.diagnostics: replay counts M_i against a brute-force count, Fig. 10's quantile snapshots,
Fig. 11's effective probabilities against Eq. 1, weight statistics against numpy, PNGs, and the
hooks in the Lightning callback and the Double DQN recipe."""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from prisample import PrioritizedSampler
from prisample.diagnostics import (
    Diagnostics,
    EffectiveProbability,
    ReplayCounter,
    TDSnapshots,
    WeightStats,
    effective_probability,
    plot_probability_vs_error,
)
from prisample.sampler import Draw

PNG = b"\x89PNG\r\n\x1a\n"


def _script(seed: int, capacity: int, steps: int) -> list[tuple[str, list[int]]]:
    """Random draws and writes, duplicates within a call included, slots filled in ring order first."""
    rng = np.random.default_rng(seed)
    ops: list[tuple[str, list[int]]] = [("write", list(range(capacity // 2)))]
    for _ in range(steps):
        if rng.random() < 0.4:
            ops.append(("write", rng.integers(0, capacity, rng.integers(1, 4)).tolist()))
        else:
            ops.append(("draw", rng.integers(0, capacity // 2 + 1, rng.integers(1, 6)).tolist()))
    return ops


@pytest.mark.parametrize("seed", range(5))
def test_replay_counts_match_a_brute_force_count(seed: int) -> None:
    """M_i: draws since the slot's last write; each write retires the item the slot held with its
    count (a slot written twice in one call retires the first new item with M = 0)."""
    capacity = 9
    counter = ReplayCounter(capacity)
    held: dict[int, int] = {}  # slot -> M of the item it holds
    retired: list[int] = []
    draws = 0
    for op, slots in _script(seed, capacity, 200):
        if op == "draw":
            counter.observe_draw(slots)
            for s in slots:
                held[s] = held.get(s, 0) + 1
            draws += len(slots)
        else:
            counter.observe_write(slots)
            for s in slots:
                if s in held:
                    retired.append(held[s])
                held[s] = 0
        expected = np.zeros(capacity, dtype=np.int64)
        for s, m in held.items():
            expected[s] = m
        np.testing.assert_array_equal(counter.counts, expected)
    live = np.array(sorted(held))
    np.testing.assert_array_equal(np.flatnonzero(counter.live), live)
    np.testing.assert_array_equal(counter.retired, np.bincount(retired, minlength=1))
    np.testing.assert_array_equal(counter.histogram(), np.bincount([held[s] for s in live]))
    summary = counter.summary()
    values = np.array([held[s] for s in live])
    assert summary["draws"] == draws and summary["live"] == len(live)
    assert summary["max"] == values.max() and summary["mean"] == pytest.approx(values.mean())
    assert summary["never_replayed"] == pytest.approx(np.mean(values == 0))
    assert summary["retired_never_replayed"] == pytest.approx(np.mean(np.array(retired) == 0))
    # every draw is either still in memory or retired with its item
    assert values.sum() + sum(retired) == draws


def test_replay_counter_refuses_slots_out_of_range() -> None:
    counter = ReplayCounter(3)
    with pytest.raises(ValueError, match=r"indices should be slots in \[0, 3\)"):
        counter.observe_draw([0, 3])
    assert counter.draws == 0 and not counter.counts.any()


def test_td_snapshot_is_the_quantiles_of_the_sorted_priorities() -> None:
    rng = np.random.default_rng(0)
    td = TDSnapshots(num_quantiles=101)
    memories = [rng.exponential(size=n) for n in (7, 500, 10_000)]
    for step, values in enumerate(memories):
        with_empty = np.concatenate([values, [np.nan, np.nan]])  # empty slots are left out
        td.record(step * 100, rng.permutation(with_empty))
    assert td.steps == [0, 100, 200] and td.sizes == [7, 500, 10_000]
    for i, values in enumerate(memories):
        levels = np.linspace(0.0, 1.0, 101)
        np.testing.assert_allclose(td.quantiles[i], np.quantile(np.sort(values), levels), rtol=1e-12)
        assert td.maxima[i] == values.max()
        x, y = td.sorted_normalised(i)
        np.testing.assert_allclose(y, np.quantile(values, levels)[::-1] / values.max(), rtol=1e-12)
        assert y[0] == 1.0 and np.all(np.diff(y) <= 0) and x[0] == 0.0 and x[-1] == 1.0
    td.record(999, [np.nan])  # nothing filled: nothing recorded
    assert len(td) == 3


@pytest.mark.parametrize("alpha", [0.6, 1.0])
def test_effective_probability_is_equation_1(alpha: float) -> None:
    """P(i) = (p_i + ε)^α / Σ_k (p_k + ε)^α over the filled slots (Eq. 1), an empty slot left out."""
    eps = 1e-3
    s = PrioritizedSampler(6, alpha=alpha, eps=eps, size=5, seed=0)
    p = np.array([0.0, 0.5, 2.0, 0.01, 1.0])
    s.update_priorities(np.arange(5), p)
    eff = effective_probability(s)
    np.testing.assert_array_equal(eff.slots, np.arange(5))
    np.testing.assert_array_equal(eff.errors, p)
    mass = (p + eps) ** alpha
    np.testing.assert_allclose(eff.probabilities, mass / mass.sum(), rtol=1e-12)
    assert eff.uniform == pytest.approx(1 / 5)
    binned = eff.binned(bins=3)  # edges: geomspace(0.01, 2, 4)
    assert binned.zero_error == 1 and sum(binned.count) == 4
    edges = np.geomspace(0.01, 2.0, 4)
    which = np.clip(np.searchsorted(edges, p[1:], side="right") - 1, 0, 2)
    for b, err_mean, p_mean in zip(sorted(set(which)), binned.error, binned.probability, strict=True):
        np.testing.assert_allclose(err_mean, p[1:][which == b].mean())
        np.testing.assert_allclose(p_mean, eff.probabilities[1:][which == b].mean())


def test_effective_probability_of_the_rank_backend() -> None:
    """Rank: P(i) = rank(i)^-α / Σ_r r^-α, rank 1 for the largest |δ|."""
    alpha = 0.7
    s = PrioritizedSampler(4, alpha=alpha, backend="rank", seed=0)
    s.update_priorities([0, 1, 2, 3], [0.3, 0.9, 0.1, 0.5])
    ranks = np.array([3, 1, 4, 2])
    mass = ranks ** (-alpha)
    np.testing.assert_allclose(effective_probability(s).probabilities, mass / mass.sum(), rtol=1e-9)


def test_weight_stats_equal_numpy_on_the_recorded_weights() -> None:
    rng = np.random.default_rng(1)
    batches = [rng.uniform(0.0, 1.0, 32).astype(np.float32) for _ in range(11)]
    exact = WeightStats(low=0.1)
    merged = WeightStats(low=0.1, max_rows=4)  # rows merged in pairs: each still exact
    for step, w in enumerate(batches):
        exact.record(step, w)
        merged.record(step, w)
    for step, row in enumerate(exact.rows()):
        w = batches[step].astype(np.float64)
        assert row["first_step"] == row["last_step"] == step
        assert row["mean"] == pytest.approx(w.mean()) and row["min"] == w.min() and row["max"] == w.max()
        assert row["below"] == pytest.approx(np.mean(w < 0.1))
    rows = merged.rows()
    assert len(rows) <= 4 and sum(r["count"] for r in rows) == 11 * 32
    assert rows[0]["first_step"] == 0 and rows[-1]["last_step"] == 10
    for row in rows:
        group = np.concatenate(batches[int(row["first_step"]) : int(row["last_step"]) + 1]).astype(np.float64)
        assert row["count"] == group.shape[0]
        assert row["mean"] == pytest.approx(group.mean()) and row["min"] == group.min()
        assert row["max"] == group.max() and row["below"] == pytest.approx(np.mean(group < 0.1))
    for a, b in itertools.pairwise(rows):  # contiguous, in order
        assert b["first_step"] == a["last_step"] + 1


def _fed_bundle(tmp_path: Path) -> tuple[Diagnostics, PrioritizedSampler]:
    """A sliding-window memory of 16 slots fed 64 writes, with draws and updates in between."""
    s = PrioritizedSampler(16, alpha=0.6, beta=0.4, size=0, seed=3)
    diag = Diagnostics(16, num_quantiles=11, bins=5)
    rng = np.random.default_rng(2)
    for t in range(64):
        slot = np.array([t % 16])
        s.add(slot)
        diag.on_write(slot)
        if t >= 8:
            draw = s.sample(4)
            diag.on_draw(t, draw)
            errors = rng.exponential(size=4)
            s.update_priorities(draw.indices, errors)
            diag.on_update(draw.indices, errors)
        if t % 16 == 15:
            diag.snapshot(t, s)
    return diag, s


def test_bundle_records_plots_and_saves(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    diag, s = _fed_bundle(tmp_path)
    assert diag.counter is not None
    assert diag.counter.draws == 56 * 4 and len(diag.td) == 4 and len(diag.probability) == 4
    diag.snapshot(63, s)  # the step of the last snapshot: nothing new
    assert len(diag.td) == 4
    assert diag.counter.retired.sum() == 64 - 16  # every overwrite retired an item
    paths = diag.plot(tmp_path / "run" / "diagnostics", title="test")
    names = sorted(p.name for p in paths)
    assert names == [
        "diagnostics_probability_vs_error.png",
        "diagnostics_replay_counts.png",
        "diagnostics_td_sorted.png",
        "diagnostics_weights.png",
    ]
    for p in paths:
        assert p.read_bytes()[:8] == PNG and p.stat().st_size > 5000
    saved = json.loads(diag.save_json(tmp_path / "run" / "diagnostics.json").read_text())
    assert saved["replay_counts"]["histogram"] == diag.counter.histogram().tolist()
    assert saved["td_snapshots"]["steps"] == [15, 31, 47, 63]
    assert saved["updates"] == 56 * 4 and len(saved["weights"]["rows"]) == 56


def test_plot_probability_vs_error_alone(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    s = PrioritizedSampler(50, alpha=0.7, backend="rank", seed=0)
    s.update_priorities(np.arange(50), np.random.default_rng(0).exponential(size=50))
    eff = effective_probability(s)
    assert isinstance(eff, EffectiveProbability)
    path = plot_probability_vs_error(tmp_path / "p.png", eff)
    assert path.read_bytes()[:8] == PNG


def test_on_draw_accepts_torch_weights() -> None:
    torch = pytest.importorskip("torch")
    diag = Diagnostics(4)
    diag.on_write([0, 1, 2, 3])
    draw = Draw(np.array([1, 1]), torch.tensor([0.5, 1.0]), np.array([0.25, 0.25]))  # type: ignore[arg-type]
    diag.on_draw(0, draw)
    assert diag.counter is not None and diag.counter.counts.tolist() == [0, 2, 0, 0]
    assert diag.weights.rows()[0]["mean"] == 0.75


def test_lightning_callback_records_draws_and_writes_files(tmp_path: Path) -> None:
    pl = pytest.importorskip("lightning.pytorch")
    from prisample.lightning import PrioritizedSamplingCallback
    from tests.test_lightning_callback import N, TinyData, TinyModel, fit

    pl.seed_everything(0, verbose=False)
    model, data = TinyModel(), TinyData(beta=0.5)
    diag = Diagnostics()
    callback = PrioritizedSamplingCallback(diagnostics=diag, diagnostics_dir=tmp_path)
    fit(model, data, max_steps=12, callback=callback, log_every_n_steps=4)
    assert diag.counter is not None and diag.counter.live.all()  # a dataset: every example is there
    trained = np.concatenate([b.numpy() for b in model.batches])
    np.testing.assert_array_equal(diag.counter.counts, np.bincount(trained, minlength=N))
    assert diag.updates == trained.shape[0]
    assert diag.td.steps == [4, 8, 12]
    weights = np.concatenate([w.numpy() for w in model.weights]).astype(np.float64)
    rows = diag.weights.rows()
    assert sum(r["count"] for r in rows) == weights.shape[0]
    assert min(r["min"] for r in rows) == pytest.approx(weights.min())
    assert (tmp_path / "diagnostics.json").exists()
    assert (tmp_path / "diagnostics_td_sorted.png").read_bytes()[:8] == PNG


def test_recipe_flag_writes_diagnostics(tmp_path: Path) -> None:
    """A 300-step CartPole run with --diagnostics: every draw counted, a snapshot per metrics row."""
    pytest.importorskip("gymnasium")
    from recipes.dqn.run import train
    from tests.test_atari_ddqn import _cartpole

    cfg = _cartpole(
        tmp_path, run_name="diag", diagnostics=True, total_steps=300, eval_every=300, checkpoint_memory=False
    )
    result = train(cfg)
    run = tmp_path / "diag"
    saved = json.loads((run / "diagnostics.json").read_text())
    counts = saved["replay_counts"]
    assert counts["summary"]["draws"] == result.updates * cfg.batch_size > 0
    assert saved["updates"] == result.updates * cfg.batch_size
    assert saved["td_snapshots"]["steps"] == [100, 200, 300]
    with (run / "metrics.csv").open() as f:  # the memory is not full: every transition still in it
        size = float(list(csv.DictReader(f))[-1]["replay/size"])
    assert (
        counts["summary"]["writes"] == counts["summary"]["live"] == size == saved["td_snapshots"]["sizes"][-1]
    )
    histogram = np.array(counts["histogram"])
    retired = np.array(counts["retired_histogram"])
    drawn = (np.arange(histogram.shape[0]) * histogram).sum() + (np.arange(retired.shape[0]) * retired).sum()
    assert drawn == result.updates * cfg.batch_size
    for name in ("td_sorted", "probability_vs_error", "weights", "replay_counts"):
        assert (run / f"diagnostics_{name}.png").read_bytes()[:8] == PNG
