"""Many Double DQN agents of one MinAtar game (or any Gymnasium game) trained in one CPU process,
resumable: the engine of the registered multi-seed MinAtar studies.

Every agent ``a`` is Algorithm 1 of Schaul et al. (2016) exactly as ``python -m recipes.dqn train``
runs it (:func:`recipes.dqn.run.train`, Algorithm 1's order: store, then learn), with its own arm,
seed, vector environment, ε-greedy random stream, replay memory
(:class:`prisample.replay.PrioritizedReplay`), evaluations and run directory::

    A_t ~ ε-greedy(Q_a(S_t, ·));  store (S_{t-1}, A_{t-1}, R_t, γ_t, S_t) at max priority
    every K steps: j ~ P_a(j) = p_j^α_a / Σ_i p_i^α_a,  w_j = (N·P_a(j))^-β_a / max w
                   θ_a ← θ_a + η/d_a Σ_j w_j δ_j ∇Q_a,  p_j ← |δ_j| (or Dopamine's sqrt(ℓ + 1e-10))

What the agents share is only the work: acting is one stacked forward of all the Q-networks
(:class:`~recipes.dqn.stacked.StackedQNetwork`), and one update of all agents is one backward
through the sum of their losses, each reaching only its own parameters, with an elementwise
optimiser whose step size and ε are per agent (:mod:`recipes.dqn.stack_parts`).  The results
equal separate agents' up to floating-point rounding of the batched operations
(``tests/test_dqn_minstack.py``); there is no lag of one transition (``together``'s GPU
overlap): on a CPU nothing runs while the environments step.

Each agent writes what ``train`` writes into its own run directory (``config.json``,
``source.json`` with an entry per start or resume, ``metrics.csv``, ``eval.csv``, ``best_q.pt``,
and ``result.json`` when its run is done), so the
sweep records of :mod:`recipes.dqn.sweep_report` read them unchanged.  The process checkpoints
(``checkpoint``, every ``checkpoint_every`` agent steps and when it stops early) everything
an identical continuation needs: the stacked networks and optimiser, every replay memory whole
(prisample's exact checkpoints), the random streams (ε-greedy, replay, evaluation, torch), the
environments pickled (a game that does not pickle is re-seeded at the resume, its episodes in
flight cut: :func:`_restore_envs`), the loop's counters (ε, α, β follow the step), the
evaluation curve so far with each agent's best network, and the length of its CSV files (rows
written after the checkpoint are cut).  A resumed process continues exactly where the
checkpoint stood (``tests/test_dqn_minstack.py`` checks interrupted = uninterrupted).
"""

from __future__ import annotations

import copy
import pickle
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import numpy as np
import torch
from tqdm import tqdm

from recipes.common import outputs
from recipes.common.provenance import record_start, source_tree
from recipes.dqn.agent import draw, make_replay, observe, store, sync_target
from recipes.dqn.config import DDQNConfig, run_dir, same_config
from recipes.dqn.envs import lives, make_env, seed_envs
from recipes.dqn.loop import LoopState, Schedules, env_options, finish, make_evaluator, metrics_row, stopping
from recipes.dqn.networks import QNetwork, resolve_device
from recipes.dqn.parts import Evaluator, Logger, StepRate, Timer
from recipes.dqn.stack_parts import (
    check_stacked,
    load_payload,
    save_payload,
    stacked_optimizer,
    stacked_td_loss,
)
from recipes.dqn.stacked import StackedQNetwork
from recipes.dqn.update import Batch, OptimizerStep, as_batch

__all__ = ["Clock", "train_stacked"]


@dataclass
class Clock:
    """The counters every agent of the process shares (agent steps of each agent)."""

    step: int
    next_target: int
    next_eval: int
    next_log: int
    next_checkpoint: int | None
    due: int = 0
    """Agent steps not yet paid for by an update (one per replay_period)."""
    updates: int = 0
    timer: Timer = field(default_factory=Timer)


