"""A griffe extension for the API reference pages (``mkdocs.yml``): reST markup to Markdown.

prisample's docstrings are written for ``help()`` and Sphinx-style reading: Sphinx roles
(``:class:`~prisample.PrioritizedSampler```), doctest blocks, literal blocks after ``::`` and
definition lists.  mkdocstrings renders docstrings as Markdown, where none of these means
anything, so this extension rewrites the docstrings in griffe's model of the package, once it is
loaded (:meth:`RestMarkup.on_package`); the source, and so ``help()``, keeps the reST.

* A role becomes an autorefs cross-reference to the object's canonical path,
  ``[`PrioritizedSampler`][prisample.sampler.PrioritizedSampler]``.  Its name is resolved as
  Sphinx would: absolute (``prisample.replay.ReplayMemory``), else from the scope of the object
  whose docstring holds it (a method's ``:meth:`state_dict``` is its class's).  A name that
  resolves to nothing is logged as a warning, which fails ``mkdocs build --strict``; so does a
  link to a public object that no page renders (autorefs finds no target).  Private objects (a
  ``_name`` in the path) and objects outside the package (``torch.Tensor``, ``ValueError``) are
  shown as code without a link: the API pages leave private names out, and the build reads no
  other project's inventory (it runs offline).
* A doctest block (``>>>`` lines and their output) becomes a fenced ``pycon`` block.
* A literal block (a paragraph ending in ``::``, then an indented block) becomes the paragraph
  ending in ``:`` and a fenced block.
* A definition list (a line directly followed by more indented lines) becomes Markdown's
  ``def_list`` syntax (``term``, then ``:   definition``).
"""

from __future__ import annotations

