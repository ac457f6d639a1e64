"""Render the results of :mod:`benchmarks.run_all` as ``docs/benchmarks.md``."""

from __future__ import annotations

import difflib
import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PEER_ORDER = ("prisample", "prisample-rank", "cpprb", "TorchRL", "numpy")
RATIO_PEERS = ("cpprb", "TorchRL", "numpy")
TARGET_CPPRB, TARGET_TORCHRL, TARGET_RANK, TARGET_BYTES = 3.0, 10.0, 1.5, 32.0


def _pow2(n: int) -> str:
    return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)


def _us(value: float | None) -> str:
    if value is None:
        return "–"
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}"


def _x(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def _times(results: dict[str, Any]) -> dict[tuple[int, str, int], dict[str, float]]:
    out = {}
    for block in results["speed"]:
        for row in block["times"]:
            out[(block["n"], row["op"], row["k"])] = row["us"]
    return out


def _dqn(results: dict[str, Any]) -> dict[int, dict[str, float]]:
    return {n: t for (n, op, _), t in _times(results).items() if op == "DQN step"}


def _pass_ratios(results: dict[str, Any], n: int, op: str, k: int, peer: str, base: str) -> list[float]:
    """``peer / base`` in each pass (when the run had several)."""
    block = next((b for b in results["speed"] if b["n"] == n), None)
    out = []
    for times in (block or {}).get("passes") or []:
        row = next((r["us"] for r in times if r["op"] == op and r["k"] == k), {})
        if peer in row and base in row:
            out.append(row[peer] / row[base])
    return out


def _ratio(
    results: dict[str, Any], n: int, op: str, k: int, peer: str, base: str = "prisample"
) -> float | None:
    """``peer / base``: the median of the per-pass ratios when there were passes, else of the medians."""
    import statistics

    per_pass = _pass_ratios(results, n, op, k, peer, base)
    if per_pass:
        return statistics.median(per_pass)
    t = _times(results).get((n, op, k), {})
    return t[peer] / t[base] if peer in t and t.get(base) else None


def _range(ratios: list[float]) -> str:
    return f"; per pass {min(ratios):.2f}–{max(ratios):.2f}×" if len(ratios) > 1 else ""


def _amortised_resort_us(block: dict[str, Any], writes_per_step: int = 32) -> float | None:
    every, seconds = block.get("rank_resort_every"), block.get("rank_resort_s")
    if not every or seconds is None:
        return None
    return float(seconds) * 1e6 * writes_per_step / float(every)


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per target: what was asked, what was measured, met or not and the shortfall."""
    dqn = _dqn(results)
    n = max(dqn)
    t = dqn[n]
    big = next(b for b in results["speed"] if b["n"] == n)
    rows: list[dict[str, Any]] = []
    mine = t.get("prisample")
    for peer, goal in (("cpprb", TARGET_CPPRB), ("TorchRL", TARGET_TORCHRL)):
        theirs = t.get(peer)
        if mine is None or theirs is None:
            rows.append(
                {
                    "target": f"DQN step at N = {_pow2(n)} ≥ {goal:g}× faster than {peer}",
                    "met": None,
                    "measured": "not measured",
                    "shortfall": big["errors"].get(peer, ""),
                }
            )
            continue
        ratio = _ratio(results, n, "DQN step", 32, peer) or theirs / mine
        needed = theirs / goal
        rows.append(
            {
                "target": f"DQN step at N = {_pow2(n)} ≥ {goal:g}× faster than {peer}",
                "measured": f"{ratio:.2f}× ({peer} {_us(theirs)} µs, prisample {_us(mine)} µs"
                + _range(_pass_ratios(results, n, "DQN step", 32, peer, "prisample"))
                + ")",
                "met": ratio >= goal,
                "shortfall": ""
                if ratio >= goal
                else f"{goal / ratio:.2f}× short: at {peer}'s {_us(theirs)} µs, prisample needs ≤ "
                f"{_us(needed)} µs per step ({_us(mine - needed)} µs less)",
                "ratio": ratio,
                "needed_us": needed,
            }
        )
    rank = t.get("prisample-rank")
    if mine is not None and rank is not None:
        ratio = _ratio(results, n, "DQN step", 32, "prisample-rank") or rank / mine
        amortised = _amortised_resort_us(big)
        with_sort = (rank + amortised) / mine if amortised is not None else None
        worst = max(
            ((_ratio(results, m, "DQN step", 32, "prisample-rank") or 0.0), m)
            for m, d in dqn.items()
            if "prisample-rank" in d and "prisample" in d
        )
        measured = f"{ratio:.2f}× at N = {_pow2(n)}" + _range(
            _pass_ratios(results, n, "DQN step", 32, "prisample-rank", "prisample")
        )
        if with_sort is not None:
            measured += f" ({with_sort:.2f}× with the amortised re-sort)"
        measured += f"; worst over N: {worst[0]:.2f}× at N = {_pow2(worst[1])}"
        worst_ratio = max(ratio, with_sort or 0.0, worst[0])
        rows.append(
            {
                "target": f"rank ≤ {TARGET_RANK:g}× proportional (DQN step)",
                "measured": measured,
                "met": worst_ratio <= TARGET_RANK,
                "shortfall": ""
                if worst_ratio <= TARGET_RANK
                else f"{worst_ratio / TARGET_RANK:.2f}× over the bound",
            }
        )
    memory = results.get("memory", {})
    per_slot = {name: memory.get(name, {}).get("nbytes_per_slot") for name in ("prisample", "prisample-rank")}
    if all(v is not None for v in per_slot.values()):
        worst_b = max(per_slot.values())
        rows.append(
            {
                "target": f"≤ {TARGET_BYTES:g} bytes per slot",
                "measured": ", ".join(f"{k} {v:.1f} B" for k, v in per_slot.items())
                + f" (N = {_pow2(memory['n'])})",
                "met": worst_b <= TARGET_BYTES,
                "shortfall": "" if worst_b <= TARGET_BYTES else f"{worst_b - TARGET_BYTES:.1f} B over",
            }
        )
    return rows


def _machine(results: dict[str, Any]) -> list[str]:
    m = results["machine"]
    v = m["versions"]
    dirty = " (with uncommitted changes in `prisample/`)" if m.get("prisample_dirty") else ""
    lines = [
        "## Machine and command",
        "",
        f"- CPU: {m['cpu']}, {m['usable_cpus']} usable logical CPUs ({m['logical_cpus']} present), "
        f"{m['memory_gib']} GiB RAM, caches seen by cpu0: {m.get('caches') or 'unknown'}, {m['os']}",
        f"- Python {m['python']}; numpy {v['numpy']}, numba {v['numba']}, torch {v['torch']}, "
        f"cpprb {v['cpprb']}, torchrl {v['torchrl']} (tensordict {v['tensordict']}); "
        f"prisample {v['prisample']} at commit `{m['prisample_commit']}`{dirty}",
        f"- One thread: `OMP_NUM_THREADS={m['omp_num_threads']}`, `torch.set_num_threads(1)` "
        f"(torch reports {m['torch_threads']})",
        f"- Load average (1, 5, 15 min) at start {_load(results['loadavg_start'])}, "
        f"at end {_load(results['loadavg_end'])}; run took {results['elapsed_s']:.0f} s on {m['date']}",
    ]
    others = [
        (v, f"N = {_pow2(b['n'])}, {g}") for b in results["speed"] for g, v in b.get("others_cpu", {}).items()
    ]
    steal = [v for b in results["speed"] for v in b.get("steal_cpu", {}).values()]
    if others:
        mean = sum(v for v, _ in others) / len(others)
        worst = max(others)
        lines.append(
            f"- CPU kept busy by other processes while timing (from `/proc/stat`, in CPUs): mean {mean:.2f} "
            f"over the {len(others)} timed groups, max {worst[0]:.2f} ({worst[1]}); hypervisor steal max "
            f"{max(steal):.2f}"
            + (
                f". A group during which others used more than {q['max_others']:g} CPU was timed again "
                f"(up to {q['attempts']} tries, {q['wait_s']:g} s apart, the least disturbed kept): "
                f"{q['retries']} retries in this run"
                if (q := results.get("quiet_policy"))
                else ""
            )
        )
    if results.get("note"):
        lines.append(f"- {results['note']}")
    ext = results.get("torchrl_extension", {})
    if ext and not ext.get("ok"):
        lines.append(f"- TorchRL's compiled extension did not import: `{ext.get('error')}`")
    lines += ["", "Command:", "", "```", results["command"], "```", ""]
    if results.get("quick"):
        lines += ["**Quick smoke run (small N, few repetitions): not the reference numbers.**", ""]
    return lines


def _load(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def _method(results: dict[str, Any]) -> list[str]:
    c = results["config"]
    return [
        "## What is timed",
        "",
        "Every structure is built in the same process and pre-filled to N valid slots with the same "
        "random priorities |N(0, 1)| before timing; α = 0.6, β = 0.4, ε = 1e-6 everywhere. "
        "Per-call arguments (slots, new priorities) are prepared beforehand in each library's own type "
        "(numpy, or torch tensors for TorchRL) from a pool of random batches and cycled through (for "
        "update k, 4096 batches of 32 or 256 slots and 256 of 4096, so that the slots touched are not all "
        "cached; 64 batches elsewhere). "
        f"The peers run interleaved in one loop: after a warm-up (numba compiles on first use) each gets "
        f"blocks of calls lasting about {c['block_s'] * 1e3:g} ms, {c['reps']} rounds, the order rotating "
        "each round; a pass's figure is the median over rounds of the mean µs per call (`time.perf_counter`, "
        f"garbage collector off). The whole set of sizes is timed in {c.get('passes', 1)} passes one after "
        "the other (fresh structures, other random priorities), so that a slow spell of this shared machine "
        "hits one pass and not all; the tables give the median over passes. Ratios are peer / prisample "
        "(proportional): above 1 means prisample is faster.",
        "",
        "- **prisample**: `PrioritizedSampler(N, alpha=0.6, beta=0.4, eps=1e-6, size=0)` through its public "
        "API: `add(slots)`, `sample(k)` → `Draw(indices, weights, probabilities)`, "
        "`update_priorities(indices, priorities)` with numpy arrays; **prisample-rank** the same with "
        '`backend="rank"`.',
        '- **cpprb**: `cpprb.PrioritizedReplayBuffer(N, {"obs": {"shape": 1}}, alpha=0.6, eps=1e-6)`, '
        "`sample(k, beta=0.4)` (indexes and weights; cpprb has no sampler-only API, so it also gathers the "
        "one-float `obs` payload), `update_priorities(indexes, priorities)`, `add(obs=...)` (writes at its "
        "own ring cursor, new items at the running max priority).",
        "- **TorchRL**: the sampler alone, "
        "`torchrl.data.replay_buffers.samplers.PrioritizedSampler(max_capacity=N, "
        "alpha=0.6, beta=0.4, eps=1e-6)` (float32 C++ sum and min trees), `sample(storage, k)` over a "
        "`LazyTensorStorage` holding N×1 floats (returns index tensor and `priority_weight`), "
        "`update_priority(index, priority)` with torch tensors; add = `mark_update(index)` + "
        "`extend(index)`, what `ReplayBuffer.extend` does to its sampler. The replay buffer classes on "
        "top of it (`TensorDictPrioritizedReplayBuffer`) are not timed.",
        "- **numpy**: `benchmarks/numpy_reference.py`, float64 sum and min trees as flat arrays, each batch "
        "operation walking the tree one level at a time with vectorised numpy (no Python loop over items, "
        "no compiled code).",
        "",
        "Operations: **sample k** (k slots with importance weights), **update k** (k raw priorities of "
        "random valid slots), **add k** (k consecutive ring slots, entering at the max priority; "
        "**add 1**: one slot), **DQN step** (sample 32 with weights, then update those 32 with new |δ|). "
        "*prisample (torch |δ|)* is the DQN step with the new priorities given as a CPU float32 torch "
        "tensor, "
        "as a loss provides them. prisample, cpprb and the numpy reference draw one slot per equal-mass "
        "stratum; TorchRL draws k independent targets.",
        "",
    ]


def _targets_table(results: dict[str, Any]) -> list[str]:
    lines = ["## Targets", "", "| target | measured | met | shortfall |", "|---|---|---|---|"]
    for row in targets(results):
        met = "–" if row["met"] is None else ("yes" if row["met"] else "**no**")
        lines.append(f"| {row['target']} | {row['measured']} | {met} | {row['shortfall'] or '–'} |")
    return [*lines, ""]


def _dqn_table(results: dict[str, Any]) -> list[str]:
    dqn = _dqn(results)
    blocks = {b["n"]: b for b in results["speed"]}
    resorts = any(b.get("rank_resort_s") is not None for b in blocks.values())
    lines = [
        "## DQN step (sample 32 + weights + update 32), µs per step",
        "",
        "| N | prisample | prisample (torch \\|δ\\|) | prisample-rank | "
        + ("rank + amortised re-sort | " if resorts else "")
        + "cpprb | TorchRL | numpy | rank / prop | cpprb / prisample | TorchRL / prisample "
        "| numpy / prisample |",
        "|---|---|---|---|" + ("---|" if resorts else "") + "---|---|---|---|---|---|---|",
    ]
    for n, t in sorted(dqn.items()):
        base = t.get("prisample")
        amortised = _amortised_resort_us(blocks[n])
        rank = t.get("prisample-rank")
        cells = [
            _pow2(n),
            _us(base),
            _us(t.get("prisample (torch |δ|)")),
            _us(rank),
            *(
                [_us(rank + amortised) if rank is not None and amortised is not None else "–"]
                if resorts
                else []
            ),
            _us(t.get("cpprb")),
            _us(t.get("TorchRL")),
            _us(t.get("numpy")),
            _x(_ratio(results, n, "DQN step", 32, "prisample-rank")),
            *[_x(_ratio(results, n, "DQN step", 32, p)) for p in RATIO_PEERS],
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [""]
    notes = []
    for n, block in sorted(blocks.items()):
        if block.get("rank_resort_s") is not None:
            notes.append(
                f"N = {_pow2(n)}: {block['rank_resort_s'] * 1e3:.1f} ms every {block['rank_resort_every']:,} "
                "writes"
            )
    if notes:
        lines += [
            "The rank backend re-sorts its heap periodically; the median hides that, so the amortised column "
            "adds "
            "(re-sort time × 32 writes per step / re-sort interval). Re-sort: " + "; ".join(notes) + ".",
            "",
        ]
    return lines


def _op_tables(results: dict[str, Any]) -> list[str]:
    times = _times(results)
    lines = ["## Per operation, µs per call", ""]
    titles = {"sample": "sample k (with weights)", "update": "update k priorities", "add": "add k items"}
    for op in ("sample", "update", "add"):
        keys = sorted((n, k) for (n, o, k) in times if o == op)
        if not keys:
            continue
        lines += [
            f"### {titles[op]}",
            "",
            "| N | k | "
            + " | ".join(PEER_ORDER)
            + " | rank / prop | "
            + " | ".join(f"{p} / prisample" for p in RATIO_PEERS)
            + " |",
            "|" + "---|" * (2 + len(PEER_ORDER) + 1 + len(RATIO_PEERS)),
        ]
        for n, k in keys:
            t = times[(n, op, k)]
            cells = [_pow2(n), str(k), *[_us(t.get(p)) for p in PEER_ORDER]]
            cells.append(_x(_ratio(results, n, op, k, "prisample-rank")))
            cells += [_x(_ratio(results, n, op, k, p)) for p in RATIO_PEERS]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    fills = [
        f"N = {_pow2(b['n'])}: " + ", ".join(f"{p} {s * 1e3:.0f} ms" for p, s in b["fill_s"].items())
        for b in results["speed"]
    ]
    lines += [
        "Pre-fill (add N, then set N random priorities), once, not part of the tables (prisample's first "
        "fill includes compiling its numba kernels): " + "; ".join(fills) + ".",
        "",
    ]
    errors = {p: e for b in results["speed"] for p, e in b["errors"].items()}
    if errors:
        lines += ["Peers that failed: " + "; ".join(f"{p}: `{e}`" for p, e in errors.items()), ""]
    return lines


def _memory(results: dict[str, Any]) -> list[str]:
    mem = results.get("memory")
    if not mem:
        return []
    n = mem["n"]
    lines = [
        f"## Bytes per slot (N = {_pow2(n)})",
        "",
        "`nbytes`: the `.nbytes` of every numpy array the object holds (shared arrays once) / N. "
        "`RSS`: resident memory given back when the filled structure is deleted, in a fresh process / N; "
        "below `nbytes` when part of an array is allocated but never written "
        "(cpprb: growth while building, since deleting its buffer returns nothing to the OS, minus its "
        "4-byte `obs` payload).",
        "",
        "| structure | nbytes / N | RSS / N | what it holds |",
        "|---|---|---|---|",
    ]
    what = {
        "cpprb": "float32 sum tree and float32 min tree, 2 × PowerOf2(N) nodes each (8 + 8)",
        "TorchRL": "float32 sum and min trees of 2C nodes each, C the power of two strictly above N "
        "(2^21 leaves for N = 2^20): 16 + 16. Beyond that, `_max_priority` holds a 0-d view into the index "
        "tensor last passed to `update_priority` with a new maximum, which keeps that tensor alive (8 B/slot "
        "after a fill in one call; not counted here, the tensor being the caller's)",
        "numpy": "float64 sum tree and float64 min tree, 2P nodes each (16 + 16)",
    }
    for name in ("prisample", "prisample-rank"):
        arrays = mem.get(name, {}).get("arrays") or {}
        what[name] = ", ".join(f"`{k}` {v / n:.1f}" for k, v in arrays.items() if v / n >= 0.05) or "–"
        own = mem.get(name, {}).get("sampler_nbytes_per_slot")
        if own is not None:
            what[name] += f" (the sampler's own `nbytes`: {own:.1f} B/slot)"
    for name in PEER_ORDER:
        entry = mem.get(name, {})
        rss = entry.get("rss_bytes_per_slot")
        if name == "cpprb" and entry.get("grown_bytes_per_slot") is not None:
            rss = entry["grown_bytes_per_slot"]
        nb = entry.get("nbytes_per_slot")
        lines.append(
            f"| {name} | {'–' if nb is None else f'{nb:.1f}'} | "
            f"{entry.get('error') or ('–' if rss is None else f'{rss:.1f}')} | {what[name]} |"
        )
    lines += [
        "",
        "cpprb, TorchRL and the numpy reference size their trees to a power of two, so their bytes per slot "
        "double when N is just above one (TorchRL's already at N = 2^k, since it takes the power of two "
        "strictly above N).",
        "",
    ]
    return lines


def _rank_tv(results: dict[str, Any]) -> list[str]:
    rows = results.get("rank_tv") or []
    if not rows:
        return []
    exact = all(r.get("mode") == "exact order" for r in rows if not r.get("error"))
    lines = [
        "## Rank-based: distance to the exact rank distribution",
        "",
        "Total variation ½ Σ|P_sampled(i) − P_exact(i)| between `sampler.probabilities(all slots)` (the "
        "piecewise-uniform distribution the backend draws from) and the exact `rank^-α / Σ r^-α` (α = 0.6) "
        "from a true sort of the priorities (ties to the lower slot). Start: N slots with random |N(0,1)| "
        "priorities. Workload: repeat {sample 32; update those 32 with |N(0,1)| · 0.5^(writes/N); add 8 new "
        "items over the oldest ring slots}, 40 priority writes per step. "
        + (
            "The backend keeps an exact order (no periodic re-sort), so the TV is read as the workload runs; "
            "what remains is the error of cutting the power law into segments. "
            if exact
            else "The periodic re-sort is switched off so that the TV can be read at a given number of "
            "writes since the last sort; the row at the default interval is the worst case of the default "
            "setting. "
        )
        + "*Paper, 32 segments*: the paper's own scheme (the power law cut into k = 32 equal-probability "
        "segments, uniform inside) on the exact order, i.e. its segmentation error alone"
        + ("." if exact else "; and on prisample's heap order at the same moment."),
        "",
    ]
    summary = []
    for r in rows:
        if r.get("error") or not r["rows"]:
            continue
        tvs = [x["prisample"] for x in r["rows"]]
        spread = (
            f"{min(tvs):.5f} at every reading"
            if round(min(tvs), 6) == round(max(tvs), 6)
            else f"{min(tvs):.5f} to {max(tvs):.5f}"
        )
        part = (
            f"N = {_pow2(r['n'])}: prisample {spread}, the paper's 32 segments "
            f"{r['rows'][0]['paper32_exact_order']:.4f}"
        )
        if not exact:
            every = r.get("resort_every")
            default = [x for x in r["rows"] if every and x["writes_over_n"] * r["n"] >= every]
            worse = [x for x in r["rows"] if x["prisample"] > x["paper32_exact_order"]]
            if worse:
                part += f"; prisample above it after {worse[0]['writes_over_n']:.3g}·N writes"
            if default:
                part += f"; {default[0]['prisample']:.4f} at the default interval"
        summary.append(part)
    if summary:
        lines += ["Summary: " + "; ".join(summary) + ".", ""]
    for r in rows:
        if r.get("error"):
            lines += [f"N = {_pow2(r['n'])}: {r['error']}", ""]
            continue
        heading = f"**N = {_pow2(r['n'])}** (CDF segments: {min(r['n'], r['resolution'] or r['n'])}"
        if r.get("resort_every"):
            heading += f", default re-sort every {r['resort_every']:,} writes"
        has_heap = any("paper32_heap_order" in x for x in r["rows"])
        lines += [
            heading + ")",
            "",
            ("| writes " if exact else "| writes since sort ")
            + "| prisample TV | paper, 32 segments, exact order |"
            + (" paper, 32 segments, heap order |" if has_heap else ""),
            "|---|---|---|" + ("---|" if has_heap else ""),
        ]
        merged: list[dict[str, Any]] = []
        for row in r["rows"]:
            key = (
                round(row["prisample"], 6),
                round(row["paper32_exact_order"], 6),
                row.get("paper32_heap_order"),
            )
            if merged and merged[-1]["key"] == key and not r.get("resort_every"):
                merged[-1]["last"] = row["writes_over_n"]
                merged[-1]["count"] += 1
            else:
                merged.append(
                    {"key": key, "first": row["writes_over_n"], "last": row["writes_over_n"], "row": row}
                    | {"count": 1}
                )
        for m in merged:
            row = m["row"]
            if m["last"] != m["first"]:
                row = {**row, "label": f"{m['first']:.3g}·N to {m['last']:.3g}·N ({m['count']} readings)"}
            every = r.get("resort_every")
            at_default = every and 0 <= row["writes_over_n"] * r["n"] - every < 40
            mark = " (default re-sort interval: worst case)" if at_default else ""
            cells = [
                row.get("label", f"{row['writes_over_n']:.3g}·N") + mark,
                f"{row['prisample']:.5f}",
                f"{row['paper32_exact_order']:.4f}",
            ]
            if has_heap:
                cells.append(f"{row.get('paper32_heap_order', float('nan')):.4f}")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def _profile(results: dict[str, Any]) -> list[str]:
    profiles = results.get("profile") or []
    if not profiles:
        return []
    lines = ["## Where prisample's DQN step goes", ""]
    for p in profiles:
        calls = ", ".join(f"{k} {_us(v)} µs" for k, v in p["calls"].items())
        lines += [
            f"**{p['backend']}, N = {_pow2(p['n'])}**: {calls} (uninstrumented; the lowest of three "
            "interleaved measurements, each a median over rounds).",
            "",
        ]
        comp = p.get("components") or {}
        if comp:
            lines += [
                f"On a sampler of N = {_pow2(p.get('components_n') or 0)} slots (everything in cache), the "
                "public calls and their internal pieces timed alone (private internals, µs): "
                + ", ".join(f"{k} {_us(v)}" for k, v in comp.items())
                + ".",
                "",
            ]
        lines += [
            f"Under `cProfile` a step takes {_us(p['profiled_total_us'])} µs (instrumentation inflates every "
            "Python-level call); self time per step of the largest functions:",
            "",
            "| self µs / step | calls / step | function |",
            "|---|---|---|",
        ]
        for e in p["functions"][:12]:
            lines.append(f"| {e['self_us_per_step']:.2f} | {e['calls_per_step']:.2f} | `{e['function']}` |")
        lines.append("")
    floors = profiles[0]["floors"]
    lines += [
        "Fixed costs on this machine, for scale: "
        + ", ".join(f"{k}: {v:.2f} µs" for k, v in floors.items())
        + ".",
        "",
    ]
    return lines


def _cache_bytes(caches: str, level: str) -> int | None:
    """Size in bytes of cache ``level`` from a string like ``"L1 32K, L2 512K, L3 32768K"``."""
    for part in caches.split(","):
        name, _, size = part.strip().partition(" ")
        if name == level and size[:-1].isdigit():
            return int(size[:-1]) * {"K": 1024, "M": 2**20}.get(size[-1], 1)
    return None


def _why_speed(
    results: dict[str, Any],
    missed: list[dict[str, Any]],
    prop: dict[str, Any],
    dqn: dict[int, dict[str, float]],
    sizes: list[int],
) -> str:
    """Why the DQN-step targets are missed, from the tables and the profile of this run."""
    hi = sizes[-1]
    mine = dqn[hi].get("prisample", float("nan"))
    text = "Why. "
    comp = prop.get("components") or {}
    mem = results.get("memory", {}).get("prisample", {})
    per_slot = mem.get("nbytes_per_slot") or 0.0
    if comp:
        small_n = prop.get("components_n") or 0
        text += (
            f"Timed alone on a sampler of N = {_pow2(small_n)} slots (about {per_slot * small_n / 1024:.0f} "
            f"KiB of arrays, within L2), prisample's step is {_us(comp['DQN step'])} µs: its compiled "
            f"kernels take {_us(comp['backend.sample(32)'])} µs (sampling) and "
            f"{_us(comp['backend write(32)'])} µs (write), and {_us(comp['DQN step: outside the backend'])} "
            "µs goes to the Python layers around them (argument conversion and validation, weights, `Draw`). "
        )
    l2 = _cache_bytes(results["machine"].get("caches", ""), "L2")
    text += f"At N = {_pow2(hi)} the step is {_us(mine)} µs"
    if comp:
        text += f" ({_us(mine - comp['DQN step'])} µs more)"
    if l2 and per_slot * hi > l2:
        text += (
            f". The operations per call are the same at both sizes; what grows is memory access: more tree "
            f"levels per path, and {per_slot * hi / 2**20:.0f} MiB of arrays, beyond the {l2 // 1024} KiB "
            "L2 cache, so the lower levels of each of the 32 descents and 32 leaf-to-root paths, and the "
            "per-slot reads of the validation, go to L3 or memory"
        )
    text += ". "
    for r in missed:
        peer = "cpprb" if "cpprb" in r["target"] else "TorchRL"
        goal = TARGET_CPPRB if peer == "cpprb" else TARGET_TORCHRL
        text += f"Against {peer} the target needs ≤ {_us(r['needed_us'])} µs per step at N = {_pow2(hi)}"
        if comp and r["needed_us"] < comp["DQN step"]:
            text += f", below the in-L2 step itself ({_us(comp['DQN step'])} µs)"
        elif comp and r["needed_us"] < comp["DQN step"] * 1.5:
            text += f", within {_us(r['needed_us'] - comp['DQN step'])} µs of the in-L2 step"
        met_at = [m for m in sizes if m != hi and (_ratio(results, m, "DQN step", 32, peer) or 0.0) >= goal]
        if met_at:
            text += (
                f"; {peer}'s own step costs {_us(min(dqn[m][peer] for m in sizes if peer in dqn[m]))} µs or "
                "more at every N, so the ratio is met where prisample's step is small: N = "
                + ", ".join(f"{_pow2(m)} ({_ratio(results, m, 'DQN step', 32, peer):.2f}×)" for m in met_at)
            )
        text += ". "
    return text.strip()


def _analysis(results: dict[str, Any]) -> list[str]:
    rows = targets(results)
    missed = [r for r in rows if r["met"] is False]
    lines = ["## Missed targets: by how much and why", ""]
    if not missed:
        return [*lines, "All targets are met.", ""]
    for r in missed:
        lines.append(f"- **{r['target']}**: measured {r['measured']}; {r['shortfall']}.")
    lines.append("")
    dqn = _dqn(results)
    sizes = sorted(dqn)
    profiles = {p["backend"]: p for p in results.get("profile") or []}
    prop = profiles.get("proportional")
    speed_missed = [r for r in missed if "needed_us" in r]
    if speed_missed and prop:
        lines += [_why_speed(results, speed_missed, prop, dqn, sizes), ""]
    if any("bytes per slot" in r["target"] for r in missed):
        mem = results.get("memory", {})
        n = mem.get("n", 1)
        for name in ("prisample", "prisample-rank"):
            entry = mem.get(name, {})
            per_slot = entry.get("nbytes_per_slot")
            if per_slot is None or per_slot <= TARGET_BYTES:
                continue
            parts = ", ".join(
                f"`{k}` {v / n:.2f}"
                for k, v in sorted((entry.get("arrays") or {}).items(), key=lambda kv: -kv[1])
            )
            lines += [
                f"Bytes, {name}: {per_slot:.2f} B/slot at N = {_pow2(n)}, of which {parts} (B/slot).",
                "",
            ]
    rank_missed = [r for r in missed if r["target"].startswith("rank")]
    rank = profiles.get("rank")
    if rank_missed and rank:
        comp = rank.get("components") or {}
        text = (
            f"Rank at N = {_pow2(rank['n'])}: sample(32) {_us(rank['calls'].get('sample(32)'))} µs, "
            f"update_priorities(32) {_us(rank['calls'].get('update_priorities(32)'))} µs"
        )
        prop_calls = prop["calls"] if prop else {}
        if prop_calls:
            text += (
                f" (random slots), against proportional's {_us(prop_calls.get('sample(32)'))} and "
                f"{_us(prop_calls.get('update_priorities(32)'))} µs"
            )
        if comp:
            text += (
                f"; at N = {_pow2(rank.get('components_n') or 0)}: backend sampling "
                f"{_us(comp['backend.sample(32)'])} µs, backend write {_us(comp['backend write(32)'])} µs"
            )
        top = rank["functions"][:4]
        text += f". Its DQN step under cProfile ({_us(rank['profiled_total_us'])} µs): " + "; ".join(
            f"`{e['function']}` {e['self_us_per_step']:.1f} µs self" for e in top
        )
        lines += [text + ".", ""]
    return lines


ROOT = Path(__file__).resolve().parent.parent
SECTIONS = Path(__file__).parent / "sections"
RERENDER = "python -m benchmarks.run_all --from-json benchmarks/results.json --out docs/benchmarks.md"


@dataclass(frozen=True)
class Backed:
    """A section of ``benchmarks/sections/`` rendered from the JSON that its benchmark wrote."""

    file: str
    """Its name under ``benchmarks/sections/`` (the report appends sections in name order)."""
    title: str
    """Its heading, shown alone with the command while the JSON does not exist yet."""
    json: str
    """The JSON its tables cite, relative to the repository root."""
    command: str
    """The command that writes that JSON."""
    render: str
    """``module:function`` that renders the section from the JSON's contents."""
    unchecked: tuple[str, ...] = ()
    """Columns the numbers check (``tests/test_docs_numbers.py``) skips (``ignore=``): values
    computed from several JSON values (a sum, a per-batch figure), which re-rendering checks
    (``tests/test_benchmark_report.py``), and labels that hold parameters (``n_step=3``)."""


BACKED = (
    Backed(
        "atari_ddqn.md",
        "Recipe: Double DQN full loop on Pong (`recipes/atari_ddqn.py`)",
        "benchmarks/atari_loop.json",
        "flock /tmp/prisample-heavy.lock env OMP_NUM_THREADS=1 python -m benchmarks.atari_loop "
        "--acting_steps 2000 --updates 300 --out benchmarks/atari_loop.json",
        "benchmarks.atari_loop:section",
    ),
    Backed(
        "imbalanced_mnist.md",
        "Recipe: imbalanced MNIST, one training epoch",
        "docs/results/imbalanced_mnist_epoch_overhead.json",
        "python -m benchmarks.epoch_overhead",
        "benchmarks.epoch_overhead:render",
        unchecked=("per batch, ms",),
    ),
    Backed(
        "lock_overhead.md",
        "Thread safety: what the sampler's lock costs an uncontended DQN step",
        "docs/results/lock_overhead.json",
        "flock /tmp/prisample-heavy.lock env OMP_NUM_THREADS=1 python -m benchmarks.lock_overhead "
        "--out docs/results/lock_overhead.json",
        "benchmarks.lock_overhead:section",
    ),
    Backed(
        "replay_step.md",
        "Replay step on Atari shapes: prisample, cpprb and TorchRL side by side "
        "(`benchmarks/replay_step.py`)",
        "docs/results/replay_step.json",
        "flock /tmp/prisample-heavy.lock env OMP_NUM_THREADS=1 python -m benchmarks.replay_step "
        "--out docs/results/replay_step.json --section benchmarks/sections/replay_step.md",
        "benchmarks.replay_step:section",
        unchecked=("bytes per transition", "prisample variant"),  # RSS + memmap bytes on disk; names
    ),
)


def mark_tables(text: str, json_path: str, unchecked: tuple[str, ...] = ()) -> str:
    """``text`` with a ``<!-- numbers: json_path -->`` line before each table that lacks one."""
    lines = text.splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        starts = line.lstrip().startswith("|") and (i == 0 or not lines[i - 1].lstrip().startswith("|"))
        if starts and not (out and out[-1].startswith("<!-- numbers:")):
            header = {c.strip() for c in line.replace("\\|", "/").strip().strip("|").split("|")}
            ignore = "|".join(c for c in unchecked if c in header)
            out.append(f"<!-- numbers: {json_path}" + (f" ignore={ignore}" if ignore else "") + " -->")
        out.append(line)
    return "\n".join(out) + "\n"


def pending(section: Backed) -> str:
    """What a backed section says until its JSON exists: the command, no numbers."""
    return (
        f"## {section.title}\n\n"
        f"Pending: run `{section.command}` (writes `{section.json}`), then `{RERENDER}`.\n"
    )


def backed_section(section: Backed, root: Path = ROOT) -> str:
    """The section's markdown: rendered from its JSON and marked for the numbers check."""
    source = root / section.json
    if not source.is_file():
        return pending(section)
    module, function = section.render.split(":")
    render_json = getattr(importlib.import_module(module), function)
    text = render_json(json.loads(source.read_text())).rstrip() + "\n"
    return mark_tables(text, section.json, section.unchecked)


def write_sections(root: Path = ROOT) -> list[Path]:
    """(Re)write every backed section of ``benchmarks/sections/`` from its JSON."""
    written = []
    for section in BACKED:
        path = root / "benchmarks" / "sections" / section.file
        path.write_text(backed_section(section, root))
        written.append(path)
    return written


def _recipe_sections() -> list[str]:
    """The recipe benchmarks' sections (``benchmarks/sections/*.md``), in name order."""
    lines: list[str] = []
    for path in sorted(SECTIONS.glob("*.md")):
        lines += [path.read_text().rstrip(), ""]
    return lines


def render_results(results: dict[str, Any]) -> str:
    """The part of ``docs/benchmarks.md`` rendered from ``benchmarks/results.json`` alone."""
    lines = [
        "# Benchmarks",
        "",
        "prisample against cpprb's `PrioritizedReplayBuffer`, TorchRL's `PrioritizedSampler` and a plain "
        "vectorised-numpy sum tree: µs per operation for N ∈ {"
        + ", ".join(_pow2(n) for n in results["config"]["sizes"])
        + "} slots and batch k ∈ {"
        + ", ".join(str(k) for k in results["config"]["ks"])
        + "}, bytes per slot, rank-based against proportional, and the accuracy of the rank-based "
        "distribution. Produced by `benchmarks/run_all.py` (raw numbers in `benchmarks/results.json`).",
        "",
    ]
    lines += _machine(results)
    lines += _targets_table(results)
    lines += _dqn_table(results)
    lines += _op_tables(results)
    lines += _memory(results)
    lines += _rank_tv(results)
    lines += _profile(results)
    lines += _analysis(results)
    lines += _method(results)
    return "\n".join(lines).rstrip() + "\n"


def render(results: dict[str, Any]) -> str:
    """``docs/benchmarks.md``: :func:`render_results`, then the sections of ``benchmarks/sections/``.

    What ``python -m benchmarks.run_all`` writes (after :func:`write_sections`); pure, times nothing.
    """
    return (render_results(results) + "\n" + "\n".join(_recipe_sections())).rstrip() + "\n"


def drift(doc: Path, results: dict[str, Any]) -> str:
    """A unified diff from ``doc`` to what :func:`render` gives (empty when ``doc`` is up to date)."""
    return "".join(
        difflib.unified_diff(
            doc.read_text().splitlines(keepends=True),
            render(results).splitlines(keepends=True),
            fromfile=str(doc),
            tofile="render(results)",
        )
    )
