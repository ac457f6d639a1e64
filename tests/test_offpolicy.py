"""Off-policy replay recipe (recipes/offpolicy/experiment.py): ratios, exact values, the sampler mappings,
end-to-end runs of every arm, and convergence of the unbiased arms on a small chain."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("tqdm")

from recipes.offpolicy.experiment import (
    ARMS,
    Model,
    OffPolicyConfig,
    aggregation,
    collect,
    env_stepper,
    main,
    make_env,
    make_sampler,
    memories,
    model_of,
    problem,
    run_seed,
)

torch.set_num_threads(1)


Transitions = dict[int, dict[int, list[tuple[float, int, float, bool]]]]


def chain_transitions(n: int = 4, slip: float = 0.2) -> Transitions:
    """A slippery chain: action 1 moves right, 0 left, each the other way with probability ``slip``;
    stepping right off the last state ends the episode with reward 1, every other step costs 0.1."""
    P: Transitions = {}
    for s in range(n):
        P[s] = {}
        for a in (0, 1):
            moves = []
            for direction, prob in ((1 if a == 1 else -1, 1 - slip), (-1 if a == 1 else 1, slip)):
                nxt = s + direction
                if nxt >= n:
                    moves.append((prob, s, 1.0, True))
                else:
                    moves.append((prob, max(nxt, 0), -0.1, False))
            P[s][a] = moves
    return P


def chain_model(n: int = 4) -> tuple[Model, Transitions]:
    P = chain_transitions(n)
    initial = np.zeros(n)
    initial[0] = 1.0
    return Model.from_transitions(P, initial, (1, n)), P


def chain_stepper(P, seed: int):
    rng = np.random.default_rng(seed)

    def step(s: int, a: int) -> tuple[int, float, bool]:
        outcomes = P[s][a]
        i = rng.choice(len(outcomes), p=[o[0] for o in outcomes])
        _, nxt, reward, terminated = outcomes[i]
        return int(nxt), float(reward), bool(terminated)

    return step


def test_rho_for_stochastic_target_and_behaviour():
    """π 0.2-greedy, μ = 0.7·uniform + 0.3·π: ρ of every stored transition is π(a|s)/μ(a|s),
    by hand 0.9/0.62 for π's greedy action and 0.1/0.38 for the other."""
    model, P = chain_model()
    config = OffPolicyConfig(target_epsilon=0.2, behaviour_mix=0.3, memory_size=500, gamma=0.9)
    prob = problem(model, config)
    greedy = prob.target.argmax(axis=1)
    np.testing.assert_allclose(prob.target.max(axis=1), 0.9)
    np.testing.assert_allclose(prob.behaviour[np.arange(4), greedy], 0.62)
    memory = memories(prob, chain_stepper(P, 0), config, seed=0)["behaviour"]
    expected = np.where(memory.a_tm1 == greedy[memory.s_tm1], 0.9 / 0.62, 0.1 / 0.38)
    np.testing.assert_allclose(memory.rho_tm1, expected, rtol=1e-12)
    assert set(np.unique(memory.a_tm1)) == {0, 1}
    on_policy = memories(prob, chain_stepper(P, 0), config, seed=0)["target"]
    np.testing.assert_array_equal(on_policy.rho_tm1, 1.0)  # π's own data: ρ = π/π


@pytest.mark.parametrize("name", ["FrozenLake-v1", "CliffWalking-v1"])
def test_exact_values_satisfy_the_bellman_equation(name):
    """V^π(s) = Σ_a π(a|s) Σ_{s'} p (r + γ [not terminal] V^π(s')), checked on env.unwrapped.P."""
    env = make_env(name)
    config = OffPolicyConfig(gamma=0.95, target_epsilon=0.1)
    prob = problem(model_of(env), config)
    v = prob.v_true
    rhs = np.zeros_like(v)
    q = np.zeros_like(prob.q_true)
    for s in range(len(env.P)):
        for a in range(len(env.P[s])):
            for p, nxt, reward, terminated in env.P[s][a]:
                q[s, a] += p * (reward + (0.0 if terminated else config.gamma * v[nxt]))
            rhs[s] += prob.target[s, a] * q[s, a]
    np.testing.assert_allclose(v, rhs, atol=1e-9)
    np.testing.assert_allclose(prob.q_true, q, atol=1e-9)
    assert np.abs(v[prob.evaluate]).max() > 0.1  # not trivially zero


def test_weighted_is_weights_equal_normalised_rho():
    """``α = 0, β = 1`` with ρ as correction: weights ``ρ_i / max_j ρ_j``, drawn uniformly."""
    env = make_env("FrozenLake-v1")
    config = OffPolicyConfig(memory_size=600)
    prob = problem(model_of(env), config)
    memory = memories(prob, env_stepper(env, 0), config, seed=0)["behaviour"]
    sampler = make_sampler("weighted_is", memory, config, seed=0)
    slots = np.arange(len(memory))
    np.testing.assert_allclose(sampler.weights(slots), memory.rho_tm1 / memory.rho_tm1.max(), rtol=1e-6)
    np.testing.assert_allclose(sampler.probabilities(slots), 1.0 / len(memory))
    d = sampler.sample(64)
    np.testing.assert_allclose(d.weights, memory.rho_tm1[d.indices] / memory.rho_tm1.max(), rtol=1e-6)


