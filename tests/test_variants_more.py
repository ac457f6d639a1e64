"""Appendix variants (Schaul et al. 2016, App. A), LAP/PAL, LaBER, R2D2/PSER sequence priorities and
Loshchilov–Hutter batch selection.

Every expected value is computed by hand, or by a slow reference written here from the formula
(Python loops over items, dicts instead of arrays, enumeration of all batches); nothing here
shares code with ``prisample``.
"""

from __future__ import annotations

import copy
import itertools
import math

import numpy as np
import pytest
import torch

from prisample import (
    LaBER,
    OnlineBatchSelection,
    PrioritizedSampler,
    StalenessBonus,
    asymmetric_priorities,
    lap_loss,
    lap_priorities,
    loshchilov_hutter_priorities,
    loshchilov_hutter_probabilities,
    pal_loss,
    predecessor_boost,
    pser_priorities,
    ring_predecessors,
    sequence_priority,
)
from tests.reference import assert_frequencies, assert_same

torch.set_num_threads(1)


# ------------------------------------------------------------------------------------------------
# asymmetric errors
# ------------------------------------------------------------------------------------------------


def test_asymmetric_priorities_by_hand():
    p = asymmetric_priorities([2.0, -2.0, 0.0, -0.5, 4.0], positive=1.5, negative=0.25)
    assert p.tolist() == [3.0, 0.5, 0.0, 0.125, 6.0]
    assert asymmetric_priorities(torch.tensor([-1.0, 1.0])).tolist() == [0.5, 1.0]
    for bad, error in [(np.nan, ValueError), (np.inf, ValueError)]:
        with pytest.raises(error, match="td_error"):
            asymmetric_priorities([1.0, bad])
    with pytest.raises(TypeError, match="td_error"):
        asymmetric_priorities(["a"])
    with pytest.raises(ValueError, match="positive"):
        asymmetric_priorities([1.0], positive=-1.0)
    with pytest.raises(TypeError, match="negative"):
        asymmetric_priorities([1.0], negative="1")


# ------------------------------------------------------------------------------------------------
# staleness bonus
# ------------------------------------------------------------------------------------------------


def test_staleness_bonus_by_hand():
    """``p_i(t) = p_i + c (t − t_i)``: slot 1 replayed at t=4 restarts its bonus; 2 never does."""
    b = StalenessBonus(4, rate=0.5)
    assert b.update([0, 1, 2], [1.0, 2.0, 3.0]).tolist() == [1.0, 2.0, 3.0]
    b.advance(4)
    b.update([1], [0.5])
    b.advance(2)
    idx, p = b.refresh()
    assert idx.tolist() == [0, 1, 2]  # slot 3 never tracked
    assert p.tolist() == [1.0 + 0.5 * 6, 0.5 + 0.5 * 2, 3.0 + 0.5 * 6]
    assert b.priorities([2, 0]).tolist() == [6.0, 4.0]
    b.remove([0])
    assert b.refresh()[0].tolist() == [1, 2]
    s = PrioritizedSampler(4, alpha=1.0, beta=0.0, eps=0.0, size=3, seed=0)
    s.update_priorities(*b.refresh())
    np.testing.assert_allclose(s.probabilities([1, 2]), np.array([1.5, 6.0]) / (1.0 + 1.5 + 6.0))


def test_staleness_bonus_orders_like_the_papers_shifted_priority():
    """App. A: subtracting ``c·t_i`` at each update keeps the same order as the bonus at every t."""
    rng = np.random.default_rng(1)
    b = StalenessBonus(20, rate=0.3)
    shifted = {}
    for _ in range(40):
        idx = rng.choice(20, size=3, replace=False)
        err = rng.exponential(size=3)
        b.update(idx, err)
        for i, e in zip(idx.tolist(), err.tolist(), strict=True):
            shifted[i] = e - 0.3 * b.step
        b.advance(int(rng.integers(0, 3)))
        slots, p = b.refresh()
        assert sorted(shifted) == slots.tolist()
        # p_i(t) = (p_i − c·t_i) + c·t: one shift for all slots, hence the same order
        np.testing.assert_allclose(p - [shifted[i] for i in slots.tolist()], 0.3 * b.step, rtol=1e-12)


