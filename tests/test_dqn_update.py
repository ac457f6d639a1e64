"""The update as one call (recipes/dqn/update.py) and stacked agents (recipes/dqn/stacked.py).

On a CPU: the eager path is Algorithm 1's update, the stacked update of A agents equals A separate
updates, the warm-up's changes are undone.  On a GPU (run there: ``pytest tests/test_dqn_update.py
-k cuda``): the captured graph gives the eager update's parameters and priorities.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

pytest.importorskip("gymnasium")
pytest.importorskip("yaml")
pytest.importorskip("tqdm")
pytest.importorskip("cloudpickle")

from recipes.dqn.agent import td_loss
from recipes.dqn.config import load_config
from recipes.dqn.envs import EnvSpec
from recipes.dqn.networks import DQNRMSprop, QNetwork, make_optimizer
from recipes.dqn.stacked import StackedQNetwork
from recipes.dqn.update import (
    Batch,
    GraphedForward,
    HostCopy,
    OptimizerStep,
    _optimizer_tensors,
    _restore_optimizer,
)

ATARI = EnvSpec((4, 84, 84), 4, np.uint8, 6)
MINATAR = EnvSpec((10, 10, 4), 1, np.uint8, 3)
cuda = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (run on the GPU machine)"
)


def network(spec: EnvSpec, seed: int, kind: str = "minatar_cnn") -> QNetwork:
    torch.manual_seed(seed)
    return QNetwork(kind, spec, (32,) if kind == "minatar_cnn" else (512,), True)  # type: ignore[arg-type]


def batches(spec: EnvSpec, k: int, count: int, seed: int, agents: int | None = None) -> list[Batch]:
    g = torch.Generator().manual_seed(seed)
    lead = (k,) if agents is None else (agents, k)
    out = []
    for _ in range(count):
        out.append(
            Batch(
                torch.randint(0, 2, (*lead, *spec.obs_shape), dtype=torch.uint8, generator=g),
                torch.randint(0, spec.num_actions, lead, generator=g),
                torch.randn(lead, generator=g),
                torch.full(lead, 0.99) * (torch.rand(lead, generator=g) > 0.1),
                torch.randint(0, 2, (*lead, *spec.obs_shape), dtype=torch.uint8, generator=g),
                torch.rand(lead, generator=g),
            )
        )
    return out


def manual_update(
    q: QNetwork, q_target: QNetwork, opt: torch.optim.Optimizer, b: Batch, arm: str
) -> torch.Tensor:
    """Algorithm 1's update written out: δ, the Huber loss weighted by w, one optimiser step; the
    priorities |δ| unclipped (DQN Zoo clips only the gradient)."""
    cfg = load_config("MinAtar/Breakout-v1", arm)
    q_taken = q(b.obs).gather(1, b.action.view(-1, 1)).squeeze(1)
    with torch.no_grad():
        greedy = q(b.next_obs).argmax(1, keepdim=True)
        target = b.reward + b.discount * q_target(b.next_obs).gather(1, greedy).squeeze(1)
    delta = target - q_taken
    loss = (b.weights * torch.nn.functional.huber_loss(q_taken, target, reduction="none", delta=1.0)).sum()
    assert cfg.clip_td
    if cfg.loss_reduction == "mean":
        loss = loss / len(delta)
    opt.zero_grad()
    loss.backward()
    opt.step()
    assert not cfg.clip_priority
    return delta.detach().abs()


def test_eager_step_is_algorithm_1_update() -> None:
    """OptimizerStep(td_loss) eagerly = the update written out by hand, over 4 steps."""
    cfg = load_config("MinAtar/Breakout-v1", "proportional")
    q, q_target = network(MINATAR, 0), network(MINATAR, 1)
    q2, q2_target = copy.deepcopy(q), copy.deepcopy(q_target)
    step = OptimizerStep(
        td_loss(q, q_target, cfg), list(q.parameters()), make_optimizer(cfg, q.parameters()), graph=False
    )
    opt2 = make_optimizer(cfg, q2.parameters())
    for b in batches(MINATAR, 8, 4, seed=0):
        _, priorities = step(b)
        expected = manual_update(q2, q2_target, opt2, b, "proportional")
        torch.testing.assert_close(priorities, expected)
    for p, p2 in zip(q.parameters(), q2.parameters(), strict=True):
        torch.testing.assert_close(p, p2)


@pytest.mark.parametrize("arm", ["proportional", "dqn_rank"])
def test_stacked_update_equals_separate_agents(arm: str) -> None:
    """A agents stacked (vmap, one loss, per-agent η) = A separate networks and optimisers, for
    Double DQN and DQN targets; a shared scalar η or a summed-over-agents mean would fail this."""
    cfg = load_config("MinAtar/Breakout-v1", arm)
    agents, k = 3, 8
    nets = [network(MINATAR, a) for a in range(agents)]
    targets = [network(MINATAR, 10 + a) for a in range(agents)]
    lrs = [0.01, 0.0025, 0.005]
    stacked, stacked_target = StackedQNetwork(nets), StackedQNetwork(targets)
    opt = DQNRMSprop(stacked.parameters(), torch.tensor(lrs))
    step = OptimizerStep(td_loss(stacked, stacked_target, cfg), list(stacked.parameters()), opt, graph=False)
    singles = [
        OptimizerStep(
            td_loss(nets[a], targets[a], cfg),
            list(nets[a].parameters()),
            DQNRMSprop(nets[a].parameters(), lrs[a]),
            graph=False,
        )
        for a in range(agents)
    ]
    for b in batches(MINATAR, k, 3, seed=1, agents=agents):
        _loss, priorities = step(b)
        assert priorities.shape == (agents, k)
        for a in range(agents):
            _, p_a = singles[a](Batch(*(t[a] for t in b)))
            torch.testing.assert_close(priorities[a], p_a)
    for a in range(agents):
        member = stacked.member(a)
        for p, p2 in zip(member.parameters(), nets[a].parameters(), strict=True):
            torch.testing.assert_close(p, p2)


def test_stacked_mean_reduction_divides_by_k_not_agents() -> None:
    """With loss_reduction='mean' each agent's loss is divided by its own k."""
    cfg = load_config("MinAtar/Breakout-v1", "uniform", loss_reduction="mean")
    nets = [network(MINATAR, a) for a in range(2)]
    stacked = StackedQNetwork(nets)
    b = batches(MINATAR, 4, 1, seed=2, agents=2)[0]
    loss, _ = td_loss(stacked, StackedQNetwork(nets), cfg)(b)
    single = sum(td_loss(nets[a], nets[a], cfg)(Batch(*(t[a] for t in b)))[0] for a in range(2))
    torch.testing.assert_close(loss, single)


