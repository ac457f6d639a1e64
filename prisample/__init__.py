"""prisample: prioritized sampling (Schaul et al. 2016) for supervised and reinforcement learning."""

from prisample.data import IndexedDataset
from prisample.device_sampler import DeviceDraw, DevicePrioritizedSampler
from prisample.methods import (
    CorrectedSampler,
    LaBER,
    LargeBatchDraw,
    OnlineBatchSelection,
    StalenessBonus,
    asymmetric_priorities,
    lap_loss,
    lap_priorities,
    loshchilov_hutter_priorities,
    loshchilov_hutter_probabilities,
    pal_loss,
    predecessor_boost,
    pser_priorities,
    ring_predecessors,
    sequence_priority,
)
from prisample.replay import PrioritizedReplay, ReplayMemory, SequenceBatch, SequenceReplay
from prisample.sampler import Draw, PrioritizedSampler
from prisample.weights import LinearSchedule, importance_weights

__all__ = [
    "CorrectedSampler",
    "DeviceDraw",
    "DevicePrioritizedSampler",
    "Draw",
    "IndexedDataset",
    "LaBER",
    "LargeBatchDraw",
    "LinearSchedule",
    "OnlineBatchSelection",
    "PrioritizedReplay",
    "PrioritizedSampler",
    "ReplayMemory",
    "SequenceBatch",
    "SequenceReplay",
    "StalenessBonus",
    "asymmetric_priorities",
    "importance_weights",
    "lap_loss",
    "lap_priorities",
    "loshchilov_hutter_priorities",
    "loshchilov_hutter_probabilities",
    "pal_loss",
    "predecessor_boost",
    "pser_priorities",
    "ring_predecessors",
    "sequence_priority",
]
__version__ = "0.1.0"
