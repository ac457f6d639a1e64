"""docs/benchmarks.md is what its JSON files render to, and the Pong loop benchmark writes one.

The report is ``report.render(benchmarks/results.json)`` (what ``python -m benchmarks.run_all
--from-json benchmarks/results.json --out docs/benchmarks.md`` writes) followed by the sections of
``benchmarks/sections/``; those listed in ``report.BACKED`` are rendered from the JSON their own
command wrote.  Nothing here times anything but the smoke run of ``benchmarks.atari_loop``.  The
bug these guard: a Pong loop table in docs/benchmarks.md that no JSON backed and that no command
reproduced (issue 10).
"""

from __future__ import annotations

import importlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchmarks import atari_loop, report
from tests.core_only import EXTRAS
from tests.test_docs_numbers import marked_blocks, numbers_in, problems

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
RESULTS = json.loads((ROOT / "benchmarks" / "results.json").read_text())


def backed(file: str) -> report.Backed:
    return next(b for b in report.BACKED if b.file == file)


def need_renderers(*sections: report.Backed) -> None:
    """Skip where the module that renders a section needs an extra that is not installed (the
    imbalanced-MNIST epoch's renderer imports Lightning); any other import error fails."""
    for section in sections or report.BACKED:
        try:
            importlib.import_module(section.render.split(":")[0])
        except ModuleNotFoundError as error:
            if (error.name or "").partition(".")[0] not in EXTRAS:
                raise
            pytest.skip(f"{section.render} needs {error.name}")


def test_docs_benchmarks_is_rendered_from_results_json() -> None:
    need_renderers()
    diff = report.drift(DOC, RESULTS)
    assert not diff, f"docs/benchmarks.md is stale: run `{report.RERENDER}`\n{diff[:3000]}"


