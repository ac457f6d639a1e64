"""Blind Cliffwalk: how much the order of replay matters (Schaul et al. 2016, Sec. 3.1-3.3, App. B.1).

A chain of ``n`` states with two actions.  The 'right' action moves one state along (reward 0, the
``n``-th one ends the episode with reward 1); the 'wrong' action ends the episode with reward 0.
Which action is 'right' alternates from state to state.  The replay memory holds every one of the
``2^n`` action sequences, run to termination in random order: ``2^(n+1) - 2`` transitions, exactly
one of them rewarded.  Q-learning replays that fixed memory one transition at a time,

    δ = R + γ_t max_a Q(S_t, a) - Q(S_{t-1}, A_{t-1}),     θ ← θ + η δ φ(S_{t-1}, A_{t-1})

(App. B.1, Eqs. 3-4), until the mean squared error between ``Q`` and the true ``Q`` over all
(state, action) pairs is below ``1e-3``.  The experiment counts the updates that takes for five
ways of choosing the next transition: uniform, the hindsight oracle, greedy TD error, rank-based
and proportional prioritization (Figs. 1 right and 2).

Run ``python -m recipes.cliffwalk run`` (n = 2..12, 10 seeds, about a minute on one core) or
``python -m recipes.cliffwalk run --max_n 16 --workers 2`` (the paper's range, about 7 minutes on two
cores).  It writes ``runs/cliffwalk/cliffwalk.md`` (tables, the command, the runtime),
``cliffwalk.json`` (updates per seed, ``null`` for a run that did not converge) and
``cliffwalk_*.png``; ``--out_dir docs/results`` rewrites the committed results.  Choices the paper
leaves open are listed in ``docs/recipes/cliffwalk.md``.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numba
import numpy as np
import numpy.typing as npt
from tqdm import tqdm

from prisample import PrioritizedSampler
from recipes.cliffwalk import report as cliffwalk_report
from recipes.cliffwalk.config import AGENTS, REPRESENTATIONS, Agent, CliffwalkConfig, Representation, run_plan
from recipes.cliffwalk.report import Results
from recipes.common.experiment import Experiment

__all__ = [
    "AGENTS",
    "EXPERIMENT",
    "REPRESENTATIONS",
    "CliffwalkConfig",
    "QLearner",
    "command",
    "command_line",
    "main",
    "run_experiment",
    "run_one",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def right_action(state: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """The 'right' action of a state: 0 in even states, 1 in odd ones, so no action is always right."""
    return np.asarray(state, dtype=np.int64) % 2


@dataclass(frozen=True)
class Memory:
    """The replay memory: one transition ``(S_{t-1}, A_{t-1}, R_t, γ_t, S_t)`` per slot.

    ``discount`` is ``γ_t``: ``γ = 1 - 1/n`` for a step along the chain, 0 when the episode ends.
    ``next_state`` is 0 (unused) for a terminal transition.
    """

    n: int
    gamma: float
    state: IntArray
    action: IntArray
    reward: FloatArray
    discount: FloatArray
    next_state: IntArray

    def __len__(self) -> int:
        return int(self.state.shape[0])

    @property
    def pair(self) -> IntArray:
        """Index ``2 s + a`` of each slot's (state, action) pair, the row of Q it updates."""
        return 2 * self.state + self.action


def fill_memory(n: int, rng: np.random.Generator) -> Memory:
    """Run all ``2^n`` action sequences to termination, in random order, and keep every transition.

    Sequence ``j`` takes action ``(j >> t) & 1`` at step ``t``.  It ends at its first 'wrong'
    action, or after ``n`` 'right' ones with reward 1, so the memory holds ``2^(n+1) - 2``
    transitions of which exactly one is rewarded (App. B.1).
    """
    gamma = 1.0 - 1.0 / n
    sequences = rng.permutation(2**n)
    actions = (sequences[:, None] >> np.arange(n)) & 1
    wrong = actions != right_action(np.arange(n))
    length = np.where(wrong.any(axis=1), wrong.argmax(axis=1) + 1, n)
    episode = np.repeat(np.arange(2**n), length)
    state = np.arange(int(length.sum())) - np.repeat(np.cumsum(length) - length, length)
    action = actions[episode, state]
    is_right = action == right_action(state)
    terminal = ~is_right | (state == n - 1)
    return Memory(
        n=n,
        gamma=gamma,
        state=state.astype(np.int64),
        action=action.astype(np.int64),
        reward=(is_right & (state == n - 1)).astype(np.float64),
        discount=np.where(terminal, 0.0, gamma),
        next_state=np.where(terminal, 0, state + 1).astype(np.int64),
    )


