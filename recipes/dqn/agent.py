"""The Double DQN agent's learning rule with prioritized replay (Schaul et al. 2016, Algorithm 1).

Both training loops run Algorithm 1's lines from here: ``python -m recipes.dqn train``
(:mod:`recipes.dqn.run`, one agent) and ``python -m recipes.dqn together``
(:mod:`recipes.dqn.together`, the stacked agents of one game)::

    line 1       the memory, α, β, ε and backend of the arm         make_replay
    line 4       A_t ~ ε-greedy(Q(S_t, ·))                         act
    line 5       observe S_t, R_t, γ_t                             observe, transition_targets
    line 6       store the transition at maximal priority          store
    lines 8-9    α, β annealed; j ~ P(j) = p_j^α / Σ_i p_i^α        draw
    lines 10-15  w_j = (N·P(j))^-β / max_i w_i, δ_j, θ's step       td_loss, make_learner
    line 12      p_j ← |δ_j|, once the device has computed it      PriorityWrites
    line 17      θ_target ← θ                                      sync_target

Lines marked ``# PER:`` are where prioritization touches the agent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from prisample.methods.laber import LaBER
from prisample.methods.lap import lap_priorities
from prisample.replay import PrioritizedReplay
from recipes.dqn.config import DDQNConfig
from recipes.dqn.envs import EnvSpec, lives
from recipes.dqn.parts import Timer
from recipes.dqn.update import Batch, LossFn, OptimizerStep, Pending, as_batch

__all__ = [
    "LABER_EPS",
    "SQRT_LOSS_FLOOR",
    "TD_ERRORS",
    "Observed",
    "PriorityWrites",
    "act",
    "double_dqn_td_error",
    "dqn_td_error",
    "draw",
    "laber_batch",
    "make_learner",
    "make_replay",
    "make_replay_update",
    "observe",
    "store",
    "sync_target",
    "td_item_loss",
    "td_loss",
    "transition_targets",
    "weighted_td_loss",
]

# -- the memory (Algorithm 1, line 1) ----------------------------------------------------------------


def make_replay(cfg: DDQNConfig, spec: EnvSpec, device: torch.device, num_streams: int) -> PrioritizedReplay:
    """The agent's memory: a :class:`~prisample.replay.PrioritizedReplay` whatever the arm (line 1).

    ``uniform`` is α = 0, β = 0; the arm's backend (proportional or rank), α, β₀, weight
    normalisation and ε of ``p = |δ| + ε`` otherwise.  Frames are stored once (``frame_stack``),
    one stream per environment, n-step returns when ``cfg.n_step > 1``, the frames on the GPU with
    ``replay_on_device``, and the priorities too with ``priorities_on_device`` (proportional and
    uniform)."""
    on_gpu = cfg.replay_on_device and device.type == "cuda"
    backend: str = cfg.replay
    if on_gpu and cfg.priorities_on_device and cfg.replay in ("proportional", "uniform"):
        backend = f"device_{cfg.replay}"
    return PrioritizedReplay(
        cfg.memory_size,
        spec.obs_shape[1:] if spec.frame_stack > 1 else spec.obs_shape,
        frame_stack=spec.frame_stack,
        obs_dtype=spec.obs_dtype,
        num_streams=num_streams,
        n_step=cfg.n_step,
        alpha=cfg.alpha,
        beta=cfg.beta0,
        weight_norm=cfg.weight_norm,
        backend=backend,
        seed=cfg.seed,
        # PER: LAP's p = max(|δ|, κ) and Dopamine's sqrt(ℓ + 1e-10) are positive without ε
        eps=0.0 if cfg.priority_rule != "abs_td" else cfg.priority_eps,
        device=device if on_gpu else None,
    )


# -- the update of Algorithm 1 -----------------------------------------------------------------------


def double_dqn_td_error(
    q: nn.Module,
    q_target: nn.Module,
    obs: torch.Tensor,
    action: torch.Tensor,
    reward: torch.Tensor,
    discount: torch.Tensor,
    next_obs: torch.Tensor,
) -> torch.Tensor:
    """``δ_j = R_j + γ_j Q_target(S_j, argmax_a Q(S_j, a)) − Q(S_{j−1}, A_{j−1})`` (Algorithm 1, line 11).

    ``discount`` is the bootstrap factor the replay returns: ``γ_j`` (γ, or 0 where the episode
    terminated or a life was lost) for one step, ``Π_{k<m} γ_{t+k}`` for an m-step return, whose
    ``reward`` is then ``Σ_{k<m} (Π_{j<k} γ_{t+j}) R_{t+k}``.  The greedy action comes from the
    online network and its value from the target network (Double Q-learning, van Hasselt et al.
    2016); only ``Q(S_{j−1}, A_{j−1})`` carries a gradient.
    """
    q_taken: torch.Tensor = q(obs).gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        greedy = q(next_obs).argmax(dim=-1, keepdim=True)
        bootstrap = q_target(next_obs).gather(-1, greedy).squeeze(-1)
        target: torch.Tensor = reward + discount * bootstrap
    return target - q_taken


def dqn_td_error(
    q: nn.Module,
    q_target: nn.Module,
    obs: torch.Tensor,
    action: torch.Tensor,
    reward: torch.Tensor,
    discount: torch.Tensor,
    next_obs: torch.Tensor,
) -> torch.Tensor:
    """``δ_j = R_j + γ_j max_a Q_target(S_j, a) − Q(S_{j−1}, A_{j−1})`` (DQN, Mnih et al. 2015):
    the target network both picks and values the action (the paper's DQN arms, Table 3)."""
    q_taken: torch.Tensor = q(obs).gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        target: torch.Tensor = reward + discount * q_target(next_obs).max(dim=-1).values
    return target - q_taken


TD_ERRORS = {"double_dqn": double_dqn_td_error, "dqn": dqn_td_error}
SQRT_LOSS_FLOOR = 1e-10
"""Added to the loss under the root of Dopamine's priorities: no transition gets priority 0."""
LABER_EPS = 1e-6
"""Added to LaBER's scores |δ| so that a large batch of zero errors still keeps k (then uniformly)."""


def td_loss(q: nn.Module, q_target: nn.Module, cfg: DDQNConfig) -> LossFn:
    """``batch -> (loss, |δ|)`` for :class:`~recipes.dqn.update.OptimizerStep`: the loss whose
    gradient step is ``θ ← θ + η Σ_j w_j δ_j ∇θ Q(S_{j−1}, A_{j−1})`` (Algorithm 1, lines 11-15),
    and the new priorities: ``|δ_j|`` (the authors' release; ``|clip(δ_j)|`` with clip_priority),
    LAP's ``max(|δ_j|, κ)`` of the unclipped δ with the Huber loss at κ (``priority_rule='lap'``),
    or Dopamine's ``sqrt(ℓ(δ_j) + 1e-10)`` of the per-item loss (``priority_rule='sqrt_loss'``)."""
    td_error = TD_ERRORS[cfg.algorithm]
    lap = cfg.priority_rule == "lap"
    kappa = cfg.lap_kappa if lap else 1.0  # LAP: Huber at κ; κ = 1 is clip_td's Huber, the same loss
    clip = cfg.clip_td or lap

    def loss_and_priorities(batch: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        obs, action, reward, discount, next_obs, weights = batch
        delta = td_error(q, q_target, obs, action, reward, discount, next_obs)
        loss = weighted_td_loss(delta, weights, clip, cfg.loss_reduction, kappa=kappa)
        if lap:  # PER: LAP's p = max(|δ|, κ) of the unclipped δ (clipped, every |δ| >= 1 would tie at κ)
            return loss, lap_priorities(delta, kappa)
        delta = delta.detach()
        if cfg.priority_rule == "sqrt_loss":  # PER: Dopamine's p = sqrt(ℓ + 1e-10), "a squared loss"
            return loss, torch.sqrt(td_item_loss(delta, clip, kappa) + SQRT_LOSS_FLOOR)
        # PER: p = |δ| (DQN Zoo clips only the gradient); clipped, every |δ| >= 1 would tie at 1
        return loss, (delta.clamp(-1.0, 1.0) if cfg.clip_priority else delta).abs()

    return loss_and_priorities


def laber_batch(
    sample: Any,
    candidates: np.ndarray,
    laber: LaBER,
    q: nn.Module,
    q_target: nn.Module,
    cfg: DDQNConfig,
    device: torch.device,
) -> tuple[Batch, np.ndarray]:
    """LaBER-mean (Lahire, Geist & Rachelson 2022, Alg. 1): the kept minibatch and its slots.

    ``sample`` holds the ``m·B`` transitions drawn uniformly (slots ``candidates``).  One forward
    without gradient scores each by ``s_i = |δ_i|`` (clipped as the update clips it: the norm of
    the loss's gradient in ``Q``), then ``B`` are kept with ``q_i = s_i / Σ_k s_k`` and weighted
    ``w_i = mean_k s_k / s_i`` (:meth:`prisample.LaBER.select`), so that the kept batch's weighted
    gradient is an unbiased estimate of the large batch's mean gradient.
    """
    large = as_batch(sample, np.ones(len(candidates), dtype=np.float32), device)
    with torch.no_grad():
        delta = TD_ERRORS[cfg.algorithm](q, q_target, *large[:5])
    scores = (delta.clamp(-1.0, 1.0) if cfg.clip_td else delta).abs()
    kept = laber.select(candidates, scores.double().cpu().numpy())
    rows = torch.as_tensor(kept.positions, device=device)
    obs, action, reward, discount, next_obs = (column.index_select(0, rows) for column in large[:5])
    weights = torch.as_tensor(kept.weights, device=device)
    return Batch(obs, action, reward, discount, next_obs, weights), kept.indices


def make_learner(
    q: nn.Module, q_target: nn.Module, optimizer: torch.optim.Optimizer, cfg: DDQNConfig, device: torch.device
) -> OptimizerStep:
    """The update as one call ``learner(batch) -> (loss, |δ|)``: captured as a CUDA graph on a
    CUDA device when ``cfg.cuda_graph``, eager otherwise (the same arithmetic)."""
    graph = cfg.cuda_graph and device.type == "cuda"
    return OptimizerStep(td_loss(q, q_target, cfg), list(q.parameters()), optimizer, graph=graph)


def make_replay_update(
    q: nn.Module,
    q_target: nn.Module,
    optimizer: torch.optim.Optimizer,
    replay: PrioritizedReplay,
    cfg: DDQNConfig,
    device: torch.device,
) -> OptimizerStep:
    """Lines 9-12 as one call with the priorities on the device: ``j ~ P(j)``, ``w_j``, the
    update of θ and ``p_j ← |δ_j|``, returning ``(loss, |δ|, mean w, min w, slots, generations)``.

    On a CUDA device with ``cfg.cuda_graph`` the whole step is one captured graph, replayed after
    the replay stages its host side (the rows added since the last draw, the ring's tail, β);
    eager otherwise, with the same arithmetic.  Nothing in it waits for the host."""
    loss_and_priorities = td_loss(q, q_target, cfg)

    def draw_and_loss(_: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        sample, drawn = replay.sample(cfg.batch_size)  # PER: j ~ P(j) (line 9), w_j (line 10)
        batch = as_batch(sample, drawn.weights, device)
        loss, priorities = loss_and_priorities(batch)
        weights = batch.weights
        slots, generations = cast(torch.Tensor, drawn.indices), cast(torch.Tensor, sample.generation)
        return loss, priorities, weights.mean(), weights.min(), slots, generations

    def write_priorities(outputs: tuple[torch.Tensor, ...]) -> None:
        _, priorities, _, _, slots, generations = outputs
        replay.update_priorities(slots, priorities, generations=generations)  # PER: p_j ← |δ_j| (line 12)

    graph = cfg.cuda_graph and device.type == "cuda"
    params = list(q.parameters())
    return OptimizerStep(draw_and_loss, params, optimizer, graph=graph, after=write_priorities, state=replay)


def weighted_td_loss(
    delta: torch.Tensor, weights: torch.Tensor, clip_td: bool, reduction: str, *, kappa: float = 1.0
) -> torch.Tensor:
    """Loss whose gradient is ``−Σ_j w_j clip(δ_j) ∇Q_j`` (Algorithm 1, line 13, with δ clipped, Sec. 4).

    With ``clip_td`` the per-item loss is the Huber loss at ``κ`` (quadratic ``δ²/2`` for |δ| ≤ κ,
    linear ``κ(|δ| − κ/2)`` beyond), whose derivative in ``Q`` is ``−clip(δ, −κ, κ)``; κ = 1 is the
    paper's TD clipping and LAP's loss (Fujimoto et al. 2020, :func:`prisample.methods.lap.lap_loss`, up to
    the reduction); without ``clip_td`` ``δ²/2``.  ``"mean"`` divides by k.
    ``delta`` is ``(k,)``, or ``(agents, k)`` for stacked agents: the sum of their losses, each of
    which reaches only its own agent's parameters.
    """
    total = (weights * td_item_loss(delta, clip_td, kappa)).sum()
    return total / delta.shape[-1] if reduction == "mean" else total


def td_item_loss(delta: torch.Tensor, clip_td: bool, kappa: float = 1.0) -> torch.Tensor:
    """Per-item loss ``ℓ(δ)``: the Huber loss at ``κ`` with ``clip_td`` (``δ²/2`` for |δ| ≤ κ,
    ``κ(|δ| − κ/2)`` beyond), else the square loss ``δ²/2``."""
    if not clip_td:
        return 0.5 * delta**2
    magnitude = delta.abs()
    return torch.where(magnitude <= kappa, 0.5 * delta**2, kappa * (magnitude - 0.5 * kappa))


# -- acting and storing (Algorithm 1, lines 4-6) -----------------------------------------------------


def act(
    q: Callable[[torch.Tensor], torch.Tensor],
    obs: np.ndarray,
    epsilon: float,
    rng: np.random.Generator,
    num_actions: int,
    device: torch.device,
) -> np.ndarray:
    """ε-greedy actions, one per environment (Algorithm 1, line 4); no network call while ε = 1."""
    n: int = obs.shape[0]
    if epsilon >= 1.0:
        return rng.integers(0, num_actions, n)
    with torch.no_grad():
        greedy = q(torch.as_tensor(obs, device=device)).argmax(dim=1).cpu().numpy()
    explore = rng.random(n) < epsilon
    return np.where(explore, rng.integers(0, num_actions, n), greedy)


def transition_targets(
    reward: np.ndarray, terminated: np.ndarray, life_lost: np.ndarray, clip_reward: bool, gamma: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(R_t, γ_t)`` as stored: the reward clipped to [−1, 1] when asked (Sec. 4), and the per-step
    discount ``γ_t``: 0 where the episode terminated or a life was lost (the bootstrapped return
    ends there), else γ."""
    learn_reward = np.clip(reward, -1.0, 1.0) if clip_reward else np.asarray(reward, dtype=np.float64)
    return learn_reward, np.where(terminated | life_lost, 0.0, gamma)


@dataclass(frozen=True)
class Observed:
    """What one step of the environments gives the agent (line 5), one entry per environment."""

    next_obs: np.ndarray
    """``S_t``."""
    reward: np.ndarray
    """``R_t`` as the environment gave it (the episode's return)."""
    learn_reward: np.ndarray
    """``R_t`` as learned: clipped to [−1, 1] with ``clip_reward``."""
    discount: np.ndarray
    """``γ_t``: 0 where the episode terminated or a life was lost, else γ."""
    done: np.ndarray
    """The episode ended at this step (a step that only resets an environment is not an end)."""
    life: np.ndarray
    """Lives left after the step."""


def observe(outcome: Sequence[Any], prev_done: np.ndarray, life: np.ndarray, cfg: DDQNConfig) -> Observed:
    """``S_t, R_t, γ_t`` from a vector environment's ``step`` result (line 5).

    ``prev_done`` marks the environments whose last step ended an episode (this step resets them);
    ``life`` holds their lives before the step: a life lost ends the bootstrapped return with
    ``terminal_on_life_loss``."""
    next_obs, reward, terminated, truncated, info = outcome
    reward, terminated = np.asarray(reward, dtype=np.float64), np.asarray(terminated, dtype=bool)
    done = (terminated | np.asarray(truncated, dtype=bool)) & ~prev_done
    next_life = lives(info, len(prev_done))
    life_lost = (next_life < life) & cfg.terminal_on_life_loss
    learn_reward, discount = transition_targets(reward, terminated, life_lost, cfg.clip_reward, cfg.gamma)
    return Observed(next_obs, reward, learn_reward, discount, done, next_life)


def store(
    replay: PrioritizedReplay,
    obs: np.ndarray,
    actions: np.ndarray,
    step: Observed,
    prev_done: np.ndarray,
    rows: np.ndarray,
    first_stream: int = 0,
) -> np.ndarray:
    """Store ``(S_{t−1}, A_{t−1}, R_t, γ_t, S_t)`` of the environments ``rows`` (line 6); their
    streams are ``rows − first_stream``.  A step that only resets an environment stores nothing.
    Returns the slots written."""
    live = rows[~prev_done[rows]]
    if not live.size:
        return np.empty(0, dtype=np.int64)
    # PER: a new transition enters at the maximal priority, p_t = max_{i<t} p_i
    return replay.add_many(
        obs[live],
        actions[live],
        step.learn_reward[live],
        step.discount[live],
        step.next_obs[live],
        episode_end=step.done[live],
        streams=live - first_stream,
    )


# -- drawing and writing priorities (Algorithm 1, lines 8-12) ---------------------------------------


def draw(replay: PrioritizedReplay, batch_size: int, alpha: float, beta: float) -> tuple[Any, Any]:
    """``(sample, draw)`` of ``batch_size`` transitions ``j ~ P(j) = p_j^α / Σ_i p_i^α`` (line 9),
    with α and β at their scheduled values first (β annealed β₀ → 1, Sec. 3.4; α annealed in the
    paper's ``dqn_rank`` arm, Table 3)."""
    if replay.sampler.alpha != alpha:
        replay.sampler.alpha = alpha  # PER: α annealed (dqn_rank: 0.5 → 0, Table 3)
    replay.sampler.beta = beta  # PER: β annealed β0 → 1 over training (Sec. 3.4)
    return replay.sample(batch_size)


class PriorityWrites:
    """Updates whose new priorities ``|δ_j|`` are on their way from the device (line 12).

    An update is queued with its drawn slots (:meth:`push`); :meth:`ready` waits for the values of
    all but the last ``keep`` and hands them over in order, for ``p_j ← |δ_j|``."""

    def __init__(self, timer: Timer) -> None:
        self._timer = timer
        self._pending: list[tuple[Any, Pending]] = []

    def push(self, indices: Any, values: Pending) -> None:
        """Queue one update (or one round of stacked updates): its slots and its values in flight."""
        self._pending.append((indices, values))

    def ready(self, keep: int = 0) -> Iterator[tuple[Any, np.ndarray]]:
        """``(slots, values on the host)`` of every queued update but the last ``keep``, oldest first."""
        while len(self._pending) > keep:
            indices, values = self._pending.pop(0)
            with self._timer("learn"):  # waits for the device
                host = values.wait()
            yield indices, host


def sync_target(q: nn.Module, q_target: nn.Module) -> None:
    """``θ_target ← θ`` (line 17), every ``target_update_period`` agent steps."""
    q_target.load_state_dict(q.state_dict())
