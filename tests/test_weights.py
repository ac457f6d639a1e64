"""Importance-sampling weights ``w_i = (N · P(i))^-β`` (Schaul et al. 2016, Sec. 3.4) by hand,
for the three normalisations, and the linear β schedule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from prisample import LinearSchedule, PrioritizedSampler, importance_weights

# ------------------------------------------------------------------------------------------------
# the pure function
# ------------------------------------------------------------------------------------------------


def test_importance_weights_by_hand():
    p = [0.5, 0.25, 0.125]
    # raw: (N P)^-β with N = 4, β = 1: (2)^-1, (1)^-1, (0.5)^-1
    np.testing.assert_allclose(importance_weights(p, 4, 1.0, "none"), [0.5, 1.0, 2.0], rtol=1e-7)
    # batch: divided by the batch's largest weight, 2
    np.testing.assert_allclose(importance_weights(p, 4, 1.0, "batch"), [0.25, 0.5, 1.0], rtol=1e-7)
    # memory: divided by (N P_min)^-β with P_min = 1/16 → (4/16)^-1 = 4
    np.testing.assert_allclose(
        importance_weights(p, 4, 1.0, "memory", min_probability=1 / 16), [0.125, 0.25, 0.5], rtol=1e-7
    )
    # β = 1/2: square roots of the above
    np.testing.assert_allclose(
        importance_weights(p, 4, 0.5, "none"), [math.sqrt(0.5), 1.0, math.sqrt(2.0)], rtol=1e-7
    )
    np.testing.assert_allclose(importance_weights(p, 4, 0.5, "batch"), [0.5, math.sqrt(0.5), 1.0], rtol=1e-7)
    np.testing.assert_allclose(
        importance_weights(p, 4, 0.5, "memory", min_probability=1 / 16),
        [math.sqrt(0.125), 0.5, math.sqrt(0.5)],
        rtol=1e-7,
    )


def test_importance_weights_docstring_example_and_dtype():
    w = importance_weights([0.5, 0.25], n=4, beta=1.0, normalize="batch")
    assert w.dtype == np.float32
    assert w.tolist() == [0.5, 1.0]


@pytest.mark.parametrize("normalize", ["memory", "batch", "none"])
def test_importance_weights_beta_zero_is_one(normalize):
    w = importance_weights([0.9, 0.05, 0.05], 3, 0.0, normalize, min_probability=0.05)
    np.testing.assert_array_equal(w, np.ones(3, dtype=np.float32))


def test_importance_weights_memory_default_normalisation_is_memory():
    w = importance_weights([0.5, 0.25], 4, 1.0, min_probability=0.25)
    np.testing.assert_allclose(w, [0.5, 1.0], rtol=1e-7)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        (dict(probabilities=[0.0, 0.5], n=2, beta=0.5, normalize="none"), "probabilities"),
        (dict(probabilities=[1.5], n=2, beta=0.5, normalize="none"), "probabilities"),
        (dict(probabilities=[float("nan")], n=2, beta=0.5, normalize="none"), "probabilities"),
        (dict(probabilities=[[0.5]], n=2, beta=0.5, normalize="none"), "probabilities"),
        (dict(probabilities=[0.5], n=0, beta=0.5, normalize="none"), "n"),
        (dict(probabilities=[0.5], n=2, beta=1.5, normalize="none"), "beta"),
        (dict(probabilities=[0.5], n=2, beta=-0.1, normalize="none"), "beta"),
        (dict(probabilities=[0.5], n=2, beta=0.5, normalize="max"), "normalize"),
        (dict(probabilities=[0.5], n=2, beta=0.5, normalize="memory"), "min_probability"),
        (
            dict(probabilities=[0.5], n=2, beta=0.5, normalize="memory", min_probability=0.0),
            "min_probability",
        ),
    ],
)
def test_importance_weights_rejects_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        importance_weights(**kwargs)


# ------------------------------------------------------------------------------------------------
# the sampler's weights
# ------------------------------------------------------------------------------------------------


def proportional(weight_norm: str, beta: float) -> PrioritizedSampler:
    """P = [1/8, 1/8, 1/8, 5/8] (α = 1, ε negligible), N = 4."""
    s = PrioritizedSampler(4, alpha=1.0, beta=beta, eps=1e-12, weight_norm=weight_norm, seed=0)
    s.update_priorities([0, 1, 2, 3], [1.0, 1.0, 1.0, 5.0])
    np.testing.assert_allclose(s.probabilities([0, 3]), [1 / 8, 5 / 8], rtol=1e-9)
    return s


@pytest.mark.parametrize(
    ("weight_norm", "beta", "expected"),
    [
        ("none", 1.0, [2.0, 2.0, 2.0, 0.4]),  # (4 · 1/8)^-1, (4 · 5/8)^-1
        ("memory", 1.0, [1.0, 1.0, 1.0, 0.2]),  # ÷ (4 · 1/8)^-1 = 2
        ("none", 0.5, [math.sqrt(2)] * 3 + [math.sqrt(0.4)]),
        ("memory", 0.5, [1.0, 1.0, 1.0, math.sqrt(0.2)]),
        ("batch", 1.0, [1.0, 1.0, 1.0, 0.2]),  # the batch is the whole memory here
        ("none", 0.0, [1.0] * 4),
        ("memory", 0.0, [1.0] * 4),
        ("batch", 0.0, [1.0] * 4),
    ],
)
def test_proportional_weights_by_hand(weight_norm, beta, expected):
    s = proportional(weight_norm, beta)
    w = s.weights([0, 1, 2, 3])
    assert w.dtype == np.float32
    np.testing.assert_allclose(w, expected, rtol=1e-6)


def test_batch_weights_use_the_batch_maximum():
    s = proportional("batch", 1.0)
    np.testing.assert_allclose(s.weights([3]), [1.0], rtol=1e-7)  # alone, it is its own maximum
    np.testing.assert_allclose(s.weights([0, 3]), [1.0, 0.2], rtol=1e-6)
    s.update_priorities([0, 1, 2], [5.0, 5.0, 5.0])
    np.testing.assert_allclose(s.weights([0, 3]), [1.0, 1.0], rtol=1e-6)


def test_memory_weights_use_the_memory_minimum_not_the_batch():
    s = proportional("memory", 1.0)
    np.testing.assert_allclose(s.weights([3]), [0.2], rtol=1e-6)  # not 1: slot 0 is in the memory
    s.remove([0, 1, 2])
    np.testing.assert_allclose(s.weights([3]), [1.0], rtol=1e-6)  # P = 1, N = 1


@pytest.mark.parametrize("weight_norm", ["memory", "batch", "none"])
@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_draw_weights_follow_the_formula(weight_norm, beta):
    """Weights of a draw are ``(N P)^-β`` of the reported probabilities, normalised as chosen."""
    rng = np.random.default_rng(0)
    s = PrioritizedSampler(50, alpha=0.7, beta=beta, weight_norm=weight_norm, size=40, seed=1)
    s.update_priorities(np.arange(40), rng.exponential(size=40))
    p_all = s.probabilities(np.arange(40))
    for _ in range(20):
        d = s.sample(8)
        raw = (40 * d.probabilities) ** -beta
        if weight_norm == "memory":
            expected = raw / (40 * p_all.min()) ** -beta
        elif weight_norm == "batch":
            expected = raw / raw.max()
        else:
            expected = raw
        np.testing.assert_allclose(d.weights, expected, rtol=2e-6)
        np.testing.assert_allclose(d.probabilities, p_all[d.indices], rtol=1e-12)


@pytest.mark.parametrize(
    ("weight_norm", "expected"),
    [("none", [0.75, 1.5]), ("memory", [0.5, 1.0]), ("batch", [0.5, 1.0])],
)
def test_rank_weights_by_hand(weight_norm, expected):
    """N = 2, α = 1: P(rank 1) = 1/(1 + 1/2) = 2/3, P(rank 2) = 1/3; β = 1: (2P)^-1."""
    s = PrioritizedSampler(2, alpha=1.0, beta=1.0, backend="rank", weight_norm=weight_norm, seed=0)
    s.update_priorities([0, 1], [3.0, 0.5])
    np.testing.assert_allclose(s.probabilities([0, 1]), [2 / 3, 1 / 3], rtol=1e-9)
    np.testing.assert_allclose(s.weights([0, 1]), expected, rtol=1e-6)


@pytest.mark.parametrize("weight_norm", ["memory", "batch", "none"])
@pytest.mark.parametrize("backend", ["uniform", "greedy"])
def test_uniform_and_greedy_weights_are_one(backend, weight_norm):
    s = PrioritizedSampler(7, backend=backend, beta=1.0, weight_norm=weight_norm, size=5, seed=0)
    s.update_priorities(np.arange(5), [0.0, 1.0, 9.0, 2.0, 3.0])
    np.testing.assert_allclose(s.weights(np.arange(5)), 1.0, rtol=1e-6)
    d = s.sample(4)
    assert d.weights.dtype == np.float32
    np.testing.assert_allclose(d.weights, 1.0, rtol=1e-6)


@pytest.mark.parametrize("backend", ["proportional", "rank"])
def test_beta_one_memory_weights_are_probability_ratios(backend):
    """β = 1, memory: ``w_i = P_min / P(i)`` (full correction up to the common scale)."""
    rng = np.random.default_rng(2)
    s = PrioritizedSampler(30, alpha=0.8, beta=1.0, backend=backend, seed=0)
    s.update_priorities(np.arange(30), rng.random(30))
    p = s.probabilities(np.arange(30))
    np.testing.assert_allclose(s.weights(np.arange(30)), p.min() / p, rtol=1e-6)
    assert s.weights(np.arange(30)).max() == pytest.approx(1.0)


# ------------------------------------------------------------------------------------------------
# β schedule
# ------------------------------------------------------------------------------------------------


def test_linear_schedule_values():
    schedule = LinearSchedule(0.4, 1.0, 10)
    assert schedule(0) == pytest.approx(0.4)
    assert schedule(5) == pytest.approx(0.7)
    assert schedule(10) == pytest.approx(1.0)
    assert schedule(11) == pytest.approx(1.0)
    assert schedule(10**9) == pytest.approx(1.0)
    assert schedule(-3) == pytest.approx(0.4)
    assert LinearSchedule(1.0, 0.0, 4)(1) == pytest.approx(0.75)
    assert LinearSchedule(0.5, 1.0, 100)(50) == pytest.approx(0.75)
    assert LinearSchedule(0.3, 0.3, 1)(7) == pytest.approx(0.3)


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ((0.4, 1.0, 0), "steps"),
        ((0.4, 1.0, -1), "steps"),
        ((0.4, 1.0, 2.5), "steps"),
        ((float("nan"), 1.0, 10), "start"),
        ((0.4, float("inf"), 10), "end"),
    ],
)
def test_linear_schedule_validation(args, name):
    with pytest.raises(ValueError, match=name):
        LinearSchedule(*args)


def test_sampler_beta_schedule_advances_once_per_sample():
    """β is the schedule at the number of ``sample`` calls made so far (Sec. 3.4 annealing)."""
    s = PrioritizedSampler(
        4, alpha=1.0, eps=1e-12, beta=LinearSchedule(0.0, 1.0, 2), weight_norm="none", seed=0
    )
    s.update_priorities([0, 1, 2, 3], [1.0, 1.0, 1.0, 5.0])  # N P = [0.5, 0.5, 0.5, 2.5]
    expected_betas = [0.0, 0.5, 1.0, 1.0]
    for beta in expected_betas:
        assert s.beta == pytest.approx(beta)
        np.testing.assert_allclose(s.weights([0, 3]), [0.5**-beta, 2.5**-beta], rtol=1e-6)
        assert s.beta == pytest.approx(beta)  # weights() does not advance the schedule
        d = s.sample(4)
        np.testing.assert_allclose(d.weights, (4 * d.probabilities) ** -beta, rtol=1e-6)


def test_sampler_beta_schedule_advances_per_batch_when_iterated():
    s = PrioritizedSampler(8, beta=LinearSchedule(0.4, 1.0, 10), batch_size=3, num_samples=10, seed=0)
    assert len(list(s)) == 10  # batches of 3, 3, 3, 1
    assert s.beta == pytest.approx(0.4 + 0.6 * 4 / 10)
    assert s.state_dict()["step"] == 4


def test_sampler_beta_can_be_set():
    s = PrioritizedSampler(4, beta=0.4, seed=0)
    s.beta = 1.0
    assert s.beta == 1.0
    s.beta = LinearSchedule(0.5, 1.0, 4)
    assert s.beta == pytest.approx(0.5)
    with pytest.raises(ValueError, match="beta"):
        s.beta = LinearSchedule(0.5, 1.5, 4)
    with pytest.raises(ValueError, match="beta"):
        PrioritizedSampler(4, beta=LinearSchedule(-0.1, 1.0, 4))
