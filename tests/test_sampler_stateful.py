"""Random operation sequences against the naive reference model, for every backend.

A hypothesis ``RuleBasedStateMachine`` drives add / update / remove / sample / α and β changes /
rejected calls / ``state_dict`` round trips on a :class:`~prisample.CorrectedSampler` (the
core :class:`~prisample.PrioritizedSampler` until a correction factor is set) and on
:class:`tests.reference.ReferenceSampler`, and after every step compares size, ``max_priority``,
raw priorities, correction factors, ``P(i)`` of every valid slot and the importance weights
``c_i (N·P(i))^-β`` under the configured normalisation.  ``ε = 0`` is among the settings, so zero
priorities of probability 0 (never drawn, weight 0) and memories that cannot be drawn from occur.
Draws must return valid slots with the weights of the formula; proportional and
rank draws must be stratified (draw ``j`` lies in the ``j``-th equal-mass range).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from prisample import CorrectedSampler, LinearSchedule
from tests.reference import (
    NORMS,
    ReferenceSampler,
    assert_draws_equal,
    assert_same,
    clone,
    power_law,
)

CAPACITIES = st.sampled_from([1, 2, 3, 5, 6, 8, 13])
ALPHAS = st.one_of(st.sampled_from([0.0, 0.5, 0.6, 0.7, 1.0, 1.5]), st.floats(0.0, 2.0))
BETA_VALUES = st.one_of(st.sampled_from([0.0, 0.4, 1.0]), st.floats(0.0, 1.0))
BETAS = st.one_of(
    BETA_VALUES,
    st.builds(LinearSchedule, BETA_VALUES, BETA_VALUES, st.integers(1, 6)),
)
PRIORITIES = st.one_of(
    st.sampled_from([0.0, 0.25, 1.0, 3.0]),  # exact ties exercise tie-breaking
    st.floats(0.0, 50.0),
    st.floats(0.0, 1e6),
)
CONTAINERS = st.sampled_from(["list", "numpy64", "numpy32", "torch32", "torch64"])
TINY = float(np.finfo(np.float64).tiny)  # the smallest normal float64
CORRECTIONS = st.one_of(st.sampled_from([0.0, 0.5, 1.0, 4.0]), st.floats(0.0, 20.0))


def as_container(values: list[float], kind: str) -> object:
    if kind == "list":
        return list(values)
    if kind == "numpy64":
        return np.asarray(values, dtype=np.float64)
    if kind == "numpy32":
        return np.asarray(values, dtype=np.float32)
    if kind == "torch32":
        return torch.tensor(values, dtype=torch.float32)
    return torch.tensor(values, dtype=torch.float64)


def as_float64(container: object) -> np.ndarray:
    if isinstance(container, torch.Tensor):
        return container.numpy().astype(np.float64)
    return np.asarray(container).astype(np.float64)


class SamplerMachine(RuleBasedStateMachine):
    backend = "proportional"

    def __init__(self) -> None:
        super().__init__()
        self.sampler: CorrectedSampler
        self.model: ReferenceSampler

    @initialize(
        capacity=CAPACITIES,
        alpha=ALPHAS,
        beta=BETAS,
        eps=st.sampled_from([1e-6, 0.01, 0.5, 0.0]),
        norm=st.sampled_from(NORMS),
        start=st.sampled_from(["full", "empty", "part"]),
        seed=st.integers(0, 2**32 - 1),
    )
    def setup(self, capacity, alpha, beta, eps, norm, start, seed):
        size = {"full": None, "empty": 0, "part": capacity // 2}[start]
        options = dict(alpha=alpha, beta=beta, eps=eps, backend=self.backend, weight_norm=norm, size=size)
        self.sampler = CorrectedSampler(capacity, seed=seed, **options)
        self.model = ReferenceSampler(capacity, **options)

    # -- rules ------------------------------------------------------------------------------------
    @rule(data=st.data())
    def add(self, data):
        slots = data.draw(st.lists(st.integers(0, self.model.capacity - 1), min_size=1, max_size=4))
        kind = data.draw(st.sampled_from(["list", "numpy", "torch"]))
        container = {"list": slots, "numpy": np.asarray(slots, np.int32), "torch": torch.tensor(slots)}[kind]
        if data.draw(st.booleans()):
            self.sampler.add(container)
            self.model.add(slots)
        else:
            factors = data.draw(st.lists(CORRECTIONS, min_size=len(slots), max_size=len(slots)))
            self.sampler.add(container, corrections=np.asarray(factors))
            self.model.add(slots, factors)

    @precondition(lambda self: self.model.size > 0)
    @rule(data=st.data(), kind=CONTAINERS)
    def set_corrections(self, data, kind):
        slots = data.draw(st.lists(st.sampled_from(self.model.valid), min_size=1, max_size=6))
        values = data.draw(st.lists(CORRECTIONS, min_size=len(slots), max_size=len(slots)))
        container = as_container(values, kind)
        self.sampler.set_corrections(np.asarray(slots), container)
        self.model.set_corrections(slots, as_float64(container))

    @precondition(lambda self: self.model.size > 0)
    @rule(data=st.data(), kind=CONTAINERS)
    def update(self, data, kind):
        slots = data.draw(st.lists(st.sampled_from(self.model.valid), min_size=1, max_size=6))
        values = data.draw(st.lists(PRIORITIES, min_size=len(slots), max_size=len(slots)))
        if self.model.eps == 0.0:  # subnormal priorities, whose P(i) itself underflows, are
            values = [0.0 if 0.0 < v < TINY else v for v in values]  # tested in test_variants
        container = as_container(values, kind)
        if self.backend == "proportional" and not all(self.model.mass_ok(v) for v in as_float64(container)):
            with pytest.raises(ValueError):  # a positive priority whose mass underflows with ε = 0
                self.sampler.update_priorities(np.asarray(slots), container)
            return
        self.sampler.update_priorities(np.asarray(slots), container)
        self.model.update_priorities(slots, as_float64(container))

    @rule(data=st.data())
    def remove(self, data):
        slots = data.draw(st.lists(st.integers(0, self.model.capacity - 1), min_size=1, max_size=3))
        self.sampler.remove(slots)
        self.model.remove(slots)

    @rule(alpha=ALPHAS)
    def set_alpha(self, alpha):
        weighed = list(self.model.raw.values()) if self.backend == "proportional" else []
        if not all(self.model.mass_ok(p, alpha) for p in [*weighed, 1.0]):
            with pytest.raises(ValueError):  # the smallest positive priority would vanish (ε = 0)
                self.sampler.alpha = alpha
            return
        self.sampler.alpha = alpha
        self.model.alpha = alpha
        assert self.sampler.alpha == alpha

    @rule(beta=BETAS)
    def set_beta(self, beta):
        self.sampler.beta = beta
        self.model.beta_schedule = beta

    @precondition(lambda self: self.model.drawable())
    @rule(data=st.data())
    def sample(self, data):
        k = data.draw(st.integers(1, 2 * self.model.capacity + 1))
        s, model = self.sampler, self.model
        assert s.beta == pytest.approx(model.beta, abs=1e-12)
        draw = s.sample(k)
        expected = self.expected_weights(draw.indices)
        assert draw.indices.shape == draw.weights.shape == draw.probabilities.shape == (k,)
        assert draw.indices.dtype == np.int64 and draw.weights.dtype == np.float32
        assert set(draw.indices.tolist()) <= set(model.valid), "an invalid slot was drawn"
        if self.backend != "greedy":  # greedy cycles through its ranking when k exceeds the ties
            assert np.all(draw.probabilities > 0.0), "a slot of probability 0 was drawn"
        np.testing.assert_allclose(draw.probabilities, s.probabilities(draw.indices), rtol=1e-12)
        if self.backend != "rank":
            np.testing.assert_allclose(draw.probabilities, model.probabilities(draw.indices), rtol=1e-9)
        np.testing.assert_allclose(draw.weights, expected, rtol=2e-6, atol=1e-30)
        if self.backend == "greedy":
            top = model.greedy_top(k)
            assert draw.indices[: len(top)].tolist() == top
        elif self.backend == "proportional":
            self.check_stratified(draw.indices, model.valid, model.probabilities(model.valid))
        elif self.backend == "rank":
            self.check_stratified_groups(draw.indices, model.valid, s.probabilities(model.valid))
        model.step += 1

    @precondition(lambda self: self.model.drawable())
    @rule(k=st.integers(1, 6))
    def state_dict_round_trip(self, k):
        """A fresh sampler loaded from ``state_dict`` draws exactly like the original."""
        before = self.sampler.state_dict()
        other = clone(self.sampler, seed=7)
        assert_same(other.state_dict(), before)
        assert_draws_equal(self.sampler.sample(k), other.sample(k))
        self.model.step += 1
        assert_same(other.state_dict(), self.sampler.state_dict())
        self.sampler = other  # carry on with the copy

    @rule(data=st.data())
    def rejected_call(self, data):
        """Bad input raises and changes nothing (raw priorities, valid set, RNG, step)."""
        s, model = self.sampler, self.model
        capacity = model.capacity
        invalid = [i for i in range(capacity) if i not in model.raw]
        kinds = ["out_of_range", "float_indices", "bad_alpha", "bad_beta"]
        if model.size:
            kinds += ["nan", "negative", "inf", "length", "bad_correction", "add_bad_correction"]
        if invalid:
            kinds.append("never_added")
        kind = data.draw(st.sampled_from(kinds))
        before = s.state_dict()
        valid = model.valid
        error: type[Exception] = ValueError
        if kind == "nan":
            call = lambda: s.update_priorities(valid, [np.nan] + [1.0] * (len(valid) - 1))  # noqa: E731
        elif kind == "negative":
            call = lambda: s.update_priorities(valid, [2.0] * (len(valid) - 1) + [-1e-9])  # noqa: E731
        elif kind == "inf":
            call = lambda: s.update_priorities(valid[:1], [np.inf])  # noqa: E731
        elif kind == "bad_correction":
            bad_value = data.draw(st.sampled_from([-0.5, np.nan, np.inf]))
            call = lambda: s.set_corrections(valid, [1.0] * (len(valid) - 1) + [bad_value])  # noqa: E731
        elif kind == "add_bad_correction":
            call = lambda: s.add(valid, corrections=[2.0] * (len(valid) - 1) + [-1.0])  # noqa: E731
        elif kind == "length":
            call = lambda: s.update_priorities(valid, [1.0] * (len(valid) + 1))  # noqa: E731
        elif kind == "never_added":
            call = lambda: s.update_priorities(valid + invalid[:1], [4.0] * (len(valid) + 1))  # noqa: E731
        elif kind == "out_of_range":
            target = data.draw(st.sampled_from(["add", "remove", "update"]))
            bad = [0, capacity]
            call = {
                "add": lambda: s.add(bad),
                "remove": lambda: s.remove(bad),
                "update": lambda: s.update_priorities(bad, [1.0, 1.0]),
            }[target]
        elif kind == "float_indices":
            error = TypeError
            call = lambda: s.add(np.array([0.0]))  # noqa: E731
        elif kind == "bad_alpha":

            def call():
                s.alpha = -0.5

        else:

            def call():
                s.beta = 1.5

        with pytest.raises(error):
            call()
        assert_same(s.state_dict(), before)

    # -- invariants -------------------------------------------------------------------------------
    @invariant()
    def same_state(self):
        s, model = self.sampler, self.model
        assert s.size == model.size
        assert len(s) == model.size
        assert s.max_priority == model.max_priority
        np.testing.assert_array_equal(s.priorities, model.priorities)
        np.testing.assert_array_equal(s.corrections, model.correction_array)
        if not model.drawable():
            with pytest.raises(ValueError):
                s.sample(1)

    @invariant()
    def same_distribution(self):
        s, model = self.sampler, self.model
        if model.size == 0:
            return
        valid = model.valid
        p = s.probabilities(valid)
        assert p.dtype == np.float64
        assert np.sum(p) == pytest.approx(1.0 if model.drawable() else 0.0, rel=1e-9)
        if self.backend == "rank":
            self.check_rank(p)
        else:
            np.testing.assert_allclose(p, model.probabilities(valid), rtol=1e-9, atol=1e-300)
        for subset in (valid, valid[::2], valid[-1:]):
            weights = s.weights(subset)
            assert weights.dtype == np.float32
            np.testing.assert_allclose(weights, self.expected_weights(subset), rtol=2e-6, atol=1e-30)
        memory = s.weights(valid)
        assert np.all(np.isfinite(memory))
        corrected = np.array([model.corrections.get(slot, 1.0) for slot in valid])
        if model.weight_norm == "memory" and np.any((corrected > 0) & (p > 0)):
            assert memory.max() == pytest.approx(1.0, rel=1e-6)

    # -- helpers ----------------------------------------------------------------------------------
    def expected_weights(self, slots) -> np.ndarray:
        """The model's weights of ``slots``; for rank under the sampler's live ranks (its
        piecewise power law: the order may differ from the model's among ties)."""
        model = self.model
        distribution = None
        if self.backend == "rank":
            valid = model.valid
            distribution = dict(zip(valid, self.sampler.probabilities(valid).tolist(), strict=True))
        return model.weights(np.asarray(slots).tolist(), distribution)

    @staticmethod
    def check_stratified(drawn: np.ndarray, order: list[int], probabilities: np.ndarray) -> None:
        """Draw ``j`` of ``k`` lies in the ``j``-th of ``k`` equal-mass ranges of ``order``."""
        k = drawn.shape[0]
        upper = np.cumsum(probabilities)
        lower = upper - probabilities
        where = {slot: i for i, slot in enumerate(order)}
        positions = [where[int(slot)] for slot in drawn]
        assert positions == sorted(positions), "draws should come sorted by stratum"
        for j, i in enumerate(positions):
            assert lower[i] <= (j + 1) / k + 1e-9 and upper[i] >= j / k - 1e-9, (
                f"draw {j} of {k} (slot {order[i]}, mass [{lower[i]}, {upper[i]})) outside its stratum"
            )

    @staticmethod
    def check_stratified_groups(drawn: np.ndarray, valid: list[int], probabilities: np.ndarray) -> None:
        """Rank: draw ``j`` of ``k`` falls in the ``j``-th equal-probability stratum of the power
        law; slots of equal probability form one CDF segment (positions inside it are uniform)."""
        k = drawn.shape[0]
        levels, counts = np.unique(probabilities, return_counts=True)
        levels, counts = levels[::-1], counts[::-1]  # most probable segment first
        mass = levels * counts
        upper = np.cumsum(mass)
        lower = upper - mass
        where = {slot: int(np.flatnonzero(levels == probabilities[i])[0]) for i, slot in enumerate(valid)}
        groups = [where[int(slot)] for slot in drawn]
        assert groups == sorted(groups), "draws should come sorted by stratum"
        for j, g in enumerate(groups):
            assert lower[g] <= (j + 1) / k + 1e-9 and upper[g] >= j / k - 1e-9, (
                f"draw {j} of {k} (mass [{lower[g]}, {upper[g]})) outside its stratum"
            )

    def check_rank(self, p: np.ndarray) -> None:
        """Rank: ``P(i) = rank(i)^-α / Σ_{r<=N} r^-α`` slot by slot (exactly: N <= 13 here is far
        below the 1024 segments), in the live sampler and in a copy restored from its state."""
        model = self.model
        law = power_law(model.size, model.alpha)
        ranked = model.rank_order()
        np.testing.assert_allclose(p[[model.valid.index(slot) for slot in ranked]], law, rtol=1e-9)
        np.testing.assert_allclose(clone(self.sampler).probabilities(ranked), law, rtol=1e-9)


class ProportionalMachine(SamplerMachine):
    backend = "proportional"


class RankMachine(SamplerMachine):
    backend = "rank"


class GreedyMachine(SamplerMachine):
    backend = "greedy"


class UniformMachine(SamplerMachine):
    backend = "uniform"


STEPS = settings(
    max_examples=120,
    stateful_step_count=40,
    deadline=None,
    report_multiple_bugs=False,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],  # no slow "explain"
)
ProportionalMachine.TestCase.settings = STEPS
RankMachine.TestCase.settings = STEPS
GreedyMachine.TestCase.settings = STEPS
UniformMachine.TestCase.settings = STEPS
TestProportionalStateful = ProportionalMachine.TestCase
TestRankStateful = RankMachine.TestCase
TestGreedyStateful = GreedyMachine.TestCase
TestUniformStateful = UniformMachine.TestCase
