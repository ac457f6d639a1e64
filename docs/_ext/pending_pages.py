"""An mkdocs hook (``mkdocs.yml``): stand-ins for pages that the docs link to and that other
branches are still writing.

``docs/index.md`` and ``docs/api.md`` already link to ``scaling.md`` and ``recipes/apex_dqn.md``,
which the Ray work adds.  Until a page of :data:`PENDING` exists, the build gets a one-line page
in its place, outside the navigation, so that ``mkdocs build --strict`` checks every other link;
once the page exists this hook adds nothing.  When both pages are merged, put them in the ``nav``
of ``mkdocs.yml`` and delete this hook (and its line there).
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files, InclusionLevel

PENDING = ("scaling.md", "recipes/apex_dqn.md")


def on_files(files: Files, *, config: MkDocsConfig) -> Files:
    for page in PENDING:
        if not (Path(config.docs_dir) / page).is_file():
            content = "# Not written yet\n\nThis page is being written on another branch.\n"
            files.append(File.generated(config, page, content=content, inclusion=InclusionLevel.NOT_IN_NAV))
    return files