def test_staleness_bonus_state_and_validation():
    b = StalenessBonus(3, rate=0.25)
    b.update([0, 2], [1.0, 2.0])
    b.advance(3)
    other = StalenessBonus(3, rate=0.0)
    other.load_state_dict(copy.deepcopy(b.state_dict()))
    assert_same(other.state_dict(), b.state_dict())
    np.testing.assert_array_equal(other.refresh()[1], b.refresh()[1])
    before = copy.deepcopy(b.state_dict())
    bad = b.state_dict()
    bad["last"] = np.array([0, 0, 9])  # after the current step
    with pytest.raises(ValueError, match="last"):
        b.load_state_dict(bad)
    with pytest.raises(ValueError, match="rate"):
        b.load_state_dict({**b.state_dict(), "rate": -1.0})
    assert_same(b.state_dict(), before)
    with pytest.raises(ValueError, match="rate"):
        StalenessBonus(3, rate=-0.1)
    with pytest.raises(ValueError, match="priorities"):
        b.update([1], [-1.0])
    with pytest.raises(ValueError, match="indices"):
        b.update([3], [1.0])
    with pytest.raises(ValueError, match="tracked"):
        b.priorities([1])
    with pytest.raises(ValueError, match="steps"):
        b.advance(-1)
    assert_same(b.state_dict(), before)


# ------------------------------------------------------------------------------------------------
# predecessor boost
# ------------------------------------------------------------------------------------------------


def reference_boost(indices, priorities, pred, current, terminal, scale, combine):
    """Written from App. A: own new values (max over duplicates), then each predecessor gets
    (its value in this call, or its current one) + scale·p  (or max with it)."""
    own = {}
    for i, p in zip(indices, priorities, strict=True):
        own[i] = max(own.get(i, -math.inf), p)
    boost = {}
    for i, p in zip(indices, priorities, strict=True):
        j = pred[i]
        if j < 0 or math.isnan(current[j]) or (terminal is not None and terminal[j]):
            continue
        boost[j] = max(boost.get(j, -math.inf), scale * p)
    out = dict(own)
    for j, b in boost.items():
        base = own.get(j, current[j])
        out[j] = base + b if combine == "add" else max(base, b)
    keys = sorted(out)
    return keys, [out[k] for k in keys]


def test_predecessor_boost_by_hand():
    pred = [-1, 0, 1, 2, -1, 4]  # episodes: slots 0-3 and 4-5
    current = [1.0, 2.0, 0.5, 3.0, 7.0, np.nan]
    idx, p = predecessor_boost([3, 5], [0.25, 4.0], pred, current)  # 5's predecessor 4; 3's is 2
    assert idx.tolist() == [2, 3, 4, 5]
    assert p.tolist() == [0.5 + 0.25, 0.25, 7.0 + 4.0, 4.0]
    # the predecessor was replayed in the same call: its new value is the base
    idx, p = predecessor_boost([1, 2], [5.0, 1.5], pred, current)
    assert (idx.tolist(), p.tolist()) == ([0, 1, 2], [1.0 + 5.0, 5.0 + 1.5, 1.5])
    # terminal predecessor and combine="max", scale
    terminal = np.array([False, False, True, False, False, False])
    idx, p = predecessor_boost([3, 1], [2.0, 2.0], pred, current, terminal=terminal, scale=0.5, combine="max")
    assert (idx.tolist(), p.tolist()) == ([0, 1, 3], [1.0, 2.0, 2.0])


