"""The device replay step on a real GPU: no host synchronisation under
``torch.cuda.set_sync_debug_mode("error")``, and the same priorities as the same step on CPU
tensors.  Runs where CUDA is present (``bash benchmarks/gpu_session.sh device``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from prisample.replay import PrioritizedReplay

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _replay(device: str) -> PrioritizedReplay:
    return PrioritizedReplay(
        256, (8, 8), obs_dtype=np.uint8, frame_stack=4, num_streams=4, device=device,
        backend="device_proportional", alpha=0.6, beta=0.4, seed=0,
    )  # fmt: skip


def _steps(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    last = rng.integers(0, 255, (4, 4, 8, 8), dtype=np.uint8)
    steps = []
    for _ in range(n):
        nxt = np.concatenate([last[:, 1:], rng.integers(0, 255, (4, 1, 8, 8), dtype=np.uint8)], axis=1)
        reward, discount = rng.normal(size=4), np.full(4, 0.99)
        steps.append(
            {"obs": last, "action": np.arange(4), "reward": reward, "discount": discount, "next_obs": nxt}
        )
        last = nxt
    return steps


def test_the_device_step_makes_no_host_synchronisation_on_a_gpu() -> None:
    replay = _replay("cuda")
    steps = _steps(200)
    for step in steps[:100]:
        replay.add_many(**step)
    torch.cuda.synchronize()
    for step in steps[100:]:
        replay.add_many(**step)  # the host's write and one host-to-device copy of its frames
        torch.cuda.set_sync_debug_mode("error")
        try:
            batch, draw = replay.sample(32)
            td = (torch.as_tensor(batch.reward).double() - 0.1).abs()
            replay.update_priorities(draw.indices, td, generations=batch.generation)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    replay.check_valid()


def test_a_gpu_and_cpu_tensors_keep_the_same_priorities() -> None:
    """The same adds and the same updates (fixed slots and values): the same raw priorities."""
    gpu, cpu = _replay("cuda"), _replay("cpu")
    rng = np.random.default_rng(1)
    for t, step in enumerate(_steps(120)):
        gpu.add_many(**step)
        cpu.add_many(**step)
        if t % 5 == 4:
            slots = rng.choice(len(cpu), 16, replace=False)
            values = rng.exponential(size=16)
            for replay in (gpu, cpu):
                device = replay.memory.device
                replay.update_priorities(
                    torch.from_numpy(slots).to(device),
                    torch.from_numpy(values).to(device),
                    generations=torch.from_numpy(replay.generations(slots)).to(device),
                )
    np.testing.assert_array_equal(gpu.sampler.priorities, cpu.sampler.priorities)


def test_the_captured_recipe_step_equals_the_eager_one_and_never_waits() -> None:
    """Double DQN's fused step (draw, learn, write |δ|) as one CUDA graph and eagerly, from the
    same state: the same losses, parameters and priorities; the graph's replays (with their
    staging) make no host synchronisation."""
    import copy

    from recipes.dqn.agent import make_replay_update
    from recipes.dqn.config import DDQNConfig
    from recipes.dqn.envs import EnvSpec
    from recipes.dqn.networks import QNetwork, make_optimizer

    spec = EnvSpec(obs_shape=(4, 8, 8), obs_dtype=np.uint8, num_actions=4, frame_stack=4)
    device = torch.device("cuda")
    steps = _steps(80)
    results = []
    for graph in (True, False):
        cfg = DDQNConfig(env="CartPole-v1", arm="proportional", batch_size=32, cuda_graph=graph)
        torch.manual_seed(0)
        q = QNetwork("mlp", spec, (64,), cfg.shared_bias).to(device)
        q_target = copy.deepcopy(q)
        optimizer = make_optimizer(cfg, q.parameters(), capturable=graph)
        replay = _replay("cuda")
        update = make_replay_update(q, q_target, optimizer, replay, cfg, device)
        losses = []
        for t, step in enumerate(steps):
            replay.add_many(**step)
            if t < 10:
                continue
            if graph and t > 10:  # the first call captures; every later one only stages and replays
                torch.cuda.set_sync_debug_mode("error")
            try:
                loss, *_ = update(())
            finally:
                torch.cuda.set_sync_debug_mode("default")
            losses.append(loss.clone())
        assert update.captured == graph
        results.append((torch.stack(losses), [p.detach().clone() for p in q.parameters()], replay))
    (l_graph, p_graph, r_graph), (l_eager, p_eager, r_eager) = results
    torch.testing.assert_close(l_graph, l_eager)
    for a, b in zip(p_graph, p_eager, strict=True):
        torch.testing.assert_close(a, b)
    np.testing.assert_allclose(r_graph.sampler.priorities, r_eager.sampler.priorities, rtol=1e-5)
    assert r_graph.dropped_updates == r_eager.dropped_updates


def test_a_memory_on_cuda_holds_the_device_its_draws_report_and_updates_stay_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: ``device="cuda"`` was kept as ``torch.device("cuda")`` while draws report
    ``cuda:0``; the two compare unequal, so every update of a draw's tensors took the host path
    (a copy and a wait), and a captured step aborted inside the priority write."""
    replay = _replay("cuda")
    for step in _steps(20):
        replay.add_many(**step)
    batch, draw = replay.sample(32)
    assert replay.memory.device == draw.indices.device == torch.device("cuda", torch.cuda.current_device())
    calls = []
    original = replay.steps.update_on_device  # type: ignore[attr-defined]

    def spied(*args: Any) -> None:
        calls.append(1)
        original(*args)

    monkeypatch.setattr(replay.steps, "update_on_device", spied)
    replay.update_priorities(
        draw.indices, torch.ones(32, device=draw.indices.device), generations=batch.generation
    )
    assert calls == [1]
