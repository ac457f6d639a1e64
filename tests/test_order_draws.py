"""Draws of the rank sampler, bit for bit, against a sequence recorded before ``SortedOrder``'s
layout changed.

``SortedOrder`` keeps the order exact and total (ties by write stamp), so which slot sits at each
rank is a function of the priorities and stamps alone, never of how the blocks are laid out.
Changing the layout (gapped positions re-laid in ``O(N)`` whenever a split found no free
position near it, then a B+-tree whose blocks and nodes split, merge and even out locally) must
therefore leave every draw unchanged.  ``tests/expected/order_draws.npz`` holds the indices,
probabilities and weights that :func:`workload` drew at commit ``ee0da2f`` (main before the
change); the test replays the workload on the current code and compares bytes (the probabilities to a few
ulps: their last bit is the CPU's, and differs between the recording's Intel Xeon and an AMD EPYC).

The workload exercises what the layout change touches: a memory built full at the maximum
priority (every later priority lands above or below all of those ties, in the first and last
blocks: the hot spots that made ``O(N)`` re-layouts), 32- and 256-slot updates with ties
(priorities rounded to 0.1), removals, re-additions at the maximum priority, at capacities whose
block structure has one group of positions (4097) and many (65537).

Regenerate (only when the draws are meant to change; say why in the commit)::

    PYTHONPATH=. python -m tests.test_order_draws --write
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from prisample import PrioritizedSampler

DATA = Path(__file__).resolve().parent / "expected" / "order_draws.npz"
CASES = {4097: 120, 65537: 40}  # capacity -> steps


def workload(capacity: int, steps: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Draw 32 per step from a rank sampler under updates, removals and re-additions."""
    rng = np.random.default_rng(seed)
    s = PrioritizedSampler(capacity, alpha=0.7, beta=0.5, backend="rank", seed=seed)
    indices, probabilities, weights = [], [], []
    for step in range(steps):
        d = s.sample(32)
        indices.append(d.indices)
        probabilities.append(d.probabilities)
        weights.append(d.weights)
        s.update_priorities(d.indices, np.round(np.abs(rng.standard_normal(32)) * 1.5, 1))
        filled = np.flatnonzero(~np.isnan(s.priorities))
        slots = rng.choice(filled, size=min(256, filled.shape[0]), replace=False)
        s.update_priorities(slots, np.abs(rng.standard_normal(slots.shape[0])) * 1.5)
        if step % 3 == 0:
            s.remove(rng.choice(capacity, size=16, replace=False))
        if step % 3 == 2:
            s.add(rng.choice(capacity, size=24, replace=False))
    return {
        "indices": np.concatenate(indices).astype(np.int32),
        "probabilities": np.concatenate(probabilities),
        "weights": np.concatenate(weights),
    }


def test_rank_draws_match_the_recorded_sequence() -> None:
    """Guards against a layout change (local re-layout of ``SortedOrder``'s blocks instead of the
    global one) that would move a slot to another rank: the draws must not change at all."""
    expected = np.load(DATA)
    for capacity, steps in CASES.items():
        got = workload(capacity, steps)
        for name, array in got.items():
            want = expected[f"{name}_{capacity}"]
            assert array.dtype == want.dtype and array.shape == want.shape, (name, capacity)
            if name == "probabilities":  # the last bit of p**α and of a sum is the CPU's (Intel vs AMD)
                np.testing.assert_allclose(array, want, rtol=1e-13, atol=0, err_msg=f"{name} at {capacity}")
            else:  # the slots drawn and their weights: bit for bit
                assert array.tobytes() == want.tobytes(), f"{name} at capacity {capacity} differ"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="record the expected draws")
    parser.add_argument("--write", action="store_true", help=f"write {DATA}")
    args = parser.parse_args(argv)
    arrays = {f"{k}_{c}": v for c, steps in CASES.items() for k, v in workload(c, steps).items()}
    if args.write:
        DATA.parent.mkdir(exist_ok=True)
        np.savez_compressed(DATA, **arrays)
        print(f"wrote {DATA} ({DATA.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
