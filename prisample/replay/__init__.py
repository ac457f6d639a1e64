"""Replay memory for RL loops: ring storage of transitions with shared frames, and prioritized replay.

One job per module:

``memory``
    :class:`ReplayMemory`: the last ``capacity`` transitions, composed of a ring, an observation
    store (built or passed in), n-step windows, a checkpoint and device reads.
``ring``
    :class:`~prisample.replay.ring.Ring`: the live range ``[tail, head)``, each slot's columns
    (action, reward, discount, generation, extras) and the streams' episode ends.
``stores``
    The observation stores, one strategy per kind: :class:`~prisample.replay.stores.FrameStore`
    (a frame pool, host or device) and :class:`~prisample.replay.stores.DictStore` (per-key
    columns).
``frames``
    :class:`FramePool`: each distinct frame stored once, reference-counted; stacks rebuilt by
    gather.
``writes``
    :class:`~prisample.replay.writes.TransitionWrites`: ``add``, ``add_many`` and
    ``add_vector_step``, declared once, each a request to the one (abstract) ``write``.
``spec``
    :class:`~prisample.replay.spec.TransitionSpec`: the shapes and dtypes of transitions, and the
    checks that turn a write's arguments into rows.
``checkpoint``
    :class:`~prisample.replay.checkpoint.MemoryCheckpoint`: the memory's
    ``state_dict``/``load_state_dict`` and the invariants a state keeps.
``batch``
    :class:`ReplayBatch`: the typed batch a read returns.
``prioritized``
    :class:`PrioritizedReplay`: a memory and a :class:`~prisample.PrioritizedSampler` over its
    slots (Schaul et al. 2016, Algorithm 1), assembled from the parts below; thread-safe.
``replay_parts``
    The parts of a prioritized replay and the one factory that builds those not passed in.
``write_back``
    The write-back guard: the draw record, stale priority updates dropped and counted (host or
    device), over any items with generation numbers.
``steps``
    :class:`~prisample.replay.steps.ReplaySteps`: how writes, draws and updates reach the
    sampler; :class:`~prisample.replay.steps.HostSteps` with the priorities on the host.
``replay_checkpoint``
    The prioritized replay's ``state_dict``/``load_state_dict``, all or nothing: a part given
    the memory, sampler, guard and eviction strategy.
``sequence``
    :class:`SequenceReplay`: prioritized replay of sequence items (R2D2: burn-in, stored
    recurrent state, one priority per item) over a memory, and :class:`SequenceBatch`.
``sequence_items``
    :class:`~prisample.replay.sequence_items.SequenceItems`: which slots form which item, the
    items' masks and their recurrent-state pool.
``eviction``
    The eviction strategies: :class:`~prisample.replay.eviction.FifoEviction` and
    :class:`~prisample.replay.eviction.PriorityEviction` (lowest priority, oldest among equals,
    under ``PrioritizedReplay(eviction="priority")``).
``prefetch``
    :class:`Prefetcher`: the next batches drawn and gathered in a background thread.
``device``
    The device side: frames and columns mirrored on a torch device, reads sent in one copy.
``device_reads``
    :class:`~prisample.replay.device_reads.DeviceReads`: a memory's reads on its device, from the
    mirrors, with no host synchronisation.
``device_steps``
    :class:`~prisample.replay.device_steps.DeviceSteps`: the steps with the priorities on the
    memory's device, with no host synchronisation.
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
from prisample.replay.sequence import SequenceBatch, SequenceReplay
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
    "SequenceBatch",
    "SequenceReplay",
    "VectorStepConverter",
]
