"""Priority rules and methods built on prioritized replay, one module per method.

Each module turns errors (or losses, or policy ratios) into what a
:class:`~prisample.PrioritizedSampler` stores or how its draws are used; the core
(``prisample.sampler``, ``backends``, ``weights``) knows nothing of them.

Schaul et al. 2016, App. A
    ``asymmetric`` (:func:`asymmetric_priorities`), ``staleness`` (:class:`StalenessBonus`),
    ``predecessor`` (:func:`predecessor_boost`, :func:`ring_predecessors`).
Schaul et al. 2016, Sec. 6 (off-policy replay)
    ``offpolicy_corrections`` (:func:`importance_ratios`, :class:`CorrectedSampler`: weighted
    importance sampling), ``rejection`` (:func:`rejection_priorities`), ``hybrid``
    (:func:`hybrid_priorities`).
Sequences
    ``sequence`` (:func:`sequence_priority`, R2D2), ``pser`` (:func:`pser_priorities`, PSER).
Beyond PER's sampler
    ``lap`` (LAP priorities, LAP and PAL losses), ``laber`` (:class:`LaBER`), ``online_selection``
    (Loshchilov & Hutter's rank selection, :class:`OnlineBatchSelection`).

Every public name of these modules is importable from ``prisample.methods``.
"""

from prisample.methods.asymmetric import asymmetric_priorities
from prisample.methods.hybrid import hybrid_priorities
from prisample.methods.laber import LABER_NORMS, LaBER, LargeBatchDraw
from prisample.methods.lap import lap_loss, lap_priorities, pal_loss
from prisample.methods.offpolicy_corrections import CorrectedSampler, CorrectionFactors, importance_ratios
from prisample.methods.online_selection import (
    OnlineBatchSelection,
    loshchilov_hutter_priorities,
    loshchilov_hutter_probabilities,
)
from prisample.methods.predecessor import predecessor_boost, ring_predecessors
from prisample.methods.pser import pser_priorities
from prisample.methods.rejection import rejection_priorities
from prisample.methods.sequence import sequence_priority
from prisample.methods.staleness import StalenessBonus

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
