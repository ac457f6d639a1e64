"""The device side of a sequence replay: items drawn, gathered and re-prioritized on a torch device
with no host synchronisation.

:class:`SequenceDeviceSteps` is what a :class:`~prisample.replay.sequence.SequenceReplay` with its
priorities on the device (``priorities_on=device``, or ``backend="device_proportional"`` /
``"device_uniform"``) holds beside its parts: the memory (mirrored on the device:
:mod:`prisample.replay.device`), the item index (:class:`~prisample.replay.sequence_items.SequenceItems`,
on the host, authoritative), a :class:`~prisample.device_sampler.DevicePrioritizedSampler` over the
memory's slots (one filled slot per drawable item, at its first step) and a
:class:`~prisample.replay.write_back.DeviceWriteBackGuard`.

What lives on the device, written when items become drawable or leave (a write may be slow; the
learner's step never waits):

============================  ========================================================================
table                         contents
============================  ========================================================================
``row_of`` ``(capacity,)``    per slot, the table row of the drawable item starting there (``-1``: none)
``live`` ``(capacity,)``      per slot, the generation of the drawable item starting there (``-1``: none)
``table`` ``(R, W + 2)``      per row: the item's ``W`` window slots (the last valid one repeated), its
                              number of steps ``L`` and its generation
``state`` ``(R, *shape)``     per row (and per name): the recurrent state at the item's first step
============================  ========================================================================

``R = ⌈capacity / min(period, min_steps)⌉`` rows: drawable items of one episode start ``period``
steps apart and the last one has at least ``min_steps`` live steps, so an episode holding ``k``
drawable items holds at least ``(k − 1)·period + min_steps ≥ k·min(period, min_steps)`` live steps,
and the memory at most ``capacity``.

A draw (:meth:`SequenceDeviceSteps.sample`) is a fixed sequence of tensor operations: the device
sampler's stratified draw and weights (Schaul et al. 2016, Eq. 1 and Sec. 3.4), one ``index_select``
of the rows, the masks from the lengths (``valid[j] = j < L``, ``learn[j] = valid[j] and burn_in <=
j < burn_in + length``), one gather of the ring's columns at the ``B·W`` window slots, one of the
frame-row tables and one of the frames (``s_{t+j}`` for ``j < L``, the last step's ``next_obs``
after it), the state rows, and the draw record.  An update (:meth:`SequenceDeviceSteps.update`,
:meth:`SequenceDeviceSteps.update_from_td` with the R2D2 mix ``p = η·max|δ| + (1 − η)·mean|δ|``
over the learn steps, Kapturowski et al. 2019) checks the generations on the device and writes the
live entries with the stale ones masked out and counted there.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from prisample._capture import capturing
from prisample.device_sampler import DeviceDraw, DevicePrioritizedSampler
from prisample.replay.device import TorchFrames, torch_dtype
from prisample.replay.memory import ReplayMemory
from prisample.replay.sequence_items import COMPLETE, ItemChanges, SequenceItems
from prisample.replay.stores import DictStore, FrameStore
from prisample.replay.write_back import DeviceWriteBackGuard

__all__ = ["SequenceDeviceSteps", "device_rows"]

IntArray = npt.NDArray[np.int64]

_READ_AROUND = 64
"""The most removed items whose maximum is read around in one write (as the one-step device
path); more are removed in a write of their own first."""


def device_rows(capacity: int, period: int, min_steps: int) -> int:
    """Rows of the device item table: ``⌈capacity / min(period, min_steps)⌉``, the most items
    drawable at once (see the module)."""
    return -(-capacity // min(period, min_steps))


def _steps_axis(flat: torch.Tensor, b: int, w: int) -> torch.Tensor:
    """``(B·W, ...)`` as ``(B, W, ...)`` (a view)."""
    return flat.view(b, w, *flat.shape[1:])


def _as_words(array: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """``array``'s bytes, zero-padded to a multiple of 8, as int64 words (sent with the indices)."""
    raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    pad = -raw.shape[0] % 8
    if pad:
        raw = np.concatenate([raw, np.zeros(pad, dtype=np.uint8)])
    return raw.view(np.int64)


