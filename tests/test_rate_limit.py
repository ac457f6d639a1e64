"""The replay-ratio limiter (prisample.rate_limit) in threads: a fast side waits for a slow one in
both directions and the ratio stays inside the error buffer at every observation; the minimum
size holds sampling back; timeouts and close() release a waiting call and count nothing else;
the counters round-trip; bad arguments and states are refused by name.

Timing: the threads sleep to make one side slow, but every assertion is on counts and order,
and every wait has a generous bound (two shared cores, other jobs on them)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from prisample.rate_limit import RATE_LIMITER_STATE_VERSION, RateLimiter, RateLimiterClosedError

JOIN_S = 60.0  # a thread that should end does so long before this, even on a loaded machine


def start(target: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """``target`` in a daemon thread; its result or error lands in the returned dict."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = target()
        except BaseException as error:
            out["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + JOIN_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def within_buffer(limiter: RateLimiter, stats: dict[str, Any]) -> bool:
    diff = stats["inserts"] * limiter.samples_per_insert - stats["samples"]
    return bool(limiter.min_diff <= diff <= limiter.max_diff)


@pytest.mark.parametrize("fast", ["insert", "sample"])
def test_the_fast_side_waits_and_the_ratio_stays_inside_the_buffer(fast: str) -> None:
    """A side calling as fast as it can against one that sleeps between calls: the fast side
    waits (counted), and every snapshot of the counts taken after sampling started (by each side
    after each call, and by a watcher in between) is inside the buffer.  The totals (35 inserts
    of 3, 40 samples of 8, 4 samples per insert) end inside it, so both sides finish."""
    spi, n, k = 4.0, 3, 8
    limiter = RateLimiter(spi, min_size_to_sample=20, error_buffer=n * spi + k, timeout=JOIN_S)
    calls = {"insert": 35, "sample": 40}
    snapshots: list[dict[str, Any]] = []
    lock = threading.Lock()

    def observe() -> None:
        stats = limiter.stats()
        with lock:
            snapshots.append(stats)

    def side(name: str) -> Callable[[], None]:
        def run() -> None:
            for _ in range(calls[name]):
                if name == "insert":
                    limiter.insert(n)
                else:
                    limiter.sample(k)
                observe()
                if name != fast:
                    time.sleep(0.01)

        return run

    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            observe()
            time.sleep(0.001)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    threads = [start(side("sample")), start(side("insert"))]
    for thread, _ in threads:
        thread.join(JOIN_S)
    stop.set()
    watcher.join(JOIN_S)
    assert not any(thread.is_alive() for thread, _ in threads)
    assert [out for _, out in threads] == [{"result": None}] * 2
    stats = limiter.stats()
    assert (stats["inserts"], stats["samples"]) == (35 * n, 40 * k)
    started = [s for s in snapshots if s["inserts"] >= limiter.min_size_to_sample]
    assert len(started) > 40  # the sides' own and the watcher's
    assert all(within_buffer(limiter, s) for s in started), [s["diff"] for s in started]
    assert stats[f"{fast}_waits"] > 0 and stats[f"{fast}_wait_s"] > 0.0
    assert stats["insert_timeouts"] == stats["sample_timeouts"] == 0


def test_sampling_waits_for_the_minimum_size() -> None:
    limiter = RateLimiter(2.0, min_size_to_sample=10, error_buffer=5.0, timeout=JOIN_S)
    limiter.insert(9)
    order: list[str] = []

    def sample() -> None:
        limiter.sample(1)
        order.append("sampled")

    thread, out = start(sample)
    wait_until(lambda: not limiter.can_sample(1) and thread.is_alive(), "the sampler to wait")
    time.sleep(0.05)
    assert thread.is_alive() and limiter.stats()["samples"] == 0
    order.append("inserted")
    limiter.insert(1)
    thread.join(JOIN_S)
    assert not thread.is_alive() and "error" not in out
    assert order == ["inserted", "sampled"]
    stats = limiter.stats()
    assert (stats["inserts"], stats["samples"], stats["sample_waits"]) == (10, 1, 1)


def test_inserts_before_the_minimum_size_are_free_and_the_crossing_insert_is_whole() -> None:
    limiter = RateLimiter(1.0, min_size_to_sample=5, error_buffer=2.0, timeout=0.0)
    limiter.insert(4)
    limiter.insert(10)  # reaches the minimum: admitted whole although it ends above max_diff
    assert limiter.stats()["inserts"] == 14
    assert not limiter.can_insert(1) and limiter.can_sample(1)


@pytest.mark.parametrize("side", ["insert", "sample"])
def test_a_timeout_raises_names_its_side_and_changes_no_count(side: str) -> None:
    limiter = RateLimiter(1.0, min_size_to_sample=4, error_buffer=2.0, timeout=0.2)
    call: Callable[..., float]
    if side == "insert":
        limiter.insert(4)
        limiter.insert(2)  # diff 6 = max_diff
        call = limiter.insert
    else:
        limiter.insert(3)  # below the minimum size
        call = limiter.sample
    before = limiter.stats()
    thread, out = start(lambda: call(1))
    thread.join(JOIN_S)
    assert not thread.is_alive()
    error = out.get("error")
    assert isinstance(error, TimeoutError), out
    assert f"{side} of n=1 waited 0.2 s" in str(error) and f"inserts={before['inserts']}" in str(error)
    after = limiter.stats()
    assert after[f"{side}_timeouts"] == 1 and after[f"{side}_waits"] == 1
    assert after[f"{side}_wait_s"] >= 0.2
    changed = {key for key in after if after[key] != before[key]}
    assert changed == {f"{side}_timeouts", f"{side}_waits", f"{side}_wait_s"}
    with pytest.raises(TimeoutError):
        call(1, timeout=0.0)  # a call's own timeout overrides the constructor's


def test_close_wakes_every_waiter_and_refuses_later_calls() -> None:
    limiter = RateLimiter(1.0, min_size_to_sample=100, error_buffer=2.0)  # no timeout
    waiters = [start(lambda: limiter.sample(1)) for _ in range(3)]
    wait_until(lambda: all(t.is_alive() for t, _ in waiters), "the samplers")
    time.sleep(0.05)
    limiter.close()
    for thread, out in waiters:
        thread.join(JOIN_S)
        assert not thread.is_alive()
        assert isinstance(out.get("error"), RateLimiterClosedError)
    with pytest.raises(RateLimiterClosedError, match="insert of n=2"):
        limiter.insert(2)
    stats = limiter.stats()
    assert stats["samples"] == 0 and stats["inserts"] == 0 and stats["sample_timeouts"] == 0
    assert not limiter.can_insert() and limiter.closed


def test_the_counters_round_trip_and_keep_the_ratio() -> None:
    limiter = RateLimiter(2.0, min_size_to_sample=3, error_buffer=(0.0, 8.0), timeout=0.0)
    limiter.insert(5)
    limiter.sample(4)
    with pytest.raises(TimeoutError):
        limiter.insert(5)
    state = limiter.state_dict()
    assert state["version"] == RATE_LIMITER_STATE_VERSION
    resumed = RateLimiter(2.0, min_size_to_sample=3, error_buffer=(0.0, 8.0), timeout=0.0)
    resumed.load_state_dict(state)
    assert resumed.stats() == limiter.stats()
    assert resumed.state_dict() == state
    for n in range(1, 8):
        assert resumed.can_insert(n) == limiter.can_insert(n)
        assert resumed.can_sample(n) == limiter.can_sample(n)
    assert resumed.can_sample(6) and not resumed.can_sample(7)  # diff 6 after 5 · 2 − 4


def bad_state(key: str, value: Any) -> dict[str, Any]:
    state = RateLimiter(1.0, error_buffer=2.0).state_dict()
    if value is KeyError:
        del state[key]
    else:
        state[key] = value
    return state


@pytest.mark.parametrize(
    ("state", "error", "message"),
    [
        ([], TypeError, "state should be a dict"),
        (bad_state("version", 2), ValueError, "version should be 1"),
        (bad_state("samples", KeyError), ValueError, "lacks \\['samples'\\]"),
        (bad_state("extra", 1), ValueError, "has \\['extra'\\]"),
        (bad_state("inserts", -1), ValueError, "inserts should be an integer >= 0, but got inserts=-1"),
        (bad_state("samples", 1.5), ValueError, "samples should be an integer"),
        (bad_state("insert_waits", True), ValueError, "insert_waits should be an integer"),
        (bad_state("sample_wait_s", float("nan")), ValueError, "sample_wait_s"),
    ],
)
def test_a_bad_state_is_refused_by_name_and_changes_nothing(state: Any, error: type, message: str) -> None:
    limiter = RateLimiter(1.0, error_buffer=2.0)
    limiter.insert(3)
    before = limiter.state_dict()
    with pytest.raises(error, match=message):
        limiter.load_state_dict(state)
    assert limiter.state_dict() == before


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ({"samples_per_insert": 0.0}, ValueError, "samples_per_insert should be finite and > 0"),
        ({"samples_per_insert": float("inf")}, ValueError, "samples_per_insert=inf"),
        ({"samples_per_insert": "8"}, TypeError, "samples_per_insert should be a real number"),
        ({"min_size_to_sample": 0}, ValueError, "min_size_to_sample should be an integer >= 1"),
        ({"min_size_to_sample": 2.5}, TypeError, "min_size_to_sample should be an integer"),
        ({"error_buffer": -1.0}, ValueError, "error_buffer should be finite and >= 0"),
        ({"error_buffer": None}, TypeError, "error_buffer should be a number or a pair"),
        ({"error_buffer": (1.0, 2.0, 3.0)}, ValueError, "error_buffer should be a number or a pair"),
        ({"error_buffer": (0.0, "9")}, TypeError, "error_buffer\\[1\\] should be a real number"),
        ({"error_buffer": 2.0}, ValueError, "max_diff - min_diff >= samples_per_insert \\+ 1 = 5.0"),
        ({"error_buffer": (3.0, 7.0)}, ValueError, "width 4.0"),
        ({"timeout": -1}, ValueError, "timeout should be finite and >= 0"),
        ({"timeout": "1"}, TypeError, "timeout should be a real number"),
    ],
)
def test_bad_arguments_are_named(args: dict[str, Any], error: type, message: str) -> None:
    options: dict[str, Any] = {"samples_per_insert": 4.0, "error_buffer": 10.0, **args}
    with pytest.raises(error, match=message):
        RateLimiter(options.pop("samples_per_insert"), **options)


def test_a_missing_error_buffer_is_explained() -> None:
    """``RateLimiter(8.0)`` failed with Python's "missing 1 required keyword-only argument:
    'error_buffer'", which says neither what the buffer is nor how to size it."""
    with pytest.raises(TypeError, match=r"RateLimiter needs error_buffer .* e\.g\. error_buffer=k \+ n \*"):
        RateLimiter(8.0)


def test_bad_call_arguments_are_named_and_count_nothing() -> None:
    limiter = RateLimiter(1.0, error_buffer=2.0)
    for call, name in ((limiter.insert, "n"), (limiter.sample, "k")):
        with pytest.raises(ValueError, match=f"{name} should be an integer >= 1, but got {name}=0"):
            call(0)
        with pytest.raises(TypeError, match=f"{name} should be an integer"):
            call(1.0)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="timeout should be finite and >= 0"):
            call(1, timeout=-0.5)
    assert limiter.stats() == RateLimiter(1.0, error_buffer=2.0).stats()
