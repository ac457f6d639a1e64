"""Every number of a marked table or paragraph in docs/ is in the JSON its marker names.

A marker is an HTML comment on the line before a markdown table or paragraph::

    <!-- numbers: docs/results/imbalanced_mnist.json -->
    <!-- numbers: docs/results/cliffwalk.json, docs/results/cliffwalk_n16/cliffwalk.json ignore=N -->

Paths are relative to the repository root, comma separated; ``ignore=`` lists column headers
(separated by ``|``) whose cells are not results (a memory size computed from ``n``, say).  A number
is found when a value of the JSON rounds to it at the precision shown (``4,184``, ``0.74``, ``3.9%``
as 3.9 or 0.039, ``20k`` as 20,000; the sign is not compared: ranges are written ``4069-4608``).
The JSON's values are its numbers, its keys and strings that are numbers, and the mean and median of
each list of numbers (a table shows medians over seeds; ``null``, a run that did not converge,
counts as infinitely large in a median, as the recipes count it); a list of more than
``LONGEST_LIST`` numbers, a curve, counts by its mean and median alone.  Numbers in code spans and link
targets are not read.  The bug this guards: docs whose numbers drifted from the results they cite
(the MNIST seeds' ranges said to overlap, CartPole and MinAtar speeds, a stale Pong table).

A table of numbers without a marker fails too, unless it is checked another way or listed in
``UNMARKED`` with its reason (see ``test_every_table_with_numbers_is_marked_or_exempt``).
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^<!--\s*numbers:\s*(?P<paths>.*?)(?:\s+ignore=(?P<ignore>.*?))?\s*-->\s*$")
NUMBER = re.compile(
    r"(?<![\w.^])(?P<int>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<frac>\d+))?(?:e(?P<exp>[-+]?\d+))?"
    r"(?P<suffix>%|k\b|M\b)?(?![\w^])"
)
SCALE = {"k": 1e3, "M": 1e6}
# A longer list of plain numbers is a curve: its thousands of points would match almost any number a
# doc shows, so only its mean and median count.
LONGEST_LIST = 64


@dataclass(frozen=True)
class Shown:
    """A number as a doc shows it: its value and the half-width of its last shown digit."""

    text: str
    value: float
    tolerance: float
    percent: bool


def numbers_in(text: str) -> list[Shown]:
    """The numbers of a piece of markdown, without those in code spans and link targets."""
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"\]\([^)]*\)", "] ", text)
    found = []
    for m in NUMBER.finditer(text):
        frac, exp, suffix = m["frac"] or "", m["exp"], m["suffix"] or ""
        value = float(m["int"].replace(",", "") + ("." + frac if frac else ""))
        tolerance = 0.5 * 10.0 ** -len(frac)
        if exp is not None:
            value, tolerance = value * 10.0 ** int(exp), tolerance * 10.0 ** int(exp)
        scale = SCALE.get(suffix, 1.0)
        found.append(Shown(m.group(0), value * scale, tolerance * scale, suffix == "%"))
    return found


def json_values(data: Any) -> Iterator[float]:
    """Every number of a JSON document, numeric keys and strings, and each list's mean and median."""
    if isinstance(data, bool) or data is None:
        return
    if isinstance(data, int | float):
        yield float(data)
    elif isinstance(data, str):
        try:
            yield float(data)
        except ValueError:
            return
    elif isinstance(data, dict):
        for key, value in data.items():
            yield from json_values(key)
            yield from json_values(value)
    elif isinstance(data, list):
        if len(data) <= LONGEST_LIST or not all(isinstance(v, int | float) or v is None for v in data):
            for item in data:
                yield from json_values(item)
        if data and all((isinstance(v, int | float) and not isinstance(v, bool)) or v is None for v in data):
            numbers = sorted(math.inf if v is None else float(v) for v in data)
            finite = [v for v in numbers if math.isfinite(v)]
            half = len(numbers) // 2
            median = numbers[half] if len(numbers) % 2 else (numbers[half - 1] + numbers[half]) / 2
            if math.isfinite(median):
                yield median
            if finite:
                yield sum(finite) / len(finite)


def matches(shown: Shown, values: list[float]) -> bool:
    """Some value rounds to ``shown`` at its precision (a percentage as itself or as a fraction)."""
    targets = [abs(v) for v in values] + ([abs(v) * 100 for v in values] if shown.percent else [])
    slack = shown.tolerance * (1 + 1e-9) + 1e-12
    return any(abs(t - shown.value) <= slack for t in targets)


@dataclass(frozen=True)
class Block:
    """A marked table or paragraph: where it is, the JSON files it cites, the headers to skip."""

    doc: Path
    line: int
    paths: tuple[str, ...]
    ignore: frozenset[str]
    lines: tuple[str, ...]