class SequenceDeviceSteps:
    """The device tables of the drawable items over ``memory`` (built with a device), ``items``,
    ``sampler`` and ``guard`` (see the module); ``single_state``: the state is one unnamed array
    (the batch's ``state`` is then that array, else a dict)."""

    def __init__(
        self,
        memory: ReplayMemory,
        items: SequenceItems,
        sampler: DevicePrioritizedSampler,
        guard: DeviceWriteBackGuard,
        *,
        eta: float,
        single_state: bool,
    ) -> None:
        device = memory.device
        if device is None:
            raise ValueError("a sequence replay's device steps need a memory with device= set")
        self.device: torch.device = device
        self.memory, self.items, self.sampler, self.guard = memory, items, sampler, guard
        self.eta, self.single_state = eta, single_state
        w = items.window
        self.rows = device_rows(items.capacity, items.period, items.min_steps)
        """Rows of the item table ``R``."""
        c = items.capacity
        self.row_of = torch.full((c,), -1, dtype=torch.int64, device=device)
        """Per slot, the table row of the drawable item starting there (``-1``: none)."""
        self.live = torch.full((c,), -1, dtype=torch.int64, device=device)
        """Per slot, the generation of the drawable item starting there (``-1``: none)."""
        self.table = torch.zeros((self.rows, w + 2), dtype=torch.int64, device=device)
        """Per row: the window's ``W`` slots, then ``L`` and the generation."""
        self.state: dict[str, torch.Tensor] = {
            name: torch.zeros(
                (self.rows, *shape), dtype=torch_dtype(dtype, f"state {name!r} dtype"), device=device
            )
            for name, (shape, dtype) in (items.state or {}).items()
        }
        """Per name, the recurrent state at each row's item start."""
        steps = torch.arange(w, device=device)
        self._steps = steps
        self._band = (steps >= items.burn_in) & (steps < items.burn_in + items.length)
        stack = getattr(memory.store, "frame_stack", 1)
        positions = torch.arange(w + 1, device=device)
        self._positions = positions[None, :]
        """Observation positions ``j = 0 .. W``."""
        self._position_frames = positions[:, None] + torch.arange(stack, device=device)[None, :]
        """``j + f`` per position and frame of a stack: padding reads the final stack's frame
        ``min(j + f - L, stack - 1)``."""
        self._host_row = np.full(c, -1, dtype=np.int64)
        self._free = np.arange(self.rows, dtype=np.int64)[::-1].copy()
        self._nfree = self.rows
        self.drawable = 0
        """Drawable items, as the host counts them (no read of the device sampler)."""

    @property
    def nbytes(self) -> int:
        """Bytes of the device tables (the sampler and guard are counted by their owner)."""
        tensors = [self.row_of, self.live, self.table, *self.state.values()]
        return sum(t.numel() * t.element_size() for t in tensors)

    # -- writes -----------------------------------------------------------------------------------
    def admit(self, changes: ItemChanges) -> None:
        """The device side of a write: the items that left are emptied from the sampler and the
        tables, the new ones enter the tables (window, length, generation, state) and the sampler
        at the maximum of the memory they join (Schaul et al. 2016, Algorithm 1, line 6; read on
        the device around the leaving ones), or at the actor's R2D2 mix when it gave one.  The
        host's arrays go over in one copy; nothing is read back."""
        removed, added = changes.removed, changes.added
        if removed.shape[0] == 0 and added.shape[0] == 0:
            return
        items = self.items
        freed = self._host_row[removed]
        self._host_row[removed] = -1
        self._release(freed[freed >= 0])
        rows = self._take(added.shape[0])
        self._host_row[added] = rows
        self.drawable += added.shape[0] - removed.shape[0]
        only = removed[~np.isin(removed, added)]  # a slot left and re-entered: the entry wins
        record = np.empty((added.shape[0], items.window + 2), dtype=np.int64)
        record[:, : items.window] = items.windows(added)
        record[:, items.window] = items.steps[added]
        record[:, items.window + 1] = items.item_gen[added]
        given = items.initial_priorities(added, self.eta, math.nan)
        ints: list[npt.NDArray[Any]] = [removed, only, added, rows, record, given.view(np.int64)]
        states = items.states(added) if self.state else {}
        ints += [_as_words(states[name]) for name in self.state]
        sent, _ = self.memory.send_to_device(ints, [])
        removed_d, only_d, added_d, rows_d, record_d, given_d = sent[:6]
        k = added.shape[0]
        # the sampler: the maximum once the removed items left, then one ordered write
        sampler = self.sampler
        leaving = removed.shape[0]
        if leaving > _READ_AROUND:
            sampler.remove(removed_d, checked=False)
            high, empty = sampler.max_priority, only_d[:0]
        else:
            high = sampler.max_priority_without(removed_d) if leaving else sampler.max_priority
            empty = only_d
        given_f = given_d.view(torch.float64)
        values = torch.where(torch.isnan(given_f), high, given_f)
        slots = torch.cat([empty, added_d])
        marks = torch.cat([torch.full_like(empty, 0).to(torch.float64).fill_(math.nan), values])
        if slots.shape[0]:
            sampler.write(slots, marks, checked=False)
        # the tables
        if only.shape[0]:
            self.row_of[only_d] = -1
            self.live[only_d] = -1
        if k:
            record_d = record_d.view(k, items.window + 2)
            self.row_of[added_d] = rows_d
            self.live[added_d] = record_d[:, items.window + 1]
            self.table[rows_d] = record_d
            for words, pool in zip(sent[6:], self.state.values(), strict=True):
                shape = pool.shape[1:]
                nbytes = k * math.prod(shape) * pool.element_size()
                pool[rows_d] = words.view(torch.uint8)[:nbytes].view(pool.dtype).view(k, *shape)

    def _take(self, n: int) -> IntArray:
        if n > self._nfree:  # cannot happen (the module's bound): a broken invariant
            raise RuntimeError(f"the device item table is full ({self.rows} rows)")
        self._nfree -= n
        return self._free[self._nfree : self._nfree + n][::-1].copy()

    def _release(self, rows: IntArray) -> None:
        n = rows.shape[0]
        self._free[self._nfree : self._nfree + n] = rows
        self._nfree += n

    def rebuild(self) -> None:
        """Every table from the host's item index (after a load): the complete items in slot
        order take rows ``0, 1, …``; the sampler's priorities were loaded with it."""
        items = self.items
        self._host_row[:] = -1
        self._free = np.arange(self.rows, dtype=np.int64)[::-1].copy()
        self._nfree = self.rows
        self.row_of.fill_(-1)
        self.live.fill_(-1)
        added = np.flatnonzero(items.status == COMPLETE).astype(np.int64)
        self.drawable = 0
        if added.shape[0] == 0:
            return
        rows = self._take(added.shape[0])
        self._host_row[added] = rows
        self.drawable = added.shape[0]
        record = np.empty((added.shape[0], items.window + 2), dtype=np.int64)
        record[:, : items.window] = items.windows(added)
        record[:, items.window] = items.steps[added]
        record[:, items.window + 1] = items.item_gen[added]
        slots_d, rows_d = torch.from_numpy(added).to(self.device), torch.from_numpy(rows).to(self.device)
        self.row_of[slots_d] = rows_d
        self.live[slots_d] = torch.from_numpy(record[:, items.window + 1]).to(self.device)
        self.table[rows_d] = torch.from_numpy(record).to(self.device)
        for name, array in (items.states(added) if self.state else {}).items():
            self.state[name][rows_d] = torch.from_numpy(np.ascontiguousarray(array)).to(self.device)

    # -- draws ------------------------------------------------------------------------------------
    def sample(self, k: int) -> tuple[dict[str, Any], DeviceDraw]:
        """Draw ``k`` items and gather them on the device: the batch's fields (tensors) and the
        draw (:class:`~prisample.device_sampler.DeviceDraw`), the draw recorded in the guard.
        ``ValueError`` while no item is drawable (the host's count: no wait).  No host
        synchronisation; inside a capture the host side (:meth:`stage`) is skipped."""
        with self.sampler.lock:
            if self.drawable == 0:
                raise ValueError(
                    f"no item can be drawn yet: an item is drawable once its W={self.items.window} steps "
                    f"are stored or its episode ended with at least {self.items.min_steps} of them "
                    f"({len(self.memory)} steps stored)"
                )
            draw = self.sampler.sample(k)
            if not capturing():
                self.memory.stage_device_read()
            fields = self.gather(draw.indices)
            fields["weights"] = draw.weights
            self.guard.record(draw.indices, fields["generation"])
        return fields, draw

    def gather(self, items: torch.Tensor) -> dict[str, Any]:
        """The batch's fields of drawable ``items`` (int64 on the device, trusted), from the
        tables and the memory's mirrors (staged before: :meth:`stage`)."""
        w = self.items.window
        b = items.shape[0]
        rows = self.row_of[items]
        record = self.table.index_select(0, rows)
        win, lengths, generation = record[:, :w], record[:, w], record[:, w + 1]
        valid = self._steps < lengths[:, None]
        learn = valid & self._band
        flat = win.reshape(-1)
        columns = self.memory.ring.columns.gather(flat)
        state: Any = None
        if self.state:
            rows_state = {name: pool.index_select(0, rows) for name, pool in self.state.items()}
            state = rows_state[""] if self.single_state else rows_state
        return {
            "obs": self._obs(flat, win[:, w - 1], valid, lengths, b),
            "action": _steps_axis(columns["action"], b, w),
            "reward": _steps_axis(columns["reward"], b, w),
            "discount": _steps_axis(columns["discount"], b, w),
            "valid": valid,
            "learn": learn,
            "state": state,
            "generation": generation,
            "length": lengths,
            "extras": {
                name: _steps_axis(columns[f"extra.{name}"], b, w) for name in self.memory.ring.extra_names
            },
        }

    def _obs(
        self, flat: torch.Tensor, last: torch.Tensor, valid: torch.Tensor, lengths: torch.Tensor, b: int
    ) -> Any:
        """``(B, W + 1, ...)`` observations: step ``j``'s ``obs`` while ``j < L``, then the last
        step's ``next_obs`` (``last``: the last valid slot, the window's final entry), then the
        padding of :class:`~prisample.replay.sequence.SequenceBatch`."""
        w = self.items.window
        store = self.memory.store
        if isinstance(store, FrameStore):
            pool = store.pool
            assert pool is not None and isinstance(pool.storage, TorchFrames)
            tables = store.tables_on_device(flat)
            stack = store.frame_stack
            final = tables["next_rows"].view(b, w, stack)[:, w - 1 : w]
            both = torch.cat([tables["obs_rows"].view(b, w, stack), final], dim=1)
            # padding (position L + d) is the final stack moved on by d frames, as on the host
            frame = (self._position_frames[None] - lengths[:, None, None]).clamp(0, stack - 1)
            padding = torch.gather(final.expand(b, w + 1, stack), 2, frame)
            steps = (self._positions < lengths[:, None])[:, :, None]
            rows = torch.where(steps, both, padding).to(torch.int64)
            frames = pool.storage.as_frames(pool.storage.gather_bytes(rows.reshape(-1)), (b, w + 1, stack))
            return frames[:, :, 0] if stack == 1 else frames
        assert isinstance(store, DictStore)
        valid_ext = torch.cat([valid, torch.ones_like(valid[:, :1])], dim=1)
        step_obs, next_obs = store.mirrors[0].gather(flat), store.mirrors[1].gather(last)
        out = {}
        for key in store.keys:
            o = _steps_axis(step_obs[f"obs.{key}"], b, w)
            final = next_obs[f"next_obs.{key}"][:, None]
            mask = valid_ext.view(b, w + 1, *([1] * (o.dim() - 2)))
            out[key] = torch.where(mask, torch.cat([o, final], dim=1), final)
        return out

    # -- write-backs ------------------------------------------------------------------------------
    def takes(self, indices: Any) -> bool:
        """Whether an update of ``indices`` runs on the device: a tensor there (a draw's)."""
        return isinstance(indices, torch.Tensor) and indices.device == self.device

    def update(self, indices: torch.Tensor, priorities: Any, generations: Any) -> None:
        """Set raw priorities of drawn items (``indices`` on the device, trusted to be a draw's):
        the generations (``generations``, else the draw record) checked against the live
        item's there, stale entries masked out and counted in the guard's device count, the
        live ones written (a slot named twice keeps its last live entry); no host
        synchronisation."""
        device = self.device
        idx = indices.to(torch.int64).reshape(-1)
        values = torch.as_tensor(priorities, dtype=torch.float64, device=device).reshape(-1)
        expected = (
            None
            if generations is None
            else torch.as_tensor(generations, dtype=torch.int64, device=device).reshape(-1)
        )
        with self.sampler.lock:
            keep = self.guard.keep(idx, self.live[idx], expected)
            self.sampler.update_priorities(idx, values, checked=False, keep=keep)

    def update_from_td(
        self, indices: torch.Tensor, td_errors: Any, learn: Any, eta: float, generations: Any
    ) -> None:
        """:meth:`update` of the R2D2 priority ``p = η·max_t|δ_t| + (1 − η)·mean_t|δ_t|`` over
        each item's ``learn`` steps (Kapturowski et al. 2019), in tensor operations on the
        device (``td_errors`` and ``learn`` of shape ``(B, W)``; a row needs a learn step, as
        every drawn item has)."""
        delta = torch.as_tensor(td_errors, device=self.device).to(torch.float64)
        mask = torch.as_tensor(learn, device=self.device).to(torch.bool)
        magnitude = torch.where(mask, delta.abs(), 0.0)
        mean = magnitude.sum(dim=1) / mask.sum(dim=1)
        priority = eta * magnitude.amax(dim=1) + (1.0 - eta) * mean
        self.update(indices, priority, generations)

    # -- captured steps ---------------------------------------------------------------------------
    def stage(self) -> None:
        """The host side of one ``sample`` (and update) for a CUDA graph that captured them: the
        memory's new rows and tail sent, ``β`` sent and the schedule's step advanced;
        ``ValueError`` while no item is drawable."""
        with self.sampler.lock:
            if self.drawable == 0:
                raise ValueError("no item can be drawn yet")
            self.memory.stage_device_read()
            self.sampler.stage_draw()

    def step_tensors(self) -> list[torch.Tensor]:
        """What a device ``sample`` and update change: the priority tree, the random stream's
        state, the draw record and the dropped count (a captured graph reads and writes these)."""
        s = self.sampler
        return [*s.tree.state_tensors(), s.rng_state, *self.guard.step_tensors()]

    def save(self) -> tuple[list[torch.Tensor], int]:
        """Copies of :meth:`step_tensors` and the β schedule's step."""
        with self.sampler.lock:
            return [t.clone() for t in self.step_tensors()], self.sampler.step

    def restore(self, saved: tuple[list[torch.Tensor], int]) -> None:
        """Put back what :meth:`save` copied, in place."""
        tensors, step = saved
        with self.sampler.lock:
            for target, value in zip(self.step_tensors(), tensors, strict=True):
                target.copy_(value)
            self.sampler.step = step

    # -- checks -----------------------------------------------------------------------------------
    def check(self) -> None:
        """``ValueError`` unless the device tables hold what the host's item index says (the
        drawable items' rows, windows, lengths, generations and states; synchronises)."""
        items = self.items
        complete = np.flatnonzero(items.status == COMPLETE)
        live = self.live.cpu().numpy()
        expected = np.full(items.capacity, -1, dtype=np.int64)
        expected[complete] = items.item_gen[complete]
        if not np.array_equal(live, expected):
            raise ValueError("device tables live should hold the generation of each drawable item")
        if self.drawable != complete.shape[0]:
            raise ValueError(
                f"device tables count {self.drawable} drawable items, the index {complete.shape[0]}"
            )
        if not complete.shape[0]:
            return
        rows = self.row_of.cpu().numpy()[complete]
        if not np.array_equal(rows, self._host_row[complete]) or (rows < 0).any():
            raise ValueError("device tables row_of should give each drawable item its row")
        record = self.table.cpu().numpy()[rows]
        w = items.window
        if not (
            np.array_equal(record[:, :w], items.windows(complete))
            and np.array_equal(record[:, w], items.steps[complete])
            and np.array_equal(record[:, w + 1], items.item_gen[complete])
        ):
            raise ValueError("device tables should hold each drawable item's window, length and generation")
        host_states = items.states(complete) if self.state else {}
        for name, pool in self.state.items():
            if not np.array_equal(pool.cpu().numpy()[rows], host_states[name]):
                raise ValueError(f"device tables state {name!r} should hold each drawable item's state")
