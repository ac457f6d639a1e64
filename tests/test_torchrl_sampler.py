"""prisample.torchrl.PrioritizedSampler inside TorchRL's replay buffers.

TorchRL's own usage (extend, sample, update_priority, ``update_tensordict_priority``, checkpoints),
the draws against the exact ``P(i) = (p_i + ε)^α / Σ_k (p_k + ε)^α`` (chi-square), the weights
against ``(N·P(i))^-β / max_j (N·P(j))^-β`` computed naively, the probabilities and weights against
TorchRL's own ``PrioritizedSampler`` for the same priorities, wrap-around, and argument errors.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("torchrl")

from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, ListStorage, ReplayBuffer, TensorDictReplayBuffer
from torchrl.data.replay_buffers.samplers import PrioritizedSampler as TorchRLSampler
from torchrl.data.replay_buffers.samplers import Sampler

from prisample.torchrl import EMPTY_STORAGE_ERROR, NOT_SHARED_ERROR, PrioritizedSampler

ROOT = Path(__file__).resolve().parent.parent


def naive_probabilities(priorities: np.ndarray, alpha: float, eps: float, backend: str) -> np.ndarray:
    """``(p_i + ε)^α / Σ_k (p_k + ε)^α``, or ``rank(i)^-α / Σ_r r^-α`` (distinct priorities)."""
    if backend == "proportional":
        mass = (priorities + eps) ** alpha
    else:
        ranks = np.empty(priorities.shape[0])
        ranks[np.argsort(-priorities, kind="stable")] = np.arange(1, priorities.shape[0] + 1)
        mass = ranks**-alpha
    return mass / mass.sum()


def buffer(n: int, sampler: Any, **kwargs: Any) -> ReplayBuffer:
    return ReplayBuffer(storage=LazyTensorStorage(n), sampler=sampler, **kwargs)


def filled(n: int, priorities: np.ndarray, **kwargs: Any) -> tuple[ReplayBuffer, PrioritizedSampler]:
    """A buffer of capacity ``n`` holding ``len(priorities)`` items with those priorities."""
    sampler = PrioritizedSampler(n, **kwargs)
    rb = buffer(n, sampler)
    rb.extend(torch.arange(len(priorities), dtype=torch.float32))
    rb.update_priority(torch.arange(len(priorities)), torch.as_tensor(priorities))
    return rb, sampler


def test_import_prisample_does_not_import_torchrl() -> None:
    code = "import sys, prisample; assert 'torchrl' not in sys.modules, 'torchrl imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_is_a_torchrl_prioritized_sampler() -> None:
    sampler = PrioritizedSampler(8, alpha=0.6, beta=0.4)
    assert isinstance(sampler, Sampler)
    assert isinstance(sampler, TorchRLSampler)  # TorchRL's isinstance checks treat it as prioritized
    assert sampler.max_size == 8 and sampler.reduction == "max" and sampler.eps == 1e-8


def test_torchrl_usage_pattern() -> None:
    """extend, sample with ``priority_weight``, update_priority; new items at the max priority."""
    rb = buffer(32, PrioritizedSampler(32, alpha=0.6, beta=0.4, seed=0), batch_size=8)
    rb.extend(torch.arange(20, dtype=torch.float32))
    data, info = rb.sample(return_info=True)
    assert set(info) == {"priority_weight", "index"}
    index, weight = info["index"], info["priority_weight"]
    assert index.dtype == torch.int64 and index.shape == (8,)
    assert weight.dtype == torch.float32 and torch.equal(weight, torch.ones(8))
    assert torch.equal(data, index.float())  # the items at the drawn indices
    rb.update_priority(index, torch.full((8,), 0.25))
    rb.update_priority(torch.tensor([3]), 4.0)
    assert rb.sampler.default_priority == 4.0
    rb.extend(torch.arange(2, dtype=torch.float32))  # slots 20, 21 enter at the max priority
    assert rb.sampler.engine.priorities[20:22].tolist() == [4.0, 4.0]
    rb.update_priority(torch.tensor([3]), 0.5)
    # the maximum of the memory now, not the running maximum (4) TorchRL's default keeps
    assert rb.sampler.default_priority == 4.0
    rb.update_priority(torch.tensor([20, 21]), torch.tensor([0.1, 0.1]))
    assert rb.sampler.default_priority == 1.0


def test_tensordict_replay_buffer_with_priority_key() -> None:
    sampler = PrioritizedSampler(16, alpha=0.7, beta=0.5, seed=1)
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(16), sampler=sampler, batch_size=6, priority_key="td_error"
    )
    td_error = torch.tensor([2.0, 0.3, 1.0, 3.0, 0.4])
    rb.extend(TensorDict({"obs": torch.randn(5, 3), "td_error": td_error}, batch_size=[5]))
    assert np.allclose(sampler.engine.priorities[:5], td_error.numpy())  # set from the data
    batch = rb.sample()
    assert batch["priority_weight"].shape == (6,) and batch["index"].shape == (6,)
    errors = torch.arange(12, dtype=torch.float32).reshape(6, 2) / 10
    batch.set("td_error", errors)  # two values per item: reduced with "max"
    rb.update_tensordict_priority(batch)
    expected: dict[int, float] = {}
    for i, p in zip(batch["index"].tolist(), errors.amax(1).tolist(), strict=True):
        expected[i] = p  # the last of duplicates wins
    for i, p in expected.items():
        assert sampler.engine.priorities[i] == pytest.approx(p)


@pytest.mark.parametrize("backend", ["proportional", "rank"])
def test_draw_frequencies_match_exact_probabilities(backend: str) -> None:
    """Chi-square of 10,000 draws against ``P(i)`` (with α ignored, i.e. ``P ∝ p``, χ² > 500).

    Draws of one item each are independent (a batch's draws are stratified, which shrinks the
    statistic), so the statistic follows the chi-square law; then a stratified batch's counts
    agree too."""
    alpha = 0.7
    priorities = np.array([0.05, 0.2, 0.4, 0.7, 1.0, 1.5, 2.5, 4.0, 6.0, 9.0, 0.01, 3.0])
    rb, sampler = filled(16, priorities, alpha=alpha, beta=0.4, backend=backend, seed=3)
    expected = naive_probabilities(priorities, alpha, sampler.eps, backend)
    single = np.zeros(16)
    for _ in range(10_000):
        single[int(sampler.sample(rb.storage, 1)[0])] += 1
    batched = np.zeros(16)
    for _ in range(100):
        batched += np.bincount(sampler.sample(rb.storage, 100)[0].numpy(), minlength=16)
    for counts in (single, batched):
        assert counts[12:].sum() == 0  # slots without data are never drawn
        want = expected * counts.sum()
        chi2 = float((((counts[:12] - want) ** 2) / want).sum())
        assert chi2 < 31.26, chi2  # df = 11, p = 0.001


@pytest.mark.parametrize("backend", ["proportional", "rank"])
def test_weights_are_memory_normalised(backend: str) -> None:
    """``priority_weight = (N·P(i))^-β / max_j (N·P(j))^-β`` over the memory, computed naively."""
    alpha, beta = 0.6, 0.4
    priorities = np.array([0.3, 1.2, 0.05, 2.0, 0.7, 0.9, 5.0])
    rb, sampler = filled(10, priorities, alpha=alpha, beta=beta, backend=backend, seed=0)
    p = naive_probabilities(priorities, alpha, sampler.eps, backend)
    w = (len(p) * p) ** -beta
    w /= w.max()
    index, info = sampler.sample(rb.storage, 64)
    np.testing.assert_allclose(info["priority_weight"].numpy(), w[index.numpy()], rtol=1e-6)
    batch = PrioritizedSampler(10, alpha=alpha, beta=beta, backend=backend, weight_norm="batch", seed=0)
    rb = buffer(10, batch)
    rb.extend(torch.arange(7.0))
    rb.update_priority(torch.arange(7), torch.as_tensor(priorities))
    index, info = batch.sample(rb.storage, 64)
    wb = (len(p) * p[index.numpy()]) ** -beta
    np.testing.assert_allclose(info["priority_weight"].numpy(), wb / wb.max(), rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_agrees_with_torchrl_sampler(dtype: torch.dtype) -> None:
    """Same priorities, ``α``, ``β``, ``ε``: the same ``P(i)`` as TorchRL's trees hold and the same
    ``priority_weight`` for the indices TorchRL draws.  TorchRL's sampler is driven directly
    (its float64 trees refuse the float32 default priority a ``ReplayBuffer.extend`` writes)."""
    n, alpha, beta, eps = 64, 0.6, 0.4, 1e-8
    rng = np.random.default_rng(0)
    priorities = torch.as_tensor(rng.exponential(size=n) * (rng.random(n) < 0.9), dtype=dtype)
    ours = PrioritizedSampler(n, alpha, beta, eps, dtype, seed=0)
    rb = buffer(n, ours)
    rb.extend(torch.arange(n, dtype=torch.float32))
    rb.update_priority(torch.arange(n), priorities)
    theirs = TorchRLSampler(n, alpha, beta, eps, dtype)
    theirs.update_priority(torch.arange(n), priorities)
    tree = theirs._sum_tree
    their_p = np.array([tree[i] for i in range(n)]) / tree.query(0, n)
    our_p = ours.engine.probabilities(np.arange(n))
    np.testing.assert_allclose(our_p, their_p, rtol=1e-12 if dtype == torch.float64 else 1e-6)
    torch.manual_seed(0)
    index, info = theirs.sample(rb.storage, 256)
    np.testing.assert_allclose(ours.engine.weights(index.numpy()), info["priority_weight"].numpy(), rtol=1e-6)
    _, our_info = ours.sample(rb.storage, 8)
    assert our_info["priority_weight"].dtype == dtype == info["priority_weight"].dtype


def test_wrap_around_enters_overwritten_slots_at_max_priority() -> None:
    rb, sampler = filled(8, np.array([0.5, 0.2, 0.9, 0.1, 0.3, 3.0, 0.4, 0.6]), alpha=0.6, beta=0.4)
    rb.extend(torch.arange(3.0))  # the ring wraps: slots 0, 1, 2 hold new items
    assert sampler.engine.priorities.tolist() == [3.0, 3.0, 3.0, 0.1, 0.3, 3.0, 0.4, 0.6]
    rb.update_priority(torch.tensor([0, 1, 2, 5]), torch.full((4,), 0.2, dtype=torch.float64))
    rb.extend(torch.arange(4.0))  # slots 3..6; the max of the memory is 0.6 now
    assert sampler.engine.priorities.tolist() == [0.2, 0.2, 0.2, 0.6, 0.6, 0.6, 0.6, 0.6]
    assert len(rb) == 8 and sampler.engine.size == 8


def test_storage_length_growth_and_prefilled_storage() -> None:
    storage = LazyTensorStorage(12)
    ReplayBuffer(storage=storage).extend(torch.arange(5.0))  # written without our sampler
    sampler = PrioritizedSampler(12, alpha=0.6, beta=0.4, seed=0)
    rb = ReplayBuffer(storage=storage, sampler=sampler, batch_size=4)
    assert sampler.engine.size == 5  # the buffer entered the storage's items at the max priority
    storage.set(torch.arange(5, 9), torch.arange(4.0))  # set on the storage directly, unseen
    index, _ = sampler.sample(storage, 200)
    assert sampler.engine.size == 9 and set(index.tolist()) == set(range(9))
    rb.empty()
    assert sampler.engine.size == 0
    with pytest.raises(RuntimeError, match=EMPTY_STORAGE_ERROR):
        rb.sample()


def test_empty_buffer_raises_torchrl_error_type() -> None:
    for sampler in (PrioritizedSampler(4, alpha=0.6, beta=0.4), TorchRLSampler(4, alpha=0.6, beta=0.4)):
        with pytest.raises(RuntimeError, match=EMPTY_STORAGE_ERROR):
            buffer(4, sampler).sample(2)


def _steps(rb: ReplayBuffer, count: int, seed: int) -> list[tuple[list[int], list[float]]]:
    """``count`` DQN replay steps (extend 3, sample, update); the drawn indices and weights."""
    gen = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        rb.extend(TensorDict({"obs": torch.arange(3.0)}, batch_size=[3]))
        _, info = rb.sample(return_info=True)
        rb.update_priority(info["index"], torch.as_tensor(gen.random(len(info["index"]))))
        out.append((info["index"].tolist(), info["priority_weight"].tolist()))
    return out


@pytest.mark.parametrize("backend", ["proportional", "rank"])
def test_state_dict_round_trip(backend: str, tmp_path: Path) -> None:
    """A restored buffer draws exactly what the saved one goes on to draw; the sampler's state
    survives ``torch.save`` / ``torch.load(weights_only=True)``."""
    torch.manual_seed(0)
    rb = buffer(16, PrioritizedSampler(16, alpha=0.6, beta=0.4, backend=backend), batch_size=5)
    _steps(rb, 8, seed=1)
    state = rb.state_dict()
    torch.save(state["_sampler"], tmp_path / "sampler.pt")
    expected = _steps(rb, 6, seed=2)
    torch.manual_seed(123)  # another seed: the restored state decides the draws
    restored = buffer(16, PrioritizedSampler(16, alpha=0.6, beta=0.4, backend=backend), batch_size=5)
    restored.load_state_dict(state)
    assert _steps(restored, 6, seed=2) == expected
    again = buffer(16, PrioritizedSampler(16, alpha=0.6, beta=0.4, backend=backend), batch_size=5)
    again.load_state_dict({**state, "_sampler": torch.load(tmp_path / "sampler.pt", weights_only=True)})
    assert _steps(again, 6, seed=2) == expected


def test_dumps_loads_round_trip(tmp_path: Path) -> None:
    rb = buffer(16, PrioritizedSampler(16, alpha=0.6, beta=0.4, seed=4), batch_size=5)
    _steps(rb, 5, seed=1)
    rb.dumps(tmp_path / "rb")
    assert (tmp_path / "rb" / "sampler" / "prisample_sampler.pt").exists()
    expected = _steps(rb, 4, seed=2)
    restored = buffer(16, PrioritizedSampler(16, alpha=0.6, beta=0.4, seed=9), batch_size=5)
    restored.loads(tmp_path / "rb")
    assert _steps(restored, 4, seed=2) == expected


def test_buffer_generator_seeds_the_draws() -> None:
    """``ReplayBuffer(generator=g)`` decides the draws, and a restore continues them."""
    runs = []
    for global_seed in (0, 1):
        torch.manual_seed(global_seed)
        gen = torch.Generator().manual_seed(7)
        rb = buffer(16, PrioritizedSampler(16, alpha=0.6, beta=0.4), batch_size=5, generator=gen)
        runs.append(_steps(rb, 5, seed=1))
    assert runs[0] == runs[1]
    state = rb.state_dict()
    expected = _steps(rb, 4, seed=2)
    other = buffer(
        16,
        PrioritizedSampler(16, alpha=0.6, beta=0.4),
        batch_size=5,
        generator=torch.Generator().manual_seed(8),
    )
    other.load_state_dict(state)
    assert _steps(other, 4, seed=2) == expected


def test_pickle_keeps_the_draws() -> None:
    rb, sampler = filled(8, np.linspace(0.1, 2.0, 6), alpha=0.6, beta=0.4, seed=0)
    copy = pickle.loads(pickle.dumps(sampler))
    for _ in range(3):
        a, b = sampler.sample(rb.storage, 8), copy.sample(rb.storage, 8)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1]["priority_weight"], b[1]["priority_weight"])


def _update_priority_in_child(rb: TensorDictReplayBuffer, result: Any) -> None:
    """What a worker process does with the buffer: update a priority; reports the error, if any."""
    try:
        rb.update_priority(torch.tensor([0]), torch.tensor([5.0]))
    except RuntimeError as error:
        result.put(str(error))
    else:
        result.put("updated")


def _shared_buffer() -> TensorDictReplayBuffer:
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(8),
        sampler=PrioritizedSampler(8, alpha=0.6, beta=0.4, seed=0),
        priority_key="td_error",
        batch_size=2,
    )
    rb.extend(TensorDict({"obs": torch.arange(4.0)}, batch_size=[4]))
    return rb


def test_a_spawned_process_is_refused_the_sampler_naming_the_fix() -> None:
    """A buffer with this sampler given to a spawned process was pickled without complaint, and
    the child's ``update_priority`` changed only its copy: the parent never saw it.  As TorchRL's
    sampler does, it is refused at ``Process.start()`` (before any child runs) with a message that
    names the fix; pickling it otherwise (a checkpoint) still gives a working, independent copy."""
    rb = _shared_buffer()
    context = mp.get_context("spawn")
    result = context.Queue()
    process = context.Process(target=_update_priority_in_child, args=(rb, result))
    try:
        with pytest.raises(RuntimeError, match=re.escape(NOT_SHARED_ERROR)):
            process.start()
    finally:
        if process.pid is not None:  # started (the bug): let the child end before failing
            process.join(timeout=120)
    assert "multiprocessing.Queue" in NOT_SHARED_ERROR and "state_dict()" in NOT_SHARED_ERROR
    copy = pickle.loads(pickle.dumps(rb.sampler))
    copy.update_priority(torch.tensor([0]), torch.tensor([5.0]))
    assert copy.engine.priorities[0] == 5.0 and rb.sampler.engine.priorities[0] == 1.0
    rb.update_priority(torch.tensor([0]), torch.tensor([2.0]))  # the owner still updates
    assert rb.sampler.engine.priorities[0] == 2.0


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="no fork on this platform")
def test_a_forked_copy_refuses_updates_that_would_be_lost() -> None:
    """A forked child (the default start method on Linux before Python 3.14) holds a copy of the
    sampler without pickling it: its ``update_priority`` used to change only that copy.  It
    raises there, naming the fix, and the parent's priorities stay as they were."""
    rb = _shared_buffer()
    context = mp.get_context("fork")
    result = context.Queue()
    process = context.Process(target=_update_priority_in_child, args=(rb, result))
    process.start()
    try:
        assert result.get(timeout=60) == NOT_SHARED_ERROR
    finally:
        process.join(timeout=60)
    assert rb.sampler.engine.priorities[:4].tolist() == [1.0] * 4


