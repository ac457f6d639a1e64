"""A short tour of ``PrioritizedSampler``: what it draws, how it weights, and how it plugs in.

Run with ``python -m recipes.demo tour`` (``make demo``).  Every number printed is computed here, on
synthetic data, in well under a minute on two CPU cores:

1. sampling frequencies of the proportional and rank-based backends against the exact ``P(i)``;
2. importance-sampling weights with the three normalisations;
3. a ``DataLoader`` whose sampler learns, from per-sample losses, to revisit a rare hard class;
4. a replay-style loop: add at max priority, sample, update with new errors.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from prisample import IndexedDataset, PrioritizedSampler
from recipes.demo.config import DemoConfig, parse_command

FloatArray = npt.NDArray[np.float64]


def exact_proportional(priorities: FloatArray, alpha: float, eps: float) -> FloatArray:
    """``P(i) = (p_i + ε)^α / Σ_k (p_k + ε)^α``."""
    mass = (priorities + eps) ** alpha
    probabilities: FloatArray = mass / mass.sum()
    return probabilities


def exact_rank(priorities: FloatArray, alpha: float) -> FloatArray:
    """``P(i) = rank(i)^-α / Σ_r r^-α`` with rank 1 for the largest priority."""
    ranks = np.empty(len(priorities))
    ranks[np.argsort(-priorities, kind="stable")] = np.arange(1, len(priorities) + 1)
    mass = ranks**-alpha
    probabilities: FloatArray = mass / mass.sum()
    return probabilities


def frequencies(sampler: PrioritizedSampler, draws: int, batch: int = 32) -> FloatArray:
    counts = np.zeros(sampler.capacity)
    for _ in range(draws // batch):
        np.add.at(counts, sampler.sample(batch).indices, 1)
    shares: FloatArray = counts / counts.sum()
    return shares


def show_distributions(config: DemoConfig) -> None:
    print("1. Sampling frequencies against the exact distribution")
    priorities = np.array([0.0, 0.1, 0.2, 0.5, 1.0, 2.0, 4.0, 8.0])
    print(f"   priorities |δ|: {priorities.tolist()}")
    for backend, alpha, exact in (
        ("proportional", 0.6, exact_proportional(priorities, 0.6, 1e-6)),
        ("rank", 0.7, exact_rank(priorities, 0.7)),
    ):
        sampler = PrioritizedSampler(len(priorities), alpha=alpha, backend=backend, seed=config.seed)
        sampler.update_priorities(np.arange(len(priorities)), priorities)
        seen = frequencies(sampler, config.draws)
        print(f"   {backend} (α = {alpha}), {config.draws:,} draws in stratified batches of 32:")
        print("     slot     " + " ".join(f"{i:>6d}" for i in range(len(priorities))))
        print("     exact P  " + " ".join(f"{p:6.3f}" for p in exact))
        print("     observed " + " ".join(f"{p:6.3f}" for p in seen))
        print(f"     total variation: {0.5 * np.abs(seen - exact).sum():.4f}")


def show_weights() -> None:
    print("\n2. Importance-sampling weights w_i = (N·P(i))^-β, β = 1, normalised three ways")
    priorities = np.array([1.0, 1.0, 2.0, 4.0])
    for norm in ("memory", "batch", "none"):
        sampler = PrioritizedSampler(4, alpha=1.0, beta=1.0, eps=1e-9, weight_norm=norm, seed=0)
        sampler.update_priorities(np.arange(4), priorities)
        batch = np.array([2, 3])
        print(
            f"   {norm:>6}: P = {np.round(sampler.probabilities(batch), 4).tolist()}, "
            f"w = {np.round(sampler.weights(batch).astype(float), 4).tolist()}"
        )
    print("   'memory' divides by the largest weight over the memory (the paper's Algorithm 1),")
    print("   'batch' by the largest in the batch; both keep every weight <= 1.")


def make_rare_class_data(config: DemoConfig) -> TensorDataset:
    generator = torch.Generator().manual_seed(config.seed)
    n_rare = int(config.dataset_size * config.rare_fraction)
    labels = torch.zeros(config.dataset_size, dtype=torch.long)
    labels[:n_rare] = 1
    features = torch.randn(config.dataset_size, 2, generator=generator)
    features[:n_rare] += torch.tensor([2.5, 2.5])
    return TensorDataset(features, labels)


def show_dataloader(config: DemoConfig) -> None:
    print("\n3. DataLoader(sampler=PrioritizedSampler): per-sample losses become priorities")
    dataset = make_rare_class_data(config)
    n_rare = int(config.dataset_size * config.rare_fraction)
    for label, alpha in (("uniform (α = 0)", 0.0), ("prioritized (α = 1)", 1.0)):
        torch.manual_seed(config.seed)
        model = nn.Linear(2, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        sampler = PrioritizedSampler(len(dataset), alpha=alpha, beta=0.0, batch_size=50, seed=config.seed)
        loader = DataLoader(IndexedDataset(dataset), sampler=sampler, batch_size=50)
        rare_draws = 0
        for _ in range(config.epochs):
            for indices, x, y in loader:
                losses = nn.functional.cross_entropy(model(x), y, reduction="none")
                optimizer.zero_grad()
                losses.mean().backward()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
                optimizer.step()
                sampler.update_priorities(indices, losses.detach())  # the one added line
                rare_draws += int((indices < n_rare).sum())
        with torch.no_grad():
            features = dataset.tensors[0]
            rare_recall = (model(features[:n_rare]).argmax(1) == 1).float().mean().item()
        share = rare_draws / (config.epochs * len(dataset))
        print(f"   {label:<20} rare class: {share:5.1%} of draws, recall {rare_recall:5.1%}")
    print(f"   (the rare class is {config.rare_fraction:.0%} of the data)")


def show_replay_loop(config: DemoConfig) -> None:
    print("\n4. A replay loop: new items enter at the maximum priority of the memory")
    rng = np.random.default_rng(config.seed)
    sampler = PrioritizedSampler(1000, alpha=0.6, beta=0.4, size=0, seed=config.seed)
    for step in range(2000):
        sampler.add([step % 1000])  # ring buffer: slot step % 1000 is (re)written
        if step >= 100 and step % 4 == 0:
            draw = sampler.sample(32)
            td_errors = rng.normal(scale=0.5, size=32)
            sampler.update_priorities(draw.indices, np.abs(td_errors))
    draw = sampler.sample(8)
    print(f"   size {sampler.size}, max priority {sampler.max_priority:.3f}")
    print(f"   a draw: indices {draw.indices.tolist()}")
    print(f"           weights {np.round(draw.weights.astype(float), 3).tolist()}")


def main(config: DemoConfig | None = None) -> None:
    config = DemoConfig() if config is None else config
    torch.set_num_threads(1)
    show_distributions(config)
    show_weights()
    show_dataloader(config)
    show_replay_loop(config)


def command(argv: list[str]) -> None:
    """``python -m recipes.demo tour [options]``: the options as a :class:`DemoConfig`, then :func:`main`."""
    return main(parse_command(argv))
