"""Blind Cliffwalk recipe (recipes/cliffwalk/): memory, true Q, hand-computed steps, end-to-end runs."""

from __future__ import annotations

import copy
import json
import shlex
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tqdm")

from prisample import Draw, PrioritizedSampler
from recipes.cliffwalk.experiment import (
    AGENTS,
    CliffwalkConfig,
    Memory,
    QLearner,
    command_line,
    features,
    fill_memory,
    main,
    make_sampler,
    oracle_choice,
    right_action,
    run_one,
    run_oracle,
    run_sampled,
    true_q,
)
from recipes.cliffwalk.report import memory_size, summarize

CONFIG = CliffwalkConfig()
ETA = CONFIG.step_size


def record_draws(sampler: PrioritizedSampler) -> list[Draw]:
    """Make ``sampler.sample`` keep every ``Draw`` it returns in the returned list."""
    draws: list[Draw] = []
    sample = sampler.sample

    def recorded(k: int) -> Draw:
        draws.append(sample(k))
        return draws[-1]

    sampler.sample = recorded  # type: ignore[method-assign]
    return draws


def slot_of(memory: Memory, state: int, action: int) -> int:
    """The first slot holding (state, action)."""
    return int(np.flatnonzero((memory.state == state) & (memory.action == action))[0])


@pytest.mark.parametrize("n", [2, 3, 5, 8, 12])
def test_memory_size_single_reward_and_copies(n: int) -> None:
    m = fill_memory(n, np.random.default_rng(n))
    assert len(m) == memory_size(n) == 2 ** (n + 1) - 2
    rewarded = np.flatnonzero(m.reward)
    assert rewarded.size == 1 and m.reward[rewarded[0]] == 1.0
    assert m.state[rewarded[0]] == n - 1 and m.action[rewarded[0]] == right_action(n - 1)
    # 2^(n-s) of the 2^n sequences reach state s, half of them take each action: 2^(n-s-1) copies
    # of every (state, action) pair, none dropped as a duplicate
    counts = np.bincount(m.pair, minlength=2 * n).reshape(n, 2)
    expected = 2.0 ** (n - 1 - np.arange(n))
    np.testing.assert_array_equal(counts, np.stack([expected, expected], axis=1))
    right = m.action == right_action(m.state)
    terminal = ~right | (m.state == n - 1)
    np.testing.assert_array_equal(m.discount == 0.0, terminal)
    np.testing.assert_allclose(m.discount[~terminal], 1.0 - 1.0 / n)
    np.testing.assert_array_equal(m.next_state[~terminal], m.state[~terminal] + 1)
    # episodes run to termination one after the other: a step in state s > 0 follows state s - 1
    np.testing.assert_array_equal(m.state[1:][m.state[1:] > 0], m.state[:-1][m.state[1:] > 0] + 1)
    assert m.state[0] == 0 and terminal[-1]


def test_memory_order_is_random_but_content_fixed() -> None:
    a, b = fill_memory(6, np.random.default_rng(0)), fill_memory(6, np.random.default_rng(1))
    assert not np.array_equal(a.pair, b.pair)
    np.testing.assert_array_equal(np.sort(a.pair), np.sort(b.pair))


@pytest.mark.parametrize("n", [2, 3, 7, 16])
def test_true_q_is_a_fixed_point_of_the_bellman_operator(n: int) -> None:
    m, q = fill_memory(n, np.random.default_rng(0)), true_q(n)
    target = m.reward + m.discount * np.maximum(q[2 * m.next_state], q[2 * m.next_state + 1])
    np.testing.assert_allclose(target, q[m.pair], rtol=0, atol=1e-15)
    gamma = 1.0 - 1.0 / n
    assert q[2 * 0 + right_action(0)] == pytest.approx(gamma ** (n - 1))
    assert q[2 * 0 + 1 - right_action(0)] == 0.0
    # and so Q-learning from the true Q never moves, whatever it replays
    learner = QLearner(m, "tabular", q.copy(), replace(CONFIG, tolerance=0.0))
    abs_delta = np.zeros(len(m))
    learner.replay(np.arange(len(m)), abs_delta)
    assert abs_delta.max() < 1e-15
    np.testing.assert_allclose(learner.q, q, atol=1e-15)


def test_tabular_update_matches_a_hand_computed_step() -> None:
    m = fill_memory(3, np.random.default_rng(0))  # γ = 2/3; 'right' is 0, 1, 0 in states 0, 1, 2
    theta = np.array([0.1, -0.2, 0.3, 0.05, -0.1, 0.4])  # Q(s, a) = θ[2s + a]
    learner = QLearner(m, "tabular", theta, CONFIG)
    abs_delta = np.zeros(1)
    # (1, right=1) -> state 2: δ = 0 + 2/3 · max(-0.1, 0.4) - 0.05
    assert learner.replay(np.array([slot_of(m, 1, 1)]), abs_delta) == (1, False)
    delta = 2 / 3 * 0.4 - 0.05
    assert abs_delta[0] == pytest.approx(delta)
    expected = theta.copy()
    expected[3] += ETA * delta
    np.testing.assert_allclose(learner.theta, expected)
    np.testing.assert_allclose(learner.q, expected)
    # (2, right=0), the rewarded end: δ = 1 - (-0.1); (0, wrong=1): δ = 0 - (-0.2)
    learner.replay(np.array([slot_of(m, 2, 0), slot_of(m, 0, 1)]), np.zeros(2))
    expected[4] += ETA * 1.1
    expected[1] += ETA * 0.2
    np.testing.assert_allclose(learner.theta, expected)
    assert learner.updates == 3


