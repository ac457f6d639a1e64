"""The replay ratio on the Ray memory (``RemoteReplay(samples_per_insert=...)``): a fast writer
waits for a slow learner and a fast learner for a slow writer, the counts staying inside the
error buffer; timeouts, shutdown and a closed prefetcher release a waiting call; the counters
travel with the checkpoint; bad arguments are named before any actor starts.

On the session's local Ray with 2 CPUs (``ray_local``): every actor is a process, so these are
few.  Assertions are on counts and order; waits are bounded generously (two shared cores)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

pytest.importorskip("ray")

import prisample.ray
from prisample.rate_limit import RateLimiterClosedError
from prisample.ray import RemoteReplay, ReplayWriter
from tests import fake_ray

LONG_S = 120.0  # a call that should proceed does so long before this, even on a loaded machine
# (the limiters wait twice as long: a planted hang shows as a test failure, not a late TimeoutError)


def bounded(call: Callable[[], Any]) -> dict[str, Any]:
    """``call()`` in a thread that must end within ``LONG_S`` (a planted hang fails, not hangs);
    its result or error."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = call()
        except BaseException as error:
            out["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(LONG_S)
    assert not thread.is_alive(), f"{call} still running after {LONG_S} s"
    return out


def transitions(start: int, n: int) -> dict[str, Any]:
    obs = np.repeat(np.arange(start, start + n, dtype=np.float64)[:, None], 2, axis=1)
    return {
        "obs": obs,
        "action": np.zeros(n, np.int64),
        "reward": np.ones(n, np.float32),
        "discount": np.full(n, 0.99, np.float32),
        "next_obs": obs + 1,
    }


def memory(**options: Any) -> RemoteReplay:
    return RemoteReplay(1_000, (2,), obs_dtype=np.float64, alpha=1.0, eps=0.0, seed=0, **options)


def inside(replay_stats: dict[str, Any], spi: float, low: float, high: float) -> bool:
    return bool(low <= replay_stats["inserts"] * spi - replay_stats["samples"] <= high)


def test_a_fast_writer_waits_for_a_slow_learner(ray_local: Any) -> None:
    """A writer process sends 30 batches of 10 as fast as the limiter lets it; the learner draws
    16 at a time with a pause between.  The writer waits (counted in stats()), every snapshot is
    inside the buffer, and everything sent arrives."""
    ray = ray_local
    spi, k, min_size, buffer = 2.0, 16, 20, 40.0
    replay = memory(
        samples_per_insert=spi, min_size_to_sample=min_size, error_buffer=buffer, rate_timeout=2 * LONG_S
    )
    low, high = spi * min_size - buffer, spi * min_size + buffer

    def write(replay: RemoteReplay, batches: int) -> int:
        out = ReplayWriter(replay, max_pending=2)
        for b in range(batches):
            out.add(transitions(10 * b, 10))
        return out.flush()

    try:
        sent = ray.remote(num_cpus=1)(write).remote(replay, 30)
        snapshots = []
        while not ray.wait([sent], timeout=0)[0]:
            replay.sample(k)
            snapshots.append(replay.stats())
            time.sleep(0.05)
        assert ray.get(sent) == 300
        stats = replay.stats()
    finally:
        replay.shutdown()
    assert stats["num_added"] == stats["inserts"] == 300
    assert stats["insert_waits"] > 0 and stats["insert_wait_s"] > 0.0
    assert stats["insert_timeouts"] == stats["sample_timeouts"] == 0
    assert stats["samples"] == k * len(snapshots) >= 300 * spi - high  # what let the last batch in
    assert all(inside(s, spi, low, high) for s in snapshots), [s["diff"] for s in snapshots]


def test_a_fast_learner_waits_for_a_slow_writer_and_its_prefetcher_closes(ray_local: Any) -> None:
    """Two shards, a writer thread that pauses between batches of 5, a prefetching learner: the
    learner waits (counted), each batch it gets leaves the counts inside the buffer; once the
    writer stopped, closing the prefetcher cancels its waiting draw (the thread ends)."""
    spi, k, min_size, buffer = 4.0, 8, 10, 40.0
    replay = memory(
        shards=2,
        samples_per_insert=spi,
        min_size_to_sample=min_size,
        error_buffer=buffer,
        rate_timeout=2 * LONG_S,
    )
    low, high = spi * min_size - buffer, spi * min_size + buffer
    out = ReplayWriter(replay, max_pending=1)

    def write() -> None:
        for b in range(20):
            out.add(transitions(5 * b, 5))
            time.sleep(0.05)
        out.flush()

    writer = threading.Thread(target=write, daemon=True)
    try:
        writer.start()
        snapshots = []
        prefetcher = replay.prefetch(k, depth=1)
        for batches, batch in enumerate(prefetcher, start=1):
            assert batch.obs.shape == (k, 2)
            snapshots.append(replay.stats())
            if batches == 100 * spi // k:  # every draw the 100 inserts allow (within the buffer)
                break
        writer.join(LONG_S)
        assert not writer.is_alive()
        time.sleep(0.2)  # the thread is now waiting for inserts that will not come
        assert bounded(prefetcher.close) == {"result": None}
        assert not prefetcher._thread.is_alive()
        stats = replay.stats()
    finally:
        replay.shutdown()
    assert stats["num_added"] == stats["inserts"] == 100
    assert stats["sample_waits"] > 0 and stats["sample_wait_s"] > 0.0
    assert stats["insert_timeouts"] == stats["sample_timeouts"] == 0
    assert all(inside(s, spi, low, high) for s in snapshots), [s["diff"] for s in snapshots]


def test_a_prefetchers_get_with_a_timeout_returns_none_while_the_limiter_holds_the_learner(
    ray_local: Any,
) -> None:
    """``get(timeout)`` (what the Ape-X learner calls, so that it can look at its actors while the
    limiter holds it back): ``None`` before ``min_size_to_sample`` items arrived, the batches once
    they did, then ``None`` with ``done`` after ``total``; a bad timeout is named."""
    replay = memory(samples_per_insert=2.0, min_size_to_sample=10, error_buffer=20.0, rate_timeout=2 * LONG_S)
    prefetcher = replay.prefetch(4, depth=1, total=3)
    try:
        assert bounded(lambda: prefetcher.get(timeout=0.2)) == {"result": None}
        assert not prefetcher.done
        with pytest.raises(ValueError, match="timeout"):
            prefetcher.get(timeout=-1.0)
        ray_local.get(replay.add(transitions(0, 10)))
        got = [bounded(lambda: prefetcher.get(timeout=LONG_S))["result"] for _ in range(3)]
        assert [batch.obs.shape for batch in got] == [(4, 2)] * 3
        assert bounded(lambda: prefetcher.get(timeout=LONG_S)) == {"result": None}
        assert prefetcher.done
        assert bounded(lambda: prefetcher.get(timeout=None)) == {"result": None}
    finally:
        prefetcher.close()
        replay.shutdown()


def test_timeouts_shutdown_and_checkpoints(ray_local: Any) -> None:
    """Timeouts raise TimeoutError on either side and send nothing; the counters round-trip
    through state_dict; shutdown wakes a waiting writer with RateLimiterClosedError."""
    replay = memory(samples_per_insert=1.0, min_size_to_sample=10, error_buffer=12.0, rate_timeout=5.0)
    try:
        error = bounded(lambda: replay.sample(4)).get("error")
        assert isinstance(error, TimeoutError)
        assert "sample of n=4 waited 5.0 s for min_size_to_sample=10" in str(error)
        ray_local.get(replay.add(transitions(0, 10)))
        ray_local.get(replay.add(transitions(10, 10)))  # diff 20 <= max_diff 22
        state = replay.state_dict()
        error = bounded(lambda: replay.add(transitions(20, 10))).get("error")
        assert isinstance(error, TimeoutError) and "insert of n=10 waited 5.0 s" in str(error)
        stats = replay.stats()
        assert (stats["num_added"], stats["inserts"], stats["samples"]) == (20, 20, 0)
        assert (stats["insert_timeouts"], stats["sample_timeouts"]) == (1, 1)
        assert replay.state_dict()["draws"] == 0  # the timed-out draw drew nothing
        assert state["rate_limiter"]["inserts"] == 20 and state["rate_limiter"]["insert_timeouts"] == 0

        replay.sample(8)  # diff 12: an insert of 10 fits again
        ray_local.get(replay.add(transitions(20, 10)))
        replay.load_state_dict(state)
        assert replay.state_dict()["rate_limiter"] == state["rate_limiter"]
        bad = {**state, "rate_limiter": {**state["rate_limiter"], "samples": -1}}
        with pytest.raises(ValueError, match="state rate_limiter: state samples should be an integer >= 0"):
            replay.load_state_dict(bad)
        assert replay.state_dict()["rate_limiter"] == state["rate_limiter"]

        incomplete = {key: value for key, value in transitions(40, 3).items() if key != "discount"}
        with pytest.raises(ValueError, match=r"lack \['discount'\]"):
            replay.add(incomplete)
        with pytest.raises(TypeError, match="transitions should be a mapping"):
            replay.add([1, 2, 3])  # type: ignore[arg-type]
        assert replay.stats()["inserts"] == state["rate_limiter"]["inserts"]  # refused, not counted

        waiting: dict[str, Any] = {}

        def add() -> None:
            try:
                replay.add(transitions(30, 10))
            except BaseException as error:
                waiting["error"] = error

        thread = threading.Thread(target=add, daemon=True)
        thread.start()
        time.sleep(0.3)
        assert thread.is_alive()
    finally:
        replay.shutdown()
    thread.join(LONG_S)
    assert not thread.is_alive()
    assert isinstance(waiting.get("error"), RateLimiterClosedError), waiting


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"samples_per_insert": 0.0, "error_buffer": 4.0}, "samples_per_insert should be finite and > 0"),
        ({"samples_per_insert": 2.0}, "samples_per_insert needs an error_buffer"),
        ({"samples_per_insert": 2.0, "error_buffer": 1.0}, "max_diff - min_diff >= samples_per_insert"),
        ({"samples_per_insert": 2.0, "error_buffer": 4.0, "min_size_to_sample": 0}, "min_size_to_sample"),
        ({"samples_per_insert": 2.0, "error_buffer": 4.0, "rate_timeout": -1.0}, "rate_timeout=-1.0"),
        ({"min_size_to_sample": 5}, "min_size_to_sample limits the replay ratio"),
        ({"error_buffer": 4.0}, "error_buffer limits the replay ratio"),
        ({"rate_timeout": 1.0}, "rate_timeout limits the replay ratio"),
    ],
)
def test_bad_rate_arguments_are_named_before_any_actor_starts(
    monkeypatch: pytest.MonkeyPatch, options: dict[str, Any], message: str
) -> None:
    started: list[Any] = []
    monkeypatch.setattr(prisample.ray, "ray", fake_ray)
    monkeypatch.setattr(fake_ray, "remote", lambda cls: started.append(cls))
    with pytest.raises(ValueError, match=message):
        memory(**options)
    assert started == []