def test_skips_minus_one_indices() -> None:
    rb, sampler = filled(8, np.ones(4), alpha=0.6, beta=0.4)
    rb.update_priority(torch.tensor([-1, 2, -1]), torch.tensor([5.0, 0.5, 7.0]))
    assert sampler.engine.priorities[:4].tolist() == [1.0, 1.0, 0.5, 1.0]


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"max_capacity": 0}, ValueError, "max_capacity=0"),
        ({"max_capacity": 4.0}, TypeError, "max_capacity=4.0"),
        ({"alpha": -1.0}, ValueError, "alpha=-1.0"),
        ({"beta": 1.5}, ValueError, "beta=1.5"),
        ({"eps": -1e-3}, ValueError, "eps=-0.001"),
        ({"dtype": torch.int64}, ValueError, "dtype=torch.int64"),
        ({"reduction": "mode"}, ValueError, "reduction='mode'"),
        ({"max_priority_within_buffer": 1}, TypeError, "max_priority_within_buffer=1"),
        ({"device": "nowhere"}, ValueError, "device='nowhere'"),
        ({"backend": "greedy"}, ValueError, "backend='greedy'"),
        ({"weight_norm": "max"}, ValueError, "weight_norm='max'"),
        ({"seed": -1}, ValueError, "seed=-1"),
    ],
)
def test_bad_constructor_arguments(kwargs: dict[str, Any], error: type[Exception], name: str) -> None:
    args = {"max_capacity": 8, "alpha": 0.6, "beta": 0.4, **kwargs}
    with pytest.raises(error, match=name.replace("(", r"\(").replace(".", r"\.")):
        PrioritizedSampler(**args)


