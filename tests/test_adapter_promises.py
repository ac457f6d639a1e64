"""What the adapters (TorchRL, SB3, Lightning), LAP/PAL and the diagnostics promise in their docs:
overwritten items leave before a new item's priority is read, errors name the caller's argument,
and non-finite, negative, float or multi-dimensional input is refused with nothing changed."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest
import torch

from prisample import PrioritizedSampler
from prisample.diagnostics import Diagnostics, ReplayCounter, TDSnapshots, WeightMonitor, WeightStats
from prisample.methods.lap import lap_loss, lap_priorities, pal_loss
from prisample.replay import PrioritizedReplay
from prisample.sampler import Draw

NON_FINITE = [math.nan, math.inf, -math.inf]


# -- 1. TorchRL: an overwritten item leaves before the new items' priority is read -------------------


def _torchrl_buffer(capacity: int) -> Any:
    pytest.importorskip("torchrl")
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    from prisample.torchrl import PrioritizedSampler as TorchRLSampler

    return ReplayBuffer(
        storage=LazyTensorStorage(capacity),
        sampler=TorchRLSampler(capacity, alpha=1.0, beta=0.5),
        batch_size=2,
    )


def test_torchrl_overwritten_maximum_is_not_inherited() -> None:
    rb = _torchrl_buffer(4)
    from tensordict import TensorDict

    rb.extend(TensorDict({"obs": torch.arange(4.0)}, [4]))
    rb.update_priority(torch.arange(4), torch.tensor([10.0, 1.0, 2.0, 3.0]))
    rb.extend(TensorDict({"obs": torch.tensor([9.0])}, [1]))  # overwrites slot 0, which held 10
    assert rb.sampler.engine.priorities.tolist() == [3.0, 1.0, 2.0, 3.0]
    assert rb.sampler.default_priority == 3.0


def _replay(capacity: int) -> PrioritizedReplay:
    return PrioritizedReplay(capacity, (1,), obs_dtype=np.float32, alpha=1.0, beta=0.5, seed=0)


def _add(replay: PrioritizedReplay, n: int) -> None:
    zeros = np.zeros((n, 1), dtype=np.float32)
    ones = np.ones(n)
    replay.add_many(zeros, np.zeros(n, np.int64), ones, ones, zeros, streams=np.zeros(n, np.int64))


@pytest.mark.parametrize("capacity", [1, 2, 3, 5])
def test_torchrl_enters_new_items_as_prioritized_replay_does(capacity: int) -> None:
    """Random extends (some longer than the memory, so one write fills a slot twice) and updates
    (the maximum often on a slot about to be overwritten): after each, the priorities equal those
    of :class:`PrioritizedReplay` fed the same writes and updates."""
    rb = _torchrl_buffer(capacity)
    replay = _replay(capacity)
    rng = np.random.default_rng(capacity)
    for _ in range(40):
        n = int(rng.integers(1, 2 * capacity + 2))
        rb.extend(torch.zeros(n))
        _add(replay, n)
        np.testing.assert_array_equal(rb.sampler.engine.priorities, replay.sampler.priorities)
        slots = np.flatnonzero(~np.isnan(replay.sampler.priorities))
        chosen = rng.choice(slots, size=int(rng.integers(1, slots.shape[0] + 1)), replace=False)
        values = rng.choice([0.5, 1.0, 2.0, 7.0, 30.0], size=chosen.shape[0])
        rb.update_priority(torch.from_numpy(chosen), torch.from_numpy(values))
        replay.update_priorities(chosen, values, generations=replay.generations(chosen))
        np.testing.assert_array_equal(rb.sampler.engine.priorities, replay.sampler.priorities)


def test_torchrl_write_that_overwrites_the_maximum_after_its_first_slot() -> None:
    """Slots 3 then 0 written, 0 holding the maximum: item by item, the first new item joins a
    memory that still holds it, and the second joins one where the first holds it."""
    rb = _torchrl_buffer(4)
    rb.extend(torch.zeros(7))  # the ring's next slot is 3
    rb.update_priority(torch.arange(4), torch.tensor([10.0, 1.0, 2.0, 3.0]))
    rb.extend(torch.zeros(2))
    assert rb.sampler.engine.priorities.tolist() == [10.0, 1.0, 2.0, 10.0]


# -- 2. SB3 and Lightning: errors name the caller's argument ------------------------------------------


def _sb3_buffer() -> Any:
    pytest.importorskip("stable_baselines3")
    from gymnasium import spaces

    from prisample.sb3 import PrioritizedReplayBuffer

    obs, act = spaces.Box(-1.0, 1.0, (2,), np.float32), spaces.Discrete(2)
    buf = PrioritizedReplayBuffer(8, obs, act, "cpu", seed=0)
    for t in range(4):
        o = np.full((1, 2), t, dtype=np.float32)
        buf.add(o, o + 1, np.array([[0]]), np.array([1.0]), np.array([False]), [{}])
    return buf


@pytest.mark.parametrize("bad", NON_FINITE)
def test_sb3_non_finite_td_errors_name_td_errors(bad: float) -> None:
    buf = _sb3_buffer()
    before = buf.sampler.priorities
    with pytest.raises(ValueError, match=rf"td_errors should be finite, but got td_errors\[1\]={bad!r}"):
        buf.update_priorities([0, 1], [0.5, bad])
    with pytest.raises(ValueError, match=rf"td_errors\[0\]={bad!r}"):
        buf.update_priorities([0], torch.tensor([[bad]]))
    np.testing.assert_array_equal(buf.sampler.priorities, before)


def test_sb3_other_bad_calls_name_their_argument() -> None:
    buf = _sb3_buffer()
    before = buf.sampler.priorities
    with pytest.raises(ValueError, match=r"td_errors should have one value per index \(2\), but got 3"):
        buf.update_priorities([0, 1], [0.5, 1.0, 2.0])
    with pytest.raises(ValueError, match="td_errors should be one-dimensional"):
        buf.update_priorities([0, 1], np.ones((2, 2)))
    with pytest.raises(TypeError, match="indices should hold integers"):
        buf.update_priorities([0.0, 1.0], [0.5, 1.0])
    with pytest.raises(ValueError, match=r"batch_size should be an integer >= 1, but got batch_size=0"):
        buf.sample(0)
    with pytest.raises(TypeError, match=r"batch_size should be an integer, but got batch_size=2.0"):
        buf.sample(2.0)
    np.testing.assert_array_equal(buf.sampler.priorities, before)
    buf.update_priorities(np.array([0, 1]), torch.tensor([[-0.5], [2.0]]))  # (k, 1), signed
    assert buf.sampler.priorities[:2].tolist() == [0.5, 2.0]


def _callback_step(driver: Any, outputs: dict[str, Any], **kwargs: Any) -> torch.Tensor:
    """One claimed batch through the callback's hooks, with ``outputs`` as the step's return."""
    pytest.importorskip("lightning")
    from prisample.lightning import PrioritizedSamplingCallback

    callback = PrioritizedSamplingCallback(sampler=driver, **kwargs)
    it = iter(driver)
    indices = torch.tensor([next(it) for _ in range(driver.batch_size)])
    trainer = cast(Any, SimpleNamespace(global_step=0, log_every_n_steps=1))
    module = cast(Any, SimpleNamespace(device=torch.device("cpu"), log_dict=lambda *args, **kwargs: None))
    batch = [indices, torch.zeros(indices.shape[0])]
    callback.on_train_batch_start(trainer, module, batch, 0)
    callback.on_train_batch_end(trainer, module, outputs, batch, 0)
    return indices


def _drivers() -> list[Any]:
    from prisample.distributed import DistributedPrioritizedSampler
    from prisample.ledger import DrawLedger

    return [
        DrawLedger(PrioritizedSampler(8, alpha=1.0, batch_size=2, seed=0)),
        DistributedPrioritizedSampler(PrioritizedSampler(8, alpha=1.0, batch_size=2, seed=0)),
    ]


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("bad", NON_FINITE)
def test_lightning_non_finite_loss_names_the_key(which: int, bad: float) -> None:
    driver = _drivers()[which]
    before = driver.sampler.priorities
    outputs = {"loss": torch.tensor(0.0), "per_sample_loss": torch.tensor([0.5, bad])}
    with pytest.raises(
        ValueError, match=rf"per_sample_loss should be finite, but got per_sample_loss\[1\]={bad!r}"
    ):
        _callback_step(driver, outputs)
    np.testing.assert_array_equal(driver.sampler.priorities, before)
    renamed = {"loss": torch.tensor(0.0), "losses": torch.tensor([bad, 0.5])}
    with pytest.raises(ValueError, match=r"losses should be finite, but got losses\[0\]="):
        _callback_step(driver, renamed, priority_key="losses")
    np.testing.assert_array_equal(driver.sampler.priorities, before)


def test_lightning_non_real_loss_names_the_key() -> None:
    driver = _drivers()[0]
    before = driver.sampler.priorities
    with pytest.raises(TypeError, match="per_sample_loss should hold real numbers"):
        _callback_step(driver, {"loss": torch.tensor(0.0), "per_sample_loss": torch.tensor([True, False])})
    np.testing.assert_array_equal(driver.sampler.priorities, before)
    indices = _callback_step(
        driver, {"loss": torch.tensor(0.0), "per_sample_loss": torch.tensor([-0.5, 2.0])}
    )
    if indices[0] != indices[1]:
        assert driver.sampler.priorities[indices.numpy()].tolist() == [0.5, 2.0]


# -- 3. and 4. LAP and PAL refuse what their docs refuse ------------------------------------------------


@pytest.mark.parametrize("value", [-1.0, 0.0, math.nan, math.inf])
def test_pal_tensor_normalizer_is_checked_as_a_float(value: float) -> None:
    d = torch.tensor([0.5, -3.0])
    with pytest.raises(ValueError) as as_float:
        pal_loss(d, normalizer=value)
    for tensor in (torch.tensor(value), torch.tensor([value], dtype=torch.float64)):
        with pytest.raises(ValueError) as as_tensor:
            pal_loss(d, normalizer=tensor)
        assert str(as_tensor.value) == str(as_float.value)
        assert f"normalizer={value!r}" in str(as_tensor.value)


def test_pal_tensor_normalizer_gives_the_float_result() -> None:
    d = torch.tensor([0.5, -3.0, 1.5])
    assert float(pal_loss(d, normalizer=torch.tensor(1.7))) == pytest.approx(
        float(pal_loss(d, normalizer=1.7))
    )


@pytest.mark.parametrize("function", [lap_priorities, lap_loss, pal_loss])
@pytest.mark.parametrize("bad", NON_FINITE)
def test_lap_and_pal_refuse_non_finite_td_error(function: Any, bad: float) -> None:
    td_error = torch.tensor([[0.5, -2.0], [bad, 1.0]], requires_grad=True)
    with pytest.raises(ValueError, match=rf"td_error should be finite, but got td_error\[2\]={bad!r}"):
        function(td_error)
    assert td_error.grad is None
    assert torch.isfinite(function(torch.tensor([0.5, -2.0, 1e3]))).all()


def test_lap_and_pal_read_nothing_back_while_a_cuda_graph_is_captured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Captured, nothing can be read back (the Double DQN recipe captures ``lap_priorities``):
    the two checks that read a value are skipped, and nothing else synchronises."""
    import prisample.methods.lap as lap
    from tests.host_sync import no_host_sync

    td_error = torch.tensor([0.5, -2.0, 3.0])
    want = (lap_priorities(td_error), lap_loss(td_error), pal_loss(td_error, normalizer=torch.tensor(1.5)))
    monkeypatch.setattr(lap, "capturing", lambda: True)
    with no_host_sync():
        got = (lap_priorities(td_error), lap_loss(td_error), pal_loss(td_error, normalizer=torch.tensor(1.5)))
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)


