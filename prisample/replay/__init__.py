"""Replay memory for RL loops: ring storage of transitions with shared frames, and prioritized replay.

One job per module:

``frames``
    :class:`FramePool`: each distinct frame stored once, reference-counted; stacks rebuilt by
    gather.
``memory``
    :class:`ReplayMemory`: the ring of the last ``capacity`` transitions (per-transition columns,
    generations, streams) over a frame pool.
``batch``
    :class:`ReplayBatch`: the typed batch a read returns.
``prioritized``
    :class:`PrioritizedReplay`: a memory and a :class:`~prisample.PrioritizedSampler` over its
    slots (Schaul et al. 2016, Algorithm 1), joined by the memory's public methods; thread-safe.
``eviction``
    :class:`~prisample.replay.eviction.PriorityEviction`: which transition a full memory evicts
    under ``PrioritizedReplay(eviction="priority")`` (lowest priority, oldest among equals).
``prefetch``
    :class:`Prefetcher`: the next batches drawn and gathered in a background thread.
``nstep``
    :class:`~prisample.replay.nstep.NStepAccumulator`: the n-step windows of a memory's slots,
    completed as transitions arrive.
``vector_env``
    :class:`VectorStepConverter`: the steps of a gymnasium vector env as transitions of one
    episode each.
"""

from prisample.replay.batch import ReplayBatch
from prisample.replay.frames import FramePool
from prisample.replay.memory import STATE_VERSION, CheckedState, Inserted, ReplayMemory
from prisample.replay.prefetch import Prefetcher
from prisample.replay.prioritized import REPLAY_STATE_VERSION, PrioritizedReplay
from prisample.replay.vector_env import VectorStepConverter

__all__ = [
    "REPLAY_STATE_VERSION",
    "STATE_VERSION",
    "CheckedState",
    "FramePool",
    "Inserted",
    "Prefetcher",
    "PrioritizedReplay",
    "ReplayBatch",
    "ReplayMemory",
    "VectorStepConverter",
]
