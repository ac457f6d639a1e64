"""Double DQN with uniform, proportional and rank-based prioritized replay (Schaul et al. 2016, Algorithm 1).

The agent is the tuned Double DQN of van Hasselt, Guez & Silver (2016) with its replay memory
replaced by :class:`prisample.replay.PrioritizedReplay`.  Every ``K`` agent steps it draws a
minibatch of ``k`` transitions ``j`` with probability ``P(j) = p_j^α / Σ_i p_i^α`` and updates

    w_j = (N · P(j))^-β / max_i w_i
    δ_j = R_j + γ_j Q_target(S_j, argmax_a Q(S_j, a)) − Q(S_{j−1}, A_{j−1})      (clipped to [−1, 1])
    p_j ← |δ_j|
    θ ← θ + η Σ_j w_j δ_j ∇_θ Q(S_{j−1}, A_{j−1})

(Algorithm 1, Sec. 3.3-4, App. B.2).  An *arm* is a config file under
``recipes/configs/atari_ddqn/arms/`` (Table 3): ``uniform`` (α = 0, β = 0: the Double DQN
baseline), ``proportional`` (``p = |δ| + ε``, α = 0.6, β 0.4 → 1), ``rank`` (``p = 1/rank``,
α = 0.7, β 0.5 → 1), and the paper's first experiment, plain DQN (``max_a Q_target``) with
``dqn_uniform`` or ``dqn_rank`` (α annealed 0.5 → 0, β = 0); the prioritized arms step η/4.
Two later schemes are arms for the replay ablation (``recipes/replay_ablation.py``): ``lap``
(Fujimoto et al. 2020: ``p = max(|δ|, κ)``, α = 0.4, no importance weights, Huber loss at κ = 1)
and ``laber`` (Lahire et al. 2022, LaBER-mean: no stored priorities; each update scores ``m·B``
uniformly drawn transitions by ``|δ|`` and keeps ``B`` of them ``∝ |δ|``, weighted
``mean_k |δ_k| / |δ_i|``).
The environment's family picks the other values (``recipes/configs/atari_ddqn/<family>.yaml``).
Lines marked ``# PER:`` are where prioritization touches the loop; all of them are in ``train``
and ``make_optimizer`` (``recipes/dqn_model.py``).

Commands (``PYTHONPATH=.`` is enough, nothing needs installing)::

    python -m recipes.atari_ddqn train --env ALE/Pong-v5 --arm proportional --device cuda
    python -m recipes.atari_ddqn train --env CartPole-v1 --arm rank
    python -m recipes.atari_ddqn train --env ALE/Pong-v5 --arm dqn_rank
    python -m recipes.dqn_sweep sweep --env CartPole-v1 --seeds 5 --jobs 14 --out docs/results/cartpole

Options given on the command line win over the arm's file, which wins over the family's; each
value and its source is listed in ``docs/recipes/atari_ddqn.md``.  Sweeps, plots and the weight
ablation live in ``recipes/dqn_sweep.py``; the config, its files and the command line in
``recipes/dqn_config.py``; the network and optimizer in ``recipes/dqn_model.py``; the minibatch on
the device, the update as one call (a CUDA graph on a GPU) and the copies back in
``recipes/dqn_update.py``; the run's start, schedules, loop state, the ``metrics.csv`` row,
checkpoints and the end of a run in ``recipes/dqn_run.py``; timers, logging, evaluation bookkeeping
and checkpoint files in ``recipes/dqn_parts.py``; environments in ``recipes/dqn_envs.py``.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
import torch
from torch import nn

from prisample.diagnostics import Diagnostics, WeightMonitor
from prisample.laber import LaBER
from prisample.losses import lap_priorities
from recipes.dqn_config import (
    ABLATION_ARMS,
    ARMS,
    CONFIG_DIR,
    PAPER_ARMS,
    DDQNConfig,
    config_files,
    load_config,
    parse_command,
    protocols,
    resolve_device,
    run_dir,
)
from recipes.dqn_envs import SendRecv, lives, make_env
from recipes.dqn_model import DQNRMSprop, QNetwork, SharedBias, make_optimizer
from recipes.dqn_parts import Logger, RunResult, StepRate, load_checkpoint, progress_bar
from recipes.dqn_run import (
    LoopState,
    Schedules,
    env_options,
    finish,
    make_evaluator,
    metrics_row,
    periodic_checkpoint,
    resume,
    save_diagnostics,
    start_run,
    stopping,
)
from recipes.dqn_update import Batch, GraphedForward, HostCopy, LossFn, OptimizerStep, Pending, as_batch

__all__ = [  # the recipe's names, those defined in its parts included (other modules import them from here)
    "ABLATION_ARMS",
    "ARMS",
    "CONFIG_DIR",
    "PAPER_ARMS",
    "Batch",
    "DDQNConfig",
    "DQNRMSprop",
    "LoopState",
    "QNetwork",
    "Schedules",
    "SharedBias",
    "act",
    "as_batch",
    "config_files",
    "double_dqn_td_error",
    "dqn_td_error",
    "laber_batch",
    "load_config",
    "main",
    "make_learner",
    "make_optimizer",
    "protocols",
    "resolve_device",
    "run_dir",
    "td_item_loss",
    "td_loss",
    "train",
    "transition_targets",
    "weighted_td_loss",
]

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
    """``batch -> (loss, |δ|)`` for :class:`~recipes.dqn_update.OptimizerStep`: the loss whose
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


