"""The driver's side of the Ape-X actors (``recipes/apex/run.py``): starting them as Ray actors,
publishing θ to them, and handing them work in chunks of env steps.

Each chunk an actor is asked to run carries a reference to the weights published last; the actor
loads them only when they are newer than its copy (Horgan et al. 2018, Algorithm 1, line 13:
``θ_i ← θ`` every ``actor_sync_every`` env steps).  The weights travel through Ray's object
store: :func:`publish` copies θ there once, and every actor that pulls it reads that copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import ray
import torch


def start_actors(cls: type, count: int, cpus: float, *args: Any) -> list[Any]:
    """``count`` Ray actors ``cls(i, *args)``, ``i = 0 … count − 1``, each reserving ``cpus`` CPUs.

    The handles are ``Any``: Ray's annotations type ``ray.remote(num_cpus=…)(cls)`` as a decorated
    function, not as an actor class, so its ``.remote`` calls would not type-check."""
    remote: Any = ray.remote(num_cpus=cpus)(cls)
    return [remote.remote(i, *args) for i in range(count)]


def publish(q: torch.nn.Module) -> ray.ObjectRef[dict[str, np.ndarray]]:
    """θ as numpy arrays in Ray's object store: one copy, read by every actor that pulls it."""
    return ray.put({name: value.detach().cpu().numpy() for name, value in q.state_dict().items()})


class ActorFleet:
    """The actors' work in chunks: each actor has ``depth`` ``run(steps, version, [weights])`` calls
    of ``chunk`` env steps queued, each carrying the weights published last, until ``total`` env
    steps are handed out.  ``steps`` counts the env steps of the chunks that returned."""

    def __init__(self, actors: Sequence[Any], chunk: int, total: int, depth: int = 2) -> None:
        self.actors, self.chunk, self.remaining = list(actors), chunk, total
        self.depth, self.steps, self.version = depth, 0, -1
        self.handed = 0
        """Env steps handed out so far (a chunk's ``start``: the clock of a scheduled ε)."""
        self.weights: ray.ObjectRef[dict[str, np.ndarray]] | None = None
        self._inflight: dict[ray.ObjectRef[dict[str, Any]], tuple[int, int]] = {}
        self._held = False
        self._owed: list[int] = []  # actors whose chunk returned while held
        self._finishing: list[ray.ObjectRef[dict[str, Any]]] | None = None

    def start(self, weights: ray.ObjectRef[dict[str, np.ndarray]]) -> None:
        self.set_weights(weights)
        for i in range(len(self.actors)):
            for _ in range(self.depth):
                self._submit(i)

    def set_weights(self, weights: ray.ObjectRef[dict[str, np.ndarray]]) -> None:
        """Chunks asked for from now on carry ``weights`` (version + 1)."""
        self.weights, self.version = weights, self.version + 1

    def poll(self, timeout: float = 0.0) -> list[dict[str, Any]]:
        """The chunks that returned (within ``timeout`` seconds); each of their actors gets its next."""
        if not self._inflight:
            return []
        ready, _ = ray.wait(list(self._inflight), num_returns=len(self._inflight), timeout=timeout)
        results = []
        for ref in ready:
            i, steps = self._inflight.pop(ref)
            results.append(ray.get(ref))
            self.steps += steps
            if self._held:
                self._owed.append(i)
            else:
                self._submit(i)
        return results

    def hold(self, held: bool) -> None:
        """While held, an actor whose chunk returns gets no next one; released, each gets what it is owed."""
        self._held = held
        if not held:
            owed, self._owed = self._owed, []
            for i in owed:
                self._submit(i)

    def stop(self) -> None:
        """Hand out no more env steps (the chunks queued still run)."""
        self.remaining = 0

    @property
    def finished(self) -> bool:
        """Every env step handed out and taken (a held fleet with steps left is not finished)."""
        return not self._inflight and self.remaining == 0

    def finish(self) -> list[dict[str, Any]]:
        """Every actor's ``finish()``: its totals once its last sends are answered."""
        return ray.get(self._finish_calls())

    def finishing_done(self) -> bool:
        """Asks every actor to ``finish()`` (once) and says whether all have: their last sends are
        answered.  A learner held to a replay ratio draws until then, since those sends may wait
        for its draws."""
        calls = self._finish_calls()
        ready, _ = ray.wait(calls, num_returns=len(calls), timeout=0.0)
        return len(ready) == len(calls)

    def _finish_calls(self) -> list[ray.ObjectRef[dict[str, Any]]]:
        if self._finishing is None:
            self._finishing = [actor.finish.remote() for actor in self.actors]
        return self._finishing

    def kill(self) -> None:
        for actor in self.actors:
            ray.kill(actor)

    def _submit(self, i: int) -> None:
        steps = min(self.chunk, self.remaining)
        if steps > 0:
            self.remaining -= steps
            ref = self.actors[i].run.remote(steps, self.version, [self.weights], self.handed)
            self.handed += steps
            self._inflight[ref] = (i, steps)