def test_bad_calls_name_the_argument_and_change_nothing() -> None:
    rb, sampler = filled(8, np.array([0.5, 1.0, 2.0]), alpha=0.6, beta=0.4, seed=0)
    before = sampler.state_dict()
    with pytest.raises(ValueError, match=r"priority\[1\]=-1.0"):
        rb.update_priority(torch.tensor([0, 1]), torch.tensor([0.3, -1.0]))
    with pytest.raises(ValueError, match="priority should be one value or one per index"):
        rb.update_priority(torch.tensor([0, 1]), torch.tensor([0.3, 0.2, 0.1]))
    with pytest.raises(TypeError, match="index should hold integers"):
        rb.update_priority(torch.tensor([0.0, 1.0]), torch.tensor([0.3, 0.2]))
    with pytest.raises(ValueError, match="max_capacity=8"):
        rb.update_priority(torch.tensor([9]), 1.0)
    with pytest.raises(ValueError, match=r"storage \(length 3\)"):
        rb.update_priority(torch.tensor([5]), 1.0)  # no data there
    with pytest.raises(ValueError, match="batch_size=0"):
        sampler.sample(rb.storage, 0)
    with pytest.raises(ValueError, match="max_capacity"):
        sampler.load_state_dict({**before, "max_capacity": 9})
    with pytest.raises(ValueError, match="missing the key 'engine'"):
        sampler.load_state_dict({"version": 1, "max_capacity": 8})
    after = sampler.state_dict()
    np.testing.assert_array_equal(after["engine"]["priorities"], before["engine"]["priorities"])
    assert after["engine"]["rng"] == before["engine"]["rng"]