def test_stacked_member_and_errors() -> None:
    nets = [network(MINATAR, a) for a in range(2)]
    stacked = StackedQNetwork(nets)
    obs = torch.randint(0, 2, (2, 5, *MINATAR.obs_shape), dtype=torch.uint8)
    q = stacked(obs)
    torch.testing.assert_close(q[1], nets[1](obs[1]))
    with pytest.raises(ValueError, match="agents first"):
        stacked(obs[:1])
    with pytest.raises(ValueError, match="a should be"):
        stacked.member(2)
    with pytest.raises(ValueError, match="at least one"):
        StackedQNetwork([])


def test_warmup_restore_puts_state_back_or_zeroes_new_state() -> None:
    """_restore_optimizer: state present before the warm-up gets its values back; state the
    warm-up created is zeroed (what a first step creates it as)."""
    p, fresh = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))
    opt = DQNRMSprop([p, fresh], 0.1)
    p.grad = torch.full((3,), 2.0)
    opt.step()  # p has state, fresh has none
    saved = _optimizer_tensors(opt)
    g_before = opt.state[p]["g"].clone()
    for _ in range(2):
        p.grad, fresh.grad = torch.full((3,), -1.0), torch.ones(2)
        opt.step()
    assert not torch.equal(opt.state[p]["g"], g_before)
    _restore_optimizer(opt, saved)
    torch.testing.assert_close(opt.state[p]["g"], g_before)
    assert torch.count_nonzero(opt.state[fresh]["g"]) == 0 and torch.count_nonzero(opt.state[fresh]["n"]) == 0