def test_rejection_never_draws_actions_the_target_never_takes():
    """Greedy π (ε = 0): ρ = 0 for every other action; those slots are never drawn."""
    env = make_env("FrozenLake-v1")
    config = OffPolicyConfig(memory_size=2000, target_epsilon=0.0)
    prob = problem(model_of(env), config)
    memory = memories(prob, env_stepper(env, 1), config, seed=1)["behaviour"]
    assert (memory.rho_tm1 == 0).mean() > 0.5
    sampler = make_sampler("rejection", memory, config, seed=1)
    drawn = np.concatenate([sampler.sample(32).indices for _ in range(300)])
    assert np.all(memory.rho_tm1[drawn] > 0.0)
    assert np.unique(drawn).shape[0] > 0.5 * np.count_nonzero(memory.rho_tm1)  # and the others are


def test_every_arm_end_to_end(tmp_path):
    config = OffPolicyConfig(
        seeds=2, memory_size=300, updates=30, eval_every=10, batch_size=8, out_dir=str(tmp_path)
    )
    results = main(config)
    saved = json.loads((tmp_path / "offpolicy.json").read_text())
    assert set(saved) == {"FrozenLake-v1", "CliffWalking-v1"}
    for env in saved:
        assert set(saved[env]) == {"tabular", "linear"}
        for rep in saved[env]:
            assert tuple(saved[env][rep]) == ARMS
            for arm in ARMS:
                cell = saved[env][rep][arm]
                assert len(cell["final_rmse"]) == 2 and all(np.isfinite(cell["final_rmse"]))
                assert len(cell["rmse_curve"][0]) == 4
                assert cell["final_rmse"] == results[env][rep][arm]["final_rmse"]
        assert saved[env]["tabular"]["hybrid_rank"]["beta_final"][0] == 1.0  # annealed to 1
    assert (tmp_path / "offpolicy_frozenlake.png").stat().st_size > 0
    assert (tmp_path / "offpolicy_cliffwalking.png").stat().st_size > 0
    text = (tmp_path / "offpolicy.md").read_text()
    assert "python -m recipes.offpolicy run" in text and "hybrid_rank" in text


def test_linear_representation_aggregates_blocks():
    model = model_of(make_env("CliffWalking-v1"))
    groups = aggregation(model, "linear", 2)
    assert groups.max() + 1 == 12  # 4 x 12 grid in 2 x 2 blocks
    assert groups[0] == groups[1] == groups[12] == groups[13] and groups[2] != groups[0]
    assert aggregation(model, "tabular", 2).tolist() == list(range(48))


def test_unbiased_arms_converge_to_the_exact_values_on_a_chain():
    """Tabular TD(0) on μ's memory: every arm whose expected update is π's converges to V^π
    (rejection with c = 2 >= max ρ = 0.95 / 0.5); the uncorrected arm converges to V^μ and stays away."""
    model, P = chain_model()
    config = OffPolicyConfig(
        gamma=0.9,
        target_epsilon=0.1,
        memory_size=4096,
        updates=1500,
        batch_size=32,
        step_size=1.0,
        step_decay=300.0,
        eval_every=100,
        representations=("tabular",),
        rejection_bound=2.0,
        beta_anneal=0.5,
    )
    out = run_seed("chain", config, seed=0, model=model, step=chain_stepper(P, 0))["tabular"]
    v = problem(model, config).v_true
    assert np.abs(v).min() > 0.1
    for arm in ("on_policy", "ordinary_is", "weighted_is", "rejection", "hybrid_proportional", "hybrid_rank"):
        assert out[arm]["run"].rmse[-1] < 0.05, (arm, out[arm]["run"].rmse[-1])  # |V^π| in [0.16, 0.86]
        assert out[arm]["fixed_point_rmse"] < 0.05, arm
    assert out["uncorrected"]["run"].rmse[-1] > 0.2
    assert out["uncorrected"]["fixed_point_rmse"] > 0.2


def test_collect_cuts_episodes_without_terminating():
    _, P = chain_model()
    uniform = np.full((4, 2), 0.5)
    rng = np.random.default_rng(3)
    memory = collect(chain_stepper(P, 3), uniform, uniform, np.array([0]), 400, 0.9, 3, rng)
    assert len(memory) == 400
    assert set(np.unique(memory.discount_t)) <= {0.0, 0.9}
    terminal = memory.discount_t == 0.0
    np.testing.assert_array_equal(memory.r_t[terminal], 1.0)  # only the goal step ends an episode
    np.testing.assert_array_equal(memory.rho_tm1, 1.0)


def test_cli_parses_the_config():
    from jsonargparse import auto_cli

    config = auto_cli(
        OffPolicyConfig,
        as_positional=False,
        args=[
            "--seeds",
            "2",
            "--arms",
            "[weighted_is,rejection]",
            "--envs",
            "[FrozenLake-v1]",
            "--tolerances",
            '{"FrozenLake-v1": 0.1}',
        ],
    )
    assert config.seeds == 2 and tuple(config.arms) == ("weighted_is", "rejection")
    assert config.tolerances == {"FrozenLake-v1": 0.1}
    with pytest.raises(ValueError, match="arms"):
        OffPolicyConfig(arms=("importance",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tolerances should give a tolerance > 0 for every env"):
        OffPolicyConfig(tolerances={"FrozenLake-v1": 0.1})  # CliffWalking-v1 would fail mid-run
