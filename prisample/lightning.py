"""``PrioritizedSamplingCallback``: prioritized supervised learning in a Lightning ``Trainer``.

Prioritized supervised learning (Schaul et al. 2016, Sec. 6) samples each training example with
probability ``P(i) = p_i^α / Σ_k p_k^α`` (Eq. 1), where ``p_i`` is the example's last-seen loss,
and may correct the bias with ``w_i = (N · P(i))^-β / max_j w_j`` (Sec. 3.4).  The paper's
supervised experiment uses β = 0: there the skew of ``P`` *is* the point (rare, hard examples seen
more often), and β = 1 would undo it, so β is only annealed when asked for.  The callback closes
that loop around a ``LightningModule``:

* the train ``DataLoader`` iterates an :class:`~prisample.IndexedDataset` with
  ``batch_size == sampler.batch_size`` and, as its sampler, a :class:`~prisample.PrioritizedSampler`
  (one process), a :class:`~prisample.ledger.DrawLedger` (one process, any ``num_workers``) or a
  :class:`~prisample.distributed.DistributedPrioritizedSampler` (DDP; the ``Trainer`` then needs
  ``use_distributed_sampler=False``: Lightning's wrapper would fix each epoch's order up front);
* before a step it claims the batch's draw: :func:`batch_weights` then gives the training step the
  weights computed when the batch was drawn;
* the training step returns ``{"loss": ..., "per_sample_loss": ...}``; after the step the callback
  writes the per-sample losses of exactly the drawn indices as their new priorities (real and
  finite: otherwise a ``TypeError``/``ValueError`` names the key, ``per_sample_loss`` or the
  ``priority_key`` given, and nothing is written);
* it logs ``per/beta``, ``per/weight_mean``, ``per/weight_max`` and ``per/max_priority`` (on the
  steps the logger writes, every ``Trainer(log_every_n_steps=...)``), feeds every batch's weights
  to a :class:`~prisample.diagnostics.WeightMonitor` (``weight_mean``: their mean over the last
  100 batches; one ``RuntimeWarning`` if it falls below 0.01), and
  stores the sampler state in the checkpoint, so a resumed run draws what the uninterrupted run
  would have (batches already prefetched at save time included);
* with ``diagnostics=`` (a :class:`~prisample.diagnostics.Diagnostics`) it records each batch's
  draw and priority update, snapshots the priorities on the logged steps and, with
  ``diagnostics_dir=``, writes ``diagnostics.json`` and the PNGs there when fitting ends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

from prisample.diagnostics import Diagnostics, WeightMonitor
from prisample.distributed import DistributedPrioritizedSampler
from prisample.ledger import DrawLedger
from prisample.sampler import INDEXED_HINT, PrioritizedSampler, loader_batch_size_problem
from prisample.weights import LinearSchedule, check_beta

__all__ = ["PrioritizedSamplingCallback", "batch_weights"]


_Driver = DrawLedger | DistributedPrioritizedSampler
_SAMPLERS = (DistributedPrioritizedSampler, DrawLedger, PrioritizedSampler)
_INDEXED = INDEXED_HINT
_ONE_SAMPLER = (
    "build the sampler (and any DrawLedger over it) once, in the DataModule's (or LightningModule's) "
    "setup(), keep it as an attribute and give that same object to the DataLoader in "
    "train_dataloader() (one built inside train_dataloader() is a new one, unknown to the callback), "
    "or pass it as PrioritizedSamplingCallback(sampler=...)"
)


def _batch_indices(batch: Any) -> torch.Tensor:
    """Slot indices of an ``IndexedDataset`` batch (``batch[0]`` or ``batch["index"]``)."""
    if isinstance(batch, Mapping):
        indices, where = batch.get("index"), 'batch["index"]'
    elif isinstance(batch, (list, tuple)) and batch:
        indices, where = batch[0], "batch[0]"
    else:
        indices, where = batch, "batch"
    if not isinstance(indices, torch.Tensor):
        raise TypeError(f"{where} should be the slot indices ({_INDEXED}), but got {where}={indices!r:.80}")
    if indices.ndim != 1 or indices.dtype.is_floating_point or indices.dtype.is_complex:
        raise TypeError(
            f"{where} should be the slot indices, one integer per sample ({_INDEXED}), "
            f"but got a {indices.dtype} tensor of shape {tuple(indices.shape)}"
        )
    return indices


def _per_sample_losses(values: Any, key: str) -> torch.Tensor:
    """The training step's ``outputs[key]``, detached and flat; ``TypeError`` naming ``key`` unless
    it holds real numbers."""
    try:
        losses = torch.as_tensor(values).detach()
    except (TypeError, ValueError, RuntimeError) as error:
        raise TypeError(
            f"{key} should be a tensor of per-sample losses, but got {key}={values!r:.80}"
        ) from error
    if losses.dtype == torch.bool or losses.is_complex():
        raise TypeError(f"{key} should hold real numbers, but got dtype {losses.dtype}")
    return losses.reshape(-1)


def _non_finite(losses: torch.Tensor, key: str) -> str | None:
    """The message naming ``key`` and the first NaN or infinite loss; ``None`` if all are finite
    (one value read back, where the update copies them all to the host anyway)."""
    finite = torch.isfinite(losses)
    if bool(finite.all()):
        return None
    j = int(torch.nonzero(~finite)[0, 0])
    return f"{key} should be finite, but got {key}[{j}]={float(losses[j])!r}"


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
        return obj.detach().cpu().numpy().copy()
    if isinstance(obj, dict):
        return {key: _to_arrays(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_arrays(value) for value in obj)
    return obj


def _loaders(loader: Any) -> list[Any]:
    if isinstance(loader, Mapping):
        return list(loader.values())
    return list(loader) if isinstance(loader, Sequence) else [loader]


def _find_sampler(loader: Any) -> tuple[Any, Any] | tuple[None, None]:
    """The prioritized sampler behind a train ``DataLoader`` (or a collection of them), and its loader."""
    for dl in _loaders(loader):
        batch_sampler = getattr(dl, "batch_sampler", None)
        for sampler in (getattr(batch_sampler, "sampler", None), getattr(dl, "sampler", None)):
            if isinstance(sampler, _SAMPLERS):
                return sampler, dl
            inner = getattr(getattr(sampler, "dataset", None), "_sampler", None)  # Lightning's wrapper
            if isinstance(inner, _SAMPLERS):
                raise ValueError(
                    "Trainer(use_distributed_sampler=True) wraps the prioritized sampler and fixes each "
                    "epoch's draws up front: set use_distributed_sampler=False"
                )
    return None, None


def _driver(sampler: Any) -> _Driver:
    """What the callback claims draws from and writes priorities to."""
    return DrawLedger(sampler) if isinstance(sampler, PrioritizedSampler) else sampler


def _drives(driver: _Driver, sampler: Any) -> bool:
    """Whether ``sampler`` (found behind the loader) is ``driver`` or the sampler it draws from."""
    return sampler is driver or (isinstance(driver, DrawLedger) and sampler is driver.sampler)


class PrioritizedSamplingCallback(Callback):
    """Feeds per-sample losses back as priorities, sets β, logs and checkpoints the sampler.

    Args:
        beta_start: ``β`` of the importance weights ``(N · P(i))^-β`` (Sec. 3.4) from the first
            batch; ``None`` keeps the sampler's own ``beta``.  For supervised learning use 0 (the
            paper's Sec. 6 experiment): weights with β > 0 undo part of the rebalancing that
            prioritization is for, and β = 1 all of it in expectation.
        beta_end: when given, β is annealed linearly from ``beta_start`` to this over the run's
            batches (the paper's RL setting: 0.4 → 1); ``None`` holds β at ``beta_start``.
            Without ``beta_start`` it has no effect.
        priority_key: key of the per-sample losses in the training step's output.
        sampler: the sampler to drive (a ``PrioritizedSampler``, ``DrawLedger`` or
            ``DistributedPrioritizedSampler``); by default the one found among the DataModule's or
            the LightningModule's attributes, else the one behind the train ``DataLoader``.
        diagnostics: a :class:`~prisample.diagnostics.Diagnostics` to record into: every batch's
            draw (replay counts ``M_i``, weights) and new priorities, and on the steps the logger
            writes a snapshot of the sorted priorities and of ``P(i)`` against them (Figs. 10-11).
            Plot it on demand with ``diagnostics.plot(prefix)``.
        diagnostics_dir: where ``diagnostics.json`` and ``diagnostics_*.png`` are written when
            fitting ends (by the global rank 0); ``None``: nothing is written.

    >>> cb = PrioritizedSamplingCallback(beta_start=0.0)
    >>> cb.state_key
    'PrioritizedSamplingCallback'
    """

    def __init__(
        self,
        beta_start: float | None = None,
        beta_end: float | None = None,
        priority_key: str = "per_sample_loss",
        sampler: PrioritizedSampler | DrawLedger | DistributedPrioritizedSampler | None = None,
        diagnostics: Diagnostics | None = None,
        diagnostics_dir: str | Path | None = None,
    ) -> None:
        if beta_start is not None:
            check_beta(beta_start, "beta_start")
        if beta_end is not None:
            check_beta(beta_end, "beta_end")
        if not isinstance(priority_key, str):
            raise TypeError(f"priority_key should be a string, but got priority_key={priority_key!r}")
        if sampler is not None and not isinstance(sampler, _SAMPLERS):
            raise TypeError(
                "sampler should be a PrioritizedSampler, DrawLedger or DistributedPrioritizedSampler, "
                f"but got sampler={sampler!r}"
            )
        if diagnostics is not None and not isinstance(diagnostics, Diagnostics):
            raise TypeError(
                f"diagnostics should be a prisample.diagnostics.Diagnostics, but got {diagnostics!r:.80}"
            )
        self.diagnostics = diagnostics
        self.diagnostics_dir = None if diagnostics_dir is None else Path(diagnostics_dir)
        self.beta_start = beta_start
        self.beta_end = beta_end
        self.priority_key = priority_key
        self.sampler = sampler
        self.batch_weights: torch.Tensor | None = None
        self._driver: _Driver | None = None if sampler is None else _driver(sampler)
        self._known = sampler is not None  # found before the train DataLoader could draw from it
        self._batch_indices: torch.Tensor | None = None
        self._beta = 0.0
        self._loaded: dict[str, Any] | None = None
        self.weight_monitor = WeightMonitor()
        """The mean importance weight over the last batches; warns once if it collapses."""

    @property
    def weight_mean(self) -> float:
        """Mean importance weight over the last 100 batches (NaN before the first)."""
        return self.weight_monitor.weight_mean

    # -- setup ----------------------------------------------------------------------------------
    def _adopt(self, sampler: Any) -> None:
        self.sampler, self._driver = sampler, _driver(sampler)
        if self._loaded is not None:
            self._driver.load_state_dict(self._loaded)
            self._loaded = None

    def _find_early(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A sampler among the DataModule's or the LightningModule's attributes: found before a
        checkpoint is restored into it and before the train DataLoader's workers draw from it."""
        if self._driver is not None:
            return
        found: list[Any] = []
        for owner in (getattr(trainer, "datamodule", None), pl_module):
            found += [
                v for v in (vars(owner).values() if owner is not None else ()) if isinstance(v, _SAMPLERS)
            ]
        for kind in _SAMPLERS:  # the outermost wrapper drives the ones inside it
            match = [v for v in found if isinstance(v, kind)]
            if match:
                self._adopt(match[0])
                self._known = True
                return

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._find_early(trainer, pl_module)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # The last hook before the train DataLoader is requested (LightningModule.setup ran).
        self._find_early(trainer, pl_module)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        found, loader = _find_sampler(trainer.train_dataloader)
        if self._driver is None:
            if found is None:
                raise ValueError(
                    "no PrioritizedSampler found behind the train DataLoader: pass sampler=... to "
                    "PrioritizedSamplingCallback or use one as the DataLoader's sampler"
                )
            workers = getattr(loader, "num_workers", 0)
            if workers:
                # The DataLoader's iterator is created before this hook, and with workers it draws
                # prefetch_factor × num_workers batches at creation: on resume those would come from
                # a sampler the checkpoint was not yet restored into.
                raise ValueError(
                    f"a sampler first seen behind a DataLoader with num_workers={workers} cannot be "
                    "restored from a checkpoint before the DataLoader draws from it: build it in the "
                    "DataModule's (or LightningModule's) setup() and keep it as an attribute, or pass "
                    "it as PrioritizedSamplingCallback(sampler=...)"
                )
            self._adopt(found)
        driver = self._driver
        assert driver is not None
        if found is not None and not _drives(driver, found):
            raise ValueError(
                "the train DataLoader should iterate the callback's sampler, but got another "
                f"{type(found).__name__} (a different object): {_ONE_SAMPLER}"
            )
        if found is None:
            raise ValueError(
                "the train DataLoader should iterate the callback's sampler, but it has another sampler: "
                + _ONE_SAMPLER
            )
        if isinstance(found, PrioritizedSampler):
            self._install(driver, found, loader)
        if trainer.world_size > 1 and not isinstance(driver, DistributedPrioritizedSampler):
            raise ValueError(
                f"with {trainer.world_size} processes the sampler should be a "
                "prisample.distributed.DistributedPrioritizedSampler (one draw shared by all ranks)"
            )
        problem = loader_batch_size_problem(getattr(loader, "batch_size", None), driver.batch_size)
        if problem is not None:
            raise ValueError(problem)
        if self.beta_start is not None:
            if self.beta_end is None:
                driver.beta = self.beta_start
            else:
                batches = int(trainer.estimated_stepping_batches) * trainer.accumulate_grad_batches
                driver.beta = LinearSchedule(self.beta_start, self.beta_end, max(batches, 1))
        if self._loaded is not None:
            if driver.pending:
                raise RuntimeError(
                    "the train DataLoader drew batches before the checkpointed sampler state could be "
                    "restored: build the sampler in the DataModule's setup() or pass it to the callback"
                )
            driver.load_state_dict(self._loaded)
            self._loaded = None
        if self.diagnostics is not None:
            self.diagnostics.attach(driver.sampler)  # a dataset: every example is there already

    @staticmethod
    def _install(ledger: _Driver, sampler: PrioritizedSampler, loader: Any) -> None:
        """Make the DataLoader iterate ``ledger`` instead of the plain ``sampler`` it was given.

        The ledger records each draw (for draw-time weights) and the epoch position (for exact
        resume).  Without workers the DataLoader's iterator, created before ``on_train_start``,
        has not drawn yet and reads its batch sampler's ``sampler`` at its first batch."""
        workers = getattr(loader, "num_workers", 0)
        batch_sampler = getattr(loader, "batch_sampler", None)
        fix = "give the DataLoader sampler=prisample.ledger.DrawLedger(sampler) (built in setup())"
        if workers:
            raise ValueError(
                f"a DataLoader with num_workers={workers} draws from a plain PrioritizedSampler before "
                f"training starts, out of the callback's sight: {fix}"
            )
        if batch_sampler is None or batch_sampler.sampler is not sampler:
            raise ValueError(f"the train DataLoader should batch its PrioritizedSampler itself: {fix}")
        batch_sampler.sampler = ledger

    # -- the loop -------------------------------------------------------------------------------
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        assert self._driver is not None
        indices = _batch_indices(batch)
        # PER: the weights of this batch are those computed when it was drawn.
        draw, beta = self._driver.take_with_beta(indices)
        self.weight_monitor.update(draw.weights)
        weights = torch.from_numpy(draw.weights).to(pl_module.device)
        self.batch_weights, self._batch_indices, self._beta = weights, indices, beta
        if self.diagnostics is not None:
            self.diagnostics.on_draw(trainer.global_step, draw)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        assert self._driver is not None and self.batch_weights is not None
        key = self.priority_key
        if not isinstance(outputs, Mapping) or key not in outputs:
            got = (
                f"keys {sorted(map(str, outputs))}"
                if isinstance(outputs, Mapping)
                else type(outputs).__name__
            )
            raise ValueError(
                f'training_step should return {{"loss": ..., "{key}": ...}} ({key}: the unreduced '
                f"loss, one value per sample; a returned tensor arrives as {{'loss': tensor}}), "
                f"but got {got}"
            )
        losses = _per_sample_losses(outputs[key], key)
        if self._batch_indices is None or losses.shape[0] != self._batch_indices.shape[0]:
            raise ValueError(
                f"{key} should hold one value per sample of the batch (reduction='none'), "
                f"but got shape {tuple(torch.as_tensor(outputs[key]).shape)}"
            )
        bad = _non_finite(losses, key)
        if bad is not None and not isinstance(self._driver, DistributedPrioritizedSampler):
            raise ValueError(bad)
        try:
            # PER: the drawn examples' new priorities are their losses, p_i = |loss_i| (+ ε inside).
            self._driver.update_priorities(self._batch_indices, losses.abs().double())
        except ValueError as error:
            if bad is None:
                raise
            # Under DDP the update is a collective that refuses on every rank, after the gather.
            raise ValueError(bad) from error
        if self.diagnostics is not None:
            self.diagnostics.on_update(self._batch_indices, losses.abs())
        # Lightning writes on_step values every log_every_n_steps; a log() call costs about a
        # millisecond, several times the sampler's own work, so the other steps skip it.
        if trainer.global_step % max(int(getattr(trainer, "log_every_n_steps", 1)), 1) == 0:
            self._log(pl_module)
            if self.diagnostics is not None:
                self.diagnostics.snapshot(trainer.global_step, self._driver.sampler)
        self._batch_indices = None

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.diagnostics is None or self._driver is None:
            return
        self.diagnostics.snapshot(trainer.global_step, self._driver.sampler)
        if self.diagnostics_dir is not None and trainer.is_global_zero:
            self.diagnostics.save_json(self.diagnostics_dir / "diagnostics.json")
            self.diagnostics.plot(self.diagnostics_dir / "diagnostics")

    def _log(self, pl_module: pl.LightningModule) -> None:
        assert self._driver is not None and self.batch_weights is not None
        w = self.batch_weights
        pl_module.log_dict(
            {
                "per/beta": float(self._beta),
                "per/weight_mean": float(w.mean()),
                "per/weight_max": float(w.max()),
                "per/max_priority": float(self._driver.max_priority),
            },
            on_step=True,
            on_epoch=False,
        )

    # -- checkpointing --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        if self._driver is None:
            return {} if self._loaded is None else {"sampler": _to_tensors(self._loaded)}
        return {"sampler": _to_tensors(self._driver.state_dict())}

    def load_state_dict(self, state_dict: Any) -> None:
        """Restore :meth:`state_dict` output; a malformed state raises and changes nothing.

        With the sampler already known, its own load validates every key first; otherwise the
        state is kept and applied (and validated) when the sampler is found, before any draw."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"state_dict should be a dict, but got state_dict={state_dict!r:.80}")
        unknown = sorted(map(str, state_dict.keys() - {"sampler"}))
        if unknown:
            raise ValueError(f"state_dict has unknown keys {unknown}")
        loaded = state_dict.get("sampler")
        if loaded is None:
            if "sampler" in state_dict:
                raise TypeError("state_dict sampler should be a sampler state, but got sampler=None")
            return
        if not isinstance(loaded, Mapping):
            raise TypeError(f"state_dict sampler should be a dict, but got sampler={loaded!r:.80}")
        arrays = _to_arrays(dict(loaded))
        if self._driver is not None:
            self._driver.load_state_dict(arrays)
        else:
            self._loaded = arrays


def batch_weights(trainer: pl.Trainer) -> torch.Tensor | None:
    """Importance weights of the batch being trained (from the trainer's
    :class:`PrioritizedSamplingCallback`), or ``None`` when the trainer has no such callback."""
    for callback in trainer.callbacks:  # type: ignore[attr-defined]
        if isinstance(callback, PrioritizedSamplingCallback):
            return callback.batch_weights
    return None