def true_q(n: int) -> FloatArray:
    """``Q*(s, right) = γ^(n-1-s)``, ``Q*(s, wrong) = 0``, indexed by pair ``2 s + a``."""
    gamma = 1.0 - 1.0 / n
    q = np.zeros(2 * n)
    states = np.arange(n)
    q[2 * states + right_action(states)] = gamma ** (n - 1 - states)
    return q


def features(n: int, representation: Representation) -> FloatArray:
    """Feature matrix ``Φ``, one row ``φ(s, a)`` per pair ``2 s + a``: ``Q = Φ θ``.

    * tabular: the one-hot vector of the pair (``2n`` features);
    * linear: the same one-hot vector with a constant bias feature of value 1 per action
      (``2n + 2`` features), i.e. ``Q(s, ·) = W [onehot(s); 1]``, a linear layer with one output
      per action.  The bias is what could generalise across states; alternating the 'right'
      action keeps it from doing so (App. B.1).
    """
    phi = np.eye(2 * n)
    if representation == "tabular":
        return phi
    if representation == "linear":
        bias = np.zeros((2 * n, 2))
        bias[np.arange(2 * n), np.arange(2 * n) % 2] = 1.0
        return np.hstack([phi, bias])
    raise ValueError(f"representation should be one of {REPRESENTATIONS}, but got {representation!r}")


# -- Q-learning -----------------------------------------------------------------------------------


@numba.njit(cache=True)
def _replay(
    theta: FloatArray,
    q: FloatArray,
    phi: FloatArray,
    kernel: FloatArray,
    q_true: FloatArray,
    pair: IntArray,
    reward: FloatArray,
    discount: FloatArray,
    next_state: IntArray,
    slots: IntArray,
    step_size: float,
    tolerance: float,
    abs_delta: FloatArray,
) -> tuple[int, bool]:
    n_pairs, n_features = phi.shape
    for j in range(slots.shape[0]):
        i = slots[j]
        p = pair[i]
        s_t = next_state[i]
        delta = reward[i] + discount[i] * max(q[2 * s_t], q[2 * s_t + 1]) - q[p]
        abs_delta[j] = abs(delta)
        step = step_size * delta
        for f in range(n_features):
            theta[f] += step * phi[p, f]
        # Q = Φθ, so the update moves every Q(s', a') by η δ φ(s', a')ᵀφ(s, a) = η δ K[p, ·].
        squared_error = 0.0
        for r in range(n_pairs):
            q[r] += step * kernel[p, r]
            squared_error += (q[r] - q_true[r]) ** 2
        if squared_error / n_pairs < tolerance:
            return j + 1, True
    return slots.shape[0], False


