"""The Ape-X actors' fixed exploration rates (Horgan et al. 2018, Sec. 4): actor ``i`` of ``N`` acts
ε_i-greedily with

    ε_i = ε^(1 + α i / (N − 1))        ε = 0.4, α = 7 (the paper's); ε_0 = ε when N = 1

so the first actor explores at ε and the last at ε^(1 + α).  Every Ape-X piece of the recipes
(the Ray run and the actor threads) takes ε_i and its defaults from here.
"""

from __future__ import annotations

__all__ = ["EPSILON", "EPSILON_EXPONENT", "actor_epsilon"]

EPSILON = 0.4
"""ε of the schedule: the first actor's rate (Horgan et al. 2018, Sec. 4)."""
EPSILON_EXPONENT = 7.0
"""α of the schedule: the last actor explores at ε^(1 + α) (Horgan et al. 2018, Sec. 4)."""


def actor_epsilon(i: int, n: int, epsilon: float = EPSILON, exponent: float = EPSILON_EXPONENT) -> float:
    """``ε_i = ε^(1 + α i / (N − 1))`` for actor ``i`` of ``N`` (Horgan et al. 2018, Sec. 4); ``ε``
    for a single actor."""
    if not 0 <= i < n:
        raise ValueError(f"i should lie in [0, {n}), but got i={i}")
    return epsilon if n == 1 else float(epsilon ** (1.0 + exponent * i / (n - 1)))
