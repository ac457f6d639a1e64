"""The stacked engine on MinAtar (recipes/dqn/minstack.py, recipes/dqn/stack_parts.py), on a CPU.

The stacked update of agents with different arms (step size, ε, priority rule) equals separate
agents' updates with ``torch.optim.Adam``; a stacked process equals each agent trained alone by
``train``; a process stopped and resumed from its checkpoint equals one never stopped.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("gymnasium")
pytest.importorskip("minatar")
pytest.importorskip("yaml")
pytest.importorskip("tqdm")
pytest.importorskip("cloudpickle")

from recipes.common.provenance import source_tree
from recipes.dqn.agent import td_loss
from recipes.dqn.config import DDQNConfig, load_config, run_dir
from recipes.dqn.envs import EnvSpec, make_env
from recipes.dqn.minstack import train_stacked
from recipes.dqn.networks import QNetwork, make_optimizer
from recipes.dqn.run import train
from recipes.dqn.stack_parts import (
    StackedAdam,
    check_stacked,
    load_payload,
    stacked_optimizer,
    stacked_td_loss,
)
from recipes.dqn.stacked import StackedQNetwork
from recipes.dqn.update import Batch, OptimizerStep

MINATAR = EnvSpec((10, 10, 4), 1, np.uint8, 3)
ARMS = ("uniform", "proportional", "proportional_dopamine")
"""The registered MinAtar arms: η with |δ|, η/4 with |δ| (ε/4 of Adam), η with sqrt(ℓ + 1e-10)."""


def _configs(log_dir: Path, **extra: Any) -> list[DDQNConfig]:
    small = dict(
        total_steps=300,
        learning_starts=100,
        target_update_period=50,
        eval_every=100,
        eval_steps=60,
        eval_episodes=2,
        eval_envs=2,
        log_every=50,
        memory_size=500,
        batch_size=8,
        progress=False,
        tensorboard=False,
        log_dir=str(log_dir),
        eval_epsilon=0.001,
    )
    small.update(extra)
    return [load_config("MinAtar/Breakout-v1", arm, "dopamine_minatar", seed=3, **small) for arm in ARMS] + [
        load_config("MinAtar/Breakout-v1", "uniform", "dopamine_minatar", seed=4, **small)
    ]


def _batches(agents: int, k: int, count: int) -> list[Batch]:
    g = torch.Generator().manual_seed(5)
    lead = (agents, k)
    return [
        Batch(
            torch.randint(0, 2, (*lead, *MINATAR.obs_shape), dtype=torch.uint8, generator=g),
            torch.randint(0, MINATAR.num_actions, lead, generator=g),
            torch.randn(lead, generator=g),
            torch.full(lead, 0.99) * (torch.rand(lead, generator=g) > 0.1),
            torch.randint(0, 2, (*lead, *MINATAR.obs_shape), dtype=torch.uint8, generator=g),
            torch.rand(lead, generator=g),
        )
        for _ in range(count)
    ]


def test_stacked_update_equals_separate_agents_on_minatar(tmp_path: Path) -> None:
    """Stacked Adam with per-agent η/d and ε/d and per-agent priority rules = each agent's own
    ``torch.optim.Adam`` and ``td_loss``, over 5 updates (a shared η, a shared rule or Adam's
    bias correction forgotten would fail this)."""
    cfgs = _configs(tmp_path)
    nets: list[QNetwork] = []
    for c in cfgs:
        torch.manual_seed(c.seed + len(nets))
        nets.append(QNetwork(c.network, MINATAR, c.hidden, c.shared_bias))
    stacked = StackedQNetwork(nets)
    stacked_target = StackedQNetwork(nets)
    opt = stacked_optimizer(cfgs, stacked.parameters(), torch.device("cpu"))
    assert isinstance(opt, StackedAdam)
    step = OptimizerStep(
        stacked_td_loss(stacked, stacked_target, cfgs), list(stacked.parameters()), opt, graph=False
    )
    targets = [stacked_target.member(a) for a in range(len(cfgs))]
    singles = [
        OptimizerStep(
            td_loss(net, target, c), list(net.parameters()), make_optimizer(c, net.parameters()), graph=False
        )
        for net, target, c in zip(nets, targets, cfgs, strict=True)
    ]
    for b in _batches(len(cfgs), 8, 5):
        _, priorities, losses = step(b)
        for a, single in enumerate(singles):
            loss_a, p_a = single(Batch(*(t[a] for t in b)))
            torch.testing.assert_close(priorities[a], p_a)
            torch.testing.assert_close(losses[a], loss_a)
    for a, net in enumerate(nets):
        for p, p2 in zip(stacked.member(a).parameters(), net.parameters(), strict=True):
            torch.testing.assert_close(p, p2)


def test_check_stacked_names_the_field(tmp_path: Path) -> None:
    cfgs = _configs(tmp_path)
    check_stacked(cfgs)  # arms and seeds may differ
    with pytest.raises(ValueError, match="batch_size"):
        check_stacked([*cfgs, _configs(tmp_path / "other", batch_size=4)[0]])
    with pytest.raises(ValueError, match="priority_rule='lap'"):
        check_stacked([_configs(tmp_path, priority_rule="lap", replay="proportional")[1]])
    with pytest.raises(ValueError, match="own run directory"):
        check_stacked([cfgs[0], cfgs[0]])
    with pytest.raises(ValueError, match="optimizer"):
        check_stacked(_configs(tmp_path, optimizer="rmsprop"))
    with pytest.raises(ValueError, match="checkpoint should be a path"):
        train_stacked(cfgs, stop_after=100)


def _result(cfg: DDQNConfig) -> dict[str, Any]:
    return json.loads((run_dir(cfg) / "result.json").read_text())  # type: ignore[no-any-return]


def _metrics(cfg: DDQNConfig) -> list[dict[str, str]]:
    with (run_dir(cfg) / "metrics.csv").open() as f:
        return [{k: v for k, v in row.items() if k != "perf/steps_per_s"} for row in csv.DictReader(f)]


def test_stacked_process_equals_agents_trained_alone(tmp_path: Path) -> None:
    """Each agent of a stacked process = ``train`` of its config: the same evaluation curve and
    training episodes, and its final network within rounding of the batched forward."""
    cfgs = _configs(tmp_path / "stacked")
    summary = train_stacked(cfgs, checkpoint=tmp_path / "stack.pt", progress=False)
    assert summary["stopped"] == "done" and summary["steps_per_agent"] == 300
    final = load_payload(tmp_path / "stack.pt")
    assert final is not None
    spec = make_env(cfgs[0].env, 1)[1]
    member = StackedQNetwork([QNetwork(c.network, spec, c.hidden, c.shared_bias) for c in cfgs])
    member.load_state_dict(final["q"])
    for a, c in enumerate(cfgs):
        alone = train(alone_config(c, tmp_path))
        stacked = _result(c)
        assert stacked["eval_scores"] == alone.eval_scores
        assert stacked["updates"] == alone.updates == 50  # (300 − 100) / K, K = 4
        single = torch.load(Path(alone.run_dir) / "checkpoint.pt", weights_only=False)["q"]
        for name, value in member.member(a).state_dict().items():
            torch.testing.assert_close(value, single[name], rtol=1e-4, atol=1e-5)
        rows, alone_rows = _metrics(c), _metrics(alone_config(c, tmp_path))
        assert [r["train/episodes"] for r in rows] == [r["train/episodes"] for r in alone_rows]


def _fields(c: DDQNConfig) -> dict[str, Any]:
    keep = ("seed", "total_steps", "learning_starts", "target_update_period", "eval_every", "eval_steps")
    more = ("eval_episodes", "eval_envs", "log_every", "memory_size", "batch_size", "eval_epsilon")
    return {k: getattr(c, k) for k in (*keep, *more)} | {"progress": False, "tensorboard": False}


def alone_config(c: DDQNConfig, tmp_path: Path) -> DDQNConfig:
    return load_config(c.env, c.arm, c.protocol, **{**_fields(c), "log_dir": str(tmp_path / "alone")})


def test_interrupted_and_resumed_equals_uninterrupted(tmp_path: Path) -> None:
    """Stopped at 150 steps (mid-learning, between evaluations), resumed in a new call: the same
    curves, metrics rows, networks, optimiser and replay priorities as a process never stopped."""
    whole = _configs(tmp_path / "whole")
    train_stacked(whole, checkpoint=tmp_path / "whole.pt", progress=False)
    parts = _configs(tmp_path / "parts")
    first = train_stacked(parts, checkpoint=tmp_path / "parts.pt", stop_after=150, progress=False)
    assert first["stopped"] == "stop_after" and first["results"] == []
    assert not (run_dir(parts[0]) / "result.json").exists()
    outside = time.perf_counter()
    second = train_stacked(parts, checkpoint=tmp_path / "parts.pt", checkpoint_every=70, progress=False)
    outside = time.perf_counter() - outside
    assert second["stopped"] == "done" and second["steps_per_agent"] == 300
    # the run's wall time counts both processes: more than the second alone took
    assert second["run_wall_s"] > outside > second["wall_s"]
    for p in parts:
        r = _result(p)
        assert r["resumes"] == 1 and r["wall_s"] > outside and r["steps_per_s"] == 300 / r["wall_s"]
    assert all(_result(w)["resumes"] == 0 for w in whole)
    for w, p in zip(whole, parts, strict=True):
        a, b = _result(w), _result(p)
        assert a["eval_scores"] == b["eval_scores"] and a["best_policy_score"] == b["best_policy_score"]
        assert _metrics(w) == _metrics(p)
    ck_whole, ck_parts = load_payload(tmp_path / "whole.pt"), load_payload(tmp_path / "parts.pt")
    assert ck_whole is not None and ck_parts is not None
    for name in ("q", "q_target"):
        for key, value in ck_whole[name].items():
            torch.testing.assert_close(value, ck_parts[name][key], rtol=0, atol=0)
    for key, value in ck_whole["optimizer"]["state"].items():
        torch.testing.assert_close(
            value["exp_avg_sq"], ck_parts["optimizer"]["state"][key]["exp_avg_sq"], rtol=0, atol=0
        )
    assert _same(ck_whole["replays"], ck_parts["replays"])
    assert ck_whole["rngs"] == ck_parts["rngs"]
    here = source_tree()["commit"]  # each start and resume records where the code came from
    for w, p in zip(whole, parts, strict=True):
        assert [e["commit"] for e in json.loads((run_dir(w) / "source.json").read_text())] == [here]
        assert [e["commit"] for e in json.loads((run_dir(p) / "source.json").read_text())] == [here, here]


def _same(x: Any, y: Any) -> bool:
    """Equal, recursively through dicts, lists and arrays (NaN equal to NaN)."""
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)):
        return isinstance(y, (list, tuple)) and len(x) == len(y) and all(map(_same, x, y))
    if isinstance(x, (np.ndarray, torch.Tensor)):
        return bool(np.array_equal(np.asarray(x), np.asarray(y), equal_nan=np.asarray(x).dtype.kind == "f"))
    return bool(x == y)


def test_resume_refuses_a_checkpoint_of_other_agents(tmp_path: Path) -> None:
    cfgs = _configs(tmp_path)
    train_stacked(cfgs, checkpoint=tmp_path / "ck.pt", stop_after=50, progress=False)
    before = {p: p.read_bytes() for p in tmp_path.glob("**/*") if p.is_file()}
    with pytest.raises(ValueError, match="same agents' configs"):
        train_stacked(cfgs[:2], checkpoint=tmp_path / "ck.pt", progress=False)
    # the refusal wrote nothing: no run directory gained a start in source.json or a new config.json
    assert {p: p.read_bytes() for p in tmp_path.glob("**/*") if p.is_file()} == before