def marked_blocks(doc: Path) -> list[Block]:
    """The blocks of ``doc`` that follow a ``<!-- numbers: … -->`` line (up to the next blank line)."""
    lines = doc.read_text().splitlines()
    blocks = []
    for i, line in enumerate(lines):
        m = MARKER.match(line.strip())
        if m is None:
            continue
        body = []
        for following in lines[i + 1 :]:
            if not following.strip():
                break
            body.append(following)
        paths = tuple(p.strip() for p in m["paths"].split(",") if p.strip())
        ignore = frozenset(h.strip() for h in (m["ignore"] or "").split("|") if h.strip())
        blocks.append(Block(doc, i + 1, paths, ignore, tuple(body)))
    return blocks


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def problems(block: Block, root: Path = ROOT) -> list[str]:
    """What is wrong with one block: a missing JSON, an empty block, numbers the JSON lacks."""
    where = f"{block.doc.relative_to(root) if block.doc.is_relative_to(root) else block.doc}:{block.line}"
    if not block.lines:
        return [f"{where}: the marker is followed by nothing"]
    values: list[float] = []
    for path in block.paths:
        source = root / path
        if not source.is_file():
            return [f"{where}: {path} does not exist"]
        values += list(json_values(json.loads(source.read_text())))
    texts: list[str] = []
    if block.lines[0].lstrip().startswith("|"):
        header = _cells(block.lines[0].replace("\\|", "/"))
        unknown = block.ignore - set(header)
        if unknown:
            return [f"{where}: ignore= names columns the table does not have: {sorted(unknown)}"]
        keep = [i for i, h in enumerate(header) if h not in block.ignore]
        for row in block.lines:
            if re.fullmatch(r"\|?[\s:|-]+\|?", row.strip()):
                continue
            cells = _cells(row.replace("\\|", "/"))
            texts += [cells[i] for i in keep if i < len(cells)]
    else:
        texts = list(block.lines)
    missing = [n.text for text in texts for n in numbers_in(text) if not matches(n, values)]
    if missing:
        return [f"{where}: not in {', '.join(block.paths)}: {', '.join(missing)}"]
    return []


def all_docs(root: Path = ROOT) -> list[Path]:
    return sorted((root / "docs").rglob("*.md"))


def test_every_marked_number_is_in_its_json() -> None:
    blocks = [b for doc in all_docs() for b in marked_blocks(doc)]
    assert blocks, "no marked tables in docs/"
    found = [p for b in blocks for p in problems(b)]
    assert not found, "\n".join(found)


def test_results_tables_of_the_recipe_docs_are_marked() -> None:
    """Each recipe page cites its results through at least one marked table."""
    for name in ("cliffwalk", "imbalanced_mnist", "offpolicy", "atari_ddqn", "apex_dqn"):
        assert marked_blocks(ROOT / "docs" / "recipes" / f"{name}.md"), name


def _synthetic(tmp_path: Path, table: str, marker: str = "<!-- numbers: r.json -->") -> Block:
    (tmp_path / "r.json").write_text(
        json.dumps(
            {
                "arms": {
                    "uniform": {
                        "updates": [300, 1000],
                        "errors": [[5387, 4580, 5583], [4184, 4069, 4608]],
                        "loss": [0.7412, 0.93, 0.69],
                        "share": 0.0391,
                    }
                },
                "4": None,
            }
        )
    )
    doc = tmp_path / "docs" / "page.md"
    doc.parent.mkdir(exist_ok=True)
    doc.write_text(f"# Results\n\n{marker}\n{table}\n\nText 99 after the table.\n")
    (block,) = marked_blocks(doc)
    return block


GOOD = """| arm | errors at 300 | at 1,000 | loss | share | n |
|---|---|---|---|---|---|
| uniform | 5,387 (4580-5583) | 4184 (4069–4608) | 0.74 | 3.9% | 4 |"""


def test_checker_accepts_numbers_at_the_precision_shown(tmp_path: Path) -> None:
    assert problems(_synthetic(tmp_path, GOOD), root=tmp_path) == []
    assert [n.text for n in numbers_in("`--seed 7` [x](a/9.json) 1e-3 20k v5 2^20")] == ["1e-3", "20k"]


@pytest.mark.parametrize(
    ("old", "new"),
    [("4184", "4185"), ("0.74", "0.75"), ("3.9%", "3.7%"), ("at 1,000", "at 1,100"), ("| 4 |", "| 5 |")],
)
def test_checker_fails_when_a_number_changes(tmp_path: Path, old: str, new: str) -> None:
    found = problems(_synthetic(tmp_path, GOOD.replace(old, new)), root=tmp_path)
    assert len(found) == 1 and new.strip("| ").split()[-1] in found[0]


