"""The reference profiles of the Double DQN recipe's prioritized arms.

* "paper" (``proportional``, ``rank``): DQN Zoo's prioritized agent, the authors' release: η/4 paired
  with the optimiser's ε so that an ε-dominated step is the baseline's, unclipped |δ|, weights
  divided by the batch's maximum, β annealed over the reference's whole budget;
* "dopamine" (``proportional_dopamine``): p = sqrt(ℓ + 1e-10), α = 1, β = 0.5 fixed, batch maximum,
  the baseline's η;
* Dopamine's MinAtar DQN as a protocol file, and its network.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("gymnasium")
pytest.importorskip("yaml")
pytest.importorskip("tqdm")
pytest.importorskip("cloudpickle")

from recipes.dqn.agent import SQRT_LOSS_FLOOR, td_loss
from recipes.dqn.config import load_config
from recipes.dqn.envs import EnvSpec
from recipes.dqn.loop import Schedules
from recipes.dqn.networks import QNetwork, make_optimizer, optimizer_settings
from tests.test_replay_ablation import hand_made_batch

torch.set_num_threads(1)

ENVS = {"ALE/Pong-v5": "dqn_rmsprop", "MinAtar/Breakout-v1": "rmsprop", "CartPole-v1": "adam"}


@pytest.mark.parametrize("env", list(ENVS))
def test_paper_profile_pairs_eps_with_the_step_size(env: str) -> None:
    """η/4 with ε/4² inside the root (DQN Zoo: learning_rate 0.00025/4, optimizer_epsilon × (1/4)²)
    and ε/4 where the optimiser adds ε to the root; the uniform and dopamine arms keep both."""
    uniform = load_config(env, "uniform")
    assert uniform.optimizer == ENVS[env]
    base_lr, base_eps = optimizer_settings(uniform)
    assert (base_lr, base_eps) == (
        uniform.lr,
        uniform.adam_eps if env == "CartPole-v1" else uniform.rmsprop_eps,
    )
    power = 2 if ENVS[env] == "dqn_rmsprop" else 1
    for arm in ("proportional", "rank"):
        lr, eps = optimizer_settings(load_config(env, arm))
        assert lr == pytest.approx(base_lr / 4) and eps == pytest.approx(base_eps / 4**power)
    assert optimizer_settings(load_config(env, "proportional_dopamine")) == (base_lr, base_eps)
    unpaired = load_config(env, "proportional", eps_follows_lr=False)
    assert optimizer_settings(unpaired) == pytest.approx((base_lr / 4, base_eps))


def _step(env: str, arm: str, gradient: float) -> float:
    """The parameter change of one optimiser step on a gradient of the given size."""
    cfg = load_config(env, arm)
    p = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    opt = make_optimizer(cfg, [p])
    p.grad = torch.full((1,), gradient, dtype=torch.float64)
    opt.step()
    return abs(float(p.detach()))


@pytest.mark.parametrize("env", ["ALE/Pong-v5", "MinAtar/Breakout-v1"])
def test_paired_eps_keeps_eps_dominated_steps_and_quarters_gradient_dominated_ones(env: str) -> None:
    """What the pairing means (the reason the release pairs them): where ε dominates the denominator
    the prioritized arm's step is the baseline's; where the gradient dominates it is a quarter.
    Without the pairing (the recipe before its profiles) the ε-dominated step is a quarter too."""
    tiny, large = 1e-7, 10.0
    assert _step(env, "proportional", tiny) / _step(env, "uniform", tiny) == pytest.approx(1.0, rel=0.02)
    assert _step(env, "proportional", large) / _step(env, "uniform", large) == pytest.approx(0.25, rel=0.02)
    cfg = load_config(env, "proportional", eps_follows_lr=False)
    p = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    opt = make_optimizer(cfg, [p])
    p.grad = torch.full((1,), tiny, dtype=torch.float64)
    opt.step()
    assert abs(float(p.detach())) / _step(env, "uniform", tiny) == pytest.approx(0.25, rel=0.02)


def test_paper_profile_rules() -> None:
    """DQN Zoo's rules: |δ| unclipped, weights over the batch's maximum, α/β of Table 3; the
    dopamine profile: sqrt of the loss, α = 1, β = 0.5 not annealed, batch maximum, η."""
    for arm, alpha, beta0 in (("proportional", 0.6, 0.4), ("rank", 0.7, 0.5)):
        cfg = load_config("ALE/Pong-v5", arm)
        assert (cfg.clip_priority, cfg.weight_norm, cfg.alpha, cfg.beta0, cfg.beta_end) == (
            False,
            "batch",
            alpha,
            beta0,
            1.0,
        )
    dopamine = load_config("MinAtar/Breakout-v1", "proportional_dopamine", protocol="dopamine_minatar")
    assert (dopamine.priority_rule, dopamine.alpha, dopamine.beta0, dopamine.beta_end) == (
        "sqrt_loss",
        1.0,
        0.5,
        0.5,
    )
    assert (dopamine.weight_norm, dopamine.lr_divisor, dopamine.replay) == ("batch", 1.0, "proportional")
    with pytest.raises(ValueError, match="replay should be proportional with priority_rule=sqrt_loss"):
        load_config("CartPole-v1", "proportional_dopamine", replay="rank")


def test_dopamine_priorities_are_the_root_of_the_item_loss() -> None:
    """p = sqrt(ℓ(δ) + 1e-10) with ℓ the square loss δ²/2 (Dopamine's MinAtar DQN, loss 'mse') or
    the Huber loss (clip_td); not |δ| (a bug that would make the profile the paper's α = 1)."""
    online, target, batch = hand_made_batch()
    square = load_config("MinAtar/Breakout-v1", "proportional_dopamine", protocol="dopamine_minatar")
    assert not square.clip_td
    _, p = td_loss(online, target, square)(batch)
    _, magnitude = td_loss(online, target, load_config("CartPole-v1", "proportional"))(batch)
    torch.testing.assert_close(p, torch.sqrt(0.5 * magnitude**2 + SQRT_LOSS_FLOOR))
    huber = load_config("CartPole-v1", "proportional_dopamine")
    _, p = td_loss(online, target, huber)(batch)
    d = magnitude
    loss = torch.where(d <= 1.0, 0.5 * d**2, d - 0.5)
    torch.testing.assert_close(p, torch.sqrt(loss + SQRT_LOSS_FLOOR))


def test_beta_follows_the_reference_budget_not_the_truncated_run() -> None:
    """A 100,000-step MinAtar run under Dopamine's 10M-step schedule ends at β ≈ 0.406, not 1; a
    family whose budget the run reaches (CartPole, RL Zoo's 50,000) ends at 1."""
    cfg = load_config("MinAtar/Breakout-v1", "proportional", protocol="dopamine_minatar", total_steps=100_000)
    assert cfg.schedule_horizon == 10_000_000
    beta = Schedules.of(cfg).at(100_000)[2]
    assert beta == pytest.approx(0.4 + 0.6 * (100_000 - 1000) / (10_000_000 - 1000))
    cartpole = load_config("CartPole-v1", "proportional")
    assert Schedules.of(cartpole).at(cartpole.total_steps)[2] == pytest.approx(1.0)
    assert load_config("MinAtar/Breakout-v1", "rank").schedule_horizon == 5_000_000
    assert load_config("ALE/Pong-v5", "rank", protocol="atari100k").schedule_horizon == 100_000


def test_dopamine_minatar_protocol_and_network() -> None:
    """Dopamine's MinAtar DQN: update every 4 steps, target every 1,000, replay start 1,000, Adam
    2.5e-4 with ε 3.125e-4, MSE loss, ε-greedy to 0.01 over 250,000 steps; its network is one 'same'
    3×3 convolution of 16 channels and one linear layer, Xavier-uniform weights, zero biases."""
    cfg = load_config("MinAtar/Breakout-v1", "uniform", protocol="dopamine_minatar")
    assert (cfg.replay_period, cfg.target_update_period, cfg.learning_starts, cfg.memory_size) == (
        4,
        1000,
        1000,
        100_000,
    )
    assert (cfg.optimizer, cfg.lr, cfg.adam_eps, cfg.clip_td, cfg.loss_reduction) == (
        "adam",
        0.00025,
        0.0003125,
        False,
        "mean",
    )
    assert (cfg.eps_end, cfg.eps_decay_steps, cfg.network, cfg.hidden) == (
        0.01,
        250_000,
        "dopamine_minatar",
        (),
    )
    spec = EnvSpec((10, 10, 4), 1, np.bool_, 3)
    torch.manual_seed(0)
    q = QNetwork("dopamine_minatar", spec, (), shared_bias=False)
    obs = torch.zeros(2, 10, 10, 4, dtype=torch.bool)
    assert q(obs).shape == (2, 3)
    shapes = [tuple(p.shape) for p in q.parameters()]
    assert shapes == [(16, 4, 3, 3), (16,), (3, 16 * 10 * 10), (3,)]
    largest = {name: float(p.detach().abs().max()) for name, p in q.named_parameters()}
    assert largest["body.0.bias"] == 0.0 and largest["out.bias"] == 0.0
    bound = (6 / (4 * 9 + 16 * 9)) ** 0.5  # Xavier-uniform: sqrt(6 / (fan_in + fan_out))
    assert 0.8 * bound < largest["body.0.weight"] <= bound
    with pytest.raises(ValueError, match="hidden should be"):
        load_config("MinAtar/Breakout-v1", "uniform", hidden=())
