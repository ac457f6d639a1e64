"""The Double DQN update and the acting forward on a GPU: eager against a captured CUDA graph.

For the Nature CNN of the Atari recipe (``recipes/dqn/``): milliseconds per update of
one agent on a minibatch of 32, and of A agents stacked into one network (``recipes/dqn/stacked.py``,
each on its own 32), eager and as a CUDA graph (``recipes/dqn/update.py``); and the acting
forward on ``envs`` observations.  Each time is the median over ``--repeats`` blocks of
``--block`` calls, the device synchronised before and after each block, after warm-up calls;
the update's time includes the copy of the 32 new priorities to the host (as the loop does).

GPU run (about 30 s)::

    python -m benchmarks.gpu_update --out $OUT/gpu_update.json
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from recipes.dqn.agent import td_loss
from recipes.dqn.config import load_config
from recipes.dqn.envs import EnvSpec
from recipes.dqn.networks import DQNRMSprop, QNetwork, make_optimizer
from recipes.dqn.stacked import StackedQNetwork
from recipes.dqn.update import Batch, GraphedForward, OptimizerStep

SPEC = EnvSpec((4, 84, 84), 4, np.uint8, 6)


def timed(fn: Callable[[], Any], block: int, repeats: int) -> float:
    """Median milliseconds per call over ``repeats`` blocks of ``block`` calls."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(block):
            fn()
        torch.cuda.synchronize()
        per_call.append(1000 * (time.perf_counter() - start) / block)
    return statistics.median(per_call)


def batch(agents: int | None, device: torch.device, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    lead = (32,) if agents is None else (agents, 32)
    return Batch(
        torch.randint(0, 255, (*lead, 4, 84, 84), dtype=torch.uint8, generator=g).to(device),
        torch.randint(0, 6, lead, generator=g).to(device),
        torch.randn(lead, generator=g).to(device),
        torch.full(lead, 0.99).to(device),
        torch.randint(0, 255, (*lead, 4, 84, 84), dtype=torch.uint8, generator=g).to(device),
        torch.rand(lead, generator=g).to(device),
    )


def update_ms(agents: int | None, graph: bool, device: torch.device, block: int, repeats: int) -> float:
    cfg = load_config("ALE/Pong-v5", "proportional")
    torch.manual_seed(0)
    if agents is None:
        q: torch.nn.Module = QNetwork("nature_cnn", SPEC, (512,), True).to(device)
        opt = make_optimizer(cfg, q.parameters(), capturable=graph)
    else:
        q = StackedQNetwork([QNetwork("nature_cnn", SPEC, (512,), True) for _ in range(agents)]).to(device)
        opt = DQNRMSprop(q.parameters(), torch.full((agents,), 6.25e-5, device=device))
    step = OptimizerStep(td_loss(q, copy.deepcopy(q), cfg), list(q.parameters()), opt, graph=graph)
    b = batch(agents, device)
    return timed(lambda: step(b)[1].cpu(), block, repeats)


def forward_ms(
    agents: int | None, envs: int, graph: bool, device: torch.device, block: int, repeats: int
) -> float:
    torch.manual_seed(0)
    if agents is None:
        q: torch.nn.Module = QNetwork("nature_cnn", SPEC, (512,), True).to(device)
        obs = torch.randint(0, 255, (envs, 4, 84, 84), dtype=torch.uint8, device=device)
    else:
        q = StackedQNetwork([QNetwork("nature_cnn", SPEC, (512,), True) for _ in range(agents)]).to(device)
        obs = torch.randint(0, 255, (agents, envs, 4, 84, 84), dtype=torch.uint8, device=device)
    forward = GraphedForward(q, graph=graph)
    return timed(lambda: forward(obs).argmax(-1).cpu(), block, repeats)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=9, help="agents stacked in one network")
    parser.add_argument("--envs", type=int, default=16, help="observations per acting forward")
    parser.add_argument("--block", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "agents": args.agents,
        "envs": args.envs,
        "update_ms": {},
        "forward_ms": {},
    }
    for graph in (False, True):
        mode = "graph" if graph else "eager"
        result["update_ms"][f"single_{mode}"] = update_ms(None, graph, device, args.block, args.repeats)
        result["update_ms"][f"stacked_{mode}"] = update_ms(
            args.agents, graph, device, args.block, args.repeats
        )
        result["forward_ms"][f"single_{mode}"] = forward_ms(
            None, args.envs, graph, device, args.block, args.repeats
        )
        result["forward_ms"][f"stacked_{mode}"] = forward_ms(
            args.agents, 1, graph, device, args.block, args.repeats
        )
        print(mode, result, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