def test_predecessor_boost_against_reference():
    rng = np.random.default_rng(7)
    for trial in range(200):
        n = int(rng.integers(1, 9))
        pred = np.where(rng.random(n) < 0.7, rng.integers(0, n, n), -1)
        current = np.where(rng.random(n) < 0.8, rng.exponential(size=n), np.nan)
        k = int(rng.integers(1, 6))
        idx = rng.integers(0, n, k)
        p = rng.exponential(size=k).round(2)
        terminal = rng.random(n) < 0.3 if trial % 2 else None
        combine = "add" if trial % 3 else "max"
        got = predecessor_boost(idx, p, pred, current, terminal=terminal, scale=0.7, combine=combine)
        want = reference_boost(
            idx.tolist(), p.tolist(), pred.tolist(), current.tolist(), terminal, 0.7, combine
        )
        assert got[0].tolist() == want[0]
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


def test_predecessor_boost_validation():
    pred, current = [-1, 0], [1.0, 1.0]
    for kwargs, error, name in [
        ({"indices": [2]}, ValueError, "indices"),
        ({"priorities": [-1.0]}, ValueError, "priorities"),
        ({"predecessors": [-1, 5]}, ValueError, "predecessors"),
        ({"current": [1.0]}, ValueError, "current"),
        ({"current": [1.0, -2.0]}, ValueError, "current"),
        ({"combine": "sum"}, ValueError, "combine"),
        ({"scale": -1.0}, ValueError, "scale"),
        ({"terminal": [1, 0]}, ValueError, "terminal"),
    ]:
        args = {"indices": [1], "priorities": [1.0], "predecessors": pred, "current": current, **kwargs}
        with pytest.raises(error, match=name):
            predecessor_boost(
                args.pop("indices"),
                args.pop("priorities"),
                args.pop("predecessors"),
                args.pop("current"),
                **args,
            )


# ------------------------------------------------------------------------------------------------
# sequences: R2D2 and PSER
# ------------------------------------------------------------------------------------------------


def test_sequence_priority_against_loops():
    rng = np.random.default_rng(3)
    delta = rng.normal(size=(6, 5))
    mask = rng.random((6, 5)) < 0.7
    mask[:, 0] = True
    for eta in (0.0, 0.9, 1.0):
        want = []
        for row, keep in zip(delta.tolist(), mask.tolist(), strict=True):
            values = [abs(d) for d, k in zip(row, keep, strict=True) if k]
            want.append(eta * max(values) + (1 - eta) * sum(values) / len(values))
        np.testing.assert_allclose(sequence_priority(delta, eta=eta, mask=mask), want, rtol=1e-12)
    padded = np.where(mask, delta, np.nan)  # padding may hold anything where masked
    np.testing.assert_allclose(sequence_priority(padded, mask=mask), sequence_priority(delta, mask=mask))
    assert sequence_priority([[1.0, -3.0, 2.0]]).tolist() == pytest.approx([0.9 * 3 + 0.1 * 2])


def test_sequence_priority_validation():
    with pytest.raises(ValueError, match="2-D"):
        sequence_priority([1.0, 2.0])
    with pytest.raises(ValueError, match="eta"):
        sequence_priority([[1.0]], eta=1.5)
    with pytest.raises(ValueError, match="mask"):
        sequence_priority([[1.0, 2.0]], mask=[[False, False]])
    with pytest.raises(ValueError, match="mask"):
        sequence_priority([[1.0, 2.0]], mask=[[1, 0]])
    with pytest.raises(ValueError, match="td_errors"):
        sequence_priority([[1.0, np.nan]])


def test_ring_predecessors_by_hand():
    assert ring_predecessors([3, 3, 3, 4, 4, -1]).tolist() == [-1, 0, 1, -1, 3, -1]
    # ring wrapped: slot 2 is the oldest (next overwritten); slots 0, 1 continue the episode in 5
    assert ring_predecessors([9, 9, 8, 8, 9, 9], oldest=2).tolist() == [5, 0, -1, 2, -1, 4]
    # one episode fills the ring: the oldest slot's neighbour is the newest step, not its predecessor
    assert ring_predecessors([5, 5, 5], oldest=1).tolist() == [2, -1, 1]
    with pytest.raises(ValueError, match="oldest"):
        ring_predecessors([1, 1], oldest=2)


