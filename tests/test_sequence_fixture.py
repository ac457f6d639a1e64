"""The committed sequence replay checkpoint (``tests/data/sequence_replay_fixture``, written by
``python -m tests.make_sequence_fixture --write``) loads into a fresh replay and continues
exactly: the same draws, weights, batches, final priorities and dropped count as when it was
written."""

from __future__ import annotations

import numpy as np

from tests.make_sequence_fixture import SAVE_AT, STEPS, Actors, build, load, run


def test_fixture_loads_and_continues_exactly() -> None:
    state, resume, after = load()
    replay = build()
    replay.load_state_dict(state)
    replay.check_valid()
    actors = Actors()
    actors.t, actors.episode = list(resume["t"]), list(resume["episode"])
    rng = np.random.Generator(np.random.PCG64())
    rng.bit_generator.state = resume["rng"]
    got = run(replay, actors, rng, STEPS - SAVE_AT)
    assert sorted(got) == sorted(after)
    for key, value in after.items():
        if key.endswith("/obs"):
            value = padded_as_now(value, after[key.replace("/obs", "/length")])
        np.testing.assert_array_equal(got[key], value, err_msg=key)


def padded_as_now(obs: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The recorded batch observations with their padding as it is defined now.

    The fixture was written when the padding of a frame-stacked item (positions past ``L``, the
    item's steps) repeated the last ``next_obs`` stack; it is now that stack moved on by one frame
    per position, its last frame repeated.  Positions up to ``L`` are compared as recorded."""
    out = obs.copy()
    stack = obs.shape[2]
    for b, n in enumerate(lengths.tolist()):
        final = obs[b, n]
        for j in range(n + 1, obs.shape[1]):
            out[b, j] = final[[min(j - n + f, stack - 1) for f in range(stack)]]
    return out
