"""prisample: prioritized sampling (Schaul et al. 2016) for supervised and reinforcement learning."""

from prisample.data import IndexedDataset
from prisample.methods.laber import LaBER, LargeBatchDraw
from prisample.methods.lap import lap_loss, lap_priorities, pal_loss
from prisample.methods.offpolicy_corrections import CorrectedSampler
from prisample.methods.online_selection import (
    OnlineBatchSelection,
    loshchilov_hutter_priorities,
    loshchilov_hutter_probabilities,
)
from prisample.methods.predecessor import (
    StalenessBonus,
    asymmetric_priorities,
    predecessor_boost,
    pser_priorities,
    ring_predecessors,
    sequence_priority,
)
from prisample.replay import PrioritizedReplay, ReplayMemory
from prisample.sampler import Draw, PrioritizedSampler
from prisample.weights import LinearSchedule, importance_weights

__all__ = [
    "CorrectedSampler",
    "Draw",
    "IndexedDataset",
    "LaBER",
    "LargeBatchDraw",
    "LinearSchedule",
    "OnlineBatchSelection",
    "PrioritizedReplay",
    "PrioritizedSampler",
    "ReplayMemory",
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
