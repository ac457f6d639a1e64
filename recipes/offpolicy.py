"""Off-policy evaluation from replay with importance ratios in the sampler (Schaul et al. 2016, Sec. 6).

A behaviour policy ``μ`` fills a replay memory on a Gymnasium toy-text environment whose dynamics
are known (``env.unwrapped.P``); TD(0) learns ``V^π`` of a target policy ``π`` from that memory,

    δ_t = r_t + γ_t V(s_t) - V(s_{t-1}),      θ ← θ + η_t · mean_j(w_j δ_j φ(s_{t-1, j})),

with per-decision ratios ``ρ_{t-1} = π(a_{t-1}|s_{t-1}) / μ(a_{t-1}|s_{t-1})``.  Seven arms differ
only in how the minibatch is drawn and weighted (``# PER:`` marks where):

* ``on_policy``: a memory filled by ``π`` itself, uniform replay (the reference);
* ``uncorrected``: ``μ``'s memory, uniform replay, no ``ρ`` at all (biased: it learns ``V^μ``);
* ``ordinary_is``: uniform replay, ``w = ρ`` in the update;
* ``weighted_is``: the sampler with ``α = 0, β = 1`` and ``ρ`` as correction factor, so
  ``w = ρ / max_j ρ_j`` (Sec. 6's "weighted IS");
* ``rejection``: proportional, ``p = min(1, ρ)``, ``α = 1``, ``β = 0``, ``ε = 0`` (Sec. 6);
* ``hybrid_proportional``: ``p = ρ·|δ|``, ``α = 0.6``, ``w = ρ (N·P)^-β``, ``β`` annealed 0.4 → 1;
* ``hybrid_rank``: the same priorities, rank-based, ``α = 0.7``, ``β`` annealed 0.5 → 1.

Ground truth is exact: ``V^π`` solves ``(I - γ P_π) v = r_π`` on the environment's model, and the
fixed point each arm converges to on its memory is solved exactly too.  ``tabular`` is one value
per state; ``linear`` aggregates square blocks of grid cells (state aggregation), where the
distribution of replayed states changes the fixed point.

Run ``python -m recipes.offpolicy`` (about 5 minutes on one core).  It writes
``runs/offpolicy/offpolicy.md`` (tables, the command, the runtime), ``offpolicy.json`` and
``offpolicy_<env>.png``; ``--out_dir docs/results`` rewrites the committed results.
``docs/recipes/offpolicy.md`` explains the mapping and the results.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from tqdm import tqdm  # type: ignore[import-untyped]

from prisample import CorrectedSampler, LinearSchedule, PrioritizedSampler
from prisample.variants import hybrid_priorities, importance_ratios, rejection_priorities
from recipes import cli

Representation = Literal["tabular", "linear"]
Arm = Literal[
    "on_policy", "uncorrected", "ordinary_is", "weighted_is", "rejection",
    "hybrid_proportional", "hybrid_rank",
]  # fmt: skip
REPRESENTATIONS: tuple[Representation, ...] = ("tabular", "linear")
ARMS: tuple[Arm, ...] = (
    "on_policy", "uncorrected", "ordinary_is", "weighted_is", "rejection",
    "hybrid_proportional", "hybrid_rank",
)  # fmt: skip
ENV_KWARGS: dict[str, dict[str, Any]] = {
    "FrozenLake-v1": {"map_name": "8x8", "is_slippery": True},
    "CliffWalking-v1": {},
}
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class OffPolicyConfig:
    """Off-policy evaluation from replay; every arm sees the same memory, updates and seeds."""

    envs: tuple[str, ...] = ("FrozenLake-v1", "CliffWalking-v1")
    """Gymnasium toy-text environments (FrozenLake-v1 is the 8x8 slippery map)."""
    representations: tuple[Representation, ...] = REPRESENTATIONS
    """'tabular': one value per state; 'linear': state aggregation over `block` x `block` grid cells."""
    arms: tuple[Arm, ...] = ARMS
    """Which arms to run (see the module docstring)."""
    seeds: int = 5
    """Independent runs per (env, representation, arm): memory, replay order."""
    gamma: float = 0.95
    """Discount γ of the evaluated return (a horizon of about 20 steps)."""
    target_epsilon: float = 0.1
    """π is ε-greedy with this ε on the optimal Q* from value iteration (ties to the first action)."""
    behaviour_mix: float = 0.0
    """μ = (1 - m)·uniform + m·π with this m; 0 gives the uniform random behaviour policy."""
    memory_size: int = 65536
    """Transitions in each replay memory (filled once, then replayed)."""
    episode_steps: int = 100
    """Episodes are cut after this many steps (a cut is not a termination: the last step bootstraps)."""
    block: int = 2
    """Side of the square blocks of grid cells that share one weight in the linear representation."""
    updates: int = 20000
    """Minibatch updates per run."""
    batch_size: int = 32
    """Transitions per update."""
    step_size: float = 1.0
    """η_0 of the step size η_t = η_0 / (1 + t / step_decay) applied to the minibatch mean."""
    step_decay: float = 2000.0
    """Updates over which the step size halves (η_t = η_0 / (1 + t / step_decay))."""
    alpha_proportional: float = 0.6
    """α of hybrid_proportional (the paper's tuned proportional value, Sec. 4)."""
    beta0_proportional: float = 0.4
    """β at the start of hybrid_proportional's annealing (the paper's β0 for proportional)."""
    alpha_rank: float = 0.7
    """α of hybrid_rank (the paper's tuned rank-based value)."""
    beta0_rank: float = 0.5
    """β at the start of hybrid_rank's annealing (the paper's β0 for rank-based)."""
    beta_anneal: float = 0.5
    """Fraction of the updates over which the hybrids' β rises linearly to 1 (then stays at 1)."""
    hybrid_eps: float = 0.01
    """ε of hybrid_proportional, p = ρ·|δ| + ε (keeps slots of tiny ρ|δ| drawable)."""
    rejection_bound: float = 1.0
    """c in the rejection priority p = min(1, ρ/c): 1 is the paper's rule; c >= max ρ is exact."""
    tolerances: dict[str, float] = field(
        default_factory=lambda: {"FrozenLake-v1": 0.03, "CliffWalking-v1": 1.5}
    )
    """RMSE counted as converged, per environment: about 5% of max |V^π| (0.66 and 31.6).  Used for
    the RMSE to V^π and for the RMSE to the arm's own fixed point on its memory."""
    weight_norm: Literal["memory", "batch", "none"] = "memory"
    """Normalisation of the sampler's weights (weighted_is, hybrids): 'memory' is the paper's;
    'none' keeps w = ρ (N·P)^-β, whose mean under the draws is 1 at β = 1, like ordinary IS."""
    eval_every: int = 200
    """Updates between RMSE measurements."""
    workers: int = 1
    """Worker processes (one run each at a time)."""
    out_dir: str = "runs/offpolicy"
    """Where offpolicy.md, offpolicy.json and the plots go (the committed results: docs/results)."""

    def __post_init__(self) -> None:
        cli.at_least(
            self,
            1,
            "seeds",
            "memory_size",
            "episode_steps",
            "block",
            "updates",
            "batch_size",
            "eval_every",
            "workers",
        )
        cli.in_range(self, "gamma", 0.0, 1.0, high_open=True)
        cli.in_range(self, "target_epsilon", 0.0, 1.0)
        cli.in_range(self, "behaviour_mix", 0.0, 1.0, high_open=True)
        cli.positive(self, "step_size", "step_decay", "rejection_bound")
        cli.at_least(self, 0.0, "alpha_proportional", "alpha_rank", "hybrid_eps")
        # β0 outside [0, 1] used to surface as LinearSchedule's "beta.start" once the arm ran.
        cli.in_range(self, "beta0_proportional", 0.0, 1.0)
        cli.in_range(self, "beta0_rank", 0.0, 1.0)
        cli.in_range(self, "beta_anneal", 0.0, 1.0, low_open=True)
        cli.one_of(self, "weight_norm", ("memory", "batch", "none"))
        distinct = bool(self.envs) and len(set(self.envs)) == len(self.envs)
        cli.require(distinct, "envs", "be a comma list of distinct Gymnasium toy-text ids", self.envs)
        cli.subset_of(self, "representations", REPRESENTATIONS)
        cli.subset_of(self, "arms", ARMS)
        for env in self.envs:
            tolerance = self.tolerances.get(env)
            cli.require(
                tolerance is not None and tolerance > 0,
                "tolerances",
                f"give a tolerance > 0 for every env ({env})",
                self.tolerances,
            )


# -- the model and its exact values ---------------------------------------------------------------


@dataclass(frozen=True)
class Model:
    """A finite MDP in the toy-text ``P[s][a] = [(prob, s', r, terminated), ...]`` form, as arrays.

    ``T[s, a, s']`` holds the probability of moving to ``s'`` *without* terminating, ``R[s, a]``
    the expected reward, so terminal transitions bootstrap from nothing.
    """

    T: FloatArray
    R: FloatArray
    initial: FloatArray
    """Initial-state distribution."""
    grid: tuple[int, int]
    """(rows, columns) of the grid the states number row by row."""

    @property
    def n_states(self) -> int:
        return int(self.T.shape[0])

    @property
    def n_actions(self) -> int:
        return int(self.T.shape[1])

    @classmethod
    def from_transitions(
        cls, P: dict[int, dict[int, list[tuple[float, int, float, bool]]]], initial: npt.ArrayLike,
        grid: tuple[int, int],
    ) -> Model:  # fmt: skip
        n_states, n_actions = len(P), len(P[0])
        T = np.zeros((n_states, n_actions, n_states))
        R = np.zeros((n_states, n_actions))
        for s in range(n_states):
            for a in range(n_actions):
                for prob, nxt, reward, terminated in P[s][a]:
                    R[s, a] += prob * reward
                    if not terminated:
                        T[s, a, int(nxt)] += prob
        return cls(T, R, np.asarray(initial, dtype=np.float64), grid)

    def occupied(self) -> IntArray:
        """States an episode can be in: reachable from the initial states by non-terminal moves."""
        seen = self.initial > 0
        frontier = seen.copy()
        while frontier.any():
            nxt = (self.T[frontier].sum(axis=(0, 1)) > 0) & ~seen
            seen |= nxt
            frontier = nxt
        return np.flatnonzero(seen).astype(np.int64)


def make_env(name: str) -> Any:
    """The raw toy-text environment (no wrappers: episodes are cut by the recipe)."""
    import gymnasium as gym

    return gym.make(name, **ENV_KWARGS.get(name, {})).unwrapped


def model_of(env: Any) -> Model:
    grid = (env.nrow, env.ncol) if hasattr(env, "nrow") else tuple(env.shape)
    return Model.from_transitions(env.P, env.initial_state_distrib, (int(grid[0]), int(grid[1])))


def optimal_q(model: Model, gamma: float, tol: float = 1e-12) -> FloatArray:
    """Q* by value iteration, ``Q ← R + γ T max_a Q``, to a sup-norm change below ``tol``."""
    q = np.zeros((model.n_states, model.n_actions))
    while True:
        new = model.R + gamma * model.T @ q.max(axis=1)
        if np.abs(new - q).max() < tol:
            return new
        q = new


def epsilon_greedy(q: FloatArray, epsilon: float) -> FloatArray:
    """``π(a|s) = 1 - ε + ε/|A|`` for the first maximising action, ``ε/|A|`` for the others."""
    n_actions = q.shape[1]
    policy = np.full(q.shape, epsilon / n_actions)
    policy[np.arange(q.shape[0]), q.argmax(axis=1)] += 1.0 - epsilon
    return policy


def policy_values(model: Model, policy: FloatArray, gamma: float) -> tuple[FloatArray, FloatArray]:
    """Exact ``V^π`` from ``(I - γ P_π) v = r_π`` and ``Q^π = R + γ T V^π``."""
    p_pi = np.einsum("sa,sat->st", policy, model.T)
    r_pi = np.einsum("sa,sa->s", policy, model.R)
    v = np.linalg.solve(np.eye(model.n_states) - gamma * p_pi, r_pi)
    return v, model.R + gamma * model.T @ v


def aggregation(model: Model, representation: Representation, block: int) -> IntArray:
    """Group of each state: itself (tabular), or its ``block`` x ``block`` cell of the grid (linear)."""
    if representation == "tabular":
        return np.arange(model.n_states, dtype=np.int64)
    cols = model.grid[1]
    r, c = np.divmod(np.arange(model.n_states), cols)
    return ((r // block) * (-(-cols // block)) + c // block).astype(np.int64)


# -- the replay memory ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Memory:
    """Transitions ``(s_{t-1}, a_{t-1}, r_t, discount_t, s_t)`` and the ratio ``ρ_{t-1}`` of each."""

    s_tm1: IntArray
    a_tm1: IntArray
    r_t: FloatArray
    discount_t: FloatArray
    s_t: IntArray
    rho_tm1: FloatArray

    def __len__(self) -> int:
        return int(self.s_tm1.shape[0])


Step = Callable[[int, int], tuple[int, float, bool]]


def env_stepper(env: Any, seed: int) -> Step:
    """``(s, a) -> (s', r, terminated)`` through the environment's own ``step`` from state ``s``."""
    env.reset(seed=seed)

    def step(s: int, a: int) -> tuple[int, float, bool]:
        env.s = s  # exploring starts: put the agent where the memory needs it
        nxt, reward, terminated, _, _ = env.step(a)
        return int(nxt), float(reward), bool(terminated)

    return step


def collect(
    step: Step, behaviour: FloatArray, target: FloatArray, starts: IntArray, size: int, gamma: float,
    episode_steps: int, rng: np.random.Generator,
) -> Memory:  # fmt: skip
    """Fill a memory of ``size`` transitions with episodes of ``behaviour`` from uniform random
    ``starts`` (exploring starts), cut after ``episode_steps``; ``ρ = π(a|s) / μ(a|s)``."""
    out = np.zeros((6, size))
    n, s, t = 0, int(rng.choice(starts)), 0
    cumulative = behaviour.cumsum(axis=1)
    while n < size:
        a = min(int(np.searchsorted(cumulative[s], rng.random(), side="right")), behaviour.shape[1] - 1)
        nxt, reward, terminated = step(s, a)
        out[:, n] = (s, a, reward, 0.0 if terminated else gamma, nxt, 0.0)
        n, t = n + 1, t + 1
        if terminated or t >= episode_steps:
            s, t = int(rng.choice(starts)), 0
        else:
            s = nxt
    s_tm1, a_tm1 = out[0].astype(np.int64), out[1].astype(np.int64)
    rho = importance_ratios(target[s_tm1, a_tm1], behaviour[s_tm1, a_tm1])
    return Memory(s_tm1, a_tm1, out[2], out[3], out[4].astype(np.int64), rho)


# -- the arms -------------------------------------------------------------------------------------


def make_sampler(arm: Arm, memory: Memory, config: OffPolicyConfig, seed: int) -> PrioritizedSampler:
    """The sampler of an arm over the whole memory (filled, so ``size = N``)."""
    n = len(memory)
    slots = np.arange(n)
    anneal = max(1, int(config.beta_anneal * config.updates))
    if arm in ("on_policy", "uncorrected", "ordinary_is"):
        return PrioritizedSampler(n, alpha=0.0, beta=0.0, backend="uniform", seed=seed)
    if arm == "weighted_is":  # PER: w = ρ, α = 0, β = 1 (Sec. 6); weights ρ_i / max_j ρ_j
        corrected = CorrectedSampler(n, alpha=0.0, beta=1.0, weight_norm=config.weight_norm, seed=seed)
        corrected.set_corrections(slots, memory.rho_tm1)
        return corrected
    if arm == "rejection":  # PER: p = min(1, ρ), α = 1, β = 0, ε = 0: slots with π(a|s) = 0 never drawn
        sampler = PrioritizedSampler(n, alpha=1.0, beta=0.0, eps=0.0, seed=seed)
        sampler.update_priorities(slots, rejection_priorities(memory.rho_tm1, config.rejection_bound))
        return sampler
    if arm == "hybrid_proportional":  # PER: p = ρ|δ| + ε, w = ρ (N·P)^-β, β annealed to 1
        beta = LinearSchedule(config.beta0_proportional, 1.0, anneal)
        corrected = CorrectedSampler(
            n, alpha=config.alpha_proportional, beta=beta, eps=config.hybrid_eps,
            weight_norm=config.weight_norm, seed=seed,
        )  # fmt: skip
    elif arm == "hybrid_rank":  # PER: rank by ρ|δ|, w = ρ (N·P)^-β, β annealed to 1
        beta = LinearSchedule(config.beta0_rank, 1.0, anneal)
        corrected = CorrectedSampler(
            n, alpha=config.alpha_rank, beta=beta, backend="rank", weight_norm=config.weight_norm, seed=seed
        )
    else:
        raise ValueError(f"arm should be one of {ARMS}, but got arm={arm!r}")
    corrected.set_corrections(slots, memory.rho_tm1)  # new slots at max priority: each replayed early
    return corrected


def effective_weights(arm: Arm, memory: Memory, config: OffPolicyConfig) -> FloatArray:
    """``q_j · w_j`` up to a constant: the weight of slot ``j`` in the arm's expected update once
    ``β = 1`` (the hybrids' ``(N·P)^-1`` cancels their sampling, leaving ``ρ``)."""
    if arm in ("on_policy", "uncorrected"):
        return np.ones(len(memory))
    if arm == "rejection":
        return rejection_priorities(memory.rho_tm1, config.rejection_bound)
    return memory.rho_tm1.copy()


def fixed_point(memory: Memory, weights: FloatArray, groups: IntArray) -> FloatArray:
    """θ with ``Σ_j q_j w_j δ_j(θ) φ(s_{t-1,j}) = 0`` (``q_j w_j`` = ``weights``), φ one-hot of the
    group: the limit of the arm's TD(0) on this memory, solved exactly."""
    n_groups = int(groups.max()) + 1
    g_tm1, g_t = groups[memory.s_tm1], groups[memory.s_t]
    a = np.zeros((n_groups, n_groups))
    np.add.at(a, (g_tm1, g_tm1), weights)
    np.add.at(a, (g_tm1, g_t), -weights * memory.discount_t)
    b = np.bincount(g_tm1, weights=weights * memory.r_t, minlength=n_groups)
    seen = np.diag(a) != 0  # a group the arm never replays keeps its initial value 0
    theta = np.zeros(n_groups)
    theta[seen] = np.linalg.solve(a[np.ix_(seen, seen)], b[seen])
    return theta


@dataclass
class Run:
    """One run's RMSE curves (to V^π, and to the arm's own fixed point) and the logged statistics."""

    rmse: list[float]
    rmse_to_fixed_point: list[float]
    beta_final: float
    weight_mean: float
    weight_min: float
    weight_max: float
    max_priority: float


def replay(
    arm: Arm, memory: Memory, sampler: PrioritizedSampler, groups: IntArray, v_true: FloatArray,
    evaluate: IntArray, config: OffPolicyConfig, theta_limit: FloatArray | None = None,
) -> Run:  # fmt: skip
    """TD(0) on minibatches drawn by ``sampler``; RMSE to ``v_true`` (and to the values of
    ``theta_limit``, the arm's fixed point) over ``evaluate`` states."""
    theta = np.zeros(int(groups.max()) + 1)
    g_tm1_all, g_t_all = groups[memory.s_tm1], groups[memory.s_t]
    target = v_true[evaluate]
    limit = (theta if theta_limit is None else theta_limit)[groups[evaluate]]

    def errors() -> tuple[float, float]:
        v = theta[groups[evaluate]]
        return float(np.sqrt(np.mean((v - target) ** 2))), float(np.sqrt(np.mean((v - limit) ** 2)))

    first = errors()
    rmse, to_limit = [first[0]], [first[1]]
    w_sum, w_min, w_max, count = 0.0, math.inf, 0.0, 0
    for t in range(config.updates):
        d = sampler.sample(config.batch_size)
        j = d.indices
        g_tm1, g_t = g_tm1_all[j], g_t_all[j]
        delta = memory.r_t[j] + memory.discount_t[j] * theta[g_t] - theta[g_tm1]
        if arm in ("on_policy", "uncorrected"):
            w = np.ones(j.shape[0])
        elif arm == "ordinary_is":
            w = memory.rho_tm1[j]
        else:  # PER: the sampler's weights carry ρ (corrections) and (N·P)^-β
            w = d.weights.astype(np.float64)
            w_sum, count = w_sum + float(w.sum()), count + j.shape[0]
            w_min, w_max = min(w_min, float(w.min())), max(w_max, float(w.max()))
        eta = config.step_size / (1.0 + t / config.step_decay)
        theta += eta / j.shape[0] * np.bincount(g_tm1, weights=w * delta, minlength=theta.shape[0])
        if arm in ("hybrid_proportional", "hybrid_rank"):  # PER: p = ρ·|δ|
            sampler.update_priorities(j, hybrid_priorities(memory.rho_tm1[j], delta))
        if (t + 1) % config.eval_every == 0:
            now = errors()
            rmse.append(now[0])
            to_limit.append(now[1])
    return Run(
        rmse=rmse,
        rmse_to_fixed_point=to_limit,
        beta_final=sampler.beta,
        weight_mean=w_sum / count if count else 1.0,
        weight_min=w_min if count else 1.0,
        weight_max=w_max if count else 1.0,
        max_priority=sampler.max_priority,
    )


# -- the experiment -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """Everything a run needs that does not depend on the arm."""

    model: Model
    target: FloatArray
    behaviour: FloatArray
    v_true: FloatArray
    q_true: FloatArray
    evaluate: IntArray


def problem(model: Model, config: OffPolicyConfig) -> Problem:
    target = epsilon_greedy(optimal_q(model, config.gamma), config.target_epsilon)
    uniform = np.full(target.shape, 1.0 / model.n_actions)
    behaviour = (1.0 - config.behaviour_mix) * uniform + config.behaviour_mix * target
    v, q = policy_values(model, target, config.gamma)
    return Problem(model, target, behaviour, v, q, model.occupied())


def memories(problem_: Problem, step: Step, config: OffPolicyConfig, seed: int) -> dict[str, Memory]:
    """The behaviour memory and the on-policy one (data from π), from the same start states."""
    out = {}
    for name, policy in (("behaviour", problem_.behaviour), ("target", problem_.target)):
        rng = np.random.default_rng([seed, 0 if name == "behaviour" else 1])
        out[name] = collect(
            step, policy, problem_.target, problem_.evaluate, config.memory_size, config.gamma,
            config.episode_steps, rng,
        )  # fmt: skip
    return out


ArmResult = dict[str, Any]


def run_seed(
    env_name: str, config: OffPolicyConfig, seed: int, model: Model | None = None, step: Step | None = None,
    on_run: Callable[[str, str, Run], None] | None = None,
) -> dict[str, dict[str, ArmResult]]:  # fmt: skip
    """Every (representation, arm) of one seed on one environment: ``{rep: {arm: result}}``.

    ``on_run(representation, arm, run)`` is called after each run (the progress bar)."""
    if model is None or step is None:
        env = make_env(env_name)
        model, step = model_of(env), env_stepper(env, seed)
    prob = problem(model, config)
    mems = memories(prob, step, config, seed)
    out: dict[str, dict[str, ArmResult]] = {}
    for rep in config.representations:
        groups = aggregation(model, rep, config.block)
        out[rep] = {}
        for arm in config.arms:
            memory = mems["target" if arm == "on_policy" else "behaviour"]
            sampler = make_sampler(arm, memory, config, seed=seed)
            theta = fixed_point(memory, effective_weights(arm, memory, config), groups)
            run = replay(arm, memory, sampler, groups, prob.v_true, prob.evaluate, config, theta)
            limit = float(np.sqrt(np.mean((theta[groups[prob.evaluate]] - prob.v_true[prob.evaluate]) ** 2)))
            out[rep][arm] = {"run": run, "fixed_point_rmse": limit}
            if on_run is not None:
                on_run(rep, arm, run)
    return out


def updates_to_tolerance(curve: Sequence[float], tolerance: float, every: int) -> int | None:
    """Updates until the RMSE first falls to ``tolerance`` (``None``: never within the run)."""
    for i, value in enumerate(curve):
        if value <= tolerance:
            return i * every
    return None


Results = dict[str, dict[str, dict[str, dict[str, list[Any]]]]]


def _task(task: tuple[str, OffPolicyConfig, int]) -> tuple[str, int, dict[str, dict[str, ArmResult]]]:
    env_name, config, seed = task
    return env_name, seed, run_seed(env_name, config, seed)


def run_experiment(config: OffPolicyConfig, progress: bool = True) -> Results:
    """``{env: {rep: {arm: {"final_rmse": [per seed], ...}}}}`` over every seed."""
    tasks = [(env, config, seed) for env in config.envs for seed in range(config.seeds)]
    results: Results = {
        env: {rep: {arm: {} for arm in config.arms} for rep in config.representations} for env in config.envs
    }
    per_seed: dict[tuple[str, int], dict[str, dict[str, ArmResult]]] = {}
    runs_per_task = len(config.representations) * len(config.arms)
    bar = tqdm(total=len(tasks) * runs_per_task, desc="offpolicy", unit="run", disable=not progress)
    if config.workers > 1:
        with ProcessPoolExecutor(config.workers) as pool:
            for env, seed, out in pool.map(_task, tasks):
                per_seed[env, seed] = out
                bar.update(runs_per_task)
    else:
        for env, _, seed in tasks:

            def log(rep: str, arm: str, run: Run, env: str = env) -> None:
                bar.set_postfix_str(
                    f"{env} {rep} {arm}: rmse {run.rmse[-1]:.3g}, beta {run.beta_final:.2f}, "
                    f"w mean {run.weight_mean:.3g} min {run.weight_min:.2g}, max p {run.max_priority:.3g}"
                )
                bar.update()

            per_seed[env, seed] = run_seed(env, config, seed, on_run=log)
    bar.close()
    for env in config.envs:
        tolerance = config.tolerances.get(env, 0.0)
        for rep in config.representations:
            for arm in config.arms:
                seeds = [per_seed[env, seed][rep][arm] for seed in range(config.seeds)]
                runs: list[Run] = [s["run"] for s in seeds]
                results[env][rep][arm] = {
                    "final_rmse": [r.rmse[-1] for r in runs],
                    "updates_to_tolerance": [
                        updates_to_tolerance(r.rmse, tolerance, config.eval_every) for r in runs
                    ],
                    "fixed_point_rmse": [s["fixed_point_rmse"] for s in seeds],
                    "updates_to_fixed_point": [
                        updates_to_tolerance(r.rmse_to_fixed_point, tolerance, config.eval_every)
                        for r in runs
                    ],
                    "beta_final": [r.beta_final for r in runs],
                    "weight_mean": [r.weight_mean for r in runs],
                    "weight_min": [r.weight_min for r in runs],
                    "max_priority": [r.max_priority for r in runs],
                    "rmse_curve": [[round(x, 6) for x in r.rmse] for r in runs],
                }
    return results


# -- outputs --------------------------------------------------------------------------------------

STYLE = {
    "on_policy": ("black", "on-policy (data from π)"),
    "uncorrected": ("gray", "uncorrected (no ρ)"),
    "ordinary_is": ("tab:green", "ordinary IS (w = ρ)"),
    "weighted_is": ("tab:olive", "weighted IS (α=0, β=1, c=ρ)"),
    "rejection": ("tab:purple", "rejection (p=min(1,ρ))"),
    "hybrid_proportional": ("tab:blue", "hybrid proportional (p=ρ|δ|)"),
    "hybrid_rank": ("tab:red", "hybrid rank (p=ρ|δ|)"),
}


def plot(results: Results, config: OffPolicyConfig, out_dir: Path) -> list[Path]:
    """RMSE to V^π against updates: median over seeds, min–max shaded; one PNG per environment."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for env, by_rep in results.items():
        fig, axes = plt.subplots(1, len(by_rep), figsize=(5.4 * len(by_rep), 4.6), squeeze=False)
        for ax, (rep, by_arm) in zip(axes[0], by_rep.items(), strict=True):
            for arm, values in by_arm.items():
                curves = np.array(values["rmse_curve"])
                x = np.arange(curves.shape[1]) * config.eval_every
                color, label = STYLE[arm]
                ax.plot(x, np.median(curves, axis=0), color=color, lw=1.6, label=label)
                ax.fill_between(x, curves.min(axis=0), curves.max(axis=0), color=color, alpha=0.15, lw=0)
            tolerance = config.tolerances.get(env)
            if tolerance:
                ax.axhline(tolerance, color="k", ls=":", lw=0.8, label=f"tolerance {tolerance:g}")
            ax.set_yscale("log")
            ax.set_xlabel(f"updates (minibatches of {config.batch_size})")
            ax.set_ylabel("RMSE(V, V^π) over occupied states")
            ax.set_title(f"{env}, {rep}", fontsize=10)
            ax.grid(True, which="major", alpha=0.3)
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
        fig.tight_layout(rect=(0, 0.12, 1, 1))
        path = out_dir / f"offpolicy_{env.split('-')[0].lower()}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def _stats(values: Sequence[float | None]) -> tuple[float, float, float]:
    x = np.array([math.inf if v is None else v for v in values], dtype=np.float64)
    return float(np.median(x)), float(x.min()), float(x.max())


def _cell(values: Sequence[float | None], integer: bool = False) -> str:
    median, low, high = _stats(values)

    def fmt(v: float) -> str:
        if math.isinf(v):
            return "n.r."
        return f"{v:,.0f}" if integer else f"{v:.3g}"

    if math.isinf(low):
        return "n.r."
    return f"{fmt(median)} ({fmt(low)}–{fmt(high)})"


def to_json(results: Results) -> str:
    """``results`` as JSON with one line per list (``null`` where the tolerance was never reached)."""
    text = json.dumps(results, indent=1)
    return re.sub(r"\[[^\[\]]*\]", lambda m: json.dumps(json.loads(m.group(0))), text) + "\n"


def command_line(config: OffPolicyConfig) -> str:
    """The command that reproduces ``config``: the recipe with its non-default arguments."""
    return cli.command_line("python -m recipes.offpolicy", config, OffPolicyConfig())


def write_markdown(
    results: Results, config: OffPolicyConfig, runtime_s: float, pngs: list[Path], path: Path
) -> None:
    doc = os.path.relpath("docs/recipes/offpolicy.md", path.parent)
    lines = [
        "# Off-policy replay: RMSE to the exact V^π",
        "",
        f"Written by `recipes/offpolicy.py`; the setup, the mapping and a discussion are in [{doc}]({doc}).  "
        "Schaul et al. 2016, Sec. 6.",
        "",
        f"- command: `{command_line(config)}`",
        f"- runtime: {runtime_s:,.0f} s wall clock, {config.workers} worker process(es) on "
        f"{os.cpu_count()} {platform.machine()} cores, {platform.python_implementation()} "
        f"{platform.python_version()}",
        f"- {config.seeds} seeds per cell: median (min–max).  γ = {config.gamma:g}; π = "
        f"{config.target_epsilon:g}-greedy on Q*; μ = {1 - config.behaviour_mix:g}·uniform"
        + (f" + {config.behaviour_mix:g}·π" if config.behaviour_mix else "")
        + f"; memory {config.memory_size:,} transitions (exploring starts, episodes cut at "
        f"{config.episode_steps}); {config.updates:,} updates of {config.batch_size}; "
        f"η_t = {config.step_size:g} / (1 + t / {config.step_decay:g})",
        "- final RMSE: after the last update, over the occupied (non-terminal, reachable) states; "
        "fixed point: RMSE of the exact limit of the arm's TD(0) on its memory (β = 1 for the hybrids)",
        "- updates to tolerance: first evaluation (every "
        f"{config.eval_every} updates) with RMSE ≤ "
        + ", ".join(f"{env} {config.tolerances.get(env, 0):g}" for env in config.envs)
        + "; to own fixed point: the same tolerance on the RMSE between V and the arm's fixed point; "
        "n.r. = not reached within the run (counted as infinitely many in the median)",
        f"- weights of the sampler-weighted arms normalised by `{config.weight_norm}`",
        "",
    ]
    for env, by_rep in results.items():
        for rep, by_arm in by_rep.items():
            lines += [f"## {env}, {rep}", ""]
            lines.append(
                "| arm | final RMSE | fixed-point RMSE | updates to tolerance | updates to own fixed point "
                "| final β | mean w |"
            )
            lines.append("|---|---|---|---|---|---|---|")
            for arm, values in by_arm.items():
                lines.append(
                    f"| {arm} | {_cell(values['final_rmse'])} | {_cell(values['fixed_point_rmse'])} | "
                    f"{_cell(values['updates_to_tolerance'], integer=True)} | "
                    f"{_cell(values['updates_to_fixed_point'], integer=True)} | "
                    f"{np.median(values['beta_final']):.2g} | {np.median(values['weight_mean']):.3g} |"
                )
            lines.append("")
    lines += ["## Plots", ""]
    lines += [f"![{p.stem}]({p.name})" for p in pngs]
    path.write_text("\n".join(lines) + "\n")


def main(config: OffPolicyConfig | None = None) -> Results:
    """Run the experiment and write the table, the JSON and the plots to ``config.out_dir``."""
    config = OffPolicyConfig() if config is None else config
    out_dir = Path(config.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    results = run_experiment(config)
    runtime = time.perf_counter() - start
    (out_dir / "offpolicy.json").write_text(to_json(results))
    pngs = plot(results, config, out_dir)
    write_markdown(results, config, runtime, pngs, out_dir / "offpolicy.md")
    print(f"wrote {out_dir}/offpolicy.md, offpolicy.json and {len(pngs)} plot(s) in {runtime:.0f} s")
    return results


if __name__ == "__main__":
    main(cli.parse(OffPolicyConfig, prog="python -m recipes.offpolicy"))
