"""The tables of ``docs/benchmarks.md`` that ``benchmarks/results.json`` fills (``make bench``).

Each public function takes the JSON's contents (what :func:`benchmarks.run_all.run` returned) and
returns markdown: a table, or a list of facts for the machine.  The text around them is written by
hand in ``benchmarks/sections/run_all.md``; :mod:`benchmarks.report` puts them together.

Times are µs per call, the median over passes of each pass's median over rounds.  A ratio
``peer / base`` is the median of the per-pass ratios when the run had several passes (a slow spell
of a shared machine then shifts one pass, not the ratio), else the ratio of the medians.
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.report import facts

PEER_ORDER = ("prisample", "prisample-rank", "cpprb", "TorchRL", "numpy")
RATIO_PEERS = ("cpprb", "TorchRL", "numpy")
TARGET_CPPRB, TARGET_TORCHRL, TARGET_RANK, TARGET_FLOOR, TARGET_BYTES = 3.0, 10.0, 2.0, 1.5, 32.0
FLOOR = "compiled floor"
"""The DQN step's compiled floor (:mod:`benchmarks.compiled_floor`), a column of the DQN table."""
OPERATIONS = {"sample": "sample k", "update": "update k", "add": "add k"}
"""The operations of the per-operation tables (the key is the ``op`` of ``results.json``)."""


def pow2(n: int) -> str:
    """``2^e`` for a power of two, else the number."""
    return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)


def us(value: float | None) -> str:
    """µs with three significant digits (thousands separated), ``–`` when not measured."""
    if value is None:
        return "–"
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}"


