"""Render ``docs/benchmarks.md``: hand-written sections whose tables are filled in from JSON files.

The page is the sections of ``benchmarks/sections/`` listed in :data:`PAGE`, in that order.  A
section is markdown written by hand in which a line ``{{ name }}`` stands for what
``TABLES[name]`` renders from the JSON a benchmark wrote: a table, which gets a
``<!-- numbers: JSON -->`` line so that ``tests/test_docs_numbers.py`` finds its numbers in that
JSON, or a list of facts (machine, versions, command).  Nothing here writes sentences; a renderer
that returns nothing (no failures to list, say) leaves no trace.  Until a JSON exists, its first
placeholder in a section says which command writes it and the others stay empty.

A new section is a file in ``benchmarks/sections/``, its name in :data:`PAGE`, and one
:class:`Table` per placeholder: its JSON, the command that writes that JSON, and a function from
the JSON's contents to markdown.  ``make bench`` (``python -m benchmarks.run_all``) measures and
renders; re-rendering alone is :data:`RERENDER`.
"""

from __future__ import annotations

import difflib
import importlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = Path(__file__).parent / "sections"
RESULTS = "benchmarks/results.json"
RERENDER = "python -m benchmarks.run_all --from-json benchmarks/results.json --out docs/benchmarks.md"
PLACEHOLDER = re.compile(r"^\{\{\s*(?P<name>[\w.-]+)\s*\}\}$")
PAGE = (
    "run_all.md",
    "atari_ddqn.md",
    "imbalanced_mnist.md",
    "lock_overhead.md",
    "replay_step.md",
    "sequence_replay.md",
    "torchrl_sampler.md",
)
"""The sections of ``docs/benchmarks.md``, in order."""


@dataclass(frozen=True)
class Table:
    """What a placeholder renders: a function of one JSON file's contents."""

    json: str
    """The JSON file, relative to the repository root."""
    render: str
    """``module:function``, called as ``function(data, *args)``; returns markdown (or ``""``)."""
    command: str
    """The command that writes the JSON (shown while it does not exist)."""
    args: tuple[Any, ...] = ()
    unchecked: tuple[str, ...] = ()
    """Columns that ``tests/test_docs_numbers.py`` skips (``ignore=``): values computed from several
    JSON values (a ratio of medians, a sum, a unit change), which re-rendering checks
    (``tests/test_benchmark_report.py``), and labels that hold parameters (``n_step=3``)."""

    def function(self) -> Callable[..., str]:
        module, name = self.render.split(":")
        fn: Callable[..., str] = getattr(importlib.import_module(module), name)
        return fn

    def markdown(self, data: Any) -> str:
        """The rendered markdown, each table preceded by its ``<!-- numbers: -->`` line."""
        text = self.function()(data, *self.args).strip()
        return mark_tables(text, self.json, self.unchecked).strip() if text else ""


_RUN_ALL = "OMP_NUM_THREADS=1 python -m benchmarks.run_all"
_RATIOS = (
    "rank / prop",
    "cpprb / prisample",
    "TorchRL / prisample",
    "numpy / prisample",
    "prisample / floor",
)
_ATARI_LOOP = (
    "flock /tmp/prisample-heavy.lock env OMP_NUM_THREADS=1 python -m benchmarks.atari_loop "
    "--acting_steps 2000 --updates 300 --out benchmarks/atari_loop.json"
)
_EPOCH = "docs/results/imbalanced_mnist_epoch_overhead.json"
_LOCK = (
    "flock /tmp/prisample-heavy.lock env OMP_NUM_THREADS=1 python -m benchmarks.lock_overhead "
    "--out docs/results/lock_overhead.json"
)
_REPLAY_STEP = (
    "flock /tmp/prisample-heavy.lock env OMP_NUM_THREADS=1 python -m benchmarks.replay_step "
    "--out docs/results/replay_step.json"
)

