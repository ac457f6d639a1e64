"""How far a prefetched batch's distribution is from the exact one, in a DQN-like run.

With ``replay.prefetch(k, depth=d)`` batch ``j`` is drawn before the priority updates of batches
``j − d … j − 1`` land.  This run measures the price exactly: at every update, the distribution the
batch was actually drawn from (``P(i)`` of every slot, read under the replay's lock at the draw)
against the distribution a draw without prefetch would use at that point (after the previous
update and the step's new transitions landed), as a total variation distance
``TV = ½ Σ_i |P_drawn(i) − P_exact(i)|``.  ``depth = 0`` draws in ``next()`` itself: TV is 0.

The run is DQN-like but synthetic (no network): a full memory of ``n`` transitions with
``|δ| ~ Exp(1)``; each step adds ``--adds`` new transitions (Algorithm 1 line 6: at the maximum
priority), draws ``k``, "trains" for ``--train-ms`` (a sleep, during which the prefetch thread
draws the next batch), and reports new ``|δ|`` for the drawn slots: the old one times ``--decay``
(learning reduces the error of what was replayed) plus ``|N(0, σ)|`` noise, σ = ``--noise``.

Run: ``python -m benchmarks.measurements.prefetch_lag_replay --out docs/results/prefetch_lag_replay.json``
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from typing import Any

import numpy as np
from tqdm import tqdm

from prisample import LinearSchedule, PrioritizedReplay
from prisample.replay import ReplayBatch
from prisample.sampler import Draw


class RecordingReplay(PrioritizedReplay):
    """A replay that records, at each draw, the full distribution it draws from and how many
    updates had landed (the prefetch thread calls ``sample`` under the lock)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.updates = 0
        self.recorded: collections.deque[tuple[np.ndarray, int]] = collections.deque()

    def distribution(self) -> np.ndarray:
        with self.lock:
            filled = np.flatnonzero(~np.isnan(self.sampler.priorities))
            p = np.zeros(self.capacity)
            p[filled] = self.sampler.probabilities(filled)
            return p

    def sample(self, k: int) -> tuple[ReplayBatch, Draw]:
        with self.lock:
            self.recorded.append((self.distribution(), self.updates))
            return super().sample(k)

    def update_priorities(self, indices: Any, priorities: Any, *, generations: Any = None) -> None:
        with self.lock:
            super().update_priorities(indices, priorities, generations=generations)
            self.updates += 1


def run(backend: str, depth: int, args: argparse.Namespace) -> dict[str, float]:
    n, k, rng = args.n, args.k, np.random.default_rng(args.seed)
    replay = RecordingReplay(
        n,
        (1,),
        obs_dtype=np.float32,
        alpha=0.6,
        beta=LinearSchedule(0.4, 1.0, args.updates),
        backend=backend,
        seed=args.seed,
    )
    error = np.zeros(n)  # the synthetic |δ| of each slot's transition
    obs = np.arange(n, dtype=np.float32)[:, None]
    zeros = np.zeros(n, np.int64)
    replay.add_many(obs, zeros, np.zeros(n), np.full(n, 0.99), obs + 1, streams=zeros)
    error[:] = rng.exponential(1.0, n)
    replay.update_priorities(np.arange(n), error, generations=replay.memory.generations(np.arange(n)))
    tv, lag = [], []
    new = np.zeros((args.adds, 1), np.float32)
    with replay.prefetch(k, depth=depth) as batches:
        for _ in tqdm(range(args.updates), desc=f"{backend} depth {depth}", leave=False, disable=args.quiet):
            one = zeros[: args.adds]
            slots = replay.add_many(new, one, np.zeros(args.adds), np.full(args.adds, 0.99), new, streams=one)
            error[slots] = rng.exponential(1.0, args.adds)  # found once its max-priority replay is over
            exact = replay.distribution()
            batch, draw = next(batches)
            drawn, updates_then = replay.recorded.popleft()
            tv.append(0.5 * float(np.abs(drawn - exact).sum()))
            lag.append(replay.updates - updates_then)
            time.sleep(args.train_ms / 1000)  # the learner's forward/backward pass
            idx = draw.indices
            error[idx] = error[idx] * args.decay + np.abs(rng.normal(0.0, args.noise, k))
            replay.update_priorities(idx, error[idx], generations=batch.generation)
    tvs, lags = np.array(tv), np.array(lag)
    return {
        "tv_mean": float(tvs.mean()),
        "tv_median": float(np.median(tvs)),
        "tv_max": float(tvs.max()),
        "lag_mean": float(lags.mean()),
        "lag_max": int(lags.max()),
        "dropped_updates": replay.dropped_updates,
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("--n", type=int, default=50_000, help="memory capacity (full)")
    p.add_argument("--k", type=int, default=32, help="batch size")
    p.add_argument("--updates", type=int, default=3000, help="learner updates per run")
    p.add_argument("--adds", type=int, default=1, help="new transitions per update")
    p.add_argument("--depths", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--backends", nargs="+", default=["proportional", "rank"])
    p.add_argument(
        "--decay", type=float, default=0.5, help="|δ| of a replayed transition is multiplied by this"
    )
    p.add_argument("--noise", type=float, default=0.1, help="plus |N(0, noise)|")
    p.add_argument(
        "--train-ms",
        type=float,
        default=2.0,
        help="simulated train step (the prefetch thread draws meanwhile)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--out", default="runs/prefetch_lag_replay.json", help="JSON path (a directory: file in it)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    results: dict[str, Any] = {
        "command": "python -m benchmarks.measurements.prefetch_lag_replay " + " ".join(argv or sys.argv[1:]),
        "config": {key: value for key, value in vars(args).items() if key not in ("out", "quiet")},
        "backends": {},
    }
    for backend in args.backends:
        results["backends"][backend] = {}
        for depth in args.depths:
            row = run(backend, depth, args)
            results["backends"][backend][str(depth)] = row
            print(
                f"{backend:12s} depth {depth}: TV mean {row['tv_mean']:.2e} max {row['tv_max']:.2e} "
                f"lag mean {row['lag_mean']:.2f} (max {row['lag_max']})",
                flush=True,
            )
    out = args.out if not os.path.isdir(args.out) else os.path.join(args.out, "prefetch_lag_replay.json")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote {out}")
    return results


if __name__ == "__main__":
    main()
