"""One batch write against the naive reference: ``add_many`` of ``n`` rows leaves a memory exactly
as ``n`` single ``add`` calls in the same order do (the frame pool's rows and counts, the ring, the
n-step windows, the dict columns, the warnings), whatever the streams repeat, end or break."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from prisample.replay import ReplayMemory


def _stacks(
    rng: np.random.Generator, last: dict[int, np.ndarray], stream: int, stack: int
) -> tuple[Any, Any]:
    """A transition of ``stream``: mostly its last ``next_obs`` moved on by a new frame (shared
    frames), sometimes a fresh stack (an episode start or a break)."""

    def frame() -> np.ndarray:
        return rng.integers(0, 4, (2,)).astype(np.float32)  # a few values: frames repeat

    if stream in last and rng.random() < 0.8:
        obs = last[stream]
    else:
        obs = np.stack([frame() for _ in range(stack)]) if stack > 1 else frame()
    new = frame()
    next_obs = np.concatenate([obs[1:], new[None]]) if stack > 1 else new
    last[stream] = next_obs
    return obs, next_obs


def _rows(seed: int, stack: int, dict_obs: bool, count: int = 40) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    last: dict[int, np.ndarray] = {}
    rows = []
    for _ in range(count):
        stream = int(rng.integers(0, 3))
        obs, next_obs = _stacks(rng, last, stream, stack)
        end = bool(rng.random() < 0.15)
        if end:
            del last[stream]
        if dict_obs:
            obs, next_obs = {"x": obs, "y": obs[..., :1] * 2}, {"x": next_obs, "y": next_obs[..., :1] * 2}
        rows.append(
            {
                "obs": obs,
                "action": int(rng.integers(0, 3)),
                "reward": float(rng.integers(-4, 5)) / 2,  # exact in float32: single and batch agree
                "discount": float(rng.choice([0.0, 0.5, 1.0])),
                "next_obs": next_obs,
                "episode_end": end,
                "stream": stream,
            }
        )
    return rows


def _memory(stack: int, dict_obs: bool, n_step: int) -> ReplayMemory:
    if dict_obs:
        return ReplayMemory(7, {"x": (2,), "y": (1,)}, obs_dtype=np.float32, num_streams=3, n_step=n_step)
    capacity = 7 + 2 * stack * 4 + 3 if stack > 1 else None  # pool pressure: early evictions
    kw: dict[str, Any] = {"frame_stack": stack, "n_step": n_step, "frame_capacity": capacity}
    return ReplayMemory(7, (2,), obs_dtype=np.float32, num_streams=3, **kw)


def _batch(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def stacked(key: str) -> Any:
        if isinstance(rows[0][key], dict):
            return {k: np.stack([r[key][k] for r in rows]) for k in rows[0][key]}
        return np.stack([np.asarray(r[key]) for r in rows])

    return {
        "obs": stacked("obs"),
        "action": np.array([r["action"] for r in rows]),
        "reward": np.array([r["reward"] for r in rows], dtype=np.float32),
        "discount": np.array([r["discount"] for r in rows], dtype=np.float32),
        "next_obs": stacked("next_obs"),
        "episode_end": np.array([r["episode_end"] for r in rows]),
        "streams": np.array([r["stream"] for r in rows]),
    }


def _same_state(a: dict[str, Any], b: dict[str, Any], where: str = "") -> None:
    assert a.keys() == b.keys(), where
    for key in a:
        if isinstance(a[key], dict):
            _same_state(a[key], b[key], f"{where}{key}.")
        elif isinstance(a[key], np.ndarray):
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{where}{key}")
        else:
            assert a[key] == b[key], f"{where}{key}"


@pytest.mark.parametrize(
    ("stack", "dict_obs", "n_step"), [(1, False, 1), (3, False, 1), (3, False, 3), (1, True, 1), (1, True, 2)]
)
@pytest.mark.parametrize("seed", range(4))
def test_add_many_equals_single_adds_in_order(stack: int, dict_obs: bool, n_step: int, seed: int) -> None:
    rows = _rows(seed, stack, dict_obs)
    single, batched = _memory(stack, dict_obs, n_step), _memory(stack, dict_obs, n_step)
    rng = np.random.default_rng(seed + 100)
    at, single_warned, batch_warned = 0, [], []
    while at < len(rows):
        n = int(rng.integers(1, 12))  # beyond the capacity of 7 at times: a write evicting its own rows
        part = rows[at : at + n]
        at += n
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            slots = [single.add(**r) for r in part]
        single_warned += [str(w.message) for w in caught]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            done = batched.insert_many(**_batch(part))
        batch_warned += [str(w.message) for w in caught]
        np.testing.assert_array_equal(done.slots, slots)
        _same_state(batched.state_dict(), single.state_dict())
        batched.check_valid()
    assert batch_warned == single_warned
    if stack > 1 and not dict_obs:
        assert single_warned, "the rows should break a stream at least once (the warning is compared)"
