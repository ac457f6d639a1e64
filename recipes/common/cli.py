"""Command-line plumbing shared by the recipes: checks that name the option, comma lists, one-line errors.

Every recipe's config is a frozen dataclass whose ``__post_init__`` validates its fields with the
checks below; each raises :class:`ConfigError`, which names the option and the value.  ``parse``
turns a command line into such a config with jsonargparse, after rewriting comma lists
(``--agents rank,proportional``, ``--agents rank``) into the list syntax jsonargparse reads
(``[rank,proportional]``, still accepted as is).  ``reporting`` turns a ``ConfigError`` into one line
``error: --step_size should be > 0, but got -1`` and exit status 2, the convention of argparse.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import itertools
import json
import re
import sys
import textwrap
import types
import typing
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, TypeVar

from recipes.common.outputs import (
    command_line as command_line,  # where it lived before recipes/common/outputs.py
)

T = TypeVar("T")


class ConfigError(ValueError):
    """An option with a value it cannot take: ``--name should <requirement>, but got <value>``."""

    def __init__(self, name: str, requirement: str, value: object) -> None:
        self.option, self.requirement, self.value = name, requirement, value
        super().__init__(f"{name} should {requirement}, but got {name}={value!r}")

    def cli_message(self) -> str:
        """The message as the command line shows it: ``--name should …, but got value``."""
        return f"--{self.option} should {self.requirement}, but got {_shown(self.value)}"


def _shown(value: object) -> str:
    if isinstance(value, tuple | list):
        return ",".join(_shown(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


# -- checks for __post_init__ ---------------------------------------------------------------------


def require(ok: bool, name: str, requirement: str, value: object) -> None:
    """Raise ``ConfigError(name, requirement, value)`` unless ``ok``."""
    if not ok:
        raise ConfigError(name, requirement, value)


def positive(config: object, *names: str) -> None:
    """Each named field is > 0 (and not NaN)."""
    for name in names:
        value = getattr(config, name)
        require(value is not None and value > 0, name, "be > 0", value)


def at_least(config: object, minimum: float, *names: str) -> None:
    """Each named field is >= ``minimum`` (``None`` passes: it means 'the preset's value')."""
    for name in names:
        value = getattr(config, name)
        require(value is None or value >= minimum, name, f"be >= {minimum:g}", value)


def in_range(
    config: object, name: str, low: float, high: float, *, low_open: bool = False, high_open: bool = False
) -> None:
    """The field lies in the interval (``None`` passes); NaN never does."""
    value = getattr(config, name)
    if value is None:
        return
    above = value > low if low_open else value >= low
    below = value < high if high_open else value <= high
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    require(bool(above and below), name, f"lie in {interval}", value)


def one_of(config: object, name: str, allowed: Sequence[object]) -> None:
    """The field is one of ``allowed``."""
    value = getattr(config, name)
    require(value in allowed, name, f"be one of {', '.join(map(str, allowed))}", value)


def subset_of(config: object, name: str, allowed: Sequence[object]) -> None:
    """The field is a non-empty sequence of members of ``allowed``, without repeats."""
    values = tuple(getattr(config, name))
    ok = bool(values) and all(v in allowed for v in values) and len(set(values)) == len(values)
    require(ok, name, f"be a comma list of distinct values among {', '.join(map(str, allowed))}", values)


# -- command lines ----------------------------------------------------------------------------------


def _is_list_type(annotation: Any) -> bool:
    """``tuple[...]``/``list[...]``, possibly ``| None``."""
    origin = typing.get_origin(annotation)
    if origin in (tuple, list):
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_is_list_type(arg) for arg in typing.get_args(annotation) if arg is not type(None))
    return False


def list_options(cls: type) -> set[str]:
    """Names of the dataclass fields that take a list of values."""
    hints = typing.get_type_hints(cls)
    return {f.name for f in fields(cls) if _is_list_type(hints[f.name])}


def _as_list(value: str) -> str:
    if value.startswith("[") or value.lower() in ("none", "null"):
        return value
    return json.dumps([item.strip() for item in value.split(",") if item.strip()])


def comma_lists(cls: type, argv: Sequence[str]) -> list[str]:
    """``argv`` with the values of ``cls``'s list options as JSON lists: ``a,b`` and ``a`` become
    ``["a", "b"]`` and ``["a"]``; a value already in ``[...]`` is left as it is."""
    names = list_options(cls)
    out: list[str] = []
    pending: str | None = None
    for arg in argv:
        if pending is not None:
            out.append(f"--{pending}={_as_list(arg)}")
            pending = None
            continue
        if arg.startswith("--") and arg[2:].split("=", 1)[0] in names:
            name, eq, value = arg[2:].partition("=")
            if eq:
                out.append(f"--{name}={_as_list(value)}")
            else:
                pending = name
            continue
        out.append(arg)
    if pending is not None:
        out.append(f"--{pending}")  # let the parser report the missing value
    return out