import builtins
import importlib.util
import re
import textwrap
from collections.abc import Iterator
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?P<role>class|meth|func|attr|mod|data|exc|obj|const):`(?P<body>[^`]+)`")
CALLABLE_ROLES = {"meth", "func"}
LIST_ITEM = re.compile(r"^(?:[-*+]|\d+[.)]|#\.)\s")
SECTION = re.compile(
    r"^(?:Args|Arguments|Parameters|Returns|Raises|Yields|Examples?|Notes?|Attributes|Warns)\s*:$"
)
"""A Google-style section header: mkdocstrings parses these itself (``docstring_style: google``)."""


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _is_private(path: str) -> bool:
    return any(part.startswith("_") and not part.endswith("__") for part in path.split("."))


def _inside(path: str, package: str) -> bool:
    return path == package or path.startswith(f"{package}.")


def _external(name: str, package: str) -> bool:
    """``name`` is a builtin or starts with an importable top-level module other than ``package``."""
    first = name.split(".", 1)[0]
    if first == package:
        return False
    if "." not in name:
        return hasattr(builtins, name)
    try:
        return importlib.util.find_spec(first) is not None
    except (ImportError, ValueError):
        return False


def _lookup(collection: griffe.ModulesCollection, path: str) -> griffe.Object | griffe.Alias | None:
    try:
        return collection[path]
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def _inherited(owner: griffe.Object | griffe.Alias, name: str) -> str | None:
    """The path of ``name`` as a member that an enclosing class of ``owner`` inherits, or None."""
    scope: griffe.Object | griffe.Alias | None = owner
    while scope is not None:
        if scope.is_class and name in scope.inherited_members:
            try:
                return scope.inherited_members[name].target_path
            except griffe.AliasResolutionError:
                return None
        scope = scope.parent
    return None


def resolve(
    owner: griffe.Object | griffe.Alias, name: str, collection: griffe.ModulesCollection
) -> str | None:
    """The path ``name`` names when written in the docstring of ``owner``, or None.

    Absolute paths first, then the first component in ``owner``'s scope and its parents'
    (members, then imports, then members its classes inherit), the rest looked up from there.
    A path that leaves ``owner``'s package (``torch.Tensor`` through an import) is returned
    unchecked.
    """
    if _lookup(collection, name) is not None:
        return name
    first, _, rest = name.partition(".")
    try:
        base = owner.resolve(first)
    except (griffe.NameResolutionError, griffe.AliasResolutionError):
        base = _inherited(owner, first)
        if base is None:
            return None
    path = f"{base}.{rest}" if rest else base
    if not _inside(path, owner.package.name) or _lookup(collection, path) is not None:
        return path
    return None


def cross_reference(
    owner: griffe.Object | griffe.Alias, role: str, body: str, collection: griffe.ModulesCollection
) -> str:
    """The Markdown for one role: an autorefs link, or code (and a warning when unresolved)."""
    body = " ".join(body.split())  # a role may be wrapped over two lines
    title, _, explicit = body.partition(" <")
    if explicit.endswith(">"):
        target, shown = explicit[:-1], title.strip()
    else:
        target = body.replace(" ", "")
        shown = target.lstrip("~!.")
        if target.startswith("~"):
            shown = shown.rsplit(".", 1)[-1]
    if role in CALLABLE_ROLES and not shown.endswith(")"):
        shown += "()"
    code = f"`{shown}`"
    if target.startswith("!"):  # Sphinx's "no link"
        return code
    target = target.lstrip("~.")
    package = owner.package.name
    path = resolve(owner, target, collection)
    if path is None:
        if not _external(target, package):
            griffe.logger.warning(f"{owner.path}: :{role}:`{body}` names nothing in {package}")
        return code
    found = _lookup(collection, path) if _inside(path, package) else None
    if found is None:
        return code
    try:
        canonical = found.canonical_path
    except griffe.AliasResolutionError:
        return code
    return code if _is_private(canonical) else f"[{code}][{canonical}]"


def _fence(lines: list[str], indent: int, language: str = "") -> list[str]:
    pad = " " * indent
    body = textwrap.dedent("\n".join(lines)).splitlines()
    return [f"{pad}```{language}", *(f"{pad}{line}" if line else "" for line in body), f"{pad}```"]


def blocks_to_markdown(text: str) -> str:
    """Doctest blocks, literal blocks and definition lists of reST ``text`` in Markdown."""
    lines = text.splitlines()
    out: list[str] = []
    i = last_definition_end = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        indent = _indent(line)
        if stripped.startswith(">>>"):
            end = i
            while end < len(lines) and lines[end].strip():
                end += 1
            if out and out[-1].strip():
                out.append("")
            out += _fence(lines[i:end], indent, "pycon")
            i = end
            continue
        if stripped.endswith("::") and not stripped.startswith(".."):
            kept = stripped[:-2].rstrip()
            if kept:
                out.append(" " * indent + kept + (":" if not line.rstrip()[:-2].endswith(" ") else ""))
            start = i + 1
            while start < len(lines) and not lines[start].strip():
                start += 1
            end = start
            while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > indent):
                end += 1
            while end > start and not lines[end - 1].strip():
                end -= 1
            if end > start:
                out += ["", *_fence(lines[start:end], indent), ""]
                i = end
                continue
            i += 1
            continue
        following = lines[i + 1] if i + 1 < len(lines) else ""
        after_definition = i > 0 and i == last_definition_end
        starts_paragraph = not out or not out[-1].strip() or out[-1].strip() == "```" or after_definition
        if (
            stripped
            and starts_paragraph
            and following.strip()
            and _indent(following) > indent
            and not LIST_ITEM.match(stripped)
            and not SECTION.match(stripped)
            and not stripped.startswith(("|", "```"))
        ):
            end = i + 1
            while end < len(lines) and lines[end].strip() and _indent(lines[end]) > indent:
                end += 1
            definition = textwrap.dedent("\n".join(lines[i + 1 : end])).splitlines()
            pad = " " * indent
            if after_definition:
                out.append("")  # reST's adjacent items; Markdown's def_list wants a blank line
            out += [line, f"{pad}:   {definition[0]}", *(f"{pad}    {d}" for d in definition[1:])]
            i = last_definition_end = end
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def to_markdown(owner: griffe.Object | griffe.Alias, text: str, collection: griffe.ModulesCollection) -> str:
    """``text``, a docstring of ``owner``, with its reST markup in Markdown."""
    text = blocks_to_markdown(text)
    parts = re.split(r"(^\s*```.*?^\s*```)", text, flags=re.S | re.M)  # roles outside code only
    return "".join(
        part
        if part.lstrip().startswith("```")
        else ROLE.sub(lambda m: cross_reference(owner, m["role"], m["body"], collection), part)
        for part in parts
    )


def _objects(obj: griffe.Object) -> Iterator[griffe.Object]:
    yield obj
    for member in obj.members.values():
        if not member.is_alias and isinstance(member, griffe.Object):
            yield from _objects(member)


class RestMarkup(griffe.Extension):
    """Rewrites the docstrings of a loaded package (see the module's docstring)."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        for obj in _objects(pkg):
            if obj.docstring is not None:
                obj.docstring.value = to_markdown(obj, obj.docstring.value, loader.modules_collection)
