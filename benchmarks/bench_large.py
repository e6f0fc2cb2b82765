"""One large Dalitz fit (issue 28): events from a file in chunks, a cache budget, a distributed loss, the GPU.

The demo's five-component D+ -> K- pi+ pi+ model (``demos.amplitude.build_model``), the couplings and
the K*(892) mass and width free, normalized on a fixed phase-space sample, fitted to N events of the model
read from ``benchmarks/.data/dalitz_<N>.npy`` (``_large_events.py`` makes the files). Every row runs in its
own child process (``_large_fit.py``), which reports its times, its fit and its peak resident set (VmHWM):

- ``UnbinnedNLL`` on all events loaded whole (the reference; up to 1e7);
- ``ChunkedLoss`` on the file read in chunks (chunk sizes to compare: ``--chunks``), at every N;
- the same with ``set_cache_budget(half of its caches' bytes)``, at 1e7;
- ``DistributedLoss`` on a 2-worker ``LocalCluster``: per call at every N, per fit up to 1e7;
- per-evaluation time on the GPU against the CPU, where TensorFlow sees a GPU.

Usage::

    python benchmarks/bench_large.py --sizes 1e6,1e7 --out /tmp/large.md   # a subset, progress on stderr
    python benchmarks/bench_large.py                                       # 1e6, 1e7 and 1e8 (hours)
    python benchmarks/run_all.py --only bench_large                        # the same through run_all
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field, replace  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _harness import fmt, markdown_table, verdict  # noqa: E402
from _large_events import MAX_TRUE, events_file, log, phasespace_file  # noqa: E402

__all__ = ["Config", "FULL", "QUICK", "run", "main"]

ROWS = ("unchunked", "chunked", "budget", "distributed", "gpu")
#: A row whose process passes this resident set stops (and says so): the machine's 24 GiB are shared.
MAX_RSS_GIB = 18.0
GIB = 1024.0


@dataclass(frozen=True)
class Config:
    """What one run measures.

    Attributes
    ----------
    sizes : tuple of int
        Events of the fits, ascending.
    chunks : tuple of int
        Chunk sizes of ``ChunkedLoss`` to compare at every N that holds more than one of them; above
        ``max_unchunked`` only the best at the largest smaller N runs.
    n_mc : int
        Events of the phase-space (integration) sample.
    repeats : int
        Warm value + gradient calls timed per row (their median is reported).
    rows : tuple of str
        Which kinds of rows run (see ``ROWS``).
    max_unchunked : int
        Largest N of the unchunked reference.
    budget_at : int
        N of the budgeted row.
    max_distributed_fit : int
        Largest N of a full distributed fit (above it, per call only).
    workers : int
        Dask workers of the distributed rows.
    one_process : bool
        Every row in one child process (quick runs: saves the imports; peak RSS then is the whole run's).
    max_fit : int
        Largest N whose rows fit (above it, per call only; the distributed rows: ``max_distributed_fit``).
    free_mass : bool
        The K*(892) mass and width float (else the couplings alone: quick runs, whose tracing is then 3x shorter).
    gpu_sizes : tuple of int
        N of the GPU rows.
    max_rss_gib : float
        A child whose resident set passes this stops; its rows say so.
    reuse : str, optional
        A JSON file of measured rows: rows found there (same label, completed) are not measured again, new ones
        are added (so that a long run can go on in parts, and a 1e8 run can sit beside earlier 1e6 and 1e7 rows).
    notes : list of str
        Lines for the setup section (filled by the run).
    """

    sizes: tuple[int, ...] = (1_000_000, 10_000_000, 100_000_000)
    chunks: tuple[int, ...] = (1_000_000, 5_000_000)
    n_mc: int = 1_000_000
    repeats: int = 3
    rows: tuple[str, ...] = ROWS
    max_unchunked: int = 10_000_000
    budget_at: int = 10_000_000
    max_distributed_fit: int = 10_000_000
    workers: int = 2
    one_process: bool = False
    max_fit: int = 10**12
    free_mass: bool = True
    gpu_sizes: tuple[int, ...] = (1_000_000, 10_000_000)
    max_rss_gib: float = MAX_RSS_GIB
    reuse: str | None = None
    notes: list[str] = field(default_factory=list, compare=False)


FULL = Config()
# One size: each new loss (and each chunk) traces its own graph, a few seconds apiece, so that 2e4 and 5e4 with
# every row would take minutes; the smoke test needs every kind of row, not two sizes of each.
QUICK = Config(sizes=(20_000,), chunks=(10_000,), n_mc=20_000, repeats=1, max_unchunked=20_000,
               budget_at=20_000, max_distributed_fit=0, one_process=True, max_fit=20_000, free_mass=False,
               gpu_sizes=(20_000,))


# -- running children -----------------------------------------------------------------------------------------
def _child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    import zcache

    env = dict(os.environ, **(extra or {}))
    # the children (and Dask's workers) import this zcache (a worktree on PYTHONPATH wins) and these helpers
    root = str(Path(zcache.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([root, str(HERE), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def run_children(specs: list[dict[str, Any]], env: dict[str, str] | None = None,
                 max_rss_gib: float = MAX_RSS_GIB) -> list[dict[str, Any]]:
    """Run ``specs`` in one child process (``--child``); a child that dies gives failed rows."""
    with tempfile.TemporaryDirectory() as tmp:
        spec_path, result_path = Path(tmp) / "specs.json", Path(tmp) / "results.json"
        spec_path.write_text(json.dumps(specs))
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(spec_path),
                               "--result", str(result_path), "--max-rss-gib", str(max_rss_gib)],
                              env=_child_env(env), cwd=HERE.parent)
        if result_path.exists():
            return json.loads(result_path.read_text())
    return [{"label": s["label"], "status": f"failed: the child exited with status {proc.returncode}"} for s in specs]


def _spec(cfg: Config, label: str, kind: str, n: int, chunk: int | None = None, **more: Any) -> dict[str, Any]:
    return {"label": label, "kind": kind, "n": n, "chunk": chunk, "path": str(events_file(n)),
            "mc_path": str(phasespace_file(cfg.n_mc)), "repeats": cfg.repeats, "workers": cfg.workers,
            "free_mass": cfg.free_mass, "do_fit": n <= cfg.max_fit, **more}


def _short(n: int) -> str:
    """``1e6``, ``5e4``, ``2.5e5``: a size in a row's label."""
    mantissa, exponent = f"{n:.1e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def _label(kind: str, n: int, chunk: int | None = None) -> str:
    names = {"unchunked": "UnbinnedNLL (in memory)", "chunked": "ChunkedLoss", "budget": "ChunkedLoss + budget 1/2",
             "distributed": "DistributedLoss"}
    text = f"{names[kind]}, N = {_short(n)}"
    return text + (f", chunks of {_short(chunk)}" if chunk else "")


def plan(cfg: Config, n: int, best_chunk: int | None, has: dict[str, bool]) -> list[dict[str, Any]]:
    """The specs of the rows at ``n`` (``best_chunk``: the chunk size kept from a smaller N, or None)."""
    specs = []
    if "unchunked" in cfg.rows and n <= cfg.max_unchunked:
        specs.append(_spec(cfg, _label("unchunked", n), "unchunked", n))
    chunks = [c for c in cfg.chunks if c <= n] or [min(cfg.chunks)]
    if n > cfg.max_unchunked and best_chunk:
        chunks = [best_chunk]
    if "chunked" in cfg.rows and has["chunks"]:
        specs += [_spec(cfg, _label("chunked", n, c), "chunked", n, c) for c in chunks]
    return specs


def _best_chunk(results: list[dict[str, Any]], n: int) -> int | None:
    rows = [r for r in results if r.get("kind") == "chunked" and r.get("n") == n and r.get("status") == "ok"]
    return min(rows, key=lambda r: r["warm_ms"])["chunk"] if rows else None


def measure_rows(cfg: Config) -> tuple[list[dict[str, Any]], dict[str, bool]]:
    """Every row of ``cfg``, N by N; returns the rows (spec + result) and which APIs were there."""
    import _large_fit

    has = _large_fit.available()
    api = {"chunks": "zcache.scale.ChunkedLoss", "budget": "zcache.set_cache_budget",
           "distributed": "zcache.scale.DistributedLoss"}
    for what, name in api.items():
        if not has[what]:
            cfg.notes.append(f"`{name}` is not in this zcache (or dask is missing): its rows were not run.")
    results: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    best = None
    for n in cfg.sizes:
        log(f"N = {n:,}: event file")
        specs = plan(cfg, n, best, has)
        pending += specs
        if not cfg.one_process:
            results += _run(specs, cfg)
            best = _best_chunk(results, n) or best
        extra = []
        if n == cfg.budget_at and "budget" in cfg.rows and has["budget"] and has["chunks"]:
            chunk = (best if not cfg.one_process else None) or min(cfg.chunks)
            extra.append(_spec(cfg, _label("budget", n, chunk), "chunked", n, chunk, budget_fraction=0.5))
        if "distributed" in cfg.rows and has["distributed"]:
            chunk = best or min(cfg.chunks)
            extra.append(_spec(cfg, _label("distributed", n, chunk), "distributed", n, chunk,
                               do_fit=n <= min(cfg.max_distributed_fit, cfg.max_fit)))
        pending += extra
        if not cfg.one_process:
            results += _run(extra, cfg)
    if cfg.one_process:
        results = _run(pending, cfg, together=True)
    # rows of earlier runs (--reuse) at these sizes that this run did not plan: for the tables and the checks
    done = {r["label"] for r in results}
    results += [r for r in _reused(cfg).values() if r["label"] not in done and r["n"] in cfg.sizes]
    return sorted(results, key=lambda r: (r["n"], ROWS.index(r["kind"]), r.get("chunk") or 0)), has


def _reused(cfg: Config) -> dict[str, dict[str, Any]]:
    """The rows of ``cfg.reuse`` that completed (or stopped at the memory limit), by label."""
    if not cfg.reuse or not Path(cfg.reuse).exists():
        return {}
    return {r["label"]: r for r in json.loads(Path(cfg.reuse).read_text())
            if r.get("status") == "ok" or str(r.get("status")).startswith("stopped")}


def _save(cfg: Config, rows: list[dict[str, Any]]) -> None:
    """Add ``rows`` to ``cfg.reuse`` (a row of the same label is replaced)."""
    if cfg.reuse:
        kept = {r["label"]: r for r in (json.loads(Path(cfg.reuse).read_text()) if Path(cfg.reuse).exists() else [])}
        kept.update({r["label"]: r for r in rows})
        Path(cfg.reuse).write_text(json.dumps(list(kept.values()), indent=1))


def _run(specs: list[dict[str, Any]], cfg: Config, together: bool = False) -> list[dict[str, Any]]:
    out = []
    reused = {k: r for k, r in _reused(cfg).items() if r.get("fit") or not any(s["label"] == k and s["do_fit"]
                                                                                 for s in specs)}
    for spec in [s for s in specs if s["label"] in reused]:
        log(f"reused from {cfg.reuse}: {spec['label']}")
        out.append(reused[spec["label"]])
    specs = [s for s in specs if s["label"] not in reused]
    groups = [specs] if together else [[s] for s in specs]
    for group in groups:
        if not group:
            continue
        log(f"child: {', '.join(s['label'] for s in group)}")
        t0 = time.perf_counter()
        rows = [{**spec, **result, "kind": "budget" if spec.get("budget_fraction") else spec["kind"]}
                for spec, result in zip(group, run_children(group, max_rss_gib=cfg.max_rss_gib), strict=True)]
        _save(cfg, rows)
        out += rows
        log(f"child done in {time.perf_counter() - t0:.0f} s")
    return out


# -- checks and tables ----------------------------------------------------------------------------------------
def _ok(row: dict[str, Any] | None) -> bool:
    return bool(row) and row.get("status") == "ok"


def _find(rows: list[dict[str, Any]], kind: str, n: int, chunk: int | None = None) -> dict[str, Any] | None:
    for row in rows:
        if row["kind"] == kind and row["n"] == n and (chunk is None or row.get("chunk") == chunk) and _ok(row):
            return row
    return None


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
    """How far two rows' numbers are apart: value and gradient at the start, fitted values in errors."""
    out = {"start equal": a["x_start"] == b["x_start"] and a["names"] == b["names"],
           "value rel": abs(a["value"] - b["value"]) / max(1.0, abs(b["value"]))}
    ga, gb = np.asarray(a["gradient"]), np.asarray(b["gradient"])
    out["gradient rel"] = float(np.max(np.abs(ga - gb)) / max(1e-300, np.max(np.abs(gb))))
    if a.get("fit") and b.get("fit"):
        fa, fb = a["fit"], b["fit"]
        out["fit values / errors"] = max(abs(fa["values"][k] - fb["values"][k]) / fb["errors"][k] for k in fb["values"])
        out["fmin diff"] = abs(fa["fmin"] - fb["fmin"])
    return out


def _check_text(what: str, c: dict[str, float]) -> str:
    text = (f"{what}: same start {fmt(bool(c['start equal']))}; value at the start {c['value rel']:.1e} relative "
            f"({'met' if c['value rel'] <= 1e-10 else '**missed**'}: goal 1e-10), gradient {c['gradient rel']:.1e} "
            f"(of its largest entry)")
    if "fit values / errors" in c:
        v = c["fit values / errors"]
        text += (f"; fitted values {v:.1e} of their errors apart ({'met' if v <= 1e-6 else '**missed**'}: goal 1e-6), "
                 f"fmin {c['fmin diff']:.1e} apart")
    return text + "."


def table_rows(rows: list[dict[str, Any]], reference: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One table row per measurement (``reference``: the in-memory row whose time per event is the unit)."""
    out = []
    for row in rows:
        fit = row.get("fit") or {}
        line: dict[str, Any] = {"row": row["label"], "status": row.get("status", "?")}
        if _ok(row):
            line.update({
                "build [s]": row["build_s"], "first value + gradient [s]": row["first_s"],
                "warm value + gradient [ms]": row["warm_ms"], "per 1e6 events [ms]": row["warm_ms"] * 1e6 / row["n"],
                "fit [s]": fit.get("seconds", "—"),
                "calls (values, gradients, Hessians)": f"{fit['nfcn']}, {fit['ngrad']}, {fit['nhessian']}" if fit else "—",
                "valid": fit.get("valid", "—"), "fmin": f"{fit['fmin']:.4f}" if fit else "—",
                "peak RSS [MiB]": row["peak_mib"], "peak RSS before the fit [MiB]": row["peak_before_fit_mib"],
                "baseline RSS [MiB]": row["baseline_mib"],
            })
            if reference:
                line["per event / in-memory per event"] = (row["warm_ms"] / row["n"]) / (reference["warm_ms"] / reference["n"])
        out.append(line)
    return out


def fit_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The K*(892) mass, width and coupling magnitude of each fit, with errors."""
    out = []
    for row in rows:
        fit = row.get("fit")
        if not (_ok(row) and fit):
            continue
        line = {"row": row["label"]}
        for name in ("K*(892)_mass", "K*(892)_width", "c[K*(892)]_mag"):
            if name in fit["values"]:
                line[name] = f"{fit['values'][name]:.6f} ± {fit['errors'][name]:.6f}"
        line["edm"] = fit["edm"]
        line["path"] = fit["path"]
        out.append(line)
    return out


def _targets(cfg: Config, rows: list[dict[str, Any]], reference: float | None) -> list[str]:
    lines = []
    for n, limit in ((100_000_000, 16 * GIB), (10_000_000, 3 * GIB)):
        for row in (r for r in rows if r["kind"] == "chunked" and r["n"] == n):
            if _ok(row):
                lines.append(f"- {row['label']}: completes {fmt(bool((row.get('fit') or {}).get('valid', True)))}; peak RSS "
                             f"{row['peak_mib'] / GIB:.2f} GiB (target ≤ {limit / GIB:.0f} GiB: "
                             f"{'met' if row['peak_mib'] <= limit else '**missed**'}"
                             + ("" if row.get("fit") else "; per call only, no fit in this run") + ")")
                if n == 100_000_000 and reference:
                    lines[-1] += ("; warm value + gradient / (100 × the 1e6 in-memory figure) = "
                                  + verdict(row["warm_ms"] / (100 * reference), 1.2))
            else:
                lines.append(f"- {row['label']}: {row.get('status')}")
    for row in (r for r in rows if r["kind"] == "budget" and _ok(r)):
        base = _find(rows, "chunked", row["n"], row["chunk"])
        if base:
            lines.append(f"- {row['label']}: budget {row['budget_bytes'] / 2**20:.0f} MiB of "
                         f"{row['cache_bytes_unbudgeted'] / 2**20:.0f} MiB; warm value + gradient "
                         f"{row['warm_ms'] / base['warm_ms']:.2f}× the unbudgeted row's"
                         + (f", fit {row['fit']['seconds'] / base['fit']['seconds']:.2f}×" if row.get("fit")
                            and base.get("fit") else "")
                         + f"; evictions {row.get('budget_info', {}).get('evictions', '?')}")
    return lines


def _checks(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for row in rows:
        if not _ok(row) or row["kind"] == "unchunked":
            continue
        ref = _find(rows, "unchunked", row["n"])
        if row["kind"] == "budget":
            ref = _find(rows, "chunked", row["n"], row["chunk"]) or ref
        if ref is None:
            ref = _find(rows, "chunked", row["n"]) if row["kind"] == "distributed" else None
        if ref is not None:
            lines.append("- " + _check_text(f"{row['label']} vs {ref['label']}", compare(row, ref)))
    return lines


def distributed_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Distributed vs one process (the chunked row at the same N and chunk, else the unchunked one)."""
    out = []
    for row in (r for r in rows if r["kind"] == "distributed"):
        if not _ok(row):
            out.append({"N": row["n"], "status": row.get("status")})
            continue
        one = _find(rows, "chunked", row["n"], row["chunk"]) or _find(rows, "unchunked", row["n"])
        line: dict[str, Any] = {"N": row["n"], "one process": one["label"] if one else "—",
                                "per call, one process [ms]": one["warm_ms"] if one else "—",
                                f"per call, {row['workers']} workers [ms]": row["warm_ms"],
                                "one process / workers (call)": one["warm_ms"] / row["warm_ms"] if one else "—"}
        if row.get("fit") and one and one.get("fit"):
            line.update({"fit, one process [s]": one["fit"]["seconds"], "fit, workers [s]": row["fit"]["seconds"],
                         "one process / workers (fit)": one["fit"]["seconds"] / row["fit"]["seconds"]})
        line["workers' peak RSS [MiB]"] = ", ".join(f"{v:.0f}" for v in row.get("workers_peak_mib", []))
        line["client peak RSS [MiB]"] = row["peak_mib"]
        out.append(line)
    return out


def gpu_section(cfg: Config) -> tuple[str, str]:
    """Per-evaluation time on the GPU vs the CPU (unchunked, no fit), or the line saying there is no GPU."""
    import tensorflow as tf

    title = "GPU: per-evaluation time against the CPU"
    if not tf.config.list_physical_devices("GPU"):
        return title, "no GPU visible to TensorFlow on this machine (`tf.config.list_physical_devices('GPU')` is empty)."
    rows = []
    for n in cfg.gpu_sizes:
        spec = _spec(cfg, f"N = {_short(n)}", "unchunked", n, do_fit=False)
        gpu = run_children([{**spec, "label": spec["label"] + " GPU"}])[0]
        cpu = run_children([{**spec, "label": spec["label"] + " CPU"}], env={"CUDA_VISIBLE_DEVICES": "-1"})[0]
        line = {"N": n, "GPU [ms]": gpu.get("warm_ms", gpu.get("status")), "CPU [ms]": cpu.get("warm_ms", cpu.get("status"))}
        if _ok(gpu) and _ok(cpu):
            line["CPU / GPU"] = cpu["warm_ms"] / gpu["warm_ms"]
        rows.append(line)
    names = ", ".join(d.name for d in tf.config.list_physical_devices("GPU"))
    return title, (markdown_table(rows) + f"\n\nUnchunked UnbinnedNLL, warm value + gradient, median of {cfg.repeats}; "
                   f"GPU: {names}.")


def setup_text(cfg: Config) -> str:
    """The configuration and the event files' provenance."""
    lines = [
        "The demo's five-component D+ → K- π+ π+ model (`demos.amplitude.build_model`: NR + K*(892), "
        "K0*(1430), K2*(1430), K*(1410)); free: the 8 coupling parameters"
        + (" and the K*(892) mass and width (10); " if cfg.free_mass else " (quick mode: the K*(892) mass and width fixed); ")
        + (f"fits up to N = {cfg.max_fit:,} (above: per call only); " if cfg.max_fit < max(cfg.sizes) else "")
        + f"phase-space sample {cfg.n_mc:,} events (fixed, one file); start: the truth shifted by a fixed-seed amount; "
        f"every fit `Minuit(compiled=False)` (MIGRAD + HESSE, the path the chunked and distributed losses take). "
        f"Each row in its own child process (`_large_fit.py`)"
        + (" (quick mode: all rows in one process, so its peak RSS is the run's)" if cfg.one_process else "")
        + f"; warm value + gradient = median of {cfg.repeats} calls at the start values; peak RSS = the child's VmHWM "
        "(the Dask workers' own in the distributed table); baseline = its resident set after the imports.",
    ]
    for n in cfg.sizes:
        meta = events_file(n).with_suffix(".json")
        if meta.exists():
            info = json.loads(meta.read_text())
            text = (f"`dalitz_{n}.npy`: {info['sampler_events']:,} events from `AmplitudePdf.sample` "
                    f"(blocks of 1e6, seeds {info['seed']} + block)")
            if info["envelope_events"]:
                pulls = ", ".join(f"{k} {v:+.2f}" for k, v in info.get("two_sample_pulls", {}).items())
                text += (f", then {info['envelope_events']:,} from the cell-wise envelope accept-reject on the same "
                         f"intensity (`_large_events.EnvelopeSampler`, efficiency {info.get('envelope_efficiency') or 0:.2f}; "
                         f"two-sample check against the first {min(MAX_TRUE, info['envelope_events']):,} events: "
                         f"{pulls})")
            lines.append("- " + text + ".")
    return "\n".join(lines + [f"- {note}" for note in cfg.notes])


def sections(cfg: Config, rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The report's sections from the measured rows."""
    ref_row = _find(rows, "unchunked", 1_000_000) or _find(rows, "unchunked", min(cfg.sizes))
    reference = ref_row["warm_ms"] * 1e6 / ref_row["n"] if ref_row else None  # ms per 1e6 events
    main_rows = [r for r in rows if r["kind"] != "distributed"]
    body = markdown_table(table_rows(main_rows, ref_row))
    if ref_row:
        body += ("\n\n'per event / in-memory per event': the row's warm value + gradient per event over the in-memory "
                 f"row's at N = {ref_row['n']:,} (1 = linear scaling from it).")
    fits = fit_rows(rows)
    body += "\n\n" + (markdown_table(fits) if fits else "_(no fits)_")
    targets, checks = _targets(cfg, rows, reference), _checks(rows)
    best = {n: _best_chunk(rows, n) for n in cfg.sizes}
    chosen = [f"N = {n:,}: chunks of {c:,}" for n, c in best.items() if c and len([r for r in rows if r['kind'] == 'chunked'
                                                                                 and r['n'] == n]) > 1]
    text = "**Targets (issue 28).**\n" + ("\n".join(targets) if targets else "- (no chunked rows at 1e7 or 1e8)")
    if chosen:
        text += "\n\n**Chunk size kept** (faster warm value + gradient): " + "; ".join(chosen) + "."
    text += "\n\n**Checks.**\n" + ("\n".join(checks) if checks else "- (nothing to compare)")
    out = [("Large Dalitz fit: setup", setup_text(cfg)), ("Large Dalitz fit: rows", body + "\n\n" + text)]
    dist = distributed_table(rows)
    if dist:
        note = ("Per call: warm value + gradient at the start (the client's round trip included); per fit: the "
                "same MIGRAD + HESSE fit from the same start. One process = the chunked row at the same N and chunk "
                "(else the in-memory one).")
        stats = [r.get("stats") for r in rows if r["kind"] == "distributed" and _ok(r) and r.get("stats")]
        if stats:
            note += f" `DistributedLoss.stats` of the last row: `{json.dumps(stats[-1])[:600]}`."
        out.append((f"Distributed: {cfg.workers}-worker LocalCluster vs one process", markdown_table(dist) + "\n\n" + note))
    if "gpu" in cfg.rows:
        out.append(gpu_section(cfg))
    return out


def run(quick: bool, cfg: Config | None = None) -> list[tuple[str, str]]:
    """``run_all.py``'s entry point: every row of ``cfg`` (default :data:`QUICK` or :data:`FULL`)."""
    cfg = cfg or (QUICK if quick else FULL)
    cfg = replace(cfg, notes=[])
    t0 = time.perf_counter()
    for n in cfg.sizes:
        events_file(n)
    phasespace_file(cfg.n_mc)
    log(f"event files ready ({time.perf_counter() - t0:.0f} s)")
    rows, _ = measure_rows(cfg)
    return sections(cfg, rows)


def _child_main(spec_path: str, result_path: str, max_rss_gib: float) -> None:
    import _large_fit
    import tensorflow  # noqa: F401 - imported before the baseline resident set is read

    import zcache  # noqa: F401

    _large_fit.measure_all(json.loads(Path(spec_path).read_text()), result_path, max_rss_gib * 1024)


def _sizes(text: str) -> tuple[int, ...]:
    return tuple(int(float(v)) for v in text.split(",") if v)


def main(argv: list[str] | None = None) -> int:
    """Command line: a subset of the rows (``--sizes``), written to ``--out``; ``--child`` is a measurement."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small N (the smoke test's sizes)")
    parser.add_argument("--sizes", type=_sizes, default=None, help="comma-separated N, e.g. 1e6,1e7")
    parser.add_argument("--chunks", type=_sizes, default=None, help="chunk sizes to compare, e.g. 1e6,5e6")
    parser.add_argument("--mc", type=lambda v: int(float(v)), default=None, help="phase-space events")
    parser.add_argument("--repeats", type=int, default=None, help="warm calls timed per row")
    parser.add_argument("--max-fit", type=lambda v: int(float(v)), default=None,
                        help="largest N whose rows fit (above: per-call rows only)")
    parser.add_argument("--rows", default=None, help=f"comma-separated subset of {','.join(ROWS)}")
    parser.add_argument("--out", type=Path, default=None, help="write the Markdown here (default: stdout)")
    parser.add_argument("--max-rss-gib", type=float, default=MAX_RSS_GIB,
                        help=f"stop a row whose process passes this resident set (default {MAX_RSS_GIB:g})")
    parser.add_argument("--reuse", default=None, metavar="JSON",
                        help="keep the measured rows in this file and reuse the completed ones found there")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child_main(args.child, args.result, args.max_rss_gib)
        return 0
    cfg = QUICK if args.quick else FULL
    changes = {k: v for k, v in {"sizes": args.sizes, "chunks": args.chunks, "n_mc": args.mc, "repeats": args.repeats,
                                 "rows": tuple(args.rows.split(",")) if args.rows else None,
                                 "max_rss_gib": args.max_rss_gib, "reuse": args.reuse,
                                 "max_fit": args.max_fit}.items() if v is not None}
    cfg = replace(cfg, **changes)
    start = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.perf_counter()
    secs = run(args.quick, cfg)
    command = " ".join(["python benchmarks/bench_large.py", *(sys.argv[1:] if argv is None else argv)])
    loads = os.getloadavg() if hasattr(os, "getloadavg") else ("n/a",)
    text = [f"## `bench_large` ({time.perf_counter() - t0:.0f} s)", "",
            f"Command: `{command}`, {start:%Y-%m-%d %H:%M} UTC, 1-minute load average at the end {loads[0]:.2f}.", ""]
    for title, body in secs:
        text += [f"### {title}", "", body.rstrip(), ""]
    report = "\n".join(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report, encoding="utf-8")
        log(f"wrote {args.out}")
    else:
        print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
