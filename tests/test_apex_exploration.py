"""The Ape-X actors' exploration rates ``ε_i = ε^(1 + α i / (N − 1))`` (``recipes/apex/exploration.py``),
the one definition the Ray run and the actor threads share."""

from __future__ import annotations

import pytest

from recipes.apex.exploration import EPSILON, EPSILON_EXPONENT, actor_epsilon


def test_actor_epsilon_follows_apex_schedule() -> None:
    # ε_i = 0.4^(1 + 7 i / (N − 1)): 0.4 for the first actor, 0.4^8 for the last
    assert (EPSILON, EPSILON_EXPONENT) == (0.4, 7.0)  # Horgan et al. 2018, Sec. 4
    assert actor_epsilon(0, 1) == 0.4
    assert [actor_epsilon(i, 8) for i in (0, 3, 7)] == pytest.approx([0.4, 0.4**4, 0.4**8])
    assert actor_epsilon(1, 3, epsilon=0.5, exponent=2.0) == pytest.approx(0.5**2)
    with pytest.raises(ValueError, match="i should lie in"):
        actor_epsilon(2, 2)