def test_a_curve_counts_by_its_mean_and_median_not_by_its_points(tmp_path: Path) -> None:
    # The stale off-policy table (hybrid_rank 2.84 after a rerun gave 2.87) passed while the
    # checker matched any of the JSON's thousands of curve points.
    curve = [0.2 + 0.001 * i for i in range(LONGEST_LIST + 1)]
    (tmp_path / "r.json").write_text(json.dumps({"curve": curve, "short": curve[:LONGEST_LIST]}))
    doc = tmp_path / "page.md"
    doc.write_text("<!-- numbers: r.json -->\nThe curve passes 0.25 and ends at 0.264; its mean is 0.232.\n")
    (block,) = marked_blocks(doc)
    assert problems(block, root=tmp_path) == ["page.md:1: not in r.json: 0.264"]


def test_checker_reports_missing_json_and_unknown_ignore_and_honours_ignore(tmp_path: Path) -> None:
    assert (
        "does not exist" in problems(_synthetic(tmp_path, GOOD, "<!-- numbers: nope.json -->"), tmp_path)[0]
    )
    marker = "<!-- numbers: r.json ignore=size -->"
    assert "ignore=" in problems(_synthetic(tmp_path, GOOD, marker), tmp_path)[0]
    with_size = GOOD.replace("| n |", "| size |").replace("| 4 |", "| 123 |")
    assert problems(_synthetic(tmp_path, with_size, marker), tmp_path) == []
    assert "123" in problems(_synthetic(tmp_path, with_size), tmp_path)[0]
    paragraph = "Uniform ends at 4184 errors, prioritized at 3,999."
    assert "3,999" in problems(_synthetic(tmp_path, paragraph), tmp_path)[0]


# Tables of numbers in docs/ that carry no marker, each with the reason.  Keyed by (page, header row).
# Parameters, formulas and hyper-parameters with their sources are inputs, not measurements; the
# entries marked "debt" are measurements without a JSON yet (a script that prints), to be given one.
UNMARKED: dict[tuple[str, str], str] = {
    ("docs/api.md", "| argument | type and range | meaning | errors |"): "argument ranges (API reference)",
    ("docs/api.md", "| name | type | access | meaning |"): "attribute reference",
    ("docs/api.md", "| `normalize` | result |"): "worked example of a formula",
    ("docs/api.md", "| member | meaning |"): "enum members and their values",
    ("docs/api.md", "| name | module | what |"): "names and formulas (API reference)",
    ("docs/diagnostics.md", "| | uniform | proportional | rank-based |"): "a figure grid",
    ("docs/concepts.md", "| backend | `P(i)` |"): "formulas",
    ("docs/concepts.md", "| `weight_norm` | formula | largest weight |"): "formulas",
    ("docs/concepts.md", "| mode | at the step where env `i` ends | the step after | what is stored |"): (
        "semantics of the modes (which step index is stored)"
    ),
    ("docs/concepts.md", "| writes since the last sort | TV(heap order, exact ranks) |"): (
        "debt: measured by benchmarks/measurements/heap_tv.py (command shown under the table), which "
        "prints and writes no JSON"
    ),
    ("docs/concepts.md", "| N | prisample (segments, at most 1024) | the paper's k = 32 segments |"): (
        "debt: measured by benchmarks/measurements/partition_tv.py, which prints and writes no JSON"
    ),
    ("docs/concepts.md", "| DataLoader | measured lag (batches) |"): (
        "debt: measured by benchmarks/measurements/prefetch_lag.py, which prints and writes no JSON"
    ),
    ("docs/index.md", "| page | contents |"): "table of contents",
    ("docs/index.md", "| module | status | what it holds |"): "module overview",
    ("docs/recipes/atari_ddqn.md", "| arm | sampling | α | β (linear, over training) | step size |"): (
        "the arms' hyper-parameters"
    ),
    ("docs/recipes/atari_ddqn.md", "| where | what |"): "where the recipe's PER lines are",
    (
        "docs/recipes/apex_dqn.md",
        "| difference | single process (source) | Ape-X matched (source) | removed by (`ApexConfig`) |",
    ): "the two runs' settings, each with its source, and the switch that removes it (the ablation's inputs)",
    (
        "docs/recipes/per_vs_uniform.md",
        "| profile | arm file | reference | step size | optimiser ε | priority | weights |",
    ): ("the registered arms and their sources (recipes/studies/configs/per_vs_uniform.yaml)"),
    (
        "docs/recipes/per_vs_uniform.md",
        "| environment | base agent | arms (each with its baseline) | seeds | agent steps | evaluations |",
    ): ("the registered protocol: seeds, steps and schedules (recipes/studies/configs/per_vs_uniform.yaml)"),
    ("docs/recipes/atari_ddqn.md", "| field | value | source |"): "presets, each value with its source",
    ("docs/recipes/atari_pong.md", "| value | here | Dopamine |"): "a protocol's values beside their sources",
    ("docs/recipes/cliffwalk.md", "| question | choice | why |"): "design choices and their parameters",
    ("docs/recipes/cliffwalk.md", "| | uniform | oracle | greedy | rank | proportional |"): (
        "computed from the marked table's JSON files (updates / N, log-log slopes): not values of them"
    ),
    ("docs/recipes/cliffwalk.md", "| | oracle | greedy | rank | proportional |"): (
        "computed from the marked table's JSON files (ratios of medians): not values of them"
    ),
    ("docs/recipes/imbalanced_mnist.md", "| setting | value | source |"): "settings, each with its source",
    ("docs/recipes/offpolicy.md", "| setting | value | source |"): "settings, each with its source",
    ("docs/variants.md", "| variant | formula | source | when to use |"): "formulas, each with its source",
    (
        "docs/recipes/offpolicy.md",
        "| arm | data | sampler (`# PER:` lines in the recipe) | weight `w` "
        "| update direction in expectation |",
    ): "the arms' definitions (formulas)",
}


