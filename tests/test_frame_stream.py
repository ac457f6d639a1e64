"""Frame stacks sent once per frame (prisample.frame_stream) and stored by a remote shard
(ReplayShard.add_frames): round trips bit for bit over episodes with resets, n-step next stacks
and interleaved streams; each frame sent once; the shard's memory the same as a local one fed
the full stacks; refusals that change nothing."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prisample import PrioritizedReplay
from prisample.frame_stream import FrameStreamDecoder, FrameStreamEncoder

STACK, SHAPE = 4, (3, 5)


def episode_stacks(rng: np.random.Generator, length: int, padding: str) -> np.ndarray:
    """The ``length + 1`` observation stacks of one episode: fresh random frames, the reset
    stack padded with zeros (ale-py's vector env) or with its first frame (Gymnasium)."""
    frames = rng.integers(1, 256, size=(length + 1, *SHAPE), dtype=np.uint8)
    pad = (
        np.zeros((STACK - 1, *SHAPE), np.uint8) if padding == "zeros" else np.repeat(frames[:1], STACK - 1, 0)
    )
    timeline = np.concatenate([pad, frames])
    return np.stack([timeline[t : t + STACK] for t in range(length + 1)])


def stream_transitions(
    rng: np.random.Generator, episodes: list[int], n_step: int, padding: str
) -> list[tuple[np.ndarray, np.ndarray, bool]]:
    """One stream's n-step transitions ``(s_t, s_{t+m}, episode_end)`` in order, ``m = n`` or
    fewer at the episode's end (as an Ape-X actor emits them)."""
    out = []
    for length in episodes:
        stacks = episode_stacks(rng, length, padding)
        for t in range(length):
            out.append((stacks[t], stacks[min(t + n_step, length)], t == length - 1))
    return out


def interleaved(
    seed: int, num_streams: int, n_step: int, padding: str, max_len: int = 9
) -> tuple[list[list[int]], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every stream's transitions interleaved at random (each stream in its own order), cut into
    messages at random: ``(messages as index lists, obs, next_obs, streams, episode_end)``."""
    rng = np.random.default_rng(seed)
    per_stream = [
        stream_transitions(rng, list(rng.integers(1, max_len, size=3)), n_step, padding)
        for _ in range(num_streams)
    ]
    order = np.concatenate([np.full(len(t), s) for s, t in enumerate(per_stream)])
    rng.shuffle(order)
    taken = [0] * num_streams
    rows = []
    for s in order:
        rows.append((*per_stream[s][taken[s]], s))
        taken[s] += 1
    obs, next_obs, ends, streams = (np.array(column) for column in zip(*rows, strict=True))
    cuts = np.sort(rng.choice(np.arange(1, len(rows)), size=min(6, len(rows) - 1), replace=False))
    messages = [list(part) for part in np.split(np.arange(len(rows)), cuts)]
    return messages, obs, next_obs, streams, ends


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    num_streams=st.integers(1, 4),
    n_step=st.sampled_from([1, 3]),
    padding=st.sampled_from(["zeros", "repeat"]),
    window=st.sampled_from([1, 5, 32]),
)
def test_round_trip_is_bit_identical(
    seed: int, num_streams: int, n_step: int, padding: str, window: int
) -> None:
    messages, obs, next_obs, streams, _ = interleaved(seed, num_streams, n_step, padding)
    encoder = FrameStreamEncoder(num_streams, STACK, window=window)
    decoder = FrameStreamDecoder(num_streams, STACK, SHAPE, np.uint8, window=window)
    for rows in messages:
        message = encoder.encode(obs[rows], next_obs[rows], streams[rows])
        got_obs, got_next = decoder.decode(message)
        assert got_obs.dtype == np.uint8 and got_obs.shape == obs[rows].shape
        assert np.array_equal(got_obs, obs[rows]) and np.array_equal(got_next, next_obs[rows])


@pytest.mark.parametrize("n_step", [1, 3, 5])
def test_each_frame_is_sent_once_per_stream(n_step: int) -> None:
    """Repeat padding, distinct frames: the new frames are exactly the distinct frames of every
    stream's episodes (a reset's one frame, then one per step), whatever the message cuts."""
    messages, obs, next_obs, streams, _ = interleaved(7, 3, n_step, "repeat")
    encoder = FrameStreamEncoder(3, STACK, window=n_step + STACK - 1)  # s_t's oldest to s_{t+n}'s newest
    for rows in messages:
        encoder.encode(obs[rows], next_obs[rows], streams[rows])
    distinct = sum(
        len(
            {
                f.tobytes()
                for f in np.concatenate([obs[streams == s], next_obs[streams == s]]).reshape(-1, *SHAPE)
            }
        )
        for s in range(3)
    )
    assert encoder.frames_sent == distinct


def test_a_steady_stream_sends_one_frame_per_transition() -> None:
    rng = np.random.default_rng(0)
    rows = stream_transitions(rng, [200], 3, "zeros")
    obs, next_obs = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
    encoder = FrameStreamEncoder(1, STACK)
    sizes = [
        encoder.encode(obs[i : i + 50], next_obs[i : i + 50], np.zeros(50, np.int64))["frames"].shape[0]
        for i in range(0, 200, 50)
    ]
    # s_0 = [0, 0, 0, f_0], s_3 = [f_0 .. f_3]: the zero frame and f_0 .. f_3 with the first
    # transition, then f_{t+3} with transition t; the last three share s_200 (f_200 sent once)
    assert sizes == [1 + 4 + 49, 50, 50, 47 + 1]


def test_a_lost_or_reordered_message_is_refused_and_changes_nothing() -> None:
    messages, obs, next_obs, streams, _ = interleaved(3, 2, 3, "zeros")
    encoder = FrameStreamEncoder(2, STACK)
    sent = [encoder.encode(obs[rows], next_obs[rows], streams[rows]) for rows in messages]
    decoder = FrameStreamDecoder(2, STACK, SHAPE, np.uint8)
    decoder.decode(sent[0])
    lost = next(m for m in sent[2:] if (m["stream_heads"][:, 1] > 0).any())
    ring = decoder._ring.copy()
    with pytest.raises(ValueError, match="lost or arrived out of order"):
        decoder.decode(lost)
    assert np.array_equal(decoder._ring, ring)
    for message in sent[1:]:  # the stream goes on as if nothing had come
        decoder.decode(message)


def test_a_new_encoder_restarts_its_stream() -> None:
    messages, obs, next_obs, streams, _ = interleaved(4, 1, 3, "zeros")
    decoder = FrameStreamDecoder(1, STACK, SHAPE, np.uint8)
    rows = messages[0]
    decoder.decode(FrameStreamEncoder(1, STACK).encode(obs[rows], next_obs[rows], streams[rows]))
    again = FrameStreamEncoder(1, STACK).encode(obs[rows], next_obs[rows], streams[rows])
    got_obs, _ = decoder.decode(again)
    assert np.array_equal(got_obs, obs[rows])


def test_an_empty_message_round_trips_as_empty_stacks() -> None:
    """An encoder given no transitions (an actor flushing an empty batch) builds a message that
    the decoder read, then failed to advance on (``zip() argument 2 is longer than argument 1``:
    the heads' first-frame rows were one too many): it decodes to two empty stacks and leaves
    every stream where it was."""
    messages, obs, next_obs, streams, _ = interleaved(6, 2, 3, "zeros")
    encoder = FrameStreamEncoder(2, STACK)
    decoder = FrameStreamDecoder(2, STACK, SHAPE, np.uint8)
    none = np.zeros((0, STACK, *SHAPE), np.uint8)
    empty = encoder.encode(none, none, np.zeros(0, np.int64))
    got_obs, got_next = decoder.decode(empty)
    assert got_obs.shape == got_next.shape == (0, STACK, *SHAPE)
    assert got_obs.dtype == np.uint8
    for rows in messages:
        got_obs, got_next = decoder.decode(encoder.encode(obs[rows], next_obs[rows], streams[rows]))
        assert np.array_equal(got_obs, obs[rows]) and np.array_equal(got_next, next_obs[rows])
        ring = decoder._ring.copy()
        assert decoder.decode(encoder.encode(none, none, []))[0].shape[0] == 0
        assert np.array_equal(decoder._ring, ring)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda m: m.pop("frames"), "lacks"),
        (lambda m: m.update(stream=m["stream"] + 5), r"stream should lie in \[0, 2\)"),
        (lambda m: m.update(frames=m["frames"].astype(np.int16)), "frames should have dtype uint8"),
        (lambda m: m.update(frames=m["frames"][:-1]), "sum to len"),
        (lambda m: m.update(frame_refs=m["frame_refs"][:, :, :2]), "frame_refs should be integers of shape"),
        (lambda m: m.update(frame_refs=m["frame_refs"] - 40), "frame_refs should refer"),
        (lambda m: m.update(stream_heads=m["stream_heads"][:1]), "name each stream"),
    ],
)
def test_a_malformed_message_is_refused_naming_the_key(change: Any, match: str) -> None:
    messages, obs, next_obs, streams, _ = interleaved(5, 2, 3, "zeros")
    encoder = FrameStreamEncoder(2, STACK)
    first = encoder.encode(obs[messages[0]], next_obs[messages[0]], streams[messages[0]])
    second = encoder.encode(obs[messages[1]], next_obs[messages[1]], streams[messages[1]])
    decoder = FrameStreamDecoder(2, STACK, SHAPE, np.uint8)
    decoder.decode(first)
    assert set(second["stream"].tolist()) == {0, 1}
    bad = dict(second)
    change(bad)
    with pytest.raises(ValueError, match=match):
        decoder.decode(bad)
    got_obs, _ = decoder.decode(second)  # nothing changed: the good message still continues
    assert np.array_equal(got_obs, obs[messages[1]])


def test_the_encoder_refuses_bad_input_and_changes_nothing() -> None:
    encoder = FrameStreamEncoder(2, STACK)
    stacks = np.zeros((3, STACK, *SHAPE), np.uint8)
    with pytest.raises(ValueError, match=r"streams should lie in \[0, 2\), but got streams\[1\]=2"):
        encoder.encode(stacks, stacks, [0, 2, 1])
    with pytest.raises(ValueError, match="obs should have shape"):
        encoder.encode(stacks[:, :2], stacks, [0, 1, 1])
    with pytest.raises(ValueError, match="next_obs should have obs's frames"):
        encoder.encode(stacks, stacks.astype(np.float32), [0, 1, 1])
    with pytest.raises(ValueError, match="num_streams should be"):
        FrameStreamEncoder(0, STACK)
    assert encoder.frames_sent == 0
    message = encoder.encode(stacks, stacks, [0, 1, 1])
    assert message["stream_heads"].tolist() == [[0, 0, 0, 1], [1, 0, 0, 1]]


@pytest.mark.parametrize("seed", [0, 1])
def test_shard_memory_equals_a_local_memory_fed_the_full_stacks(seed: int) -> None:
    """The shard decodes each message and stores it on its streams: its frames, transitions and
    draws are the local memory's, fed the same full stacks, streams, ends and priorities."""
    pytest.importorskip("ray")
    from prisample.ray import ReplayShard

    messages, obs, next_obs, streams, ends = interleaved(seed, 3, 3, "zeros", max_len=30)
    options: dict[str, Any] = dict(frame_stack=STACK, num_streams=3, obs_dtype=np.uint8, alpha=0.6, seed=seed)
    shard = ReplayShard(64, SHAPE, **options)
    local = PrioritizedReplay(64, SHAPE, **options)
    encoder = FrameStreamEncoder(3, STACK)
    rng = np.random.default_rng(seed)
    for rows in messages:
        n = len(rows)
        columns: dict[str, Any] = {
            "action": rng.integers(0, 4, n),
            "reward": rng.random(n).astype(np.float32),
            "discount": np.full(n, 0.97, np.float32),
            "episode_end": ends[rows],
        }
        priorities = rng.random(n) + 0.1
        message = {**encoder.encode(obs[rows], next_obs[rows], streams[rows]), **columns}
        with warnings.catch_warnings():  # a new episode's stack breaks no stream: its end was passed
            warnings.simplefilter("error", RuntimeWarning)
            assert shard.add(message, priorities) == n
        local.add_many(
            obs[rows],
            columns["action"],
            columns["reward"],
            columns["discount"],
            next_obs[rows],
            episode_end=ends[rows],
            streams=streams[rows],
            priorities=priorities,
        )
    remote_memory, local_memory = shard.replay.memory, local.memory
    assert len(remote_memory) == len(local_memory) > 48
    assert remote_memory.num_frames == local_memory.num_frames
    slots = np.flatnonzero(local_memory.valid(np.arange(64)))
    assert np.array_equal(slots, np.flatnonzero(remote_memory.valid(np.arange(64))))
    for key in ("obs", "next_obs", "action", "reward", "discount"):
        assert np.array_equal(remote_memory.get(slots)[key], local_memory.get(slots)[key]), key
    for _ in range(3):
        drawn = shard.sample(16)
        batch, draw = local.sample(16)
        assert np.array_equal(drawn["slots"], draw.indices)
        assert np.array_equal(drawn["obs"], batch["obs"]) and np.array_equal(
            drawn["next_obs"], batch["next_obs"]
        )


def test_shard_refuses_a_frame_message_it_cannot_store_and_changes_nothing() -> None:
    pytest.importorskip("ray")
    from prisample.ray import ReplayShard

    messages, obs, next_obs, streams, _ = interleaved(2, 2, 3, "zeros")
    rows = messages[0]
    message = {
        **FrameStreamEncoder(2, STACK).encode(obs[rows], next_obs[rows], streams[rows]),
        "action": np.zeros(len(rows), np.int64),
        "reward": np.zeros(len(rows), np.float32),
        "discount": np.ones(len(rows), np.float32),
    }
    with pytest.raises(ValueError, match="frame_stack > 1"):
        ReplayShard(16, SHAPE, obs_dtype=np.uint8).add(message)
    shard = ReplayShard(64, SHAPE, frame_stack=STACK, num_streams=2, obs_dtype=np.uint8)
    with pytest.raises(ValueError, match="priorities"):
        shard.add(message, np.full(len(rows), -1.0))
    with pytest.raises(ValueError, match="lacks"):
        shard.add({key: v for key, v in message.items() if key != "reward"})
    assert shard.info()["num_added"] == 0
    assert shard.add(message) == len(rows)  # the refused calls left the streams where they were
    assert np.array_equal(shard.replay.memory.get(np.arange(len(rows)))["obs"], obs[rows])


def test_the_rate_limiter_counts_a_frame_message_by_its_transitions() -> None:
    """A frame-stream message has no ``obs``/``next_obs``: ``RemoteReplay.add`` still counts its
    ``n`` transitions for the rate limiter, and refuses one that lacks a frame field."""
    pytest.importorskip("ray")
    from prisample.ray import _count_transitions

    messages, obs, next_obs, streams, _ = interleaved(3, 2, 3, "zeros")
    rows = messages[0]
    message = {
        **FrameStreamEncoder(2, STACK).encode(obs[rows], next_obs[rows], streams[rows]),
        "action": np.zeros(len(rows), np.int64),
        "reward": np.zeros(len(rows), np.float32),
        "discount": np.ones(len(rows), np.float32),
    }
    assert _count_transitions(message) == len(rows) > 0
    del message["frames"]
    with pytest.raises(ValueError, match="frames"):
        _count_transitions(message)