def reference_pser(indices, priorities, pred, current, decay, window, eta):
    own = {}
    for i, p in zip(indices, priorities, strict=True):
        old = current[i]
        value = p if math.isnan(old) else max(p, eta * old)
        own[i] = max(own.get(i, -math.inf), value)
    passed = {}
    for i, p in zip(indices, priorities, strict=True):
        old = current[i]
        value = p if math.isnan(old) else max(p, eta * old)
        node = i
        for k in range(1, window + 1):
            node = pred[node]
            if node < 0 or math.isnan(current[node]):
                break
            passed[node] = max(passed.get(node, -math.inf), decay**k * value)
    out = dict(own)
    for j, v in passed.items():
        out[j] = max(own.get(j, current[j]), v)
    keys = sorted(out)
    return keys, [out[k] for k in keys]


def test_pser_by_hand():
    pred = ring_predecessors([1, 1, 1, 1, 2, 2])
    current = [1.0, 1.0, 3.0, 1.0, 0.1, 0.1]
    idx, p = pser_priorities([3], [8.0], pred, current, decay=0.5, window=2)
    assert (idx.tolist(), p.tolist()) == ([1, 2, 3], [2.0, 4.0, 8.0])  # window stops at k=2
    idx, p = pser_priorities([5], [8.0], pred, current, decay=0.5, window=3)
    assert (idx.tolist(), p.tolist()) == ([4, 5], [4.0, 8.0])  # episode start stops it
    idx, p = pser_priorities([2], [0.5], pred, current, decay=0.5, window=1, eta=0.7)
    assert idx.tolist() == [1, 2]
    assert p.tolist() == pytest.approx([0.5 * 2.1, 2.1])  # own max(0.5, 0.7·3); passed on: max(1, ρ·2.1)


def test_pser_against_reference():
    rng = np.random.default_rng(11)
    for _ in range(200):
        n = int(rng.integers(1, 10))
        episodes = np.sort(rng.integers(0, 3, n))
        episodes[rng.random(n) < 0.1] = -1
        pred = ring_predecessors(episodes, oldest=int(rng.integers(0, n)))
        current = np.where(episodes >= 0, rng.exponential(size=n), np.nan)
        filled = np.flatnonzero(episodes >= 0)
        if filled.shape[0] == 0:
            continue
        idx = rng.choice(filled, size=int(rng.integers(1, 5)))
        p = rng.exponential(size=idx.shape[0])
        decay, window, eta = (
            float(rng.uniform(0.1, 1.0)),
            int(rng.integers(0, 5)),
            float(rng.choice([0.0, 0.7])),
        )
        got = pser_priorities(idx, p, pred, current, decay=decay, window=window, eta=eta)
        want = reference_pser(idx.tolist(), p.tolist(), pred.tolist(), current.tolist(), decay, window, eta)
        assert got[0].tolist() == want[0]
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


def test_pser_validation():
    pred, current = [-1, 0], [1.0, 1.0]
    with pytest.raises(ValueError, match="decay"):
        pser_priorities([1], [1.0], pred, current, decay=1.5, window=1)
    with pytest.raises(ValueError, match="window"):
        pser_priorities([1], [1.0], pred, current, decay=0.5, window=-1)
    with pytest.raises(TypeError, match="window"):
        pser_priorities([1], [1.0], pred, current, decay=0.5, window=1.5)
    with pytest.raises(ValueError, match="eta"):
        pser_priorities([1], [1.0], pred, current, decay=0.5, window=1, eta=-0.1)
    with pytest.raises(ValueError, match="priorities"):
        pser_priorities([1], [np.nan], pred, current, decay=0.5, window=1)


