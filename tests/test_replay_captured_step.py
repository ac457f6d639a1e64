"""The device replay step as a CUDA graph replays it, checked on CPU tensors.

A graph replays the kernels it recorded and runs no Python, so the host side of a device draw
(β at the schedule's step, rows added since the last read, the ring's tail) is staged before
every replay by ``PrioritizedReplay.stage_device_step`` and skipped while capturing.  Here
"capturing" is simulated (``capturing()`` patched to ``True``) and the staged step compared with
the eager one; the warm-up's save/restore round trip and the Double DQN recipe's fused step
(draw, learn, priority write: one call) are compared with their unfused, eager equivalents.
The graph itself needs a GPU: ``tests/test_device_replay_cuda.py``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any, cast

import numpy as np
import pytest
import torch

import prisample.device_sampler
import prisample.replay.device_reads
from prisample import DevicePrioritizedSampler, LinearSchedule
from prisample.replay import PrioritizedReplay
from tests.test_replay_device_backend import Stream


def _replay(capacity: int = 24, beta: Any = 0.5) -> PrioritizedReplay:
    return PrioritizedReplay(
        capacity, (3, 3), obs_dtype=np.uint8, frame_stack=4, num_streams=2, device="cpu",
        backend="device_proportional", alpha=0.7, beta=beta, seed=3,
    )  # fmt: skip


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A switch: while on, the device code behaves as inside a CUDA graph capture."""
    state = {"on": False}
    for module in (prisample.device_sampler, prisample.replay.device_reads):
        monkeypatch.setattr(module, "capturing", lambda: state["on"])

    class Switch:
        def __enter__(self) -> None:
            state["on"] = True

        def __exit__(self, *exc: object) -> None:
            state["on"] = False

    yield Switch()


def _step(replay: PrioritizedReplay) -> tuple[Any, Any]:
    batch, draw = replay.sample(8)
    reward, slots = cast(torch.Tensor, batch.reward), cast(torch.Tensor, draw.indices)
    td = (reward.double() * 0.7).abs() + 0.05 * slots.double()
    replay.update_priorities(draw.indices, td, generations=batch.generation)
    return batch, draw