def test_storage_larger_than_the_sampler_and_multidim_storage_raise() -> None:
    rb = buffer(8, PrioritizedSampler(4, alpha=0.6, beta=0.4))
    with pytest.raises(ValueError, match="max_capacity=4"):
        rb.extend(torch.arange(6.0))
    rb2 = ReplayBuffer(
        storage=LazyTensorStorage(12, ndim=2), sampler=PrioritizedSampler(12, alpha=0.6, beta=0.4)
    )
    with pytest.raises(ValueError, match=r"storage should be one-dimensional.*shape \(3, 4\)"):
        rb2.extend(TensorDict({"a": torch.zeros(4, 3)}, batch_size=[4, 3]))


def test_list_storage_and_scheduled_parameters() -> None:
    sampler = PrioritizedSampler(6, alpha=0.6, beta=0.4, backend="rank", seed=0)
    rb = ReplayBuffer(storage=ListStorage(6), sampler=sampler, batch_size=3, collate_fn=lambda x: x)
    rb.extend(["a", "b", "c", "d"])
    rb.update_priority(torch.arange(4), torch.tensor([0.1, 0.2, 0.3, 0.4]))
    sampler.beta, sampler.alpha = 1.0, 1.0  # what TorchRL's ParameterScheduler sets
    assert sampler.beta == 1.0 and sampler.alpha == 1.0
    data, info = rb.sample(return_info=True)
    assert all(x in "abcd" for x in data)
    p = naive_probabilities(np.array([0.1, 0.2, 0.3, 0.4]), 1.0, 0.0, "rank")
    w = (4 * p[info["index"].numpy()]) ** -1.0 / (4 * p.min()) ** -1.0
    np.testing.assert_allclose(info["priority_weight"].numpy(), w, rtol=1e-6)