_SEQUENCE_REPLAY = (
    "flock /tmp/prisample-heavy.lock env OMP_NUM_THREADS=1 python -m benchmarks.sequence_replay --full "
    "--flashbax-path FOLDER --out docs/results/sequence_replay.json"
)
_SEQUENCE_JSON = "docs/results/sequence_replay.json"


def _results(function: str, *args: Any, unchecked: tuple[str, ...] = ()) -> Table:
    return Table(RESULTS, f"benchmarks.results_tables:{function}", _RUN_ALL, args, unchecked)


TABLES: dict[str, Table] = {
    "results.machine": _results("machine"),
    "results.targets": _results("targets", unchecked=("target", "measured", "shortfall")),
    "results.dqn_step": _results("dqn_step", unchecked=_RATIOS),
    **{f"results.{op}": _results("operation", op, unchecked=_RATIOS) for op in ("sample", "update", "add")},
    "results.prefill": _results(
        "prefill",
        unchecked=tuple(f"{p}, ms" for p in ("prisample", "prisample-rank", "cpprb", "TorchRL", "numpy")),
    ),
    "results.failures": _results("failures"),
    "results.memory": _results("memory", unchecked=("arrays, B/slot",)),
    "results.rank_tv": _results("rank_tv"),
    "results.profile": _results("profile_calls"),
    "results.profile.proportional": _results("profile_functions", "proportional"),
    "results.profile.rank": _results("profile_functions", "rank"),
    "results.floors": _results("floors", unchecked=("fixed cost",)),  # labels such as `x ** 0.4`
    "atari_loop.run": Table("benchmarks/atari_loop.json", "benchmarks.atari_loop:run_facts", _ATARI_LOOP),
    "atari_loop.arms": Table("benchmarks/atari_loop.json", "benchmarks.atari_loop:table", _ATARI_LOOP),
    "epoch_overhead.run": Table(
        _EPOCH, "benchmarks.epoch_overhead:run_facts", "python -m benchmarks.epoch_overhead"
    ),
    "epoch_overhead.epochs": Table(
        _EPOCH,
        "benchmarks.epoch_overhead:table",
        "python -m benchmarks.epoch_overhead",
        unchecked=("per batch, ms",),
    ),
    "epoch_overhead.targets": Table(
        _EPOCH,
        "benchmarks.epoch_overhead:targets",
        "python -m benchmarks.epoch_overhead",
        unchecked=("target",),
    ),
    "lock_overhead.run": Table(
        "docs/results/lock_overhead.json", "benchmarks.lock_overhead:run_facts", _LOCK
    ),
    "lock_overhead.backends": Table(
        "docs/results/lock_overhead.json", "benchmarks.lock_overhead:table", _LOCK
    ),
    "lock_overhead.targets": Table(
        "docs/results/lock_overhead.json", "benchmarks.lock_overhead:targets", _LOCK, unchecked=("target",)
    ),
    "replay_step.run": Table(
        "docs/results/replay_step.json", "benchmarks.replay_step:run_facts", _REPLAY_STEP
    ),
    "replay_step.libraries": Table(
        "docs/results/replay_step.json",
        "benchmarks.replay_step:libraries_table",
        _REPLAY_STEP,
        unchecked=("bytes per transition",),  # resident + memmap bytes on disk
    ),
    "replay_step.variants": Table(
        "docs/results/replay_step.json",
        "benchmarks.replay_step:variants_table",
        _REPLAY_STEP,
        unchecked=("prisample variant",),  # names such as n_step=3
    ),
    "replay_step.targets": Table(
        "docs/results/replay_step.json",
        "benchmarks.replay_step:targets",
        _REPLAY_STEP,
        unchecked=("against", "target"),  # n_step=3, the bounds
    ),
    "sequence_replay.run": Table(_SEQUENCE_JSON, "benchmarks.sequence_replay:run_facts", _SEQUENCE_REPLAY),
    "sequence_replay.libraries": Table(
        _SEQUENCE_JSON,
        "benchmarks.sequence_replay:libraries_table",
        _SEQUENCE_REPLAY,
        unchecked=("library", "bytes per stored step"),  # labels with frame counts; resident + disk bytes
    ),
    "sequence_replay.targets": Table(
        _SEQUENCE_JSON,
        "benchmarks.sequence_replay:targets",
        _SEQUENCE_REPLAY,
        unchecked=("target",),  # the bounds
    ),
    "torchrl_sampler.steps": Table(
        "benchmarks/measurements/torchrl_sampler.json",
        "benchmarks.torchrl_sampler:table",
        "OMP_NUM_THREADS=1 python -m benchmarks.torchrl_sampler",
    ),
}