# -- 5. Diagnostics: indices are one-dimensional integers in range ----------------------------------


def _counter_state(counter: ReplayCounter) -> tuple[list[int], list[bool], list[int], int, int]:
    return (
        counter.counts.tolist(),
        counter.live.tolist(),
        counter.retired.tolist(),
        counter.draws,
        counter.writes,
    )


@pytest.mark.parametrize(
    ("indices", "error", "message"),
    [
        ([0.7, 1.2], TypeError, "indices should hold integers"),
        (np.array([1.0]), TypeError, "indices should hold integers"),
        ([True, False], TypeError, "indices should hold integers"),
        (torch.tensor([0.0, 1.0]), TypeError, "indices should hold integers"),
        ([[0, 1], [2, 3]], ValueError, "indices should be one-dimensional"),
        ([0, 4], ValueError, r"indices should be slots in \[0, 4\)"),
        ([-1], ValueError, r"indices should be slots in \[0, 4\)"),
    ],
)
def test_replay_counter_refuses_bad_indices(indices: Any, error: type[Exception], message: str) -> None:
    counter = ReplayCounter(4)
    counter.observe_write([0, 1, 2, 3])
    counter.observe_draw([1, 1, 2])
    before = _counter_state(counter)
    for call in (counter.observe_draw, counter.observe_write, counter.mark_live):
        with pytest.raises(error, match=message):
            call(indices)
        assert _counter_state(counter) == before