def tables(doc: Path) -> Iterator[tuple[int, str, str]]:
    """``(line, header row, line before)`` of each markdown table of ``doc`` with numbers in it."""
    lines = doc.read_text().splitlines()
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("|") or (i and lines[i - 1].lstrip().startswith("|")):
            continue
        end = next((j for j in range(i, len(lines)) if not lines[j].lstrip().startswith("|")), len(lines))
        if any(numbers_in(row) for row in lines[i:end]):
            yield i + 1, line.strip(), lines[i - 1].strip() if i else ""


def unexplained_tables(root: Path = ROOT) -> list[str]:
    """Tables of numbers in ``root/docs`` with no marker and no exemption (see the test below)."""
    found = []
    for doc in all_docs(root):
        rel = doc.relative_to(root).as_posix()
        for line, header, before in tables(doc):
            if MARKER.match(before) or (rel, header) in UNMARKED:
                continue
            if rel.startswith("docs/results/") and doc.with_suffix(".json").is_file():
                continue
            found.append(f"{rel}:{line}: {header}")
    return found


def test_every_table_with_numbers_is_marked_or_exempt() -> None:
    """A table of numbers in docs/ cites its JSON, or is one of these, each checked another way:

    * ``docs/results/NAME.md``, written by a recipe command in the same call as ``NAME.json`` beside
      it, from that JSON (the JSON must exist; the recipe pages cite its numbers through marked tables);
    * ``UNMARKED``: tables of parameters, formulas or sources, which are inputs rather than
      measurements, each with its reason, and the measurements that have no JSON yet ("debt").

    Checking every table would be too broad (an argument's range is not a result) and checking none
    let a stale Pong table stand (one no JSON backed): a new table of numbers fails here until it is marked or
    listed with its reason.
    """
    found = unexplained_tables()
    assert not found, "tables of numbers with no <!-- numbers: --> marker:\n" + "\n".join(found)


def test_an_unmarked_table_of_numbers_fails(tmp_path: Path) -> None:
    """An unmarked table in a page, in docs/benchmarks.md, or in docs/results/ without its JSON is
    reported; the same tables marked are not."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    assert unexplained_tables(tmp_path) == []
    report = tmp_path / "docs" / "benchmarks.md"
    text = report.read_text()
    marker = next(line for line in text.splitlines() if MARKER.match(line) and "epoch_overhead" in line)
    report.write_text(text.replace(marker + "\n", ""))
    (tmp_path / "docs" / "new.md").write_text("# New\n\n| arm | steps/s |\n|---|---|\n| rank | 36.5 |\n")
    (tmp_path / "docs" / "results" / "cartpole.json").unlink()
    found = unexplained_tables(tmp_path)
    pages = [f.split(":")[0] for f in found]
    assert pages == ["docs/benchmarks.md", "docs/new.md", "docs/results/cartpole.md"]
    assert "| measure | median |" in found[0]


def test_every_exemption_still_names_a_table() -> None:
    found = {(doc.relative_to(ROOT).as_posix(), header) for doc in all_docs() for _, header, _ in tables(doc)}
    assert not set(UNMARKED) - found, sorted(set(UNMARKED) - found)
