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

Run ``python -m recipes.offpolicy run`` (about 5 minutes on one core).  It writes
``runs/offpolicy/offpolicy.md`` (tables, the command, the runtime), ``offpolicy.json`` and
``offpolicy_<env>.png``; ``--out_dir docs/results`` rewrites the committed results.
``docs/recipes/offpolicy.md`` explains the mapping and the results.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from prisample import CorrectedSampler, LinearSchedule, PrioritizedSampler
from prisample.methods import hybrid_priorities, importance_ratios, rejection_priorities
from recipes.common.experiment import Experiment
from recipes.offpolicy import report as offpolicy_report
from recipes.offpolicy.config import ARMS, Arm, OffPolicyConfig, run_plan
from recipes.offpolicy.model import (
    FloatArray,
    IntArray,
    Model,
    Step,
    aggregation,
    env_stepper,
    epsilon_greedy,
    make_env,
    model_of,
    optimal_q,
    policy_values,
)
from recipes.offpolicy.report import Results

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


def collect(
    step: Step,
    behaviour: FloatArray,
    target: FloatArray,
    starts: IntArray,
    size: int,
    gamma: float,
    episode_steps: int,
    rng: np.random.Generator,
) -> Memory:
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
            n,
            alpha=config.alpha_proportional,
            beta=beta,
            eps=config.hybrid_eps,
            weight_norm=config.weight_norm,
            seed=seed,
        )
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
    arm: Arm,
    memory: Memory,
    sampler: PrioritizedSampler,
    groups: IntArray,
    v_true: FloatArray,
    evaluate: IntArray,
    config: OffPolicyConfig,
    theta_limit: FloatArray | None = None,
) -> Run:
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
            step,
            policy,
            problem_.target,
            problem_.evaluate,
            config.memory_size,
            config.gamma,
            config.episode_steps,
            rng,
        )
    return out


ArmResult = dict[str, Any]


def run_seed(
    env_name: str,
    config: OffPolicyConfig,
    seed: int,
    model: Model | None = None,
    step: Step | None = None,
    on_run: Callable[[str, str, Run], None] | None = None,
) -> dict[str, dict[str, ArmResult]]:
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


EXPERIMENT: Experiment[OffPolicyConfig, Results] = Experiment(
    "offpolicy", OffPolicyConfig, run_experiment, offpolicy_report.write, run_plan
)
"""``python -m recipes.offpolicy run``: :func:`run_experiment`, then the report."""
command_line = EXPERIMENT.command_line
main = EXPERIMENT.main
command = EXPERIMENT.command