def test_diagnostics_refuse_float_and_bool_indices() -> None:
    diag = Diagnostics(4)
    diag.on_write([0, 1, 2, 3])
    assert diag.counter is not None
    before = _counter_state(diag.counter)
    with pytest.raises(TypeError, match="indices should hold integers"):
        diag.on_update([0.5], [1.0])
    with pytest.raises(TypeError, match="indices should hold integers"):
        diag.on_update([True], [1.0])
    with pytest.raises(TypeError, match="indices should hold integers"):
        diag.on_write([1.0])
    with pytest.raises(ValueError, match="indices should be one-dimensional"):
        diag.on_write([[1]])
    with pytest.raises(TypeError, match=r"draw\.indices should hold integers"):
        diag.on_draw(0, Draw(np.array([0.0, 1.0]), np.ones(2, np.float32), np.full(2, 0.25)))
    assert _counter_state(diag.counter) == before
    assert diag.updates == 0 and diag._last_error is None and not diag.weights.rows()
    diag.on_update(np.array([1], dtype=np.int32), [1.0])
    assert diag._last_error is not None and diag._last_error[1] == 1.0


# -- 6. Diagnostics: values finite and >= 0, constructor arguments named ---------------------------


@pytest.mark.parametrize("bad", [*NON_FINITE, -0.5])
def test_diagnostics_refuse_bad_errors_weights_and_priorities(bad: float) -> None:
    diag = Diagnostics(4)
    diag.on_write([0, 1, 2, 3])
    diag.on_update([0, 1], [0.5, 1.0])
    last = diag._last_error.copy() if diag._last_error is not None else None
    with pytest.raises(ValueError, match=rf"errors should be finite and >= 0, but got errors\[1\]={bad!r}"):
        diag.on_update([2, 3], [0.25, bad])
    np.testing.assert_array_equal(diag._last_error, last)
    assert diag.updates == 2

    stats = WeightStats()
    stats.record(0, [1.0, 0.5])
    rows = stats.rows()
    with pytest.raises(ValueError, match=rf"weights should be finite and >= 0, but got weights\[2\]={bad!r}"):
        stats.record(1, [1.0, 0.5, bad])
    assert stats.rows() == rows

    assert diag.counter is not None
    counts = _counter_state(diag.counter)
    draw = Draw(np.array([0, 1]), np.array([1.0, bad], np.float32), np.full(2, 0.25))
    with pytest.raises(
        ValueError, match=r"draw.weights should be finite and >= 0, but got draw.weights\[1\]="
    ):
        diag.on_draw(0, draw)
    assert _counter_state(diag.counter) == counts and not diag.weights.rows()

    # WeightMonitor took a negative weight into its mean (update([-0.5, -0.25]) gave -0.375)
    monitor = WeightMonitor(window=4, min_batches=1)
    monitor.update([1.0, 0.5])
    for batch in ([1.0, 0.5, bad], np.array([[1.0], [0.5], [bad]]), torch.tensor([1.0, 0.5, bad])):
        with pytest.raises(ValueError, match=r"weights should be finite and >= 0, but got weights\[2\]="):
            monitor.update(batch)
        assert monitor.batches == 1 and monitor.weight_mean == 0.75 and monitor.last_mean == 0.75

    td = TDSnapshots(num_quantiles=3)
    if math.isnan(bad):  # NaN marks an empty slot: left out, not refused
        td.record(0, [1.0, bad, 3.0])
        assert td.sizes == [2]
        return
    with pytest.raises(
        ValueError,
        match=rf"priorities should be NaN \(an empty slot\) or finite and >= 0, but got "
        rf"priorities\[2\]={bad!r}",
    ):
        td.record(0, [1.0, math.nan, bad])
    assert len(td) == 0 and not td.quantiles and not td.maxima


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: WeightStats(low=cast(Any, "x")), TypeError, "low should be a real number, but got low='x'"),
        (lambda: WeightStats(low=math.nan), ValueError, "low should be finite and >= 0.0, but got low=nan"),
        (lambda: WeightStats(low=-0.1), ValueError, "low should be finite"),
        (
            lambda: WeightStats(max_rows=1),
            ValueError,
            "max_rows should be an integer >= 2, but got max_rows=1",
        ),
        (
            lambda: WeightStats(max_rows=cast(Any, 4.0)),
            TypeError,
            "max_rows should be an integer, but got max_rows=4.0",
        ),
        (lambda: ReplayCounter(0), ValueError, "capacity should be an integer >= 1, but got capacity=0"),
        (
            lambda: ReplayCounter(cast(Any, 2.0)),
            TypeError,
            "capacity should be an integer, but got capacity=2.0",
        ),
        (lambda: TDSnapshots(num_quantiles=1), ValueError, "num_quantiles should be an integer >= 2"),
        (lambda: Diagnostics(4, bins=0), ValueError, "bins should be an integer >= 1, but got bins=0"),
        (
            lambda: Diagnostics(4, bins=cast(Any, "5")),
            TypeError,
            "bins should be an integer, but got bins='5'",
        ),
        (
            lambda: Diagnostics(4, weight_rows=1),
            ValueError,
            "weight_rows should be an integer >= 2, but got weight_rows=1",
        ),
    ],
)
def test_diagnostics_constructor_errors_name_the_argument(
    make: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        make()
    assert message in str(raised.value)