def test_graph_needs_gpu_parameters_and_eager_forward_on_cpu() -> None:
    cfg = load_config("MinAtar/Breakout-v1", "rank")
    q = network(MINATAR, 0)
    step = OptimizerStep(
        td_loss(q, q, cfg), list(q.parameters()), make_optimizer(cfg, q.parameters()), graph=True
    )
    with pytest.raises(ValueError, match="CUDA device"):
        step(batches(MINATAR, 4, 1, seed=0)[0])
    obs = torch.randint(0, 2, (3, *MINATAR.obs_shape), dtype=torch.uint8)
    torch.testing.assert_close(GraphedForward(q, graph=False)(obs), q(obs).detach())


def test_host_copy_on_cpu_returns_a_copy_of_the_values() -> None:
    copier = HostCopy(torch.device("cpu"))
    td = torch.tensor([0.5, 1.0, 0.25])
    pending = copier.start(td, torch.tensor([2.0]))
    td.mul_(0)  # the values were taken when the copy started
    np.testing.assert_allclose(pending.wait(), [0.5, 1.0, 0.25, 2.0])


# -- on a GPU ---------------------------------------------------------------------------------------


def _graph_vs_eager(stacked: bool, optimizer: str) -> None:
    device = torch.device("cuda")
    cfg = load_config("ALE/Pong-v5", "proportional", optimizer=optimizer)
    agents = 3 if stacked else None
    if stacked:
        q: torch.nn.Module = StackedQNetwork([network(ATARI, a, "nature_cnn") for a in range(3)])
    else:
        q = network(ATARI, 0, "nature_cnn")
    q = q.to(device)
    q_target = copy.deepcopy(q)
    q_eager, q_eager_target = copy.deepcopy(q), copy.deepcopy(q_target)

    def make_opt(module: torch.nn.Module, capturable: bool) -> torch.optim.Optimizer:
        if stacked:
            return DQNRMSprop(module.parameters(), torch.tensor([2.5e-4, 6.25e-5, 1e-4], device=device))
        return make_optimizer(cfg, module.parameters(), capturable=capturable)

    graphed = OptimizerStep(td_loss(q, q_target, cfg), list(q.parameters()), make_opt(q, True), graph=True)
    eager = OptimizerStep(
        td_loss(q_eager, q_eager_target, cfg),
        list(q_eager.parameters()),
        make_opt(q_eager, False),
        graph=False,
    )
    for b in batches(ATARI, 32, 5, seed=3, agents=agents):
        b = Batch(*(t.to(device) for t in b))
        _, p_graph = graphed(b)
        p_graph = p_graph.clone()
        _, p_eager = eager(b)
        torch.testing.assert_close(p_graph, p_eager, rtol=1e-4, atol=1e-5)
    assert graphed.captured
    for p, p2 in zip(q.parameters(), q_eager.parameters(), strict=True):
        torch.testing.assert_close(p, p2, rtol=1e-4, atol=1e-6)


@cuda
@pytest.mark.parametrize("optimizer", ["dqn_rmsprop", "rmsprop", "adam"])
def test_cuda_graph_update_equals_eager(optimizer: str) -> None:
    """The captured update replays the eager update: same priorities and parameters after 5 steps,
    the warm-up's changes undone (TF32 off on both, so they differ only by kernel choice)."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    _graph_vs_eager(stacked=False, optimizer=optimizer)


@cuda
def test_cuda_graph_stacked_update_equals_eager() -> None:
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    _graph_vs_eager(stacked=True, optimizer="dqn_rmsprop")


@cuda
def test_cuda_graphed_forward_sees_in_place_updates() -> None:
    q = network(ATARI, 0, "nature_cnn").cuda()
    forward = GraphedForward(q, graph=True)
    obs = torch.randint(0, 255, (4, *ATARI.obs_shape), dtype=torch.uint8, device="cuda")
    torch.testing.assert_close(forward(obs), q(obs).detach())
    with torch.no_grad():
        for p in q.parameters():
            p.mul_(1.5)
    torch.testing.assert_close(forward(obs).clone(), q(obs).detach())


@cuda
def test_cuda_host_copy_waits_for_the_device_work() -> None:
    copier = HostCopy(torch.device("cuda"))
    x = torch.arange(1000.0, device="cuda")
    pendings = [copier.start(x * i) for i in range(2)]
    np.testing.assert_allclose(pendings[1].wait(), np.arange(1000.0))
    np.testing.assert_allclose(pendings[0].wait(), np.zeros(1000))
