"""``make demo``: what its data stage installs, said once and avoidable, and each stage timed into a JSON.

Bugs these guard: the data stage said "neither MNIST nor Fashion-MNIST is available: run `apt-get
install ...`" and then "installing Fashion-MNIST" (an instruction, then the script doing it itself),
and installed a Debian package as root with no way to decline; and the demo's duration in the docs was
a guess ("a few minutes" for a run that took longer), with nothing recording it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from recipes.demo import timing
from recipes.imbalanced_mnist import data as mnist_data

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "recipes" / "imbalanced_mnist" / "ensure_data.sh"


def fake_tools(tmp_path: Path, prepare_status: int) -> tuple[Path, dict[str, str]]:
    """A directory of stand-ins: ``python`` (``prepare`` exits ``prepare_status`` the first time,
    0 after), ``apt-get`` and ``sudo`` that log their arguments instead of installing anything."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    scripts = {
        "python": f'echo "python $*" >> {log}\n'
        f"if [ -e {tmp_path}/prepared ]; then exit 0; fi\ntouch {tmp_path}/prepared\nexit {prepare_status}\n",
        "apt-get": f'echo "apt-get $*" >> {log}\n',
        "sudo": f'echo "sudo" >> {log}\n"$@"\n',
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PRISAMPLE_NO_APT", None)
    return log, env


def ensure_data(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(SCRIPT), str(tmp_path / "bin" / "python"), "data"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
def test_the_install_is_announced_in_one_line_with_its_reason_and_how_to_avoid_it(tmp_path: Path) -> None:
    log, env = fake_tools(tmp_path, prepare_status=1)
    result = ensure_data(tmp_path, env)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("Installing Debian's dataset-fashion-mnist package (Fashion-MNIST) with apt-get")
    assert "cannot be downloaded" in line and "data/MNIST/raw/" in line and "PRISAMPLE_NO_APT=1" in line
    assert "run `apt-get" not in result.stderr
    calls = log.read_text()
    assert "apt-get install -y -qq dataset-fashion-mnist" in calls
    assert "prepare --root data --explain false" in calls.splitlines()[0]


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
def test_prisample_no_apt_installs_nothing_and_says_what_follows(tmp_path: Path) -> None:
    log, env = fake_tools(tmp_path, prepare_status=1)
    result = ensure_data(tmp_path, {**env, "PRISAMPLE_NO_APT": "1"})
    assert result.returncode == 1
    assert "apt-get" not in log.read_text()
    assert len(result.stderr.strip().splitlines()) == 1 and "PRISAMPLE_NO_APT=1" in result.stderr


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
def test_data_already_there_installs_nothing_and_says_nothing(tmp_path: Path) -> None:
    log, env = fake_tools(tmp_path, prepare_status=0)
    result = ensure_data(tmp_path, env)
    assert result.returncode == 0 and result.stderr == "" and "apt-get" not in log.read_text()


def test_prepare_explains_unless_told_not_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``prepare`` alone says how to get the data (without telling the user to run what the demo's
    script then runs itself); with ``--explain false`` it leaves the saying to the script."""
    pytest.importorskip("jsonargparse")  # the recipes' command lines (the rl and lightning extras)
    monkeypatch.setattr(mnist_data, "download_mnist", lambda root, timeout=20.0: None)
    monkeypatch.setattr(mnist_data, "FASHION_MNIST_SYSTEM_DIR", tmp_path / "not_installed")
    for explain, said in (("false", False), ("true", True)):
        with pytest.raises(SystemExit) as stopped:
            mnist_data.prepare(["--root", str(tmp_path / "data"), "--explain", explain])
        err = capsys.readouterr().err
        assert stopped.value.code == 1 and bool(err) == said
    assert "MNIST" in err and "dataset-fashion-mnist" in err and "run `apt-get" not in err


# -- each stage timed ------------------------------------------------------------------------------


def test_a_stage_is_timed_into_the_json_with_the_load(tmp_path: Path) -> None:
    out = tmp_path / "runs" / "demo_timing.json"
    ok = [sys.executable, "-c", "import time; time.sleep(0.2)"]
    assert timing.main(["--out", str(out), "--fresh", "tour", "--", *ok]) == 0
    assert timing.main(["--out", str(out), "data", "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
    data = json.loads(out.read_text())
    assert data["command"] == "make demo" and data["machine"]["cpus"] == os.cpu_count()
    assert [s["name"] for s in data["stages"]] == ["tour", "data"]
    assert [s["returncode"] for s in data["stages"]] == [0, 3]
    assert data["stages"][0]["wall_s"] >= 0.2 and data["total_s"] == pytest.approx(
        sum(s["wall_s"] for s in data["stages"])
    )
    if hasattr(os, "getloadavg"):
        assert len(data["stages"][0]["load_before"]) == 3 and len(data["stages"][0]["load_after"]) == 3
    timing.main(["--out", str(out), "--fresh", "install", "--", *ok])
    assert [s["name"] for s in json.loads(out.read_text())["stages"]] == ["install"]  # --fresh: a new file


def test_a_stage_without_a_command_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        timing.main(["--out", str(tmp_path / "t.json"), "tour"])
    with pytest.raises(ValueError, match="command"):
        timing.record(tmp_path / "t.json", "tour", [])
    assert not (tmp_path / "t.json").exists()


def test_make_demo_times_every_stage() -> None:
    """Every command of ``make demo`` runs through recipes/demo/timing.py, the first with --fresh."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^demo:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe is not None
    lines = [line.strip() for line in recipe.group(1).splitlines()]
    assert lines and all(line.startswith("$(TIMED) ") for line in lines), lines
    assert "--fresh" in lines[0] and all("--fresh" not in line for line in lines[1:])
    assert "TIMED := $(PYTHON) recipes/demo/timing.py --out $(DEMO_TIMING)" in makefile