def weighted_td_loss(
    delta: torch.Tensor, weights: torch.Tensor, clip_td: bool, reduction: str, *, kappa: float = 1.0
) -> torch.Tensor:
    """Loss whose gradient is ``−Σ_j w_j clip(δ_j) ∇Q_j`` (Algorithm 1, line 13, with δ clipped, Sec. 4).

    With ``clip_td`` the per-item loss is the Huber loss at ``κ`` (quadratic ``δ²/2`` for |δ| ≤ κ,
    linear ``κ(|δ| − κ/2)`` beyond), whose derivative in ``Q`` is ``−clip(δ, −κ, κ)``; κ = 1 is the
    paper's TD clipping and LAP's loss (Fujimoto et al. 2020, :func:`prisample.losses.lap_loss`, up to
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


# -- training ----------------------------------------------------------------------------------------


def train(cfg: DDQNConfig) -> RunResult:
    """Train one agent with ``cfg``'s arm: Algorithm 1, with evaluation, logging and checkpoints."""
    from prisample.replay import PrioritizedReplay

    started = time.perf_counter()
    device = start_run(cfg)  # threads, seed, device, the run's directory
    env, spec = make_env(cfg.env, cfg.num_envs, **env_options(cfg))
    q = QNetwork(cfg.network, spec, cfg.hidden, cfg.shared_bias).to(device)  # Q with random θ
    q_target = copy.deepcopy(q)
    graph = cfg.cuda_graph and device.type == "cuda"
    optimizer = make_optimizer(cfg, q.parameters(), capturable=graph)
    learner = make_learner(q, q_target, optimizer, cfg, device)
    schedules = Schedules.of(cfg)
    # PER: the memory is a PrioritizedReplay whatever the arm; 'uniform' is α = 0, β = 0 (line 1).
    replay = PrioritizedReplay(
        cfg.memory_size,
        spec.obs_shape[1:] if spec.frame_stack > 1 else spec.obs_shape,
        frame_stack=spec.frame_stack,
        obs_dtype=spec.obs_dtype,
        num_streams=cfg.num_envs,
        n_step=cfg.n_step,
        alpha=cfg.alpha,
        beta=cfg.beta0,
        weight_norm=cfg.weight_norm,
        backend=cfg.replay,
        seed=cfg.seed,
        # PER: LAP's p = max(|δ|, κ) and Dopamine's sqrt(ℓ + 1e-10) are positive without ε
        eps=0.0 if cfg.priority_rule != "abs_td" else cfg.priority_eps,
        device=device if cfg.replay_on_device and device.type == "cuda" else None,
    )
    diagnostics = Diagnostics(cfg.memory_size) if cfg.diagnostics else None  # PER: M_i, Figs. 10-11
    # PER: LaBER draws m·B uniformly (the 'uniform' replay) and keeps B ∝ |δ| (a stream of its own)
    laber = None
    if cfg.sampling == "laber":
        laber_seed = int(np.random.SeedSequence([cfg.seed, 2]).generate_state(1)[0])
        laber = LaBER(cfg.batch_size, cfg.laber_m, eps=LABER_EPS, seed=laber_seed)
    rng = np.random.default_rng([cfg.seed, 1])
    logger = Logger(run_dir(cfg), cfg.tensorboard, resume=cfg.resume)
    evaluator = make_evaluator(cfg, device, logger)
    parts = dict(
        q=q, q_target=q_target, optimizer=optimizer, replay=replay, rng=rng, evaluator=evaluator, laber=laber
    )
    state, env = resume(cfg, load_checkpoint(run_dir(cfg) / "checkpoint.pt", device), env, parts)
    timer, window, rate = state.timer, state.window, StepRate(state.step)
    bar = progress_bar(cfg, state.step)
    forward = GraphedForward(q, graph=graph)  # acting's Q(S_t, ·), a CUDA graph on a GPU
    stepper = SendRecv(env)

    copier = HostCopy(device)
    weights = WeightMonitor()  # per/weight_mean below 0.01: ε and the normalisation are named
    pending: list[tuple[np.ndarray, Pending]] = []  # updates whose new priorities are not written yet

    def write_priorities(keep: int) -> None:
        """p_j ← |δ_j| for the updates in flight but the last ``keep`` (line 12)."""
        while len(pending) > keep:
            indices, values = pending.pop(0)
            with timer("learn"):  # waits for the GPU
                host = values.wait()
            if laber is None:  # LaBER stores no priorities: it scores its large batch afresh
                with timer("update_priorities"):
                    # PER: p_j ← |δ_j| (line 12), or LAP's max(|δ_j|, κ) (priority_rule, in td_loss)
                    replay.update_priorities(indices, host[:-3])
            if diagnostics is not None:
                diagnostics.on_update(indices, host[:-3])
            window.add_update(host)  # PER: the loss, mean |δ|, and the weights' mean and minimum
            weights.update(host[-2:-1])  # PER: warns once if the batches' mean weight collapses

    def update_due(step: int, alpha: float, beta: float) -> None:
        """Lines 7-15 once learning started: one minibatch update per K agent steps up to ``step``."""
        if step < max(cfg.learning_starts, state.refill_until):
            return
        timer.mark_learning(step)
        state.due += cfg.num_envs
        while state.due >= cfg.replay_period:  # one minibatch update per K agent steps (line 7)
            if replay.sampler.alpha != alpha:
                replay.sampler.alpha = alpha  # PER: α annealed (dqn_rank: 0.5 → 0, Table 3)
            replay.sampler.beta = beta  # PER: β annealed β0 → 1 over training (Sec. 3.4)
            with timer("sample"):
                # PER: j ~ P(j) = p_j^α / Σ_i p_i^α (line 9); LaBER: m·k uniform candidates
                sample, draw = replay.sample(cfg.batch_size if laber is None else laber.large_batch_size)
            if diagnostics is not None:
                diagnostics.on_draw(step, draw)
            with timer("learn"):  # PER: w_j = (N·P(j))^-β / max_i w_i (line 10), Δ += w_j δ_j ∇Q
                if laber is None:
                    batch, indices = as_batch(sample, draw.weights, device), draw.indices
                else:  # PER: LaBER keeps k of the m·k ∝ |δ|, w_i = mean|δ| / |δ_i|
                    batch, indices = laber_batch(sample, draw.indices, laber, q, q_target, cfg, device)
                loss, td_abs = learner(batch)
                w = batch.weights
                pending.append(
                    (indices, copier.start(td_abs, loss.view(1), w.mean().view(1), w.min().view(1)))
                )
            # defer_priorities: this update's priorities are written after the next update's draw
            write_priorities(keep=1 if cfg.defer_priorities else 0)
            state.updates += 1
            state.due -= cfg.replay_period

    while (stopped := stopping(cfg, state.step, started)) is None:  # total_steps, stop_after, time_budget
        epsilon, alpha, beta = schedules.at(state.step)
        with timer("act"):  # A_t ~ ε-greedy(Q(S_t, ·)) in every environment (line 4)
            actions = act(forward, state.obs, epsilon, rng, spec.num_actions, device)
        with timer("env"):
            stepper.send(actions.astype(np.int64))
        if cfg.overlap_env:  # the updates of this step run while the emulators compute it
            update_due(state.step + cfg.num_envs, alpha, beta)
        with timer("env"):  # observe S_t, R_t, γ_t (line 5)
            next_obs, reward, terminated, truncated, info = stepper.recv()
            reward, terminated = np.asarray(reward, dtype=np.float64), np.asarray(terminated, dtype=bool)
            done = (terminated | np.asarray(truncated, dtype=bool)) & ~state.prev_done
            next_life = lives(info, cfg.num_envs)
            life_lost = (next_life < state.life) & cfg.terminal_on_life_loss
            learn_reward, discount = transition_targets(
                reward, terminated, life_lost, cfg.clip_reward, cfg.gamma
            )
            live = np.flatnonzero(~state.prev_done)  # a step that only resets an environment stores nothing
        with timer("add"):  # store (S_{t-1}, A_{t-1}, R_t, γ_t, S_t) (line 6)
            # PER: a new transition enters at the maximal priority, p_t = max_{i<t} p_i
            slots = replay.add_many(
                state.obs[live],
                actions[live],
                learn_reward[live],
                discount[live],
                next_obs[live],
                episode_end=done[live],
                streams=live,
            )
        if diagnostics is not None:
            diagnostics.on_write(slots)
        state.end_episodes(reward, done)
        state.prev_done, state.obs, state.life = done, next_obs, next_life
        state.step += cfg.num_envs
        bar.update(cfg.num_envs)
        if not cfg.overlap_env:
            update_due(state.step, alpha, beta)
        if state.step >= state.next_target:  # from time to time θ_target ← θ (line 17)
            q_target.load_state_dict(q.state_dict())
            state.next_target += cfg.target_update_period
        if state.step >= state.next_eval:
            result = evaluator.select(q, state.next_eval)
            state.next_eval += cfg.eval_every
            bar.set_postfix_str(f"eval {result.score:.1f}", refresh=False)
        if state.step >= state.next_log:  # PER: the row logs α, β, max priority and the weights' window
            logger.log("metrics", state.step, metrics_row(state, epsilon, replay, rate(state.step)))
            if diagnostics is not None:  # PER: sorted |δ| and P(i) against |δ| of the memory now
                diagnostics.snapshot(state.step, replay.sampler)
            state.next_log += cfg.log_every
        if state.next_checkpoint is not None and state.step >= state.next_checkpoint:
            write_priorities(keep=0)  # the checkpoint holds every update's priorities
            periodic_checkpoint(cfg, state, env, parts)
    write_priorities(keep=0)
    bar.close()
    if diagnostics is not None:
        save_diagnostics(cfg, diagnostics, state.step, replay)
    return finish(cfg, state, env, parts, stopped, started, logger)


# -- command line ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> RunResult:
    """``python -m recipes.atari_ddqn [train] [options]``; ``--help`` lists the options."""
    result = train(parse_command(sys.argv[1:] if argv is None else argv))
    print(json.dumps({k: v for k, v in asdict(result).items() if k != "config"}, indent=1))
    return result


if __name__ == "__main__":
    main()