def times_x(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _header(cells: list[str]) -> list[str]:
    return [_row(cells), "|" + "---|" * len(cells)]


def _times(results: dict[str, Any]) -> dict[tuple[int, str, int], dict[str, float]]:
    """``(N, op, k) -> peer -> µs``."""
    return {
        (block["n"], row["op"], row["k"]): row["us"] for block in results["speed"] for row in block["times"]
    }


def _dqn(results: dict[str, Any]) -> dict[int, dict[str, float]]:
    return {n: t for (n, op, _), t in _times(results).items() if op == "DQN step"}


def _pass_ratios(results: dict[str, Any], n: int, op: str, k: int, peer: str, base: str) -> list[float]:
    """``peer / base`` in each pass of size ``n`` (none when the run had one pass)."""
    block = next((b for b in results["speed"] if b["n"] == n), None)
    out = []
    for times in (block or {}).get("passes") or []:
        row: dict[str, float] = next((r["us"] for r in times if r["op"] == op and r["k"] == k), {})
        if peer in row and base in row:
            out.append(row[peer] / row[base])
    return out


def ratio(
    results: dict[str, Any], n: int, op: str, k: int, peer: str, base: str = "prisample"
) -> float | None:
    """``peer / base``: the median of the per-pass ratios, else the ratio of the medians."""
    per_pass = _pass_ratios(results, n, op, k, peer, base)
    if per_pass:
        return statistics.median(per_pass)
    t = _times(results).get((n, op, k), {})
    return t[peer] / t[base] if peer in t and t.get(base) else None


def _spread(ratios: list[float]) -> str:
    return f"; per pass {min(ratios):.2f}–{max(ratios):.2f}×" if len(ratios) > 1 else ""


def _load(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def machine(results: dict[str, Any]) -> str:
    """The machine, versions, load and command of the run, as a list of facts."""
    m, v = results["machine"], results["machine"]["versions"]
    dirty = " (with uncommitted changes in `prisample/`)" if m.get("prisample_dirty") else ""
    items = []
    if results.get("quick"):
        items.append(("**Quick smoke run**", "small N, few repetitions; not the reference numbers"))
    items += [
        (
            "CPU",
            f"{m['cpu']}, {m['usable_cpus']} usable logical CPUs ({m['logical_cpus']} present), "
            f"{m['memory_gib']} GiB RAM, caches seen by cpu0: {m.get('caches') or 'unknown'}, {m['os']}",
        ),
        (
            "Python",
            f"{m['python']}; numpy {v['numpy']}, numba {v['numba']}, torch {v['torch']}, cpprb {v['cpprb']}, "
            f"torchrl {v['torchrl']} (tensordict {v['tensordict']}); prisample {v['prisample']} at commit "
            f"`{m['prisample_commit']}`{dirty}",
        ),
        (
            "One thread",
            f"`OMP_NUM_THREADS={m['omp_num_threads']}`, `torch.set_num_threads(1)` "
            f"(torch reports {m['torch_threads']})",
        ),
        (
            "Load average (1, 5, 15 min)",
            f"at start {_load(results['loadavg_start'])}, at end {_load(results['loadavg_end'])}; run took "
            f"{results['elapsed_s']:.0f} s on {m['date']}",
        ),
    ]
    others = [
        (value, f"N = {pow2(b['n'])}, {group}")
        for b in results["speed"]
        for group, value in b.get("others_cpu", {}).items()
    ]
    if others:
        steal = [value for b in results["speed"] for value in b.get("steal_cpu", {}).values()]
        worst = max(others)
        items.append(
            (
                "CPU kept busy by other processes while timing (`/proc/stat`, in CPUs)",
                f"mean {sum(v for v, _ in others) / len(others):.2f} over the {len(others)} timed groups, "
                f"max {worst[0]:.2f} ({worst[1]}); hypervisor steal max {max(steal, default=0.0):.2f}",
            )
        )
    if q := results.get("quiet_policy"):
        items.append(
            (
                f"Groups timed again because others used more than {q['max_others']:g} CPU "
                f"(up to {q['attempts']} tries, {q['wait_s']:g} s apart, the least disturbed kept)",
                str(q["retries"]),
            )
        )
    if results.get("note"):
        items.append(("Note", results["note"]))
    ext = results.get("torchrl_extension", {})
    if ext and not ext.get("ok"):
        items.append(("TorchRL's compiled extension did not import", f"`{ext.get('error')}`"))
    items.append(("Command", f"`{results['command']}`"))
    return facts(items)


def target_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per target: what was asked, what was measured, met or not, and the shortfall."""
    dqn = _dqn(results)
    n = max(dqn)
    t = dqn[n]
    big = next(b for b in results["speed"] if b["n"] == n)
    rows: list[dict[str, Any]] = []
    mine = t.get("prisample")
    for peer, goal in (("cpprb", TARGET_CPPRB), ("TorchRL", TARGET_TORCHRL)):
        target = f"DQN step at N = {pow2(n)} ≥ {goal:g}× faster than {peer}"
        theirs = t.get(peer)
        if mine is None or theirs is None:
            rows.append(
                {
                    "target": target,
                    "met": None,
                    "measured": "not measured",
                    "shortfall": big["errors"].get(peer),
                }
            )
            continue
        r = ratio(results, n, "DQN step", 32, peer) or theirs / mine
        needed = theirs / goal
        rows.append(
            {
                "target": target,
                "measured": f"{r:.2f}× ({peer} {us(theirs)} µs, prisample {us(mine)} µs"
                + _spread(_pass_ratios(results, n, "DQN step", 32, peer, "prisample"))
                + ")",
                "met": r >= goal,
                "shortfall": None
                if r >= goal
                else f"{goal / r:.2f}× short: at {peer}'s {us(theirs)} µs, prisample needs ≤ {us(needed)} µs "
                f"per step ({us(mine - needed)} µs less)",
            }
        )
    floor = t.get(FLOOR)
    target = f"DQN step at N = {pow2(n)} ≤ {TARGET_FLOOR:g}× the compiled floor"
    if mine is None or floor is None:
        rows.append(
            {"target": target, "met": None, "measured": "not measured", "shortfall": big["errors"].get(FLOOR)}
        )
    else:
        r = ratio(results, n, "DQN step", 32, "prisample", FLOOR) or mine / floor
        rows.append(
            {
                "target": target,
                "measured": f"{r:.2f}× (prisample {us(mine)} µs, compiled floor {us(floor)} µs"
                + _spread(_pass_ratios(results, n, "DQN step", 32, "prisample", FLOOR))
                + ")",
                "met": r <= TARGET_FLOOR,
                "shortfall": None
                if r <= TARGET_FLOOR
                else f"{r / TARGET_FLOOR:.2f}× over: prisample needs ≤ {us(floor * TARGET_FLOOR)} µs "
                f"per step ({us(mine - floor * TARGET_FLOOR)} µs less)",
            }
        )
    rank = t.get("prisample-rank")
    if mine is not None and rank is not None:
        r = ratio(results, n, "DQN step", 32, "prisample-rank") or rank / mine
        worst = max(
            ((ratio(results, m, "DQN step", 32, "prisample-rank") or 0.0), m)
            for m, d in dqn.items()
            if "prisample-rank" in d and "prisample" in d
        )
        worst_ratio = max(r, worst[0])
        rows.append(
            {
                "target": f"rank ≤ {TARGET_RANK:g}× proportional (DQN step)",
                "measured": f"{r:.2f}× at N = {pow2(n)}"
                + _spread(_pass_ratios(results, n, "DQN step", 32, "prisample-rank", "prisample"))
                + f"; worst over N: {worst[0]:.2f}× at N = {pow2(worst[1])}",
                "met": worst_ratio <= TARGET_RANK,
                "shortfall": None
                if worst_ratio <= TARGET_RANK
                else f"{worst_ratio / TARGET_RANK:.2f}× over the bound",
            }
        )
    memory = results.get("memory", {})
    per_slot = {name: memory.get(name, {}).get("nbytes_per_slot") for name in ("prisample", "prisample-rank")}
    if all(v is not None for v in per_slot.values()):
        worst_b = max(v for v in per_slot.values() if v is not None)
        rows.append(
            {
                "target": f"≤ {TARGET_BYTES:g} bytes per slot",
                "measured": ", ".join(f"{k} {v:.1f} B" for k, v in per_slot.items())
                + f" (N = {pow2(memory['n'])})",
                "met": worst_b <= TARGET_BYTES,
                "shortfall": None if worst_b <= TARGET_BYTES else f"{worst_b - TARGET_BYTES:.1f} B over",
            }
        )
    return rows


def targets(results: dict[str, Any]) -> str:
    """The targets of the issue: measured, met, and by how much each miss falls short."""
    lines = _header(["target", "measured", "met", "shortfall"])
    for row in target_rows(results):
        met = "–" if row["met"] is None else ("yes" if row["met"] else "**no**")
        lines.append(_row([row["target"], row["measured"], met, row["shortfall"] or "–"]))
    return "\n".join(lines)


def dqn_step(results: dict[str, Any]) -> str:
    """µs per DQN step (sample 32 + weights + update 32) per N and peer, the compiled floor's
    (:mod:`benchmarks.compiled_floor`) among them, and the ratios."""
    lines = _header(
        [
            "N",
            "prisample",
            "prisample (torch \\|δ\\|)",
            "prisample-rank",
            "cpprb",
            "TorchRL",
            "numpy",
            FLOOR,
            "rank / prop",
            *(f"{p} / prisample" for p in RATIO_PEERS),
            "prisample / floor",
        ]
    )
    for n, t in sorted(_dqn(results).items()):
        lines.append(
            _row(
                [
                    pow2(n),
                    *(us(t.get(p)) for p in ("prisample", "prisample (torch |δ|)", "prisample-rank")),
                    *(us(t.get(p)) for p in (*RATIO_PEERS, FLOOR)),
                    times_x(ratio(results, n, "DQN step", 32, "prisample-rank")),
                    *(times_x(ratio(results, n, "DQN step", 32, p)) for p in RATIO_PEERS),
                    times_x(ratio(results, n, "DQN step", 32, "prisample", FLOOR)),
                ]
            )
        )
    return "\n".join(lines)


def operation(results: dict[str, Any], op: str) -> str:
    """µs per call of ``op`` (a key of :data:`OPERATIONS`) per N, k and peer, and the ratios."""
    times = _times(results)
    keys = sorted((n, k) for (n, o, k) in times if o == op)
    lines = _header(["N", "k", *PEER_ORDER, "rank / prop", *(f"{p} / prisample" for p in RATIO_PEERS)])
    for n, k in keys:
        t = times[(n, op, k)]
        lines.append(
            _row(
                [
                    pow2(n),
                    str(k),
                    *(us(t.get(p)) for p in PEER_ORDER),
                    times_x(ratio(results, n, op, k, "prisample-rank")),
                    *(times_x(ratio(results, n, op, k, p)) for p in RATIO_PEERS),
                ]
            )
        )
    return "\n".join(lines)


def prefill(results: dict[str, Any]) -> str:
    """Milliseconds to pre-fill each structure (add N, then set N priorities), once per N."""
    lines = _header(["N", *(f"{p}, ms" for p in PEER_ORDER)])
    for block in results["speed"]:
        fill = block["fill_s"]
        lines.append(
            _row([pow2(block["n"]), *("–" if p not in fill else f"{fill[p] * 1e3:.0f}" for p in PEER_ORDER)])
        )
    return "\n".join(lines)


def failures(results: dict[str, Any]) -> str:
    """The peers that failed, with their error (nothing when none did)."""
    errors = {p: e for b in results["speed"] for p, e in b["errors"].items()}
    if not errors:
        return ""
    return "\n".join(
        _header(["peer that failed", "error"]) + [_row([p, f"`{e}`"]) for p, e in errors.items()]
    )


def memory(results: dict[str, Any]) -> str:
    """Bytes per slot: the arrays' ``nbytes`` and the resident memory, per structure."""
    mem = results.get("memory")
    if not mem:
        return ""
    n = mem["n"]
    lines = _header(
        [f"structure (N = {pow2(n)})", "nbytes / N", "RSS / N", "sampler alone, nbytes / N", "arrays, B/slot"]
    )
    for name in PEER_ORDER:
        entry = mem.get(name, {})
        rss = entry.get("rss_bytes_per_slot")
        if name == "cpprb" and entry.get("grown_bytes_per_slot") is not None:
            rss = entry["grown_bytes_per_slot"]  # deleting cpprb's buffer gives nothing back to the OS
        nb, own = entry.get("nbytes_per_slot"), entry.get("sampler_nbytes_per_slot")
        arrays = entry.get("arrays") or {}
        lines.append(
            _row(
                [
                    name,
                    "–" if nb is None else f"{nb:.1f}",
                    entry.get("error") or ("–" if rss is None else f"{rss:.1f}"),
                    "–" if own is None else f"{own:.1f}",
                    ", ".join(f"`{k}` {v / n:.1f}" for k, v in arrays.items() if v / n >= 0.05) or "–",
                ]
            )
        )
    return "\n".join(lines)


def rank_tv(results: dict[str, Any]) -> str:
    """Total variation to the exact rank distribution per N, consecutive equal readings merged."""
    rows = results.get("rank_tv") or []
    if not rows:
        return ""
    lines = _header(["N", "CDF segments", "writes", "prisample TV", "paper, 32 segments, exact order"])
    for r in rows:
        if r.get("error"):
            lines.append(_row([pow2(r["n"]), "–", "–", r["error"], "–"]))
            continue
        merged: list[dict[str, Any]] = []
        for row in r["rows"]:
            key = (round(row["prisample"], 6), round(row["paper32_exact_order"], 6))
            if merged and merged[-1]["key"] == key:
                merged[-1]["last"] = row["writes_over_n"]
                merged[-1]["count"] += 1
            else:
                merged.append({"key": key, "first": row["writes_over_n"], "last": row["writes_over_n"]})
                merged[-1] |= {"count": 1, "row": row}
        segments = str(min(r["n"], r["resolution"] or r["n"]))
        for m in merged:
            writes = f"{m['first']:.3g}·N"
            if m["last"] != m["first"]:
                writes = f"{m['first']:.3g}·N to {m['last']:.3g}·N ({m['count']} readings)"
            lines.append(
                _row(
                    [
                        pow2(r["n"]),
                        segments,
                        writes,
                        f"{m['row']['prisample']:.5f}",
                        f"{m['row']['paper32_exact_order']:.4f}",
                    ]
                )
            )
    return "\n".join(lines)


def profile_calls(results: dict[str, Any]) -> str:
    """Per backend: the public calls of a DQN step, µs uninstrumented, and the step under cProfile."""
    profiles = results.get("profile") or []
    if not profiles:
        return ""
    calls = list(profiles[0]["calls"])
    lines = _header(["backend", "N", *(f"{c}, µs" for c in calls), "DQN step under cProfile, µs"])
    for p in profiles:
        lines.append(
            _row(
                [
                    p["backend"],
                    pow2(p["n"]),
                    *(us(p["calls"].get(c)) for c in calls),
                    us(p["profiled_total_us"]),
                ]
            )
        )
    return "\n".join(lines)


def profile_functions(results: dict[str, Any], backend: str, top: int = 12) -> str:
    """The ``top`` functions by self time per DQN step under cProfile, for one backend."""
    p = next((p for p in results.get("profile") or [] if p["backend"] == backend), None)
    if p is None:
        return ""
    lines = _header(["self µs / step", "calls / step", "function"])
    for e in p["functions"][:top]:
        lines.append(
            _row([f"{e['self_us_per_step']:.2f}", f"{e['calls_per_step']:.2f}", f"`{e['function']}`"])
        )
    return "\n".join(lines)


def floors(results: dict[str, Any]) -> str:
    """Fixed costs of this machine (an empty kernel call, a Python method call), µs."""
    profiles = results.get("profile") or []
    if not profiles:
        return ""
    return "\n".join(
        _header(["fixed cost", "µs"]) + [_row([k, f"{v:.2f}"]) for k, v in profiles[0]["floors"].items()]
    )
