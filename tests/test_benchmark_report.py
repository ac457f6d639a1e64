"""docs/benchmarks.md is its hand-written sections with tables rendered from the benchmarks' JSON.

The page is ``report.render(benchmarks/results.json)`` (what ``python -m benchmarks.run_all
--from-json benchmarks/results.json --out docs/benchmarks.md`` writes): the sections of
``benchmarks/sections/`` in ``report.PAGE`` order, each ``{{ name }}`` line replaced by what
``report.TABLES[name]`` renders from its JSON.  Nothing here times anything but the smoke run of
``benchmarks.atari_loop``.  The bugs these guard: a Pong loop table in docs/benchmarks.md that no
JSON backed and that no command reproduced, and a report that wrote its own prose, with
branches for a re-sorted heap the rank backend no longer has.
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchmarks import atari_loop, report
from tests.test_docs_numbers import MARKER, marked_blocks, numbers_in, problems

# The imbalanced-MNIST epoch table's renderer imports Lightning: without that extra (the core-only
# run, `make test-core`) the page cannot be rendered, so these tests skip there.
pytest.importorskip("lightning")

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
RESULTS = json.loads((ROOT / report.RESULTS).read_text())


def data_of(table: report.Table) -> Any:
    return json.loads((ROOT / table.json).read_text())


def test_docs_benchmarks_is_rendered_from_the_json_files() -> None:
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
        _bump_first_digit_after("## DQN step (sample 32 + weights + update 32), µs per step\n\n<!--"),
        _bump_first_digit_after("## Targets\n\n<!--"),
        _bump_first_digit_after("| uniform epoch |"),
        _bump_first_digit_after("- Filled slots N: "),  # a list of facts
    ],
    ids=["dqn-table", "targets", "epoch-table", "lock-facts"],
)
def test_a_hand_edited_number_fails(tmp_path: Path, edit: Callable[[str], str]) -> None:
    copy_ = tmp_path / "benchmarks.md"
    shutil.copy(DOC, copy_)
    assert report.drift(copy_, RESULTS) == ""
    copy_.write_text(edit(DOC.read_text()))
    assert copy_.read_text() != DOC.read_text()
    assert report.drift(copy_, RESULTS).startswith("---")


def test_the_page_is_its_sections_and_every_placeholder_has_a_table() -> None:
    files = {p.name for p in report.SECTIONS.glob("*.md")}
    assert set(report.PAGE) == files, "each file of benchmarks/sections/ is in report.PAGE, and back"
    used = [
        name for file in report.PAGE for name in report.placeholders((report.SECTIONS / file).read_text())
    ]
    assert set(used) <= set(report.TABLES), sorted(set(used) - set(report.TABLES))
    assert set(report.TABLES) <= set(used), (
        f"tables no section shows: {sorted(set(report.TABLES) - set(used))}"
    )
    assert len(used) == len(set(used)), "each table is shown once"


def _nudged(data: Any) -> Any:
    """``data`` with every number changed (floats × 1.37, integers + 1), booleans kept."""
    if isinstance(data, bool) or data is None or isinstance(data, str):
        return data
    if isinstance(data, int):
        return data + 1
    if isinstance(data, float):
        return data * 1.37
    if isinstance(data, list):
        return [_nudged(v) for v in data]
    return {k: _nudged(v) for k, v in data.items()}


@pytest.mark.parametrize("name", sorted(report.TABLES))
def test_each_table_is_rendered_from_its_json(name: str, tmp_path: Path) -> None:
    """Its numbers are values of the JSON at the precision shown (the numbers check of
    tests/test_docs_numbers.py, on the columns that are not computed), and they follow the JSON."""
    table = report.TABLES[name]
    data = data_of(table)
    text = table.markdown(data)
    if name == "results.failures":  # no peer failed in the recorded run
        assert text == ""
        data = copy.deepcopy(data)
        data["speed"][0]["errors"] = {"TorchRL": "ImportError: no module"}
        text = table.markdown(data)
        assert "| TorchRL | `ImportError: no module` |" in text
    assert text
    doc = tmp_path / "docs" / "table.md"
    doc.parent.mkdir()
    doc.write_text(text + "\n")
    blocks = marked_blocks(doc)
    if text.lstrip().startswith("|") or "\n|" in text:
        assert blocks and all(b.paths == (table.json,) for b in blocks), "each table names its JSON"
        assert [p for b in blocks for p in problems(b, root=ROOT)] == []
    else:
        assert not blocks and text.startswith("- "), "a list of facts"
    if name != "results.failures":  # error messages, no numbers
        assert table.markdown(_nudged(data)) != text, "the rendering follows the JSON's numbers"


def test_a_section_shows_its_command_until_its_json_exists(tmp_path: Path) -> None:
    text = (report.SECTIONS / "imbalanced_mnist.md").read_text()
    table = report.TABLES["epoch_overhead.epochs"]
    (tmp_path / table.json).parent.mkdir(parents=True)
    data = data_of(table)
    (tmp_path / table.json).write_text(json.dumps(data))
    rendered = report.render_section(text, report._Sources(tmp_path, {}))
    assert rendered == report.render_section(text, report._Sources(ROOT, {}))
    assert "| 3.9% |" in rendered
    data["inside_fraction_median"] = 0.0123
    (tmp_path / table.json).write_text(json.dumps(data))
    changed = report.render_section(text, report._Sources(tmp_path, {}))
    assert "| 1.2% |" in changed and "| 3.9% |" not in changed

    (tmp_path / table.json).unlink()
    pending = report.render_section(text, report._Sources(tmp_path, {}))
    assert pending.count(report.pending(table)) == 1, "one line for the three placeholders of the JSON"
    assert "python -m benchmarks.epoch_overhead" in report.pending(table)
    assert "\n|" not in pending and not MARKER.search(pending)
    assert numbers_in(report.pending(table)) == [], "a pending table shows no numbers"
    for block in text.split("\n\n"):
        if not report.PLACEHOLDER.match(block.strip()):
            assert block.strip() in pending, "the hand-written text stays"


def test_an_empty_rendering_leaves_no_trace() -> None:
    page = report.render(RESULTS)
    assert "\n\n\n" not in page and "{{" not in page
    assert "peer that failed" not in page
    failed = copy.deepcopy(RESULTS)
    failed["speed"][0]["errors"] = {"cpprb": "RuntimeError: boom"}
    assert "| cpprb | `RuntimeError: boom` |" in report.render(failed)


def test_mark_tables_marks_each_table_once_with_its_derived_columns() -> None:
    text = "Intro 1.\n\n| a | sum |\n|---|---|\n| 1 | 2 |\n\n| a |\n|---|\n| 3 |\n"
    marked = report.mark_tables(text, "r.json", unchecked=("sum",))
    assert marked.count("<!-- numbers: r.json ignore=sum -->\n| a | sum |") == 1
    assert marked.count("<!-- numbers: r.json -->\n| a |\n") == 1
    assert report.mark_tables(marked, "r.json", unchecked=("sum",)) == marked


def _numbers_check(names: list[str], data: dict[str, Any], tmp_path: Path) -> list[str]:
    """The numbers check of ``tests/test_docs_numbers.py`` on the tables ``names`` rendered from
    ``data`` (written where their JSON goes under ``tmp_path``)."""
    json_path = report.TABLES[names[0]].json
    (tmp_path / json_path).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / json_path).write_text(json.dumps(data))
    doc = tmp_path / "docs" / "section.md"
    doc.parent.mkdir(exist_ok=True)
    doc.write_text("\n\n".join(report.TABLES[n].markdown(data) for n in names) + "\n")
    blocks = marked_blocks(doc)
    tables = doc.read_text().count("<!-- numbers:")  # a renderer may give more than one table
    assert len(blocks) == tables >= len(names), "each table is marked"
    return [p for b in blocks for p in problems(b, root=tmp_path)]


def test_atari_loop_writes_the_json_its_tables_render(tmp_path: Path) -> None:
    """A smoke run on Pong (tiny arguments): the JSON holds what the docs need, and every number of
    the table rendered from it is a value of it."""
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
    assert _numbers_check(["atari_loop.arms"], results, tmp_path) == []
    assert "| proportional |" in report.TABLES["atari_loop.arms"].markdown(results)
    assert "- Timed: 3 updates after 48 acting steps" in report.TABLES["atari_loop.run"].markdown(results)


def test_replay_step_tables_pass_the_numbers_check(tmp_path: Path) -> None:
    """Its tables, from a results dict shaped like ``benchmarks.replay_step``'s JSON; unchecked: the
    bytes column (resident + disk bytes), the variants' names (``n_step=3``) and the targets."""
    lib = {"n_measured": 1 << 18, "us_per_step": 812.4, "us_per_pass": [800.2, 812.4, 830.9]}
    lib["stacks_exact"] = True
    peer = {**lib, "us_per_step": 2400.7, "us_per_pass": [2350.1, 2400.7, 2501.3], "stacks_exact": False}
    peer["ratio_to_prisample"] = {"median": 2.95, "per_pass": [2.9, 2.95, 3.01]}
    results: dict[str, Any] = {
        "machine": {
            "cpu": "x",
            "date": "2026-01-01T00:00:00",
            "versions": dict.fromkeys(("numpy", "torch", "cpprb", "torchrl"), "1.0"),
        },
        "elapsed_s": 1200.0,
        "sizes": [
            {
                "n": 1 << 18,
                "libraries": {"prisample": lib, "cpprb": peer},
                "variants": {
                    "n_step=3": {
                        "us_per_step": 850.3,
                        "ratio_to_prisample": {"median": 1.04, "per_pass": [1.01, 1.04, 1.07]},
                    },
                    "extras": {"skipped": "not available"},
                },
            }
        ],
        "memory": {
            "prisample": {"nbytes_per_transition": 7210.5},
            "cpprb": {"rss_anon_bytes_per_transition": 7300.0, "disk_bytes_per_transition": 12.0},
        },
    }
    names = ["replay_step.libraries", "replay_step.variants", "replay_step.targets"]
    assert _numbers_check(names, results, tmp_path) == []
    targets = report.TABLES["replay_step.targets"].markdown(results)
    assert "| 2^18 | cpprb | prisample ≥ 1× faster | 2.95× | yes |" in targets
    assert "| 2^18 | n_step=3 | ≤ 1.3× the base step | 1.04× | yes |" in targets
    assert "copy floor" not in report.TABLES["replay_step.libraries"].markdown(results)  # older runs
    assert "prisample ≥ 4× faster" not in targets  # no step bounds in runs without the copy floor

    # the copy floor, phases, 16-env add and the step's bounds: a second table and more target rows
    block = results["sizes"][0]
    results["workload"] = {"envs": 4, "batch": 32}  # the labels' numbers
    lib["ratio_to_copy_floor"] = {"median": 1.62, "per_pass": [1.6, 1.62, 1.7]}
    peer["ratio_to_copy_floor"] = {"median": 4.81, "per_pass": [4.7, 4.81, 5.02]}
    block["copy_floor"] = {"us": 501.2, "us_per_pass": [498.7, 501.2, 510.3], "frames_per_batch": 160.0}
    block["phases"] = {
        key: {"us": us, "us_per_pass": [us, us + 1.5], "ratio_to_copy_floor": {"median": r, "per_pass": [r]}}
        for key, us, r in (
            ("add", 61.3, 0.12),
            ("sample", 640.2, 1.27),
            ("update", 98.6, 0.2),
            ("step", 800.1, 1.59),
        )
    }
    block["phases"]["copy_floor"] = {"us": 503.4, "us_per_pass": [503.4, 504.9]}
    block["vector_add"] = {"envs": 16, "us_per_transition": 13.2, "us_per_transition_per_pass": [13.1, 13.2]}
    block["targets"] = {
        "step_over_copy_floor": {"bound": 1.5, "measured": 1.62, "met": False},
        "cpprb_over_prisample": {"bound": 3.0, "measured": 2.95, "met": False},
        "vector_add_us_per_transition": {"bound": 10.0, "measured": 13.2, "met": False},
    }
    assert _numbers_check(names, results, tmp_path) == []
    libraries = report.TABLES["replay_step.libraries"].markdown(results)
    for row in (
        "| 2^18 | prisample sample 32 (draw, gather, weights) | 640.2 | 640.2–641.7 | 1.27× (1.27–1.27) |",
        "| 2^18 | cpprb step, with the libraries | 2,400.7 | 2,350.1–2,501.3 | 4.81× (4.70–5.02) |",
        "| 2^18 | copy floor (160 frames, one take), with the libraries | 501.2 | 498.7–510.3 | – |",
        "| 2^18 | add_many of a 16-env vector step, per transition | 13.2 | 13.1–13.2 | – |",
    ):
        assert row in libraries, row
    targets = report.TABLES["replay_step.targets"].markdown(results)
    assert "| 2^18 | copy floor | prisample step ≤ 1.5× the floor | 1.62× | **no** |" in targets
    assert "| 2^18 | cpprb | prisample ≥ 4× faster | 2.95× | **no** |" in targets
    assert "| 2^18 | add, 4-env vector step | ≤ 40 µs per call | 61.3 µs | **no** |" in targets
    assert "| 2^18 | add_many, 16 envs | ≤ 5 µs per transition | 13.2 µs | **no** |" in targets