# ------------------------------------------------------------------------------------------------
# LAP and PAL
# ------------------------------------------------------------------------------------------------


def hand_huber(d: float, k: float) -> float:
    return 0.5 * d * d if abs(d) <= k else k * (abs(d) - 0.5 * k)


def test_lap_priorities_and_loss_by_hand():
    d = torch.tensor([-3.0, 0.5, 1.5, 0.0])
    assert lap_priorities(d).tolist() == [3.0, 1.0, 1.5, 1.0]
    assert lap_priorities(d, kappa=0.25).tolist() == [3.0, 0.5, 1.5, 0.25]
    for k in (1.0, 0.6, 2.0):
        want = sum(hand_huber(x, k) for x in d.tolist()) / 4
        assert float(lap_loss(d, kappa=k)) == pytest.approx(want, rel=1e-6)
    # in the sampler: P ∝ max(|δ|, κ)^α with β = 0: unit weights
    s = PrioritizedSampler(4, alpha=0.6, beta=0.0, eps=0.0, seed=0)
    s.update_priorities(np.arange(4), lap_priorities(d))
    mass = np.array([3.0, 1.0, 1.5, 1.0]) ** 0.6
    np.testing.assert_allclose(s.probabilities(np.arange(4)), mass / mass.sum(), rtol=1e-12)
    np.testing.assert_array_equal(s.sample(3).weights, np.ones(3, dtype=np.float32))


def test_lap_pal_validation():
    with pytest.raises(TypeError, match="td_error"):
        lap_loss([1.0])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="td_error"):
        pal_loss(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="td_error"):
        lap_priorities(torch.empty(0))
    with pytest.raises(ValueError, match="kappa"):
        lap_loss(torch.tensor([1.0]), kappa=0.0)
    with pytest.raises(ValueError, match="alpha"):
        pal_loss(torch.tensor([1.0]), alpha=-0.5)
    with pytest.raises(ValueError, match="normalizer"):
        pal_loss(torch.tensor([1.0]), normalizer=0.0)


def _grad(loss_fn, theta: torch.Tensor) -> torch.Tensor:
    t = theta.clone().requires_grad_(True)
    loss_fn(t).backward()
    assert t.grad is not None
    return t.grad


@pytest.mark.parametrize(("alpha", "kappa"), [(0.4, 1.0), (0.6, 0.7), (1.0, 2.0), (0.0, 1.0)])
def test_pal_expected_gradient_equals_lap_by_enumeration(alpha, kappa):
    """Fujimoto et al. 2020: E_uniform[∇ L_PAL] = E_LAP[∇ Huber_κ], checked by enumerating every
    ordered batch of B = 2 drawn with replacement from N = 4 items (a linear model, δ_i = x_i·θ − y_i),
    with λ the memory's mean of max(|δ|, κ)^α; and, with λ estimated on the batch, on the batch
    that is the whole memory."""
    torch.manual_seed(0)
    x = torch.randn(4, 3, dtype=torch.float64)
    y = torch.tensor([0.1, 2.5, -3.0, 0.4], dtype=torch.float64)
    theta = torch.tensor([0.3, -0.2, 0.5], dtype=torch.float64)
    delta = (x @ theta - y).tolist()
    assert any(abs(d) <= kappa for d in delta) and any(abs(d) > kappa for d in delta)
    mass = [max(abs(d), kappa) ** alpha for d in delta]
    prob = [m / sum(mass) for m in mass]
    lam = sum(mass) / 4
    lap = torch.zeros(3, dtype=torch.float64)
    pal = torch.zeros(3, dtype=torch.float64)
    for batch in itertools.product(range(4), repeat=2):
        rows = list(batch)
        weight = math.prod(prob[i] for i in batch)
        lap += weight * _grad(lambda t, r=rows: lap_loss(x[r] @ t - y[r], kappa=kappa), theta)
        pal += (1 / 16) * _grad(
            lambda t, r=rows: pal_loss(x[r] @ t - y[r], alpha=alpha, kappa=kappa, normalizer=lam), theta
        )
    torch.testing.assert_close(pal, lap, rtol=1e-10, atol=1e-12)
    whole = _grad(lambda t: pal_loss(x @ t - y, alpha=alpha, kappa=kappa), theta)
    torch.testing.assert_close(whole, lap, rtol=1e-10, atol=1e-12)
    assert float(lap.abs().max()) > 1e-3