@pytest.mark.filterwarnings("ignore:__array_wrap__:DeprecationWarning")  # TorchRL's np.clip on a tensor
def test_torchrl_parameter_schedulers_drive_alpha_and_beta() -> None:
    """TorchRL's ``LinearScheduler``/``StepScheduler`` set ``alpha`` and ``beta`` as 0-d tensors
    (given tensor parameters, as TorchRL's own scheduler test does); the setters refused them with
    ``TypeError``.  They now follow the schedule; a ``β`` stepped above 1 raises ``ValueError``
    naming the cap (``max_value=1.0``) and leaves ``β`` where it was."""
    from torchrl.data.replay_buffers.scheduler import LinearScheduler, SchedulerList, StepScheduler

    sampler = PrioritizedSampler(16, alpha=torch.tensor(1.0), beta=torch.tensor(0.1), seed=0)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(16), sampler=sampler, batch_size=4)
    rb.extend(TensorDict({"obs": torch.arange(16.0)}, batch_size=[16]))
    alpha_end, steps = torch.tensor(0.2), 8
    schedulers = SchedulerList(
        [
            LinearScheduler(rb, param_name="alpha", final_value=alpha_end, num_steps=steps),
            StepScheduler(rb, param_name="beta", gamma=torch.tensor(0.1), mode="additive", max_value=1.0),
        ]
    )
    for step in range(1, 12):
        schedulers.step()
        rb.sample()
        expected_alpha = 1.0 + (0.2 - 1.0) * min(step, steps) / steps
        assert sampler.alpha == pytest.approx(expected_alpha, abs=1e-6)
        assert sampler.beta == pytest.approx(min(0.1 + 0.1 * step, 1.0), abs=1e-6)
    assert sampler.beta == 1.0  # clipped there by the scheduler's max_value
    uncapped = StepScheduler(rb, param_name="beta", gamma=torch.tensor(0.1), mode="additive")
    with pytest.raises(ValueError, match=r"beta should be in \[0, 1\] \(.*max_value=1\.0\)"):
        uncapped.step()
    assert sampler.beta == 1.0


def test_docs_examples_run() -> None:
    """Every python block of docs/torchrl.md runs (each block stands alone)."""
    text = (ROOT / "docs" / "torchrl.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 4
    for block in blocks:
        exec(compile(block, "docs/torchrl.md", "exec"), {"__name__": "docs_torchrl"})