@contextmanager
def reporting() -> Iterator[None]:
    """Turn a :class:`ConfigError` raised inside into ``error: …`` on stderr and exit status 2."""
    try:
        yield
    except ConfigError as error:
        print(f"error: {error.cli_message()}", file=sys.stderr)
        raise SystemExit(2) from None


def parse(cls: type[T], argv: Sequence[str] | None = None, *, prog: str, epilog: str | None = None) -> T:
    """The config of ``cls`` that the command line ``argv`` (default ``sys.argv[1:]``) asks for.

    ``--help`` lists every field with its docstring; a value a field cannot take ends the process
    with one line naming the option (see :func:`reporting`).
    """
    from jsonargparse import auto_cli, set_parsing_settings

    assert is_dataclass(cls)
    set_parsing_settings(docstring_parse_attribute_docstrings=True)  # field docstrings become --help
    args = comma_lists(cls, sys.argv[1:] if argv is None else argv)
    with reporting():
        return auto_cli(  # type: ignore[no-any-return]
            cls,
            args=args,
            as_positional=False,
            parser_class=_one_line_parser(),
            prog=prog,
            description=description(cls),
            epilog=epilog,
        )


_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`(?P<tilde>~?)(?P<text>[^`<]*?)\s*(?:<(?P<target>[^`>]+)>)?`")
_LITERAL = re.compile(r"``(?P<text>[^`]+?)``")


def plain(text: str) -> str:
    """``text`` with the reST markup of docstrings made plain for a terminal: a role ``:func:`a.b```
    → ``a.b``, ``:class:`~a.B``` → ``B`` (the last part, as Sphinx shows it), ``:mod:`title <a.b>```
    → ``title``; a literal ````x```` → ``x``.  (The docs site renders the same markup as links and
    code: ``docs/_ext/rest_markup.py``.)"""

    def role(m: re.Match[str]) -> str:
        shown = m["text"] or m["target"] or ""
        return shown.rsplit(".", 1)[-1] if m["tilde"] else shown

    return _LITERAL.sub(r"\g<text>", _ROLE.sub(role, text))


class PlainHelp:
    """A mixin for an ``argparse.ArgumentParser`` (jsonargparse's and LightningCLI's too) whose help
    shows the options' docstrings without their reST (:func:`plain`), before the text is wrapped."""

    def format_help(self, *args: Any, **kwargs: Any) -> str:
        parser: Any = self
        for action in parser._actions:
            if isinstance(action.help, str):
                action.help = plain(action.help)
        for group in parser._action_groups:
            if group.description:
                group.description = plain(group.description)
        for name in ("description", "epilog"):
            if getattr(parser, name, None):
                setattr(parser, name, plain(getattr(parser, name)))
        return plain(super().format_help(*args, **kwargs))  # type: ignore[misc]


class PlainHelpParser(PlainHelp, argparse.ArgumentParser):
    """``argparse.ArgumentParser`` with :class:`PlainHelp`."""


def description(obj: object) -> str | None:
    """The first paragraph of the docstring of ``obj`` (a class or a function) on one line: what
    ``--help`` shows above the options.

    jsonargparse (and LightningCLI) show a docstring's first *line* only, which cuts a summary that
    wraps (``One run.  The defaults are …; build the``); a class without a docstring of its own
    has none (a dataclass's ``__doc__`` is then its signature)."""
    doc = vars(obj).get("__doc__") if isinstance(obj, type) else getattr(obj, "__doc__", None)
    if not doc or (isinstance(obj, type) and is_dataclass(obj) and doc.startswith(f"{obj.__name__}(")):
        return None
    first = inspect.cleandoc(doc).split("\n\n", 1)[0]
    return plain(" ".join(line.strip() for line in first.splitlines()))


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of the dataclass ``cls`` (and its bases), on one line each:
    ``{field: text}``, a field without one left out.  (jsonargparse reads them for ``--help``;
    this is the same for an ``argparse`` parser, :func:`add_field_options`.)"""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not is_dataclass(klass):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        body = next(node for node in tree.body if isinstance(node, ast.ClassDef)).body
        for node, after in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = plain(" ".join(inspect.cleandoc(after.value.value).split()))
    return docs


def add_field_options(parser: argparse.ArgumentParser, cls: type) -> None:
    """One ``--<field>`` option of ``parser`` per field of the dataclass ``cls``, of its default's
    type, its help the field's docstring and its default; ``TypeError`` names a field without a
    docstring (every option says what it does)."""
    docs = field_docs(cls)
    for f in fields(cls):
        if f.name not in docs:
            raise TypeError(f"{cls.__name__}.{f.name} has no docstring: --{f.name} would have no help")
        text = docs[f.name].replace("%", "%%")
        parser.add_argument(
            f"--{f.name}", type=type(f.default), default=f.default, help=f"{text} (default: %(default)s)"
        )


def _one_line_parser() -> type[Any]:
    """jsonargparse's parser, its errors (an unknown option, a value of the wrong type) on one line."""
    from jsonargparse import ArgumentParser

    class OneLineErrors(PlainHelp, ArgumentParser):  # the fields' docstrings hold reST
        def error(self, message: str, ex: Exception | None = None) -> typing.NoReturn:
            if not self.exit_on_error:
                super().error(message, ex)
            print("error: " + " ".join(line.strip() for line in message.splitlines()), file=sys.stderr)
            raise SystemExit(2)

    return OneLineErrors


def subcommand(
    argv: Sequence[str] | None,
    commands: Sequence[str] | Mapping[str, str],
    *,
    prog: str,
    epilog: str | None = None,
) -> tuple[str, list[str]]:
    """The command ``argv[0]`` (default ``sys.argv[1:]``), one of ``commands``, and the options after it.

    ``-h``/``--help`` prints ``usage: <prog> {<commands>} [options]`` (then, when ``commands`` maps
    each command to a summary, one line per command, and ``epilog``) and exits 0; no command or
    another word prints ``error: the command should be one of …, but got …`` and exits 2, as
    argparse does."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in commands:
        return args[0], args[1:]
    if args and args[0] in ("-h", "--help"):
        lines = [f"usage: {prog} {{{','.join(commands)}}} [options]"]
        if isinstance(commands, Mapping):
            width = max(map(len, commands))
            lines += ["", "commands:", *(f"  {c:<{width}}  {summary}" for c, summary in commands.items())]
            lines += ["", f"'{prog} <command> --help' lists a command's options."]
        print(plain("\n".join(lines) + (f"\n{epilog}" if epilog else "")))
        raise SystemExit(0)
    got = args[0] if args else "nothing"
    print(f"error: the command should be one of {', '.join(commands)}, but got {got}", file=sys.stderr)
    raise SystemExit(2)


def field_overrides(items: Iterable[str]) -> dict[str, Any]:
    """``--set FIELD=VALUE`` items as ``{field: value}``, each value read as YAML (``4000`` an int,
    ``true`` a bool); ``ValueError`` naming an item without ``=``."""
    import yaml

    values: dict[str, Any] = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise ValueError(f"--set should be FIELD=VALUE, but got {item!r}")
        values[name] = yaml.safe_load(value)
    return values


# -- recipes with several commands --------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One command of a recipe: ``python -m recipes.<recipe> <name> [options]``.

    ``target`` is ``"module:function"``, imported only when the command runs (listing commands
    imports no extra); the function takes the options after the command's name, or the whole
    line from the name on when ``takes_name`` (a function that parses several commands itself).
    ``parser``, when given, is the ``"module:function"`` that only parses the options (it takes
    what ``target`` takes, less ``--yes``): it is called first, so that ``--help`` and a command
    line it refuses (a missing or a bad option) are answered from the command's config without
    importing the modules of its run (torch, Gymnasium, Ray, Lightning); ``target`` then parses
    the same line again and runs.
    """

    name: str
    summary: str
    target: str
    takes_name: bool = False
    parser: str | None = None

    def run(self, options: Sequence[str]) -> Any:
        """Call the parser (when there is one: it exits on ``--help`` or a bad line), then import
        the target and call it, each with the command line it expects."""
        if self.parser is not None:
            self._call(self.parser, [o for o in options if o != "--yes"])
        return self._call(self.target, options)

    def _call(self, target: str, options: Sequence[str]) -> Any:
        module_name, _, function = target.partition(":")
        function_ = getattr(importlib.import_module(module_name), function)
        return function_([self.name, *options] if self.takes_name else list(options))


def usage(prog: str, description: str, commands: Sequence[Command]) -> str:
    """The text a recipe prints with no arguments or ``--help``: its commands, one line each."""
    width = max(len(c.name) for c in commands)
    lines = [f"usage: {prog} {{{','.join(c.name for c in commands)}}} [options]", "", description, ""]
    lines += ["commands:", *(f"  {c.name:<{width}}  {c.summary}" for c in commands), ""]
    lines.append(f"'{prog} <command> --help' lists a command's options; no command runs without one.")
    return plain("\n".join(lines))


def dispatch(
    prog: str,
    description: str,
    commands: Sequence[Command],
    argv: Sequence[str] | None = None,
    *,
    default: str | None = None,
) -> Any:
    """Run the command that ``argv`` (default ``sys.argv[1:]``) names and return its result.

    Nothing, ``-h`` or ``--help`` prints :func:`usage` and exits 0 (a recipe never starts a run
    without being asked); a line that opens with an option runs ``default`` when there is one (the
    command lines of the single-command modules these recipes were before); another word exits 2
    with ``error: the command should be one of …``, as argparse does.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    by_name = {c.name: c for c in commands}
    if not args or args[0] in ("-h", "--help"):
        print(usage(prog, description, commands))
        raise SystemExit(0)
    if args[0] in by_name:
        return by_name[args[0]].run(args[1:])
    if default is not None and args[0].startswith("-"):
        return by_name[default].run(args)
    print(f"error: the command should be one of {', '.join(by_name)}, but got {args[0]}", file=sys.stderr)
    raise SystemExit(2)
