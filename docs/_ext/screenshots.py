"""Screenshots of every page of the built docs site, and a check that nothing overflows sideways.

Not part of ``make test``: it needs Chromium (Debian's ``chromium`` package, ``/usr/bin/chromium``),
which CI does not install.  Run it by hand after changing a page's layout::

    NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict -d /tmp/site
    .venv/bin/python docs/_ext/screenshots.py --site /tmp/site --out /tmp/shots

It serves the site on localhost, loads each page in a 1280-px-wide frame (``--width``) and
measures, with the page's own layout:

* **page**: ``document.documentElement.scrollWidth > clientWidth``, a page that scrolls sideways;
* **spills**: an element of the content column (``.md-content``) whose box reaches past the
  column's right edge (into the table of contents, or off the page) without an ancestor that
  clips or scrolls it;
* **scrolls**: a box that scrolls sideways inside itself (a wide code block or table).  Allowed,
  and listed so that a diagram or a command block that should fit can be spotted.

Then it takes one screenshot per page, ``--height`` pixels tall, into ``--out`` (``--page`` picks
pages by glob: ``--page / --page '/recipes/*'``).  The exit status
is 1 when a page overflows or an element spills, else 0.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import html
import http.server
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
HARNESS = "_overflow_check.html"

# Loads each page into an iframe of the given width, measures it once its fonts are in, and writes
# the findings as JSON into <pre id="result">, which `chromium --dump-dom` prints.
_SCRIPT = r"""
const PAGES = __PAGES__;
const WIDTH = __WIDTH__;
const out = [];
function describe(el) {
  let name = el.tagName.toLowerCase();
  if (el.id) name += "#" + el.id;
  if (el.classList.length) name += "." + [...el.classList].join(".");
  const text = (el.textContent || "").trim().replace(/\s+/g, " ").slice(0, 70);
  return name + (text ? " «" + text + "»" : "");
}
function clippedBy(win, el, stop) {
  for (let a = el.parentElement; a && a !== stop; a = a.parentElement) {
    if (win.getComputedStyle(a).overflowX !== "visible") return a;
  }
  return null;
}
function measure(page, win, doc) {
  const de = doc.documentElement;
  const found = {page, width: de.clientWidth, scrollWidth: de.scrollWidth, spills: [], scrolls: []};
  const column = doc.querySelector(".md-content");
  if (!column) return found;
  const right = column.getBoundingClientRect().right;
  for (const el of column.querySelectorAll("*")) {
    const style = win.getComputedStyle(el);
    if (style.display === "none" || style.visibility === "hidden") continue;
    const box = el.getBoundingClientRect();
    if (box.width === 0 && box.height === 0) continue;
    if ((style.overflowX === "auto" || style.overflowX === "scroll") && el.scrollWidth > el.clientWidth + 1) {
      found.scrolls.push({element: describe(el), box: el.clientWidth, content: el.scrollWidth});
    }
    if (box.right > right + 1 && !clippedBy(win, el, column)) {
      found.spills.push({element: describe(el), right: Math.round(box.right), column: Math.round(right)});
    }
  }
  found.spills = found.spills.slice(0, 20);
  return found;
}
const frame = document.getElementById("frame");
let at = 0;
function next() {
  if (at === PAGES.length) {
    document.getElementById("result").textContent = JSON.stringify(out);
    return;
  }
  frame.src = PAGES[at];
}
frame.addEventListener("load", () => {
  const win = frame.contentWindow, doc = frame.contentDocument;
  doc.fonts.ready.then(() => setTimeout(() => {
    out.push(measure(PAGES[at], win, doc));
    at += 1;
    next();
  }, 300));
});
next();
"""


def pages(site: Path) -> list[str]:
    """The site's pages as URL paths, ``/`` first (the 404 page and mkdocs' search left out)."""
    found = []
    for index in sorted(site.rglob("index.html")):
        rel = index.parent.relative_to(site).as_posix()
        if rel.startswith(("search", "assets")):
            continue
        found.append("/" if rel == "." else f"/{rel}/")
    return found


@contextlib.contextmanager
def serve(site: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def chromium(browser: str, *args: str, timeout: float = 300) -> str:
    with tempfile.TemporaryDirectory() as profile:
        command = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return result.stdout


def check(browser: str, site: Path, base: str, urls: list[str], width: int) -> list[dict[str, Any]]:
    script = _SCRIPT.replace("__PAGES__", json.dumps(urls)).replace("__WIDTH__", str(width))
    (site / HARNESS).write_text(
        "<!doctype html><html><head><meta charset='utf-8'></head><body style='margin:0'>"
        f"<iframe id='frame' style='width:{width}px;height:900px;border:0'></iframe>"
        f"<pre id='result'></pre><script>{script}</script></body></html>"
    )
    try:
        budget = 4000 * len(urls) + 10000
        dom = chromium(
            browser,
            f"--window-size={width + 40},1000",
            f"--virtual-time-budget={budget}",
            "--dump-dom",
            f"{base}/{HARNESS}",
        )
    finally:
        (site / HARNESS).unlink()
    match = re.search(r'<pre id="result">(.*?)</pre>', dom, re.S)
    if not match or not match.group(1).strip():
        raise RuntimeError("the measuring page wrote no result (raise --virtual-time-budget?)")
    result: list[dict[str, Any]] = json.loads(html.unescape(match.group(1)))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, required=True, help="a built site (mkdocs build -d DIR)")
    parser.add_argument("--out", type=Path, help="folder for the screenshots (none taken without it)")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1600)
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument(
        "--page",
        action="append",
        help="only the pages matching this glob, e.g. / or '/recipes/*' (repeatable)",
    )
    args = parser.parse_args(argv)
    urls = [url for url in pages(args.site) if not args.page or any(fnmatch(url, p) for p in args.page)]
    with serve(args.site) as base:
        results = check(args.chromium, args.site, base, urls, args.width)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            for url in urls:
                name = url.strip("/").replace("/", "_") or "index"
                chromium(
                    args.chromium,
                    f"--window-size={args.width},{args.height}",
                    f"--screenshot={args.out / (name + '.png')}",
                    "--virtual-time-budget=3000",
                    base + url,
                )
    bad = 0
    for found in results:
        overflow = found["scrollWidth"] > found["width"]
        bad += overflow or bool(found["spills"])
        status = "OVERFLOWS" if overflow or found["spills"] else "ok"
        print(f"{found['page']:45} {status:9} scrollWidth {found['scrollWidth']} / {found['width']}")
        for spill in found["spills"]:
            print(f"    spills: {spill['element']} (right {spill['right']} > column {spill['column']})")
        for box in found["scrolls"]:
            print(f"    scrolls in its box: {box['element']} ({box['content']} in {box['box']} px)")
    print(f"{len(results)} pages at {args.width} px, {bad} overflowing")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