class _Agents:
    """The agents' parts: stacked networks and optimiser, and per agent its environment, memory,
    random stream, schedules, logger, evaluator and loop state."""

    def __init__(self, cfgs: list[DDQNConfig], device: torch.device, resumed: bool) -> None:
        self.cfgs, self.device = cfgs, device
        self.envs, nets = [], []
        source = source_tree()  # where the code of this process (a start or a resume) came from
        for c in cfgs:  # as train(): torch seeded with the agent's seed, then its environment and Q
            run_dir(c).mkdir(parents=True, exist_ok=True)
            outputs.write_json(run_dir(c) / "config.json", asdict(c))
            record_start(run_dir(c), source)
            torch.manual_seed(c.seed)
            env, self.spec = make_env(c.env, c.num_envs, **env_options(c))
            self.envs.append(env)
            nets.append(QNetwork(c.network, self.spec, c.hidden, c.shared_bias))
        self.q = StackedQNetwork(nets).to(device)
        self.q_target = copy.deepcopy(self.q)
        self.optimizer = stacked_optimizer(cfgs, self.q.parameters(), device)
        loss = stacked_td_loss(self.q, self.q_target, cfgs)
        self.learner = OptimizerStep(loss, list(self.q.parameters()), self.optimizer, graph=False)
        # line 1, per agent: its memory, α, β and ε of p = |δ| + ε
        self.replays = [make_replay(c, self.spec, device, num_streams=c.num_envs) for c in cfgs]
        self.schedules = [Schedules.of(c) for c in cfgs]
        self.rngs = [np.random.default_rng([c.seed, 1]) for c in cfgs]
        self.loggers = [Logger(run_dir(c), c.tensorboard, resume=resumed) for c in cfgs]
        self.evaluators: list[Evaluator] = [
            make_evaluator(c, device, logger) for c, logger in zip(cfgs, self.loggers, strict=True)
        ]
        self.states: list[LoopState] = []
        for c, env in zip(cfgs, self.envs, strict=True):
            obs, info = seed_envs(env, c.seed)
            n = c.num_envs
            self.states.append(
                LoopState(0, 0, 0, 0, None, obs, np.zeros(n, dtype=bool), lives(info, n), np.zeros(n))
            )

    def payload(self, clock: Clock) -> dict[str, Any]:
        """The process's checkpoint (see the module's docstring)."""
        envs = []
        for env in self.envs:
            try:
                envs.append(cloudpickle.dumps(env))
            except Exception:  # a game holding unpicklable state is re-seeded at the resume
                envs.append(None)
        best = [e.best_path.read_bytes() if e.best_path.exists() else None for e in self.evaluators]
        csv = [{name: p.stat().st_size for name, p in lg.paths.items()} for lg in self.loggers]
        return {
            "configs": [asdict(c) for c in self.cfgs],
            "q": self.q.state_dict(),
            "q_target": self.q_target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "replays": [r.state_dict(include_memory=True) for r in self.replays],
            "rngs": [rng.bit_generator.state for rng in self.rngs],
            "evaluators": [e.state_dict() for e in self.evaluators],
            "best": best,
            "csv": csv,
            "states": self.states,
            "clock": clock,
            "envs": envs,
            "torch_rng": torch.get_rng_state(),
        }

    def restore(self, ck: dict[str, Any]) -> Clock:
        """Put the checkpoint back (one :func:`check_checkpoint` accepted)."""
        self.q.load_state_dict(ck["q"])
        self.q_target.load_state_dict(ck["q_target"])
        self.optimizer.load_state_dict(ck["optimizer"])
        for a in range(len(self.cfgs)):
            self.replays[a].load_state_dict(ck["replays"][a])
            self.rngs[a].bit_generator.state = ck["rngs"][a]
            self.evaluators[a].load_state_dict(ck["evaluators"][a])
            if ck["best"][a] is not None:
                self.evaluators[a].best_path.write_bytes(ck["best"][a])
            for name, size in ck["csv"][a].items():
                with self.loggers[a].paths[name].open("r+b") as f:
                    f.truncate(size)
        self.states = ck["states"]
        torch.set_rng_state(ck["torch_rng"])
        clock: Clock = ck["clock"]
        self._restore_envs(ck["envs"], clock.step)
        return clock

    def _restore_envs(self, blobs: list[bytes | None], step: int) -> None:
        """The pickled environments; one that did not pickle is reset with the seeds
        ``seed + 1000·step`` (as ``train``'s resume), its episodes in flight cut short."""
        for a, (c, blob) in enumerate(zip(self.cfgs, blobs, strict=True)):
            self.envs[a].close()
            if blob is not None:
                self.envs[a] = pickle.loads(blob)
                continue
            self.envs[a] = make_env(c.env, c.num_envs, **env_options(c))[0]
            st = self.states[a]
            st.obs, info = seed_envs(self.envs[a], c.seed + 1000 * step)
            st.prev_done, st.life = np.zeros(c.num_envs, dtype=bool), lives(info, c.num_envs)
            st.returns = np.zeros(c.num_envs)


