"""Priority rules and methods built on prioritized replay, one module per method."""

from prisample.methods.laber import LABER_NORMS, LaBER, LargeBatchDraw
from prisample.methods.lap import lap_loss, lap_priorities, pal_loss
from prisample.methods.offpolicy_corrections import CorrectedSampler, CorrectionFactors
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
from prisample.methods.rejection import hybrid_priorities, importance_ratios, rejection_priorities

__all__ = [
    "LABER_NORMS",
    "CorrectedSampler",
    "CorrectionFactors",
    "LaBER",
    "LargeBatchDraw",
    "OnlineBatchSelection",
    "StalenessBonus",
    "asymmetric_priorities",
    "hybrid_priorities",
    "importance_ratios",
    "lap_loss",
    "lap_priorities",
    "loshchilov_hutter_priorities",
    "loshchilov_hutter_probabilities",
    "pal_loss",
    "predecessor_boost",
    "pser_priorities",
    "rejection_priorities",
    "ring_predecessors",
    "sequence_priority",
]
