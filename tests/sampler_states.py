"""Sampler checkpoints as the code wrote them before the correction factors left the sampler, and
the draws that followed them.

``tests/data/sampler_states_v3.npz`` was written by ``python tests/sampler_states.py`` at commit
``ee0da2f``, when the correction factors still lived in ``PrioritizedSampler`` (state version 3,
key ``"corrections"``: ``None`` or the factors).  For each case it holds the ``state_dict`` of a
sampler after a few writes and draws, and what that sampler returned in :func:`continuation`
after the save.  ``tests/test_corrections.py`` loads each state into today's classes and checks
that they continue bit for bit.  Run today, the script writes the same file again: a case with
factors is then built as a :class:`~prisample.CorrectedSampler`.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

import prisample
from prisample import LinearSchedule, PrioritizedSampler

FIXTURE = Path(__file__).parent / "data" / "sampler_states_v3.npz"
CAPACITY = 12

# name: (backend, weight_norm, alpha, eps, beta schedule?, correction factors?)
CASES: dict[str, tuple[str, str, float, float, bool, bool]] = {
    "proportional-plain": ("proportional", "memory", 0.6, 1e-6, True, False),
    "proportional-corrections": ("proportional", "memory", 0.6, 1e-6, True, True),
    "proportional-eps0-corrections": ("proportional", "memory", 1.0, 0.0, False, True),
    "proportional-batch-corrections": ("proportional", "batch", 0.7, 0.01, True, True),
    "rank-plain": ("rank", "memory", 0.7, 1e-6, True, False),
    "rank-corrections": ("rank", "memory", 0.7, 1e-6, True, True),
    "rank-none-corrections": ("rank", "none", 0.7, 1e-6, False, True),
    "greedy-plain": ("greedy", "memory", 0.6, 1e-6, False, False),
    "greedy-corrections": ("greedy", "memory", 0.6, 1e-6, False, True),
    "uniform-plain": ("uniform", "memory", 0.0, 1e-6, True, False),
    "uniform-corrections": ("uniform", "memory", 0.0, 1e-6, True, True),
}


def sampler_class(corrections: bool) -> type[PrioritizedSampler]:
    """``CorrectedSampler`` for a case with factors where it exists (``PrioritizedSampler`` held
    the factors before it did)."""
    corrected: type[PrioritizedSampler] = getattr(prisample, "CorrectedSampler", PrioritizedSampler)
    return corrected if corrections else PrioritizedSampler


def build(name: str) -> PrioritizedSampler:
    """The sampler whose state the fixture holds: ties, zeros, an empty slot, factors, draws."""
    backend, norm, alpha, eps, schedule, corrections = CASES[name]
    beta: float | LinearSchedule = LinearSchedule(0.4, 1.0, 10) if schedule else 0.5
    s = sampler_class(corrections)(
        CAPACITY, backend=backend, alpha=alpha, eps=eps, beta=beta, weight_norm=norm, size=9, seed=7
    )
    s.update_priorities(np.arange(9), [3.0, 0.5, 0.5, 0.0, 2.0, 1.25, 0.0, 4.0, 0.75])
    s.remove([4])
    if corrections:
        s.set_corrections([0, 1, 2, 3], [0.5, 2.0, 0.0, 1.5])
        s.add([9, 10], corrections=[3.0, 0.25])
    else:
        s.add([9, 10])
    for step in range(3):
        d = s.sample(4)
        s.update_priorities(d.indices, 0.5 + np.arange(4) * (step + 1) * 0.3)
    return s


def continuation(s: PrioritizedSampler, corrections: bool) -> dict[str, np.ndarray]:
    """Draws, weights and writes after a checkpoint: what a restored sampler must reproduce."""
    out: dict[str, np.ndarray] = {}
    for step in range(4):
        d = s.sample(5)
        out[f"indices{step}"], out[f"weights{step}"] = d.indices, d.weights
        out[f"probabilities{step}"] = d.probabilities
        s.update_priorities(d.indices, np.arange(5) * 0.7 + step * 0.1)
        if corrections:
            s.set_corrections(d.indices[:2], [0.3 * step + 0.1, 1.7])
        if step == 1:
            s.remove(d.indices[:1])
        if step == 2:
            empty = np.flatnonzero(np.isnan(s.priorities))[:1]
            if corrections:
                s.add(empty, corrections=[2.5])
            else:
                s.add(empty)
    filled = np.flatnonzero(~np.isnan(s.priorities))
    out["weights_filled"], out["probabilities_filled"] = s.weights(filled), s.probabilities(filled)
    out["priorities"] = s.priorities
    out["corrections"] = s.corrections if corrections else np.empty(0)
    return out


def _flatten(value: Any, key: str, arrays: dict[str, np.ndarray]) -> Any:
    """JSON for the state's tree, with each numpy array stored aside under ``key``."""
    if isinstance(value, dict):
        return {k: _flatten(v, f"{key}/{k}", arrays) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        arrays[key] = value
        return {"__array__": key}
    return value


def _unflatten(tree: Any, arrays: Any) -> Any:
    if isinstance(tree, dict):
        if set(tree) == {"__array__"}:
            return np.array(arrays[tree["__array__"]])  # a writable copy
        return {k: _unflatten(v, arrays) for k, v in tree.items()}
    return tree


def write(path: Path = FIXTURE) -> None:
    arrays: dict[str, np.ndarray] = {}
    trees = {}
    for name, case in CASES.items():
        s = build(name)
        trees[name] = _flatten(s.state_dict(), f"{name}/state", arrays)
        for key, value in continuation(s, case[5]).items():
            arrays[f"{name}/after/{key}"] = value
    arrays["trees"] = np.array(json.dumps(trees))
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    path.write_bytes(buffer.getvalue())


def load(path: Path = FIXTURE) -> dict[str, tuple[dict[str, Any], dict[str, np.ndarray]]]:
    """Each case's saved state and the continuation recorded after it."""
    with np.load(path, allow_pickle=False) as data:
        trees = json.loads(str(data["trees"]))
        out = {}
        for name, tree in trees.items():
            prefix = f"{name}/after/"
            after = {k[len(prefix) :]: np.array(data[k]) for k in data.files if k.startswith(prefix)}
            out[name] = (_unflatten(tree, data), after)
    return out


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else FIXTURE)