def test_linear_update_matches_a_hand_computed_step() -> None:
    m = fill_memory(3, np.random.default_rng(0))
    # θ[2s + a] per pair, θ[6 + a] the bias of action a: Q(s, a) = θ[2s + a] + θ[6 + a]
    theta = np.array([0.1, -0.2, 0.3, 0.05, -0.1, 0.4, 0.02, -0.03])
    learner = QLearner(m, "linear", theta, CONFIG)
    q0 = np.array([0.12, -0.23, 0.32, 0.02, -0.08, 0.37])
    np.testing.assert_allclose(learner.q, q0)
    abs_delta = np.zeros(1)
    learner.replay(np.array([slot_of(m, 1, 1)]), abs_delta)
    delta = 2 / 3 * 0.37 - 0.02
    assert abs_delta[0] == pytest.approx(delta)
    expected_theta = theta.copy()
    expected_theta[[3, 7]] += ETA * delta
    np.testing.assert_allclose(learner.theta, expected_theta)
    # Q(1, 1) moves by 2ηδ (its own weight and the bias), the other action-1 pairs by ηδ (the
    # bias), the action-0 pairs not at all
    expected_q = q0 + ETA * delta * np.array([0, 1, 0, 2, 0, 1])
    np.testing.assert_allclose(learner.q, expected_q)
    np.testing.assert_allclose(learner.q, features(3, "linear") @ learner.theta)


@pytest.mark.parametrize("representation", ["tabular", "linear"])
@pytest.mark.parametrize("agent", ["uniform", "greedy", "rank", "proportional"])
def test_sampled_agent_step_updates_q_and_feeds_back_its_td_error(representation: str, agent: str) -> None:
    n = 4
    rng = np.random.default_rng(7)
    m = fill_memory(n, rng)
    theta = rng.normal(0.0, 0.1, size=features(n, representation).shape[1])
    learner = QLearner(m, representation, theta, CONFIG)
    before = copy.deepcopy(learner)
    sampler = make_sampler(agent, len(m), CONFIG, seed=3)
    np.testing.assert_array_equal(sampler.priorities, 1.0)  # every transition entered at max priority
    assert run_sampled(learner, sampler, max_updates=1, batch=1) is None  # not converged after one
    changed = np.flatnonzero(sampler.priorities != 1.0)
    assert changed.size == 1
    slot = int(changed[0])
    if agent == "greedy":
        assert slot == 0  # all tied at the maximum: the lowest slot, i.e. the first one filled
    delta = before.td_errors([slot])[0]
    assert sampler.priorities[slot] == pytest.approx(abs(delta))
    np.testing.assert_allclose(learner.theta, before.theta + ETA * delta * learner.phi[m.pair[slot]])
    assert learner.updates == 1


def test_oracle_choice_is_the_brute_force_best_update() -> None:
    rng = np.random.default_rng(3)
    for representation in ("tabular", "linear"):
        m = fill_memory(5, rng)
        learner = QLearner(
            m, representation, rng.normal(0, 0.1, features(5, representation).shape[1]), CONFIG
        )
        learner.replay(rng.integers(0, len(m), 50), np.zeros(50))  # somewhere along the way
        candidates = np.arange(len(m), dtype=np.int64)
        losses = []
        for slot in candidates:
            trial = copy.deepcopy(learner)
            trial.replay(np.array([slot]), np.zeros(1))
            losses.append(trial.mse)
        chosen = oracle_choice(learner, candidates)
        assert losses[chosen] == pytest.approx(min(losses), rel=1e-12)
        assert losses[chosen] < learner.mse
        # run_oracle applies exactly that update
        expected = copy.deepcopy(learner)
        expected.replay(np.array([chosen]), np.zeros(1))
        assert run_oracle(learner, max_updates=learner.updates + 1) is None
        np.testing.assert_allclose(learner.q, expected.q)


