"""``PrioritizedSamplingCallback``: prioritized supervised learning in a Lightning ``Trainer``.

Prioritized supervised learning (Schaul et al. 2016, Sec. 6) samples each training example with
probability ``P(i) = p_i^α / Σ_k p_k^α`` (Eq. 1), where ``p_i`` is the example's last-seen loss,
and may correct the bias with ``w_i = (N · P(i))^-β / max_j w_j`` (Sec. 3.4), β annealed
linearly to 1 over training.  The callback closes that loop around a ``LightningModule``:

* the train ``DataLoader`` iterates an :class:`~prisample.IndexedDataset` with a
  :class:`~prisample.distributed.DistributedPrioritizedSampler` (also for a single process) and
  ``batch_size == sampler.batch_size``; under DDP the ``Trainer`` needs
  ``use_distributed_sampler=False`` (Lightning's wrapper would fix each epoch's order up front);
* before a step it claims the batch's draw: :func:`batch_weights` then gives the training step the
  weights computed when the batch was drawn;
* the training step returns ``{"loss": ..., "per_sample_loss": ...}``; after the step the callback
  writes the per-sample losses of exactly the drawn indices as their new priorities;
* it logs ``per/beta``, ``per/weight_mean``, ``per/weight_max`` and ``per/max_priority`` (on the
  steps the logger writes, every ``Trainer(log_every_n_steps=...)``), and
  stores the sampler state in the checkpoint, so a resumed run draws what the uninterrupted run
  would have (batches already prefetched at save time included).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

from prisample.distributed import DistributedPrioritizedSampler
from prisample.sampler import PrioritizedSampler
from prisample.weights import LinearSchedule, check_beta


def _batch_indices(batch: Any) -> torch.Tensor:
    """Slot indices of an ``IndexedDataset`` batch: ``batch[0]`` or ``batch["index"]``."""
    indices = batch["index"] if isinstance(batch, Mapping) else batch[0]
    if not isinstance(indices, torch.Tensor):
        raise TypeError(
            "the train batch should come from an IndexedDataset (indices first), "
            f"but got batch[0]={indices!r}"
        )
    return indices


def _to_tensors(obj: Any) -> Any:
    """numpy arrays and scalars as tensors and Python numbers: what ``torch.load(weights_only=True)``,
    which Lightning uses to restore checkpoints, can read back."""
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(obj.copy())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return {key: _to_tensors(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_tensors(value) for value in obj)
    return obj


def _to_arrays(obj: Any) -> Any:
    """Inverse of :func:`_to_tensors` (sampler states hold numpy arrays, never tensors)."""
    if isinstance(obj, torch.Tensor):
        return obj.numpy().copy()
    if isinstance(obj, dict):
        return {key: _to_arrays(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_arrays(value) for value in obj)
    return obj


def _find_sampler(loader: Any) -> DistributedPrioritizedSampler | None:
    """The prioritized sampler behind a train ``DataLoader`` (or a collection of them)."""
    if isinstance(loader, Mapping):
        loaders = list(loader.values())
    else:
        loaders = list(loader) if isinstance(loader, Sequence) else [loader]
    for dl in loaders:
        batch_sampler = getattr(dl, "batch_sampler", None)
        for sampler in (getattr(dl, "sampler", None), getattr(batch_sampler, "sampler", None)):
            if isinstance(sampler, DistributedPrioritizedSampler):
                return sampler
            if isinstance(sampler, PrioritizedSampler):
                raise TypeError(
                    "wrap the PrioritizedSampler in prisample.distributed.DistributedPrioritizedSampler "
                    "so that the callback can find each batch's draw"
                )
            inner = getattr(getattr(sampler, "dataset", None), "_sampler", None)  # Lightning's wrapper
            if isinstance(inner, (DistributedPrioritizedSampler, PrioritizedSampler)):
                raise ValueError(
                    "Trainer(use_distributed_sampler=True) wraps the prioritized sampler and fixes each "
                    "epoch's draws up front: set use_distributed_sampler=False"
                )
    return None


class PrioritizedSamplingCallback(Callback):
    """Feeds per-sample losses back as priorities, anneals β, logs and checkpoints the sampler.

    Args:
        beta_start: when given, β is annealed linearly from this value to ``beta_end`` over the
            run's batches (Sec. 3.4); when ``None`` the sampler keeps its own ``beta``.
        beta_end: β at the end of training (the paper: 1).
        priority_key: key of the per-sample losses in the training step's output.
        sampler: the sampler to drive; by default the one behind the train ``DataLoader``.

    >>> cb = PrioritizedSamplingCallback(beta_start=0.4)
    >>> cb.state_key
    'PrioritizedSamplingCallback'
    """

    def __init__(
        self,
        beta_start: float | None = None,
        beta_end: float = 1.0,
        priority_key: str = "per_sample_loss",
        sampler: DistributedPrioritizedSampler | None = None,
    ) -> None:
        if beta_start is not None:
            check_beta(beta_start, "beta_start")
        check_beta(beta_end, "beta_end")
        if sampler is not None and not isinstance(sampler, DistributedPrioritizedSampler):
            raise TypeError(f"sampler should be a DistributedPrioritizedSampler, but got sampler={sampler!r}")
        self.beta_start = beta_start
        self.beta_end = beta_end
        self.priority_key = priority_key
        self.sampler = sampler
        self.batch_weights: torch.Tensor | None = None
        self._batch_indices: torch.Tensor | None = None
        self._beta = 0.0
        self._loaded: dict[str, Any] | None = None

    # -- setup ----------------------------------------------------------------------------------
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # A sampler built in the DataModule's setup() is found here, before a checkpoint is restored
        # and before the train DataLoader's workers start prefetching from it.
        if self.sampler is None:
            datamodule = getattr(trainer, "datamodule", None)
            for value in vars(datamodule).values() if datamodule is not None else ():
                if isinstance(value, DistributedPrioritizedSampler):
                    self.sampler = value
                    break

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        found = _find_sampler(trainer.train_dataloader)
        if self.sampler is None:
            self.sampler = found
        if self.sampler is None:
            raise ValueError(
                "no DistributedPrioritizedSampler found behind the train DataLoader: pass sampler=..."
            )
        if found is not None and found is not self.sampler:
            raise ValueError("the callback's sampler is not the one behind the train DataLoader")
        loader = trainer.train_dataloader
        batch_size = getattr(loader, "batch_size", None)
        if isinstance(batch_size, int) and batch_size != self.sampler.batch_size:
            raise ValueError(
                "the train DataLoader's batch_size should equal "
                f"sampler.batch_size={self.sampler.batch_size}, but got batch_size={batch_size}"
            )
        if self.beta_start is not None:
            batches = int(trainer.estimated_stepping_batches) * trainer.accumulate_grad_batches
            self.sampler.sampler.beta = LinearSchedule(self.beta_start, self.beta_end, max(batches, 1))
        if self._loaded is not None:
            if self.sampler.pending:
                raise RuntimeError(
                    "the train DataLoader drew batches before the checkpointed sampler state could be "
                    "restored (DataLoader workers prefetch at creation): build the sampler in the "
                    "DataModule's setup() or pass it to the callback, so that it is restored first"
                )
            self.sampler.load_state_dict(self._loaded)
            self._loaded = None

    # -- the loop -------------------------------------------------------------------------------
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        assert self.sampler is not None
        indices = _batch_indices(batch)
        # PER: the weights of this batch are those computed when it was drawn.
        draw, beta = self.sampler.take_with_beta(indices)
        weights = torch.from_numpy(draw.weights).to(pl_module.device)
        self.batch_weights, self._batch_indices, self._beta = weights, indices, beta

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        assert self.sampler is not None and self.batch_weights is not None
        if not isinstance(outputs, Mapping) or self.priority_key not in outputs:
            raise ValueError(
                f"training_step should return a dict with {self.priority_key!r} (one loss per sample), "
                f"but got {type(outputs).__name__}"
            )
        losses = torch.as_tensor(outputs[self.priority_key]).detach().reshape(-1)
        if self._batch_indices is None or losses.shape[0] != self._batch_indices.shape[0]:
            raise ValueError(
                f"{self.priority_key} should hold one value per sample of the batch, "
                f"but got shape {tuple(losses.shape)}"
            )
        # PER: the drawn examples' new priorities are their losses, p_i = |loss_i| (+ ε inside).
        self.sampler.update_priorities(self._batch_indices, losses.abs().double())
        # Lightning writes on_step values every log_every_n_steps; a log() call costs about a
        # millisecond, several times the sampler's own work, so the other steps skip it.
        if trainer.global_step % max(int(getattr(trainer, "log_every_n_steps", 1)), 1) == 0:
            self._log(pl_module)
        self._batch_indices = None

    def _log(self, pl_module: pl.LightningModule) -> None:
        assert self.sampler is not None and self.batch_weights is not None
        w = self.batch_weights
        pl_module.log_dict(
            {
                "per/beta": float(self._beta),
                "per/weight_mean": float(w.mean()),
                "per/weight_max": float(w.max()),
                "per/max_priority": float(self.sampler.sampler.max_priority),
            },
            on_step=True,
            on_epoch=False,
        )

    # -- checkpointing --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        if self.sampler is None:
            return {} if self._loaded is None else {"sampler": _to_tensors(self._loaded)}
        return {"sampler": _to_tensors(self.sampler.state_dict())}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # The sampler is built with the DataLoader, after checkpoint restore: apply it at train start.
        loaded = state_dict.get("sampler")
        self._loaded = None if loaded is None else _to_arrays(loaded)
        if self._loaded is not None and self.sampler is not None:
            self.sampler.load_state_dict(self._loaded)
            self._loaded = None


def batch_weights(trainer: pl.Trainer) -> torch.Tensor | None:
    """Importance weights of the batch being trained (from the trainer's
    :class:`PrioritizedSamplingCallback`), or ``None`` when the trainer has no such callback."""
    for callback in trainer.callbacks:  # type: ignore[attr-defined]
        if isinstance(callback, PrioritizedSamplingCallback):
            return callback.batch_weights
    return None
