"""Writing a run's results: the machine and the command behind them, JSON, markdown tables and PNGs.

Every recipe ends with :func:`write_results`: ``<name>.json`` (the raw numbers), the figures, and
``<name>.md`` (the table that names the command and the machine), all in one directory.  The
pieces are usable alone: :func:`write_json` for a JSON file, :func:`markdown_table` for one
table, :func:`figure` for one PNG in the recipes' common style.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any

# -- what produced the results ---------------------------------------------------------------------


def machine_description() -> str:
    """``<cores> × <CPU model>[; GPU <name>]; torch <version>, Python <version>``."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    text = f"{os.cpu_count()} × {cpu}"
    try:
        import torch

        if torch.cuda.is_available():
            text += f"; GPU {torch.cuda.get_device_name(0)}"
        text += f"; torch {torch.__version__}, Python {platform.python_version()}"
    except ImportError:
        text += f"; Python {platform.python_version()}"
    return text


def command_line(prog: str, config: object, default: object, skip: Iterable[str] = ()) -> str:
    """``prog`` with the fields where the dataclass ``config`` differs from ``default``, lists as
    comma lists: the command that reproduces ``config``."""
    args = [prog]
    for f in fields(config):  # type: ignore[arg-type]
        value = getattr(config, f.name)
        if f.name in skip or value == getattr(default, f.name):
            continue
        if isinstance(value, tuple | list):
            shown = ",".join(str(v) for v in value)
        elif isinstance(value, dict):
            shown = json.dumps(value)
        else:
            shown = str(value)
        args.append(f"--{f.name} {shlex.quote(shown)}")
    return " ".join(args)


def argv_command(prog: str, argv: Sequence[str]) -> str:
    """``prog`` followed by the arguments as given (for recipes parsed by ``argparse``)."""
    return " ".join([prog, *argv])


# -- files -----------------------------------------------------------------------------------------


def json_text(payload: Any, indent: int = 1, compact_lists: bool = False, default: Any = None) -> str:
    """``payload`` as JSON ending in a newline; ``compact_lists``: each innermost list on one line."""
    text = json.dumps(payload, indent=indent, default=default)
    if compact_lists:
        text = re.sub(r"\[[^\[\]]*\]", lambda m: json.dumps(json.loads(m.group(0))), text)
    return text + "\n"


def write_json(path: str | Path, payload: Any, **options: Any) -> Path:
    """Write ``payload`` to ``path`` as :func:`json_text` (``options``: its keywords); the path."""
    path = Path(path)
    path.write_text(json_text(payload, **options))
    return path


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub markdown table, one line per row, no trailing newline."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def write_results(
    out_dir: str | Path,
    name: str,
    payload: Any,
    table: str | Callable[[list[Path]], str],
    figure: Callable[[Path], Path | Sequence[Path]] | None = None,
    **json_options: Any,
) -> list[Path]:
    """Write ``<name>.json`` (``payload``), the figures, then ``<name>.md`` into ``out_dir``.

    ``figure(out_dir)`` draws the PNGs and returns their paths; ``table`` is the markdown text, or a
    function of those paths that returns it (to link the plots).  Returns every path written.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [write_json(out_dir / f"{name}.json", payload, **json_options)]
    drawn = figure(out_dir) if figure is not None else []
    pngs = [drawn] if isinstance(drawn, Path) else list(drawn)
    markdown = out_dir / f"{name}.md"
    markdown.write_text(table(pngs) if callable(table) else table)
    return [*written, *pngs, markdown]


# -- plots -----------------------------------------------------------------------------------------


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the file-only Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def default_colors() -> list[str]:
    """matplotlib's colour cycle, for curves without a colour of their own."""
    return list(pyplot().rcParams["axes.prop_cycle"].by_key()["color"])


@contextmanager
def figure(
    path: str | Path,
    figsize: tuple[float, float] = (6.0, 4.0),
    dpi: int = 120,
    layout_rect: tuple[float, float, float, float] | None = None,
    **subplots: Any,
) -> Iterator[tuple[Any, Any]]:
    """``with figure(path) as (fig, ax):`` draw; on leaving, the layout is tightened (within
    ``layout_rect``), the PNG saved at ``dpi`` and the figure closed.  ``subplots``: keywords of
    ``plt.subplots`` (``nrows``, ``ncols``, ``squeeze``)."""
    plt = pyplot()
    fig, axes = plt.subplots(figsize=figsize, **subplots)
    try:
        yield fig, axes
        fig.tight_layout(**({} if layout_rect is None else {"rect": layout_rect}))
        fig.savefig(path, dpi=dpi)
    finally:
        plt.close(fig)
