"""prisample.diagnostics.WeightMonitor: the windowed mean importance weight and its one warning;
the TorchRL sampler and the Lightning callback feed one (the SB3 adapter's: tests/test_sb3.py)."""

from __future__ import annotations

import math
import pickle
import warnings
from typing import Any

import numpy as np
import pytest
import torch

from prisample.diagnostics import WeightMonitor


def feed(monitor: WeightMonitor, batches: Any) -> list[warnings.WarningMessage]:
    """Feed every batch; the RuntimeWarnings issued (every one recorded, none filtered out)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for batch in batches:
            monitor.update(batch)
    return [w for w in caught if issubclass(w.category, RuntimeWarning)]


def test_warns_exactly_once_when_the_window_mean_falls_below_the_threshold() -> None:
    monitor = WeightMonitor(threshold=0.01, window=10, min_batches=20)
    low = [np.full(32, 0.001)] * 19
    assert feed(monitor, low) == []  # not before min_batches
    found = feed(monitor, [np.full(32, 0.001)])
    assert len(found) == 1 and monitor.warned
    text = str(found[0].message)
    for part in ("eps", "ε", '"memory"', "eps=0.01", 'weight_norm="batch"', "0.001"):
        assert part in text, part
    assert found[0].filename == __file__  # points at the code that fed the weights
    assert feed(monitor, [np.full(32, 0.001)] * 200) == []  # once per monitor
    assert len(feed(WeightMonitor(min_batches=1), [[0.001]])) == 1  # another monitor warns again


def test_never_warns_while_the_window_mean_stays_above_the_threshold() -> None:
    rng = np.random.default_rng(0)
    monitor = WeightMonitor(threshold=0.01, window=100, min_batches=100)
    assert feed(monitor, [rng.uniform(0.02, 1.0, size=32) for _ in range(500)]) == []
    # Single batches below the threshold do not count: only the window's mean does.
    dips = [np.full(32, 0.001) if i % 2 else np.full(32, 0.5) for i in range(500)]
    assert feed(monitor, dips) == [] and not monitor.warned
    assert monitor.weight_mean == pytest.approx((0.001 + 0.5) / 2)


def test_weight_mean_is_the_mean_over_the_last_window_batches() -> None:
    monitor = WeightMonitor(window=3, min_batches=1)
    assert math.isnan(monitor.weight_mean) and math.isnan(monitor.last_mean)
    assert monitor.update([1.0, 0.5]) == 0.75
    assert monitor.update(np.array([[0.25], [0.25]], dtype=np.float32)) == 0.25  # (k, 1), float32
    assert monitor.update(torch.tensor([0.5, 0.1, 0.3])) == pytest.approx(0.3)
    assert monitor.weight_mean == pytest.approx((0.75 + 0.25 + 0.3) / 3)
    assert monitor.update(torch.tensor([[0.9], [0.7]], dtype=torch.float64)) == pytest.approx(0.8)
    assert monitor.weight_mean == pytest.approx((0.25 + 0.3 + 0.8) / 3)  # the first batch left
    assert monitor.last_mean == pytest.approx(0.8) and monitor.batches == 4
    assert math.isnan(monitor.update([])) and monitor.batches == 4  # an empty batch is skipped
    with pytest.raises(ValueError, match="weights should be finite"):
        monitor.update([0.5, float("nan")])
    assert monitor.batches == 4


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"threshold": 0.0}, ValueError, "threshold"),
        ({"threshold": -0.1}, ValueError, "threshold"),
        ({"threshold": float("nan")}, ValueError, "threshold"),
        ({"threshold": float("inf")}, ValueError, "threshold"),
        ({"threshold": "0.01"}, TypeError, "threshold"),
        ({"threshold": True}, TypeError, "threshold"),
        ({"window": 0}, ValueError, "window"),
        ({"window": 2.5}, TypeError, "window"),
        ({"min_batches": 0}, ValueError, "min_batches"),
        ({"min_batches": None}, TypeError, "min_batches"),
    ],
)
def test_bad_arguments_are_refused_naming_them(kwargs: dict[str, Any], error: type, name: str) -> None:
    value = next(iter(kwargs.values()))
    with pytest.raises(error, match=f"{name}={value!r}".replace("(", r"\(").replace(")", r"\)")):
        WeightMonitor(**kwargs)


def test_torchrl_sampler_feeds_its_monitor_and_warns_once_on_collapse() -> None:
    pytest.importorskip("torchrl")
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    from prisample.torchrl import PrioritizedSampler

    n = 256
    sampler = PrioritizedSampler(n, alpha=0.6, beta=1.0, seed=0)  # TorchRL's eps 1e-8, memory maximum
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(n), sampler=sampler, batch_size=32)
    rb.extend(TensorDict({"obs": torch.arange(float(n))}, batch_size=[n]))
    errors = torch.from_numpy(np.random.default_rng(0).uniform(0.5, 2.0, size=n))
    rb.update_priority(torch.arange(n), errors)
    means = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(120):
            means.append(float(rb.sample()["priority_weight"].mean()))
    assert [w for w in caught if issubclass(w.category, RuntimeWarning)] == []
    assert sampler.weight_monitor.batches == 120
    assert sampler.weight_mean == pytest.approx(np.mean(means[-100:]))
    assert sampler.weight_mean > 0.1

    rb.update_priority(torch.tensor([5]), torch.tensor([0.0]))  # |δ| = 0 with a tiny eps
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(200):
            rb.sample()
    found = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(found) == 1 and "eps" in str(found[0].message)
    assert sampler.weight_mean < sampler.weight_monitor.threshold

    restored = pickle.loads(pickle.dumps(sampler))
    assert restored.weight_monitor.batches == 320
    state = sampler.__getstate__()
    del state["weight_monitor"]  # a sampler pickled before the monitor existed
    old = PrioritizedSampler.__new__(PrioritizedSampler)
    old.__setstate__(state)
    assert old.weight_monitor.batches == 0 and math.isnan(old.weight_mean)


def test_lightning_callback_feeds_its_monitor() -> None:
    pytest.importorskip("lightning")
    import lightning.pytorch as pl

    from tests.test_lightning_callback import TinyData, TinyModel, fit

    pl.seed_everything(0, verbose=False)
    model, data = TinyModel(), TinyData(beta=0.7)
    trainer = fit(model, data, max_steps=13)
    (callback,) = [c for c in trainer.callbacks if hasattr(c, "weight_monitor")]  # type: ignore[attr-defined]
    assert callback.weight_monitor.batches == 13
    expected = np.mean([float(w.double().mean()) for w in model.weights])
    assert callback.weight_mean == pytest.approx(expected)
    assert callback.weight_mean < 1.0  # β = 0.7 reweights