class QLearner:
    """Q-learning on a fixed memory with ``Q(s, a) = θᵀφ(s, a)`` (App. B.1, Eqs. 3-4)."""

    def __init__(
        self, memory: Memory, representation: Representation, theta: FloatArray, config: CliffwalkConfig
    ) -> None:
        self.memory = memory
        self.phi = features(memory.n, representation)
        if theta.shape != (self.phi.shape[1],):
            raise ValueError(f"theta should have shape ({self.phi.shape[1]},), but got {theta.shape}")
        self.theta = theta.astype(np.float64, copy=True)
        self.kernel = self.phi @ self.phi.T
        self.q = self.phi @ self.theta
        self.q_true = true_q(memory.n)
        self.pair = memory.pair
        self.step_size = config.step_size
        self.tolerance = config.tolerance
        self.updates = 0

    @property
    def mse(self) -> float:
        """Mean squared error between ``Q`` and the true ``Q`` over all (state, action) pairs."""
        return float(np.mean((self.q - self.q_true) ** 2))

    def td_errors(self, slots: npt.ArrayLike) -> FloatArray:
        """``δ = R + γ_t max_a Q(S_t, a) - Q(S_{t-1}, A_{t-1})`` of the slots under the current θ."""
        m, i = self.memory, np.asarray(slots, dtype=np.int64)
        bootstrap = np.maximum(self.q[2 * m.next_state[i]], self.q[2 * m.next_state[i] + 1])
        return np.asarray(m.reward[i] + m.discount[i] * bootstrap - self.q[self.pair[i]])

    def replay(self, slots: IntArray, abs_delta: FloatArray) -> tuple[int, bool]:
        """Update on ``slots`` one after the other, each with the θ its predecessors left.

        Writes the pre-update ``|δ|`` of each into ``abs_delta`` and stops right after the update
        that brings the MSE below the tolerance.  Returns (updates applied, converged).
        """
        m = self.memory
        applied, converged = _replay(
            self.theta,
            self.q,
            self.phi,
            self.kernel,
            self.q_true,
            self.pair,
            m.reward,
            m.discount,
            m.next_state,
            slots,
            self.step_size,
            self.tolerance,
            abs_delta,
        )
        self.updates += applied
        return applied, converged


# -- agents ---------------------------------------------------------------------------------------


def oracle_choice(learner: QLearner, candidates: IntArray) -> int:
    """The candidate slot whose update leaves the smallest global loss ``MSE(Q, Q_true)`` (Sec. 3.1).

    All candidate updates are evaluated at once: slot ``j`` would move ``Q`` to
    ``Q + η δ_j K[pair_j]``.
    """
    delta = learner.td_errors(candidates)
    error = learner.q - learner.q_true
    after = error[None, :] + learner.step_size * delta[:, None] * learner.kernel[learner.pair[candidates]]
    return int(candidates[np.argmin(np.mean(after**2, axis=1))])


def run_oracle(learner: QLearner, max_updates: int) -> int | None:
    """Hindsight oracle: always replay the transition that most reduces the global loss.

    Copies of one (state, action) pair are identical transitions, so one slot per pair stands for
    all of its copies; choosing among those ``2n`` slots is choosing among all ``2^(n+1) - 2``.
    """
    _, first = np.unique(learner.pair, return_index=True)
    candidates = first.astype(np.int64)
    chosen, abs_delta = np.zeros(1, dtype=np.int64), np.zeros(1)
    while learner.updates < max_updates:
        chosen[0] = oracle_choice(learner, candidates)
        q_before = learner.q.copy()
        if learner.replay(chosen, abs_delta)[1]:
            return learner.updates
        if np.array_equal(q_before, learner.q):
            # The best update left Q unchanged (every other one raises the loss), and the choice
            # depends on Q alone: the oracle would repeat this step until any cap.
            return None
    return None


def make_sampler(agent: Agent, size: int, config: CliffwalkConfig, seed: int) -> PrioritizedSampler:
    """The agent's ``PrioritizedSampler`` over the filled memory.

    ``β = 0``: no importance weights.  The experiment appears before importance sampling in the
    paper (Sec. 3.3 vs 3.4), and here every transition is deterministic, so the true Q is a fixed
    point of every single update whatever the sampling distribution: nothing to correct.
    """
    # greedy and uniform ignore α
    alpha = {"rank": config.alpha_rank, "proportional": config.alpha_proportional}.get(agent, 1.0)
    sampler = PrioritizedSampler(
        size, alpha=alpha, beta=0.0, eps=config.eps, backend=agent, size=0, seed=seed
    )
    # PER: transitions enter at the maximal priority of the memory (1 for the first, Sec. 3.2).
    # No learning happens while the memory fills, so that is 1 for every slot, in fill order.
    sampler.add(np.arange(size))
    return sampler