def check_checkpoint(ck: dict[str, Any], cfgs: list[DDQNConfig]) -> None:
    """``ValueError`` when the checkpoint ``ck`` was written for other agents than ``cfgs``."""
    if len(ck["configs"]) != len(cfgs) or not all(
        same_config(stored, c) for stored, c in zip(ck["configs"], cfgs, strict=True)
    ):
        raise ValueError(
            "checkpoint should hold the same agents' configs as this process, but it holds "
            f"{[(c['arm'], c['seed']) for c in ck['configs']]}; delete it to start afresh"
        )


def train_stacked(
    cfgs: list[DDQNConfig],
    *,
    checkpoint: Path | None = None,
    checkpoint_every: int | None = None,
    stop_after: int | None = None,
    time_budget_s: float | None = None,
    progress: bool = True,
    position: int = 0,
) -> dict[str, Any]:
    """Train the agents of ``cfgs`` (one per config, :func:`~recipes.dqn.stack_parts.check_stacked`)
    in this process; continue from ``checkpoint`` when it exists (``position``: the progress bar's
    line, for processes side by side).

    The process stops at ``total_steps`` agent steps of each agent, or earlier at ``stop_after``
    steps or after ``time_budget_s`` seconds of this call, writing ``checkpoint`` then (and every
    ``checkpoint_every`` steps).  Returns ``{"stopped", "agents", "steps_per_agent", "updates_per_agent",
    "wall_s" (this call), "run_wall_s" (every process of the run; None: resumed from a checkpoint
    written before it was kept), "agent_steps_per_s" (all agents' steps of this call per second),
    "learning_phase", "timing_s", "results"}``; ``results`` holds each agent's ``result.json`` once
    it is done."""
    check_stacked(cfgs)
    for name, value in (("checkpoint_every", checkpoint_every), ("stop_after", stop_after)):
        if value is not None and value < 1:
            raise ValueError(f"{name} should be >= 1 or None, but got {name}={value}")
    if (
        checkpoint_every is not None or stop_after is not None or time_budget_s is not None
    ) and checkpoint is None:
        raise ValueError(
            "checkpoint should be a path when the process checkpoints or stops early, but got None"
        )
    started = time.perf_counter()
    cfg = cfgs[0]
    torch.set_num_threads(cfg.threads)
    device = resolve_device(cfg.device)
    ck = load_payload(checkpoint) if checkpoint is not None else None
    if ck is not None:  # before the agents write their run directories: a refusal changes nothing
        check_checkpoint(ck, cfgs)
    agents = _Agents(cfgs, device, resumed=ck is not None)
    if ck is not None:
        clock = agents.restore(ck)
        clock.timer.resumes += 1
        clock.next_checkpoint = None if checkpoint_every is None else clock.step + checkpoint_every
    else:
        clock = Clock(0, cfg.target_update_period, cfg.eval_every, cfg.log_every, checkpoint_every)
    clock.timer.start(started)
    first_step, timer, rate = clock.step, clock.timer, StepRate(clock.step)
    limits = replace(cfg, stop_after=stop_after, time_budget_s=time_budget_s)
    A, n, rows = len(cfgs), cfg.num_envs, np.arange(cfg.num_envs)
    bar = tqdm(
        total=cfg.total_steps,
        initial=clock.step,
        desc=f"{cfg.env} ×{A}",
        unit="step",
        disable=not progress,
        dynamic_ncols=True,
        smoothing=0.05,
        position=position,
    )

    def learn(at: list[tuple[float, float, float]]) -> None:
        """Lines 7-15 for every agent once learning started: one update per K agent steps."""
        if clock.step < cfg.learning_starts:
            return
        timer.mark_learning(clock.step)
        clock.due += n
        while clock.due >= cfg.replay_period:
            with timer("sample"):  # PER: j ~ P_a(j) with each agent's α and β (line 9), w_j (line 10)
                drawn = [
                    draw(r, cfg.batch_size, a_b[1], a_b[2]) for r, a_b in zip(agents.replays, at, strict=True)
                ]
                parts = [as_batch(sample, d.weights, device) for sample, d in drawn]
                batch = Batch(*(torch.stack(column) for column in zip(*parts, strict=True)))
            with timer("learn"):  # Δ += w_j δ_j ∇Q_a for every agent at once (lines 11-15)
                _, td_abs, losses = agents.learner(batch)
            with timer("update_priorities"):
                host, weights = td_abs.cpu().numpy(), batch.weights
                for a, (replay, (_, d)) in enumerate(zip(agents.replays, drawn, strict=True)):
                    replay.update_priorities(d.indices, host[a])  # PER: p_j ← |δ_j| (line 12)
                    agents.states[a].window.add(
                        loss=float(losses[a]),
                        td_abs=float(host[a].mean()),
                        weight_mean=float(weights[a].mean()),
                        weight_min=float(weights[a].min()),
                    )
            clock.updates += 1
            clock.due -= cfg.replay_period

    while (stopped := stopping(limits, clock.step, started)) is None:
        at = [s.at(clock.step) for s in agents.schedules]  # ε shared, α and β per arm
        epsilon = at[0][0]
        with timer("act"):  # A_t ~ ε-greedy(Q_a(S_t, ·)) for every agent (line 4)
            actions = _act(agents, epsilon)
        for a, (c, st) in enumerate(zip(cfgs, agents.states, strict=True)):
            with timer("env"):  # observe S_t, R_t, γ_t (line 5)
                seen = observe(agents.envs[a].step(actions[a].astype(np.int64)), st.prev_done, st.life, c)
            with timer("add"):  # store the transition at maximal priority (line 6)
                store(agents.replays[a], st.obs, actions[a], seen, st.prev_done, rows)
            st.end_episodes(seen.reward, seen.done)
            st.prev_done, st.obs, st.life = seen.done, seen.next_obs, seen.life
        clock.step += n
        bar.update(n)
        learn(at)
        if clock.step >= clock.next_target:  # θ_target ← θ for every agent (line 17)
            sync_target(agents.q, agents.q_target)
            clock.next_target += cfg.target_update_period
        if clock.step >= clock.next_eval:
            scores = [
                e.select(agents.q.member(a), clock.next_eval).score for a, e in enumerate(agents.evaluators)
            ]
            clock.next_eval += cfg.eval_every
            bar.set_postfix_str(
                f"eval mean {np.nanmean(scores) if np.isfinite(scores).any() else np.nan:.2f}"
            )
        if clock.step >= clock.next_log:  # PER: each agent's row logs its α, β, max priority, weights
            steps_per_s = rate(clock.step)
            for a, st in enumerate(agents.states):
                st.step, st.updates = clock.step, clock.updates
                agents.loggers[a].log(
                    "metrics", clock.step, metrics_row(st, epsilon, agents.replays[a], steps_per_s)
                )
            clock.next_log += cfg.log_every
        if clock.next_checkpoint is not None and clock.step >= clock.next_checkpoint:
            assert checkpoint is not None
            save_payload(checkpoint, agents.payload(clock))
            clock.next_checkpoint += checkpoint_every or 0
    bar.close()
    wall = time.perf_counter() - started
    results: list[dict[str, Any]] = []
    summary: dict[str, Any] = {
        "env": cfg.env,
        "stopped": stopped,
        "agents": [{"arm": c.arm, "seed": c.seed, "run_dir": str(run_dir(c))} for c in cfgs],
        "steps_per_agent": clock.step,
        "updates_per_agent": clock.updates,
        "wall_s": wall,
        "run_wall_s": timer.wall(),
        "agent_steps_per_s": A * (clock.step - first_step) / wall,
        "learning_phase": timer.learning_phase(clock.step, clock.updates),
        "timing_s": dict(timer.totals),
        "results": results,
    }
    if checkpoint is not None:  # at the end too: a finished process resumed only finishes again
        save_payload(checkpoint, agents.payload(clock))
    if stopped != "done":
        for env, evaluator, logger in zip(agents.envs, agents.evaluators, agents.loggers, strict=True):
            env.close()
            evaluator.env.close()
            logger.close()
        return summary
    for a, (c, st) in enumerate(zip(cfgs, agents.states, strict=True)):
        st.step, st.updates, st.timer = clock.step, clock.updates, timer
        parts = {"q": agents.q.member(a), "evaluator": agents.evaluators[a]}
        done = finish(c, st, agents.envs[a], parts, stopped, agents.loggers[a], write_checkpoint=False)
        results.append(asdict(done))
    return summary


@torch.no_grad()
def _act(agents: _Agents, epsilon: float) -> list[np.ndarray]:
    """ε-greedy actions of every agent, each from its own random stream in ``act``'s order (one
    stacked forward for all greedy actions; no forward while ε = 1)."""
    n, k = agents.cfgs[0].num_envs, agents.spec.num_actions
    if epsilon >= 1.0:
        return [rng.integers(0, k, n) for rng in agents.rngs]
    obs = torch.as_tensor(np.stack([st.obs for st in agents.states]), device=agents.device)
    greedy = agents.q(obs).argmax(dim=-1).cpu().numpy()
    actions = []
    for rng, row in zip(agents.rngs, greedy, strict=True):
        explore = rng.random(n) < epsilon
        actions.append(np.where(explore, rng.integers(0, k, n), row))
    return actions
