"""Many Q-networks of one architecture as one module: their parameters stacked, one call for all.

A sweep of A agents that each update a small network on 32 transitions keeps a GPU mostly idle
and launch-bound.  :class:`StackedQNetwork` holds the A agents' parameters stacked along a first
dimension and evaluates ``Q_a(obs_a)`` for all of them at once with ``torch.func.vmap`` over
``torch.func.functional_call`` of one :class:`~recipes.dqn.networks.QNetwork`, so one update of
all agents is one captured graph (:class:`~recipes.dqn.update.OptimizerStep`).  Agent ``a``'s
loss reaches only its own slice of the parameters, and :class:`~recipes.dqn.networks.DQNRMSprop`
is elementwise (with a per-agent step size), so the stacked update is A independent updates:
``tests/test_dqn_stacked.py`` checks it against A separate networks and optimisers.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap


class StackedQNetwork(nn.Module):
    """``Q(obs) = [Q_a(obs_a)]_a`` for ``obs`` of shape ``(A, batch, *obs_shape)`` -> ``(A, batch, actions)``.

    Built from A networks of one architecture (copies: later changes to them are not seen);
    :meth:`member` gives agent ``a``'s network back.
    """

    def __init__(self, members: Sequence[nn.Module]) -> None:
        super().__init__()
        if not members:
            raise ValueError("members should hold at least one network, but got none")
        params, buffers = stack_module_state(list(members))
        self.names = list(params)
        self.stacked = nn.ParameterList(nn.Parameter(params[name].detach().clone()) for name in self.names)
        if buffers:
            raise ValueError(f"members should have no buffers, but they have {sorted(buffers)}")
        self.agents = len(members)
        self._template = [copy.deepcopy(members[0]).to("meta")]  # a list: not a registered submodule

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if obs.shape[0] != self.agents:
            raise ValueError(f"obs should have {self.agents} agents first, but got shape {tuple(obs.shape)}")
        template = self._template[0]

        def one(params: tuple[torch.Tensor, ...], x: torch.Tensor) -> torch.Tensor:
            return functional_call(template, dict(zip(self.names, params, strict=True)), (x,))  # type: ignore[no-any-return]

        return vmap(one)(tuple(self.stacked), obs)

    @torch.no_grad()
    def member(self, a: int) -> nn.Module:
        """Agent ``a``'s network, as a separate module on the stacked parameters' device."""
        if not 0 <= a < self.agents:
            raise ValueError(f"a should be in [0, {self.agents}), but got a={a}")
        net = copy.deepcopy(self._template[0]).to_empty(device=self.stacked[0].device)
        net.load_state_dict({name: p[a] for name, p in zip(self.names, self.stacked, strict=True)})
        return net