def test_linear_oracle_stalls_where_no_single_update_lowers_the_loss() -> None:
    """The documented failure: the greedy loss oracle with the shared per-action bias (n = 9)."""
    assert run_one(CONFIG, "linear", "oracle", 9, 0) is None
    rng = np.random.default_rng([CONFIG.seed, 9, 0])
    m = fill_memory(9, rng)
    learner = QLearner(m, "linear", rng.normal(0, CONFIG.init_std, features(9, "linear").shape[1]), CONFIG)
    assert run_oracle(learner, CONFIG.max_updates) is None
    assert learner.updates < 10_000 and learner.mse > 10 * CONFIG.tolerance
    for slot in range(len(m)):
        trial = copy.deepcopy(learner)
        trial.replay(np.array([slot]), np.zeros(1))
        assert trial.mse >= learner.mse


def test_uniform_batches_are_sequential_single_updates() -> None:
    """A batch of uniform draws is replayed one transition after the other, stopping at convergence."""
    rng = np.random.default_rng(11)
    m = fill_memory(4, rng)
    theta = rng.normal(0.0, 0.1, size=2 * 4)
    learner = QLearner(m, "tabular", theta, CONFIG)
    sampler = make_sampler("uniform", len(m), CONFIG, seed=5)
    drawn = record_draws(sampler)
    updates = run_sampled(learner, sampler, max_updates=10**6, batch=64)
    assert updates is not None and updates == learner.updates
    sequence = np.concatenate([d.indices for d in drawn])[:updates]
    single = QLearner(m, "tabular", theta, CONFIG)
    results = [single.replay(sequence[i : i + 1], np.zeros(1))[1] for i in range(updates)]
    assert results[-1] and not any(results[:-1])
    np.testing.assert_allclose(single.q, learner.q)


@pytest.mark.parametrize("representation", ["tabular", "linear"])
def test_greedy_first_replays_every_slot_once(representation: str) -> None:
    """New transitions at maximal priority: greedy sweeps the whole memory in fill order first."""
    for seed in range(3):
        rng = np.random.default_rng([CONFIG.seed, 8, seed])
        m = fill_memory(8, rng)
        learner = QLearner(
            m, representation, rng.normal(0, 0.1, features(8, representation).shape[1]), CONFIG
        )
        sampler = make_sampler("greedy", len(m), CONFIG, seed=0)
        draws = record_draws(sampler)
        assert run_sampled(learner, sampler, max_updates=len(m) + 1, batch=1) is None
        drawn = [int(d.indices[0]) for d in draws]
        assert set(drawn) == set(range(len(m)))  # N + 1 draws: all N slots (one may repeat)
        firsts = sorted(set(drawn), key=drawn.index)
        assert firsts == list(range(len(m)))  # in slot order, i.e. the random fill order


def test_tiny_end_to_end_run_converges_for_every_agent(tmp_path: Path) -> None:
    config = CliffwalkConfig(min_n=2, max_n=3, seeds=2, out_dir=str(tmp_path))
    results = main(config)
    for representation in ("tabular", "linear"):
        assert list(results[representation]) == list(AGENTS)
        for agent in AGENTS:
            for n in ("2", "3"):
                updates = results[representation][agent][n]
                assert len(updates) == 2 and all(isinstance(u, int) and u > 0 for u in updates), (agent, n)
    assert json.loads((tmp_path / "cliffwalk.json").read_text()) == results
    table = (tmp_path / "cliffwalk.md").read_text()
    assert command_line(config) in table and "runtime" in table and "| 3 | 14 |" in table
    for name in ("fig1_right", "fig2_left", "fig2_right"):
        assert (tmp_path / f"cliffwalk_{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the oracle needs fewer updates than uniform replay, seed by seed
    for representation in ("tabular", "linear"):
        for n in ("2", "3"):
            oracle, uniform = results[representation]["oracle"][n], results[representation]["uniform"][n]
            assert all(o < u for o, u in zip(oracle, uniform, strict=True))


def test_a_capped_run_is_null_in_the_json(tmp_path: Path) -> None:
    config = CliffwalkConfig(
        min_n=4,
        max_n=4,
        seeds=1,
        representations=("tabular",),
        agents=("uniform", "greedy"),
        max_updates=5,
        out_dir=str(tmp_path),
    )
    main(config)
    assert json.loads((tmp_path / "cliffwalk.json").read_text()) == {
        "tabular": {"uniform": {"4": [None]}, "greedy": {"4": [None]}}
    }
    assert "n.c. (n.c.–n.c.) [1 n.c.]" in (tmp_path / "cliffwalk.md").read_text()
    assert summarize([3, None, 5]) == (5.0, 3.0, float("inf"))


def test_command_line_round_trips_through_the_cli() -> None:
    from recipes.common import cli

    config = CliffwalkConfig(max_n=16, seeds=3, agents=("rank", "oracle"), initial_priority="td")
    args = shlex.split(command_line(config))[4:]  # python -m recipes.cliffwalk run
    assert args[:2] == ["--max_n", "16"]
    parsed = cli.parse(CliffwalkConfig, args, prog="python -m recipes.cliffwalk run")
    assert parsed == config
    with pytest.raises(ValueError, match="agents"):
        CliffwalkConfig(agents=("uniform", "psychic"))  # type: ignore[arg-type]