def _run(staged: bool, captured: Any, *, stage: bool = True) -> list[tuple[Any, Any]]:
    """Adds and steps; the steps eager, or staged and then run as a graph runs them."""
    replay = _replay(beta=LinearSchedule(0.4, 1.0, 30))  # β moves every draw
    stream = Stream(7)
    out = []
    for t in range(60):  # 120 adds into 24 slots: the tail moves, rows arrive between draws
        replay.add_many(**stream.step())
        if t >= 3:
            if staged:
                if stage:
                    replay.stage_device_step()
                with captured:
                    out.append(_step(replay))
            else:
                out.append(_step(replay))
    out.append((replay.state_dict(), replay.dropped_updates))
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return bool(torch.equal(a, b))
    if isinstance(a, np.ndarray):
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "__dataclass_fields__"):
        return all(_same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    return bool(a == b)


def test_a_staged_step_run_as_a_graph_runs_it_equals_the_eager_step(captured: Any) -> None:
    eager, staged = _run(False, captured), _run(True, captured)
    assert len(eager) == len(staged) == 58
    for i, (a, b) in enumerate(zip(eager, staged, strict=True)):
        assert _same(a, b), f"step {i} differs"


def test_without_staging_the_captured_reads_are_stale(captured: Any) -> None:
    """What the staging does is needed: skipped, the reads see old rows, tail and β."""
    eager, unstaged = _run(False, captured), _run(True, captured, stage=False)
    assert not _same(eager, unstaged)


def _tail_on_device(replay: PrioritizedReplay) -> int:
    """The ring's tail as the device reads last received it."""
    reads = replay.memory._device
    assert reads is not None
    return int(reads.tail_on_device)


def test_staging_sends_beta_tail_and_rows(captured: Any) -> None:
    replay = _replay(capacity=8, beta=LinearSchedule(0.4, 1.0, 4))
    stream = Stream(1)
    for _ in range(8):
        replay.add_many(**stream.step())  # 16 adds into 8 slots
    replay.stage_device_step()
    sampler = cast(DevicePrioritizedSampler, replay.sampler)
    assert float(sampler._beta_on_device) == pytest.approx(0.4) and sampler.step == 1
    assert _tail_on_device(replay) == replay.memory.num_evicted == 8
    replay.add_many(**stream.step())
    with captured:
        replay.sample(4)
    # the two rows just added are not on the device yet: a graph would read the old rows
    assert _tail_on_device(replay) == 8 < replay.memory.num_evicted
    assert replay.memory.ring.columns._synced == 16 < replay.memory.num_added
    replay.stage_device_step()
    assert _tail_on_device(replay) == replay.memory.num_evicted == 10
    assert float(sampler._beta_on_device) == pytest.approx(0.55) and sampler.step == 2


def test_stage_device_step_refuses_before_a_draw_is_possible() -> None:
    replay = _replay()
    with pytest.raises(ValueError, match="no transition can be drawn yet"):
        replay.stage_device_step()
    host = PrioritizedReplay(8, (3,), device="cpu", seed=0)
    with pytest.raises(ValueError, match="backend='device_"):
        host.save_device_step()


def test_save_and_restore_device_step_put_every_changed_value_back() -> None:
    replay, stream = _replay(), Stream(2)
    for _ in range(20):
        replay.add_many(**stream.step())
    _step(replay)
    before, dropped = replay.state_dict(), replay.dropped_updates
    saved = replay.save_device_step()
    tensors = replay.steps.step_tensors()
    for _ in range(3):  # draws, priority writes, and one stale update dropped
        batch, draw = _step(replay)
    replay.add_many(**stream.step())
    ones = torch.ones(8, dtype=torch.float64)
    replay.update_priorities(draw.indices, ones, generations=batch.generation - 1)
    assert replay.dropped_updates > dropped
    replay.restore_device_step(saved)
    assert all(a is b for a, b in zip(tensors, replay.steps.step_tensors(), strict=True))  # in place
    after = replay.state_dict()
    for key in ("sampler", "drawn"):
        assert _same(before[key], after[key]), key
    assert replay.dropped_updates == dropped


def test_the_sampler_step_setter_refuses_bad_values() -> None:
    sampler = cast(DevicePrioritizedSampler, _replay().sampler)
    with pytest.raises(TypeError, match=r"step=1\.5"):
        sampler.step = 1.5  # type: ignore[assignment]
    with pytest.raises(ValueError, match="step=-1"):
        sampler.step = -1
    assert sampler.step == 0


# -- the Double DQN recipe's fused step ------------------------------------------------------------


def _needs_the_recipes_extras() -> None:
    """The recipe's modules import gymnasium and yaml (the ``rl`` extra); core-only runs skip."""
    pytest.importorskip("gymnasium")
    pytest.importorskip("yaml")


def test_the_recipe_fused_step_equals_draw_learn_write_done_apart() -> None:
    """``make_replay_update`` (one call: draw, learn, write |δ|) against the same three steps
    called one by one, from the same networks, optimiser and memory: the same parameters and
    priorities after every update."""
    _needs_the_recipes_extras()
    from recipes.dqn.agent import make_learner, make_replay_update
    from recipes.dqn.config import DDQNConfig
    from recipes.dqn.envs import EnvSpec
    from recipes.dqn.networks import QNetwork, make_optimizer
    from recipes.dqn.update import as_batch

    cfg = DDQNConfig(env="CartPole-v1", arm="proportional", batch_size=8, cuda_graph=False)
    spec = EnvSpec(obs_shape=(4, 3, 3), obs_dtype=np.uint8, num_actions=3, frame_stack=4)
    device = torch.device("cpu")

    def agent() -> tuple[Any, ...]:
        torch.manual_seed(0)
        q = QNetwork("mlp", spec, (16,), cfg.shared_bias)
        q_target = copy.deepcopy(q)
        return q, q_target, make_optimizer(cfg, q.parameters(), capturable=False), _replay()

    q1, t1, o1, r1 = agent()
    q2, t2, o2, r2 = agent()
    fused = make_replay_update(q1, t1, o1, r1, cfg, device)
    learner = make_learner(q2, t2, o2, cfg, device)
    stream = Stream(5)
    for _ in range(30):
        step = stream.step()
        r1.add_many(**step)
        r2.add_many(**step)
        loss1, td1, *_ = fused(())
        sample, drawn = r2.sample(cfg.batch_size)
        loss2, td2 = learner(as_batch(sample, drawn.weights, device))
        r2.update_priorities(drawn.indices, td2, generations=sample.generation)
        assert torch.equal(loss1, loss2) and torch.equal(td1, td2)
    for a, b in zip(q1.parameters(), q2.parameters(), strict=True):
        assert torch.equal(a, b)
    np.testing.assert_array_equal(r1.sampler.priorities, r2.sampler.priorities)
    assert r1.dropped_updates == r2.dropped_updates


@pytest.mark.parametrize(
    ("option", "value"), [("diagnostics", True), ("sampling", "laber")], ids=["diagnostics", "laber"]
)
def test_the_recipe_refuses_what_needs_the_drawn_slots_on_the_host(option: str, value: Any) -> None:
    _needs_the_recipes_extras()
    from recipes.common.cli import ConfigError
    from recipes.dqn.config import DDQNConfig

    options: dict[str, Any] = {option: value, "replay": "uniform"}
    DDQNConfig(env="CartPole-v1", arm="uniform", **options)  # without the device priorities: fine
    with pytest.raises(ConfigError, match=f"{option}.*priorities_on_device"):
        DDQNConfig(env="CartPole-v1", arm="uniform", priorities_on_device=True, **options)
