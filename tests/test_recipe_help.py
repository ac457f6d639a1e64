"""Every recipe says what it can do and every option what it does.

For each recipe of ``python -m recipes``: with no arguments it lists each of its commands with the
command's summary and starts nothing; for each command, ``<command> --help`` exits 0, starts
nothing, and lists options each with a description.  A description is the text of an option's
help once jsonargparse's suffix ``(type: …, default: …)`` (which it writes for a dataclass field
without a docstring too) is taken off; ``-h, --help`` is argparse's own.  Of LightningCLI's
commands (``imbalanced_mnist fit|validate|test|predict``) only the project's options are read:
``--config``, ``--seed_everything``, ``--print_config`` and the ``--model.*``/``--data.*`` options
of the recipe's module and data module, not Lightning's ``--trainer.*``, ``--optimizer`` and
``--lr_scheduler``.  A command whose module needs an extra that is not installed is skipped
(``make test-core``).  Everything runs in this process, as ``python -m recipes.<recipe>`` would.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import runpy
import sys
from pathlib import Path

import pytest
import torch

from recipes.common.cli import Command

with contextlib.redirect_stdout(io.StringIO()):  # recipes/__main__.py prints the listing on import
    from recipes.__main__ import RECIPES

COMMANDS = [
    (recipe, command)
    for recipe in RECIPES
    for command in importlib.import_module(f"recipes.{recipe}").COMMANDS
]
LIGHTNING_OWN = ("--config", "--seed_everything", "--print_config", "--model", "--data")
"""The options of a LightningCLI command that are this project's (the rest are Lightning's)."""
SUFFIX = re.compile(r"\((?:required, )?(?:type|default):")
"""Where jsonargparse's ``(type: …, default: …)`` (or argparse's ``(default: …)``) suffix starts."""
REST = re.compile(r"``[^`]+``|:[a-z]+:`[^`]+`")
"""reST in a help text: a literal or a Sphinx role, which a terminal shows as they are written."""
NESTED = re.compile(r"^usage: .*? \{([\w,-]+)\} \[options\]$")
"""The usage line of a command that has commands of its own (``studies per-vs-uniform``)."""


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty working directory (a command that starts leaves something in it); torch's thread
    count as it was (LightningCLI sets it)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)


def run_recipe(recipe: str, *argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``python -m recipes.<recipe> ARGV`` in this process: its exit status and its stdout.  A
    command whose module needs a missing extra is skipped."""
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(sys, "argv", [f"python -m recipes.{recipe}", *argv])
    try:
        runpy.run_module(f"recipes.{recipe}", run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code
    except ModuleNotFoundError as error:  # an extra this command needs (make test-core)
        if error.name is None or error.name.split(".")[0] in ("recipes", "prisample"):
            raise
        pytest.importorskip(error.name)
        raise
    else:
        pytest.fail(f"python -m recipes.{recipe} {' '.join(argv)} returned instead of exiting")
    finally:
        monkeypatch.undo()
    assert isinstance(code, int | None)
    return code or 0, capsys.readouterr().out


def option_help(text: str) -> dict[str, str]:
    """``{option: description}`` of an argparse help text (jsonargparse's too): an option line is
    ``  --name VALUE  help`` or ``  --name VALUE`` with its help on the more indented lines below;
    the description is the help without jsonargparse's ``(type: …, default: …)`` suffix."""
    options: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("  -") and not line.startswith("   "):  # an option: two spaces, a dash
            invocation, _, inline = line.strip().partition("  ")
            names = [word.rstrip(",") for word in invocation.split() if word.startswith("--")]
            current = options.setdefault(names[0] if names else invocation.split()[0], [])
            current.append(inline)
        elif current is not None and line.startswith("   ") and line.strip():
            current.append(line.strip())
        else:  # a blank line, a group's title, the epilog
            current = None
    described = {}
    for name, parts in options.items():
        help_text = " ".join(part for part in parts if part)
        described[name] = SUFFIX.split(help_text, maxsplit=1)[0].strip()
    return described


def assert_described(recipe: str, words: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m recipes.<recipe> WORDS --help`` exits 0, starts nothing, says what the command
    does in whole sentences (not a docstring's first line cut mid-sentence) and lists options, each
    with a description; or (a command with commands of its own) lists its commands with a summary
    each, and each of them is checked in turn."""
    code, shown = run_recipe(recipe, *words, "--help", capsys=capsys)
    line = " ".join(words)
    assert code == 0, f"{line} --help exited {code}"
    markup = sorted(set(REST.findall(shown)))
    assert markup == [], f"{line} --help shows reST markup (cli.plain): {markup}"
    assert list(Path.cwd().iterdir()) == [], f"{line} --help started something"
    nested = NESTED.match(shown.splitlines()[0]) if shown else None
    if nested:
        for sub in nested.group(1).split(","):
            assert re.search(rf"^  {re.escape(sub)}\s+\S", shown, re.M), f"{line}: '{sub}' has no summary"
            assert_described(recipe, (*words, sub), capsys)
        return
    description = shown.split("\n\n")[1] if shown.count("\n\n") > 1 else ""
    if not description.rstrip().endswith(":"):  # not the first group of options: the description
        assert description.rstrip()[-1:] in (".", "?", "!", ")"), f"{line} --help: cut: {description!r}"
    options = option_help(shown)
    if "--trainer CONFIG" in shown:  # LightningCLI: the project's options only
        assert any(o.startswith("--model.") for o in options) and any(
            o.startswith("--data.") for o in options
        )
        options = {o: d for o, d in options.items() if o.split(".")[0] in LIGHTNING_OWN}
    options.pop("-h", None)
    options.pop("--help", None)
    assert options, f"{line} --help lists no option:\n{shown}"
    undescribed = sorted(name for name, description in options.items() if not description)
    assert undescribed == [], f"{line} --help: options without a description: {undescribed}"


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("argv", [(), ("--help",)], ids=["no-arguments", "help"])
def test_recipe_lists_its_commands_and_starts_nothing(
    recipe: str, argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    code, shown = run_recipe(recipe, *argv, capsys=capsys)
    assert code == 0 and shown.startswith(f"usage: python -m recipes.{recipe} {{")
    commands: tuple[Command, ...] = importlib.import_module(f"recipes.{recipe}").COMMANDS
    for command in commands:
        assert command.summary.strip(), f"{recipe} {command.name} has no summary"
        pattern = rf"^  {re.escape(command.name)}\s+{re.escape(command.summary)}$"
        assert re.search(pattern, shown, re.M), f"{recipe}'s usage lacks '{command.name}  {command.summary}'"
    assert list(Path.cwd().iterdir()) == []


@pytest.mark.parametrize(
    ("recipe", "command"), COMMANDS, ids=[f"{recipe}-{command.name}" for recipe, command in COMMANDS]
)
def test_every_option_of_every_command_has_a_description(
    recipe: str, command: Command, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_described(recipe, (command.name,), capsys)


def test_the_help_parser_finds_a_missing_description() -> None:
    """The check itself: an option with only jsonargparse's suffix, or with nothing, has no
    description; one whose help starts on the next line has one."""
    shown = """usage: p [-h] [--a A] [--bee_option BEE_OPTION] [--c C] [--d D]

options:
  -h, --help            Show this help message and exit.
  --a A                 (type: int, default: 3)
  --bee_option BEE_OPTION
                        What b does. (type: str | null,
                        default: null)
  --c C
  --d D                 Steps (default: 5)
"""
    assert option_help(shown) == {
        "--help": "Show this help message and exit.",
        "--a": "",
        "--bee_option": "What b does.",
        "--c": "",
        "--d": "Steps",
    }


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("Gymnasium id: ``ALE/<Game>-v5`` (Atari)", "Gymnasium id: ALE/<Game>-v5 (Atari)"),
        (
            "False: only η (:func:`recipes.dqn.networks.optimizer_settings`).",
            "False: only η (recipes.dqn.networks.optimizer_settings).",
        ),
        (":class:`~prisample.PrioritizedSampler` and :meth:`add`", "PrioritizedSampler and add"),
        (":paramref:`~lightning.pytorch.trainer.trainer.Trainer.logger`", "logger"),
        (":mod:`Replay <prisample.replay>`", "Replay"),
        ("no markup: a `single` backtick, 2 * 3", "no markup: a `single` backtick, 2 * 3"),
    ],
)
def test_plain_takes_the_rest_markup_out_of_a_help_text(text: str, shown: str) -> None:
    from recipes.common.cli import plain

    assert plain(text) == shown