# ------------------------------------------------------------------------------------------------
# LaBER
# ------------------------------------------------------------------------------------------------


def test_laber_kept_positions_follow_scores():
    """Chi-square of the kept positions against ``s_j / Σ s`` (a zero score never kept), and of the
    large batch against uniform over ``[0, size)``."""
    scores = np.array([0.5, 1.0, 0.0, 2.0, 4.0, 0.25, 1.25, 3.0])
    laber = LaBER(batch_size=2, m=4, seed=123)
    kept = np.zeros(8, dtype=np.int64)
    drawn = np.zeros(5, dtype=np.int64)
    for _ in range(20000):
        cand = laber.candidates(5)
        drawn += np.bincount(cand, minlength=5)
        d = laber.select(cand, scores)
        kept += np.bincount(d.positions, minlength=8)
        assert d.indices.tolist() == cand[d.positions].tolist()
    assert kept[2] == 0
    assert_frequencies(kept, scores / scores.sum())
    assert_frequencies(drawn, np.full(5, 0.2))


@pytest.mark.parametrize("norm", ["mean", "max", "lazy"])
def test_laber_weights_by_formula(norm):
    scores = [0.5, 1.0, 0.0, 2.0, 4.0, 0.25]
    laber = LaBER(batch_size=3, m=2, weight_norm=norm, eps=0.5, seed=0)
    s = np.array(scores) + 0.5
    for _ in range(20):
        cand = laber.candidates(100)
        d = laber.select(cand, scores)
        kept = s[d.positions]
        if norm == "mean":
            want = [sum(s) / len(s) / v for v in kept]
        elif norm == "max":
            want = [(1 / v) / max(1 / u for u in kept) for v in kept]
        else:
            want = [1 / v for v in kept]
        np.testing.assert_allclose(d.weights, want, rtol=1e-6)
        np.testing.assert_allclose(d.probabilities, kept / s.sum(), rtol=1e-12)
        assert d.weights.dtype == np.float32 and len(d) == 3


def test_laber_state_round_trip_and_validation():
    a = LaBER(batch_size=3, m=2, weight_norm="max", seed=5)
    a.candidates(10)
    state = copy.deepcopy(a.state_dict())
    b = LaBER(batch_size=1, seed=0)
    b.load_state_dict(state)
    assert_same(b.state_dict(), a.state_dict())
    for _ in range(3):
        ca, cb = a.candidates(50), b.candidates(50)
        assert ca.tolist() == cb.tolist()
        da, db = a.select(ca, np.arange(6.0)), b.select(cb, np.arange(6.0))
        assert da.positions.tolist() == db.positions.tolist()
        assert da.weights.tolist() == db.weights.tolist()
    before = copy.deepcopy(b.state_dict())
    for bad, name in [({"weight_norm": "min"}, "weight_norm"), ({"m": 0}, "m"), ({"rng": {"x": 1}}, "rng")]:
        with pytest.raises(ValueError, match=name):
            b.load_state_dict({**b.state_dict(), **bad})
    assert_same(b.state_dict(), before)
    with pytest.raises(ValueError, match="scores"):
        b.select([1, 2, 3, 4, 5, 6], np.zeros(6))
    with pytest.raises(ValueError, match="scores"):
        b.select([1, 2], [1.0, -1.0])
    with pytest.raises(ValueError, match="scores"):
        b.select([1, 2], [1.0])
    with pytest.raises(ValueError, match="weight_norm"):
        LaBER(4, weight_norm="batch")
    with pytest.raises(ValueError, match="size"):
        b.candidates(0)
    assert_same(b.state_dict(), before)  # rejected calls drew nothing


