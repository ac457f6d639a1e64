"""prisample: prioritized sampling (Schaul et al. 2016) for supervised and reinforcement learning."""

from prisample.data import IndexedDataset
from prisample.replay import PrioritizedReplay, ReplayMemory
from prisample.sampler import Draw, PrioritizedSampler
from prisample.weights import LinearSchedule, importance_weights

__all__ = [
    "Draw",
    "IndexedDataset",
    "LinearSchedule",
    "PrioritizedReplay",
    "PrioritizedSampler",
    "ReplayMemory",
    "importance_weights",
]
__version__ = "0.1.0"
