"""Double DQN with uniform, proportional and rank-based prioritized replay (Schaul et al. 2016, Algorithm 1).

The agent is the tuned Double DQN of van Hasselt, Guez & Silver (2016) with its replay memory
replaced by :class:`prisample.replay.PrioritizedReplay`.  Every ``K`` agent steps it draws a
minibatch of ``k`` transitions ``j`` with probability ``P(j) = p_j^α / Σ_i p_i^α`` and updates

    w_j = (N · P(j))^-β / max_i w_i
    δ_j = R_j + γ_j Q_target(S_j, argmax_a Q(S_j, a)) − Q(S_{j−1}, A_{j−1})      (clipped to [−1, 1])
    p_j ← |δ_j|
    θ ← θ + η Σ_j w_j δ_j ∇_θ Q(S_{j−1}, A_{j−1})

(Algorithm 1, Sec. 3.3-4, App. B.2).  An *arm* is a config file under
``recipes/dqn/configs/arms/`` (Table 3): ``uniform`` (α = 0, β = 0: the Double DQN
baseline), ``proportional`` (``p = |δ| + ε``, α = 0.6, β 0.4 → 1), ``rank`` (``p = 1/rank``,
α = 0.7, β 0.5 → 1), and the paper's first experiment, plain DQN (``max_a Q_target``) with
``dqn_uniform`` or ``dqn_rank`` (α annealed 0.5 → 0, β = 0); the prioritized arms step η/4.
Two later schemes are arms for the replay ablation (``recipes/studies/replay_ablation.py``): ``lap``
(Fujimoto et al. 2020: ``p = max(|δ|, κ)``, α = 0.4, no importance weights, Huber loss at κ = 1)
and ``laber`` (Lahire et al. 2022, LaBER-mean: no stored priorities; each update scores ``m·B``
uniformly drawn transitions by ``|δ|`` and keeps ``B`` of them ``∝ |δ|``, weighted
``mean_k |δ_k| / |δ_i|``).
The environment's family picks the other values (``recipes/dqn/configs/<family>.yaml``).
Lines marked ``# PER:`` are where prioritization touches the loop: here, in the learning rule
(``recipes/dqn/agent.py``, shared with the stacked agents of ``together``) and in ``make_optimizer``
(``recipes/dqn/networks.py``).

Commands (``PYTHONPATH=.`` is enough, nothing needs installing)::

    python -m recipes.dqn train --env ALE/Pong-v5 --arm proportional --device cuda
    python -m recipes.dqn train --env CartPole-v1 --arm rank
    python -m recipes.dqn train --env ALE/Pong-v5 --arm dqn_rank
    python -m recipes.dqn sweep --env CartPole-v1 --seeds 5 --jobs 14 --out docs/results/cartpole

Options given on the command line win over the arm's file, which wins over the family's; each
value and its source is listed in ``docs/recipes/atari_ddqn.md``.  The learning rule (TD errors,
losses, the learner, acting, the memory, the priority writes) lives in ``recipes/dqn/agent.py``;
sweeps, plots and the weight ablation in ``recipes/dqn/sweep.py``; the config, its files and the
command line in ``recipes/dqn/config.py``; the network and optimizer in ``recipes/dqn/networks.py``;
the minibatch on the device, the update as one call (a CUDA graph on a GPU) and the copies back in
``recipes/dqn/update.py``; the run's start, schedules, loop state, the ``metrics.csv`` row,
checkpoints (and their files) and the end of a run in ``recipes/dqn/loop.py``; timers, logging and
evaluation bookkeeping in ``recipes/dqn/parts.py``; environments in ``recipes/dqn/envs.py``.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import asdict

import numpy as np

from prisample.diagnostics import Diagnostics, WeightMonitor
from prisample.methods.laber import LaBER
from recipes.common import launch
from recipes.dqn.agent import (
    LABER_EPS,
    PriorityWrites,
    act,
    draw,
    laber_batch,
    make_learner,
    make_replay,
    make_replay_update,
    observe,
    store,
    sync_target,
)
from recipes.dqn.config import DDQNConfig, parse_command, run_dir
from recipes.dqn.envs import SendRecv, make_env
from recipes.dqn.loop import (
    Schedules,
    check_resumable,
    env_options,
    finish,
    load_checkpoint,
    make_evaluator,
    metrics_row,
    periodic_checkpoint,
    resume,
    save_diagnostics,
    start_run,
    stopping,
)
from recipes.dqn.networks import QNetwork, make_optimizer, resolve_device
from recipes.dqn.parts import Logger, RunResult, StepRate, progress_bar
from recipes.dqn.plan import run_plan
from recipes.dqn.update import GraphedForward, HostCopy, as_batch

__all__ = ["main", "train"]


def train(cfg: DDQNConfig) -> RunResult:
    """Train one agent with ``cfg``'s arm: Algorithm 1, with evaluation, logging and checkpoints."""
    started = time.perf_counter()
    ck = load_checkpoint(run_dir(cfg) / "checkpoint.pt", resolve_device(cfg.device)) if cfg.resume else None
    if ck is not None:  # before the run's directory is written: a refused resume changes nothing
        check_resumable(ck, cfg)
    device = start_run(cfg)  # threads, seed, device, the run's directory
    env, spec = make_env(cfg.env, cfg.num_envs, **env_options(cfg))
    q = QNetwork(cfg.network, spec, cfg.hidden, cfg.shared_bias).to(device)  # Q with random θ
    q_target = copy.deepcopy(q)
    graph = cfg.cuda_graph and device.type == "cuda"
    optimizer = make_optimizer(cfg, q.parameters(), capturable=graph)
    learner = make_learner(q, q_target, optimizer, cfg, device)
    schedules = Schedules.of(cfg)
    replay = make_replay(cfg, spec, device, num_streams=cfg.num_envs)  # line 1
    # PER: with the priorities on the GPU, lines 9-12 are one captured graph (draw, learn, write)
    replay_update = (
        make_replay_update(q, q_target, optimizer, replay, cfg, device) if replay.on_device else None
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
    state, env = resume(cfg, ck, env, parts)
    state.timer.start(started)
    timer, window, rate = state.timer, state.window, StepRate(state.step)
    bar = progress_bar(cfg, state.step)
    forward = GraphedForward(q, graph=graph)  # acting's Q(S_t, ·), a CUDA graph on a GPU
    stepper = SendRecv(env)
    rows = np.arange(cfg.num_envs)

    copier = HostCopy(device)
    weights = WeightMonitor()  # per/weight_mean below 0.01: ε and the normalisation are named
    writes = PriorityWrites(timer)  # updates whose new priorities are not written yet

    def write_priorities(keep: int) -> None:
        """p_j ← |δ_j| for the updates in flight but the last ``keep`` (line 12)."""
        for indices, host in writes.ready(keep):
            if laber is None and not replay.on_device:  # LaBER: no priorities; on the device: written
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
            if replay_update is not None:  # lines 9-12 on the GPU: nothing waits for the host
                with timer("learn"):
                    replay.sampler.beta = beta  # PER: β annealed β0 → 1 over training (Sec. 3.4)
                    loss, td_abs, w_mean, w_min, *_ = replay_update(())
                    writes.push(None, copier.start(td_abs, loss.view(1), w_mean.view(1), w_min.view(1)))
                write_priorities(keep=1)  # the logged values of the update before, if copied
                state.updates += 1
                state.due -= cfg.replay_period
                continue
            with timer("sample"):  # PER: j ~ P(j) (line 9); LaBER: m·k uniform candidates
                sample, drawn = draw(
                    replay, cfg.batch_size if laber is None else laber.large_batch_size, alpha, beta
                )
            if diagnostics is not None:
                diagnostics.on_draw(step, drawn)
            with timer("learn"):  # PER: w_j = (N·P(j))^-β / max_i w_i (line 10), Δ += w_j δ_j ∇Q
                if laber is None:
                    batch, indices = as_batch(sample, drawn.weights, device), drawn.indices
                else:  # PER: LaBER keeps k of the m·k ∝ |δ|, w_i = mean|δ| / |δ_i|
                    batch, indices = laber_batch(sample, drawn.indices, laber, q, q_target, cfg, device)
                loss, td_abs = learner(batch)
                w = batch.weights
                writes.push(indices, copier.start(td_abs, loss.view(1), w.mean().view(1), w.min().view(1)))
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
            step = observe(stepper.recv(), state.prev_done, state.life, cfg)
        with timer("add"):  # store (S_{t-1}, A_{t-1}, R_t, γ_t, S_t) at maximal priority (line 6)
            slots = store(replay, state.obs, actions, step, state.prev_done, rows)
        if diagnostics is not None:
            diagnostics.on_write(slots)
        state.end_episodes(step.reward, step.done)
        state.prev_done, state.obs, state.life = step.done, step.next_obs, step.life
        state.step += cfg.num_envs
        bar.update(cfg.num_envs)
        if not cfg.overlap_env:
            update_due(state.step, alpha, beta)
        if state.step >= state.next_target:  # from time to time θ_target ← θ (line 17)
            sync_target(q, q_target)
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
    return finish(cfg, state, env, parts, stopped, logger)


def main(argv: list[str]) -> RunResult:
    """``python -m recipes.dqn train [options]``; ``--help`` lists the options.  Before the run
    starts, what it will run and its estimated time are printed, and asked about on a terminal when
    over an hour (:func:`recipes.common.launch.confirm`; ``--yes`` does not ask)."""
    yes, argv = launch.take_yes(argv)
    cfg = parse_command(argv)
    launch.confirm(run_plan(cfg, resolve_device(cfg.device).type), yes)
    result = train(cfg)
    print(json.dumps({k: v for k, v in asdict(result).items() if k != "config"}, indent=1))
    return result