# ------------------------------------------------------------------------------------------------
# Loshchilov & Hutter
# ------------------------------------------------------------------------------------------------


def test_loshchilov_hutter_probabilities_formula():
    for n, se in [(1, 5.0), (5, 1.0), (10, 100.0), (1000, 1e8)]:
        mass = [1 / math.exp(math.log(se) / n * r) for r in range(1, n + 1)]
        want = [m / sum(mass) for m in mass]
        np.testing.assert_allclose(loshchilov_hutter_probabilities(n, se), want, rtol=1e-12)
        p = loshchilov_hutter_probabilities(n, se)
        assert p[0] / p[-1] == pytest.approx(se ** ((n - 1) / n))
    with pytest.raises(ValueError, match="selection_pressure"):
        loshchilov_hutter_probabilities(4, 0.5)
    with pytest.raises(ValueError, match="n"):
        loshchilov_hutter_probabilities(0, 2.0)


def test_loshchilov_hutter_through_the_sampler():
    """Priorities from the losses, in a proportional sampler with α = 1, ε = 0: each item's
    probability is the formula's at its loss rank (largest loss = rank 1), drawn counts agree."""
    losses = np.array([0.3, 2.0, 0.1, 5.0, 0.7, 1.1])
    rank = {i: r + 1 for r, i in enumerate(sorted(range(6), key=lambda i: -losses[i]))}
    table = loshchilov_hutter_probabilities(6, 50.0)
    want = np.array([table[rank[i] - 1] for i in range(6)])
    s = PrioritizedSampler(6, alpha=1.0, beta=0.0, eps=0.0, seed=2)
    s.update_priorities(np.arange(6), loshchilov_hutter_priorities(losses, 50.0))
    np.testing.assert_allclose(s.probabilities(np.arange(6)), want, rtol=1e-12)
    counts = np.zeros(6, dtype=np.int64)
    for _ in range(3000):
        counts += np.bincount(s.sample(4).indices, minlength=6)
    assert_frequencies(counts, want)


def test_online_batch_selection_rewrites_ranks():
    s = PrioritizedSampler(5, alpha=1.0, beta=0.0, eps=0.0, size=4, seed=0)
    sel = OnlineBatchSelection(s, selection_pressure=32.0, refresh_every=2)
    sel.update([0, 1], [1.0, 3.0])
    np.testing.assert_array_equal(s.priorities[:4], [1.0, 1.0, 1.0, 1.0])  # not due yet
    sel.update([2, 3, 1], [2.0, 0.5, 0.25])  # slot 1 drops to the last rank
    order = [2, 0, 3, 1]  # losses 2.0, 1.0, 0.5, 0.25
    c = math.log(32.0) / 4
    for r, i in enumerate(order, start=1):
        assert s.priorities[i] == pytest.approx(math.exp(-c * r))
    s.add([4])  # a new slot enters at the memory's maximum: tied with rank 1
    assert s.priorities[4] == pytest.approx(math.exp(-c))
    with pytest.raises(ValueError, match="alpha"):
        OnlineBatchSelection(PrioritizedSampler(3, alpha=0.6, eps=0.0), 2.0)
    with pytest.raises(ValueError, match="losses"):
        sel.update([0], [np.nan])
    with pytest.raises(ValueError, match="indices"):
        sel.update([9], [1.0])
    s.alpha = 0.5
    with pytest.raises(ValueError, match="alpha"):
        sel.update([0], [1.0])
    assert sel.losses[0] == 1.0  # the rejected update changed nothing