def run_sampled(learner: QLearner, sampler: PrioritizedSampler, max_updates: int, batch: int) -> int | None:
    """Replay what ``sampler`` draws, one update per draw, and feed ``|δ|`` back as the priority."""
    abs_delta = np.zeros(batch)
    while learner.updates < max_updates:
        k = min(batch, max_updates - learner.updates)
        draw = sampler.sample(k)  # PER: greedy / rank / proportional draw from the current priorities
        applied, converged = learner.replay(draw.indices, abs_delta)
        # PER: p_i ← |δ_i|, the TD error met at this replay (Algorithm 1, line 12)
        sampler.update_priorities(draw.indices[:applied], abs_delta[:applied])
        if converged:
            return learner.updates
    return None


def run_one(
    config: CliffwalkConfig, representation: Representation, agent: Agent, n: int, seed: int
) -> int | None:
    """Updates until convergence of one run, or ``None`` if it hit its cap (or the oracle stalled).

    The memory order and the initial θ depend on ``(config.seed, n, seed)`` only, so every agent
    and both representations start from the same memory, and all agents of one representation
    from the same θ.
    """
    rng = np.random.default_rng([config.seed, n, seed])
    memory = fill_memory(n, rng)
    theta = rng.normal(0.0, config.init_std, size=(features(n, representation).shape[1],))
    learner = QLearner(memory, representation, theta, config)
    if agent == "oracle":
        return run_oracle(learner, min(config.max_updates, config.max_oracle_updates))
    sampler = make_sampler(agent, len(memory), config, seed=int(rng.integers(2**63)))
    if config.initial_priority == "td":  # a variant, not the paper: no slot starts above its own |δ|
        every_slot = np.arange(len(memory))
        sampler.update_priorities(every_slot, np.abs(learner.td_errors(every_slot)))
    # Uniform draws do not depend on the priorities, so a batch of independent draws is the same
    # process as one draw per update.  The others must see each new priority before the next draw.
    batch = config.uniform_batch if agent == "uniform" else 1
    return run_sampled(learner, sampler, config.max_updates, batch)


# -- the experiment -------------------------------------------------------------------------------


def _run_task(task: tuple[CliffwalkConfig, Representation, Agent, int, int]) -> int | None:
    return run_one(*task)


def run_experiment(config: CliffwalkConfig, progress: bool = True) -> Results:
    """``{representation: {agent: {str(n): [updates per seed, None if capped]}}}``."""
    sizes = range(config.min_n, config.max_n + 1)
    tasks = [
        (config, rep, agent, n, seed)
        for n in sizes
        for rep in config.representations
        for agent in config.agents
        for seed in range(config.seeds)
    ]
    bar = tqdm(total=len(tasks), desc="cliffwalk", unit="run", disable=not progress)
    if config.workers == 1:
        outcomes = []
        for task in tasks:
            bar.set_postfix_str(f"{task[1]} {task[2]} n={task[3]}", refresh=False)
            outcomes.append(_run_task(task))
            bar.update()
    else:
        with ProcessPoolExecutor(config.workers) as pool:
            outcomes = []
            for outcome in pool.map(_run_task, tasks):
                outcomes.append(outcome)
                bar.update()
    bar.close()
    results: Results = {
        rep: {agent: {str(n): [] for n in sizes} for agent in config.agents} for rep in config.representations
    }
    for (_, rep, agent, n, _), outcome in zip(tasks, outcomes, strict=True):
        results[rep][agent][str(n)].append(outcome)
    return results


# -- outputs --------------------------------------------------------------------------------------


EXPERIMENT: Experiment[CliffwalkConfig, Results] = Experiment(
    "cliffwalk", CliffwalkConfig, run_experiment, cliffwalk_report.write, run_plan
)
"""``python -m recipes.cliffwalk run``: :func:`run_experiment`, then the report."""
command_line = EXPERIMENT.command_line
main = EXPERIMENT.main
command = EXPERIMENT.command