def _bump_first_digit_after(anchor: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        at = text.index(anchor) + len(anchor)
        digit = next(i for i in range(at, len(text)) if text[i].isdigit())
        return text[:digit] + str((int(text[digit]) + 1) % 10) + text[digit + 1 :]

    return edit


@pytest.mark.parametrize(
    "edit",
    [
        _bump_first_digit_after("## DQN step"),  # rendered from benchmarks/results.json
        _bump_first_digit_after("## Targets"),
        _bump_first_digit_after("| uniform epoch |"),  # a backed section's table
    ],
    ids=["dqn-table", "targets", "epoch-section"],
)
def test_a_hand_edited_number_fails(tmp_path: Path, edit: Callable[[str], str]) -> None:
    need_renderers()
    copy = tmp_path / "benchmarks.md"
    shutil.copy(DOC, copy)
    assert report.drift(copy, RESULTS) == ""
    copy.write_text(edit(DOC.read_text()))
    assert copy.read_text() != DOC.read_text()
    assert report.drift(copy, RESULTS).startswith("---")


def test_results_part_is_the_start_of_the_report() -> None:
    assert report.render(RESULTS).startswith(report.render_results(RESULTS))


@pytest.mark.parametrize("section", report.BACKED, ids=lambda b: b.file)
def test_backed_sections_are_rendered_from_their_json(section: report.Backed) -> None:
    need_renderers(section)
    path = report.SECTIONS / section.file
    assert path.read_text() == report.backed_section(section), (
        f"benchmarks/sections/{section.file} is not what {section.json} renders to: run `{report.RERENDER}`"
    )
    assert path.read_text().startswith(f"## {section.title}\n")


def test_a_backed_section_follows_its_json_and_is_pending_without_it(tmp_path: Path) -> None:
    section = backed("imbalanced_mnist.md")
    need_renderers(section)
    (tmp_path / section.json).parent.mkdir(parents=True)
    data = json.loads((ROOT / section.json).read_text())
    (tmp_path / section.json).write_text(json.dumps(data))
    assert report.backed_section(section, tmp_path) == report.backed_section(section)
    data["inside_fraction_median"] = 0.0123
    (tmp_path / section.json).write_text(json.dumps(data))
    changed = report.backed_section(section, tmp_path)
    assert "| 1.2% |" in changed and changed != report.backed_section(section)
    (tmp_path / section.json).unlink()
    text = report.backed_section(section, tmp_path)
    assert text == report.pending(section) and section.command in text
    assert numbers_in(text.split("\n", 1)[1]) == [], "a pending section shows no numbers"


def test_mark_tables_marks_each_table_once_with_its_derived_columns() -> None:
    text = "Intro 1.\n\n| a | sum |\n|---|---|\n| 1 | 2 |\n\n| a |\n|---|\n| 3 |\n"
    marked = report.mark_tables(text, "r.json", unchecked=("sum",))
    assert marked.count("<!-- numbers: r.json ignore=sum -->\n| a | sum |") == 1
    assert marked.count("<!-- numbers: r.json -->\n| a |\n") == 1
    assert report.mark_tables(marked, "r.json", unchecked=("sum",)) == marked


def _numbers_check(section: report.Backed, data: dict[str, Any], root: Path) -> list[str]:
    """The numbers check of ``tests/test_docs_numbers.py`` on ``section`` rendered from ``data``."""
    (root / section.json).parent.mkdir(parents=True, exist_ok=True)
    (root / section.json).write_text(json.dumps(data))
    doc = root / "docs" / "section.md"
    doc.parent.mkdir(exist_ok=True)
    doc.write_text(report.backed_section(section, root))
    blocks = marked_blocks(doc)
    assert blocks, "the section's tables are marked"
    return [p for b in blocks for p in problems(b, root=root)]


def test_atari_loop_writes_the_json_its_section_renders(tmp_path: Path) -> None:
    """A smoke run on Pong (tiny arguments): the JSON holds what the docs need, and every number of
    the table rendered from it is a value of it."""
    for name in ("gymnasium", "ale_py", "cloudpickle", "yaml", "tqdm"):
        pytest.importorskip(name)
    out = tmp_path / "loop.json"
    argv = ["--acting_steps", "48", "--updates", "3", "--arms", "proportional", "--out", str(out)]
    atari_loop.main(argv)
    results = json.loads(out.read_text())
    assert results["command"] == "python -m benchmarks.atari_loop " + " ".join(argv)
    for key in ("cpu", "date", "python", "prisample_commit", "usable_cpus"):
        assert key in results["machine"], key
    assert {"torch", "ale-py", "prisample"} <= set(results["machine"]["versions"])
    assert results["config"]["updates"] == 3 and results["config"]["device_name"] == "CPU"
    (arm,) = results["arms"]
    assert arm["arm"] == "proportional" and arm["updates"] >= 3
    for key in ("acting_steps_per_s", "steps_per_s", "update_ms", "replay_share_of_loop"):
        assert arm[key] > 0, key
    assert set(arm["per_update_ms"]) == set(atari_loop.PARTS)
    section = backed("atari_ddqn.md")
    assert _numbers_check(section, results, tmp_path) == []
    assert "| proportional |" in report.backed_section(section, tmp_path)


def test_replay_step_section_passes_the_numbers_check(tmp_path: Path) -> None:
    """Its tables, from a results dict shaped like ``benchmarks.replay_step``'s JSON; unchecked: the
    bytes column (resident + disk bytes) and the variants' names (``n_step=3``)."""
    lib = {"n_measured": 1 << 18, "us_per_step": 812.4, "us_per_pass": [800.2, 812.4, 830.9]}
    lib["stacks_exact"] = True
    peer = {**lib, "us_per_step": 2400.7, "us_per_pass": [2350.1, 2400.7, 2501.3], "stacks_exact": False}
    peer["ratio_to_prisample"] = {"median": 2.95, "per_pass": [2.9, 2.95, 3.01]}
    results = {
        "machine": {"cpu": "x", "date": "2026-01-01T00:00:00", "versions": dict.fromkeys(
            ("numpy", "torch", "cpprb", "torchrl"), "1.0")},
        "elapsed_s": 1200.0,
        "sizes": [{
            "n": 1 << 18,
            "libraries": {"prisample": lib, "cpprb": peer},
            "variants": {"n_step=3": {"us_per_step": 850.3, "ratio_to_prisample": {
                "median": 1.04, "per_pass": [1.01, 1.04, 1.07]}}, "extras": {"skipped": "not available"}},
        }],
        "memory": {"prisample": {"nbytes_per_transition": 7210.5},
                   "cpprb": {"rss_anon_bytes_per_transition": 7300.0, "disk_bytes_per_transition": 12.0}},
    }  # fmt: skip
    assert _numbers_check(backed("replay_step.md"), results, tmp_path) == []
