"""The committed sequence replay checkpoint: ``tests/data/sequence_replay_fixture/``.

A :class:`~prisample.SequenceReplay` (three streams, frame stacks of 2 uint8 frames, a dict
state, burn-in, bootstrap step, padded episode tails, a wrapped ring) is driven by a fixed
script (writes with actor priorities on some steps, draws, R2D2 write-backs), saved mid-stream
with ``state_dict(include_memory=True)``, and driven on; the file holds the state (plain data: a
JSON tree, its arrays beside it; no pickle) and what the draws after the save returned.
``tests/test_sequence_fixture.py`` loads the state into a fresh replay and must reproduce them,
so later versions keep loading this format and continue exactly.

Regenerate only when the format or the draws are meant to change (say why in the commit), from
the repository root::

    OMP_NUM_THREADS=1 .venv/bin/python -m tests.make_sequence_fixture --write
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from prisample import SequenceReplay
from tests.make_replay_fixtures import flatten, pack, unflatten, unpack

PATH = Path(__file__).resolve().parent / "data" / "sequence_replay_fixture" / "state.npz"
SAVE_AT = 70
STEPS = 120


def build() -> SequenceReplay:
    return SequenceReplay(
        48,
        (3,),
        frame_stack=2,
        obs_dtype=np.uint8,
        burn_in=2,
        length=3,
        period=2,
        bootstrap=1,
        num_streams=3,
        state={"h": ((2,), np.float32), "c": ((2,), np.float32)},
        alpha=0.8,
        beta=0.5,
        seed=11,
    )


class Actors:
    """Three streams of synthetic episodes; each frame encodes (stream, episode step)."""

    def __init__(self) -> None:
        self.t = [0, 0, 0]
        self.episode = [0, 0, 0]

    def frame(self, s: int, t: int) -> npt.NDArray[np.uint8]:
        return np.array([s, self.episode[s] % 256, t % 256], np.uint8)

    def stack(self, s: int, t: int) -> npt.NDArray[np.uint8]:
        return np.stack([self.frame(s, max(t - 1, 0)), self.frame(s, t)])


def step(replay: SequenceReplay, actors: Actors, rng: np.random.Generator) -> None:
    s = int(rng.integers(0, 3))
    t = actors.t[s]
    end = bool(rng.random() < 0.12)
    priority = float(rng.uniform(0, 2)) if rng.random() < 0.5 else None
    state = {"h": np.full(2, t, np.float32), "c": np.full(2, -t, np.float32)}
    replay.add(
        actors.stack(s, t), t % 5, float(t), 0.0 if end else 0.95, actors.stack(s, t + 1),
        episode_end=end, stream=s, state=state, priority=priority,
    )  # fmt: skip
    actors.t[s] += 1
    if end:
        actors.t[s], actors.episode[s] = 0, actors.episode[s] + 1


def run(replay: SequenceReplay, actors: Actors, rng: np.random.Generator, steps: int) -> dict[str, Any]:
    """``steps`` operations; every fourth draws 4 items and writes back; returns the draws."""
    out: dict[str, Any] = {}
    for i in range(steps):
        step(replay, actors, rng)
        if i % 4 == 3 and len(replay):
            batch, draw = replay.sample(4)
            td = rng.normal(size=(4, replay.window))
            lag = i % 8 == 7  # half the write-backs come one batch late (some stale)
            if lag and "pending" in out:
                replay.update_from_td(*out.pop("pending"))
            out[f"{i}/indices"] = draw.indices.copy()
            out[f"{i}/weights"] = draw.weights.copy()
            for key, value in batch.items():
                if isinstance(value, dict):
                    out.update({f"{i}/{key}.{k}": np.asarray(v).copy() for k, v in value.items()})
                else:
                    out[f"{i}/{key}"] = np.asarray(value).copy()
            out["pending"] = (draw.indices.copy(), td, batch.learn.copy())
            replay.update_from_td(draw.indices, td, batch.learn, generations=batch.generation)
    out.pop("pending", None)
    out["end/priorities"] = replay.sampler.priorities.copy()
    out["end/dropped"] = np.array(replay.dropped_updates)
    return out


def record() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The state at the save point, the rng state there, and the record after it."""
    replay, actors, rng = build(), Actors(), np.random.default_rng(5)
    run(replay, actors, rng, SAVE_AT)
    state = replay.state_dict(include_memory=True)
    resume = {"t": list(actors.t), "episode": list(actors.episode), "rng": rng.bit_generator.state}
    after = run(replay, actors, rng, STEPS - SAVE_AT)
    return state, resume, after


def write(path: Path = PATH) -> None:
    state, resume, after = record()
    arrays: dict[str, npt.NDArray[Any]] = {}
    tree = flatten(state, "state", arrays)
    arrays.update({f"after/{k}": v for k, v in after.items()})
    index, blob = pack(arrays)
    meta = {"state": tree, "resume": resume, "index": index, "format": 1}
    buffer = io.BytesIO()
    np.savez_compressed(buffer, meta=np.array(json.dumps(meta, sort_keys=True)), blob=blob)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue())


def load(path: Path = PATH) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(str(data["meta"]))
        arrays = unpack(meta.pop("index"), data["blob"])
    after = {k[len("after/") :]: v for k, v in arrays.items() if k.startswith("after/")}
    return unflatten(meta["state"], arrays), meta["resume"], after


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="write the committed sequence replay checkpoint fixture")
    parser.add_argument("--write", action="store_true", help=f"write {PATH}")
    args = parser.parse_args(argv)
    if not args.write:
        parser.print_usage()
        return
    write()
    print(f"wrote {PATH}")


if __name__ == "__main__":
    main()