def facts(items: Iterable[tuple[str, str]]) -> str:
    """A markdown list ``- name: value``, what a placeholder renders for a run's machine and command."""
    return "\n".join(f"- {name}: {value}" for name, value in items)


def mark_tables(text: str, json_path: str, unchecked: tuple[str, ...] = ()) -> str:
    """``text`` with a ``<!-- numbers: json_path -->`` line before each table that lacks one.

    ``ignore=`` lists the columns of ``unchecked`` that the table has.
    """
    lines = text.splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        starts = line.lstrip().startswith("|") and (i == 0 or not lines[i - 1].lstrip().startswith("|"))
        if starts and not (out and out[-1].startswith("<!-- numbers:")):
            header = {c.strip() for c in line.replace("\\|", "/").strip().strip("|").split("|")}
            ignore = "|".join(c for c in unchecked if c in header)
            out.append(f"<!-- numbers: {json_path}" + (f" ignore={ignore}" if ignore else "") + " -->")
        out.append(line)
    return "\n".join(out) + "\n"


def pending(table: Table) -> str:
    """What stands for a table until its JSON exists: the command, no numbers."""
    return f"Pending: run `{table.command}` (writes `{table.json}`), then `{RERENDER}`."


def placeholders(text: str) -> list[str]:
    """The names of the placeholders of a section, in order."""
    return [m["name"] for line in text.splitlines() if (m := PLACEHOLDER.match(line.strip()))]


class _Sources:
    """The JSON files' contents, read once; ``given`` overrides files (fresh results, tests)."""

    def __init__(self, root: Path, given: Mapping[str, Any]) -> None:
        self.root, self.data = root, dict(given)

    def get(self, path: str) -> Any | None:
        if path not in self.data:
            source = self.root / path
            self.data[path] = json.loads(source.read_text()) if source.is_file() else None
        return self.data[path]


def render_section(text: str, sources: _Sources) -> str:
    """``text`` (a section) with each placeholder replaced by what its :class:`Table` renders."""
    out: list[str] = []
    said_pending: set[str] = set()
    for line in text.splitlines():
        m = PLACEHOLDER.match(line.strip())
        if m is None:
            out.append(line)
            continue
        table = TABLES[m["name"]]
        data = sources.get(table.json)
        if data is not None:
            out.append(table.markdown(data))
        elif table.json not in said_pending:
            said_pending.add(table.json)
            out.append(pending(table))
    # an empty rendering leaves its blank lines behind: one blank line between blocks
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip() + "\n"


def render(results: dict[str, Any], root: Path = ROOT, given: Mapping[str, Any] | None = None) -> str:
    """``docs/benchmarks.md``: the sections of :data:`PAGE` with their tables filled in.

    ``results`` stands for ``benchmarks/results.json`` (a fresh run's); the other JSON files are
    read under ``root`` unless ``given`` maps their path to their contents.  Pure, times nothing.
    """
    sources = _Sources(root, {RESULTS: results, **(given or {})})
    return "\n".join(render_section((SECTIONS / name).read_text(), sources) for name in PAGE)


def drift(doc: Path, results: dict[str, Any]) -> str:
    """A unified diff from ``doc`` to what :func:`render` gives (empty when ``doc`` is up to date)."""
    return "".join(
        difflib.unified_diff(
            doc.read_text().splitlines(keepends=True),
            render(results).splitlines(keepends=True),
            fromfile=str(doc),
            tofile="render(results)",
        )
    )
