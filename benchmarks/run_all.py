"""Run every ``benchmarks/bench_*.py`` module and write ``benchmarks/RESULTS.md``.

Each module provides ``run(quick: bool) -> list[tuple[str, str]]``: one ``(title,
markdown body)`` pair per table (see ``_harness.py``). This script imports
TensorFlow once, runs the modules in name order in one process and writes the
report with the command, the date and the machine.

Usage::

    make bench                                   # = .venv-bench/bin/python benchmarks/run_all.py
    python benchmarks/run_all.py --quick --out /tmp/results.md   # smoke test, < 1 min
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse  # noqa: E402
import datetime  # noqa: E402
import importlib  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import zcache  # noqa: E402

Section = tuple[str, str]


def discover() -> list[str]:
    """Names of the benchmark modules (``bench_*.py`` beside this file), sorted."""
    return sorted(path.stem for path in HERE.glob("bench_*.py"))


def cpu_count() -> int:
    """CPUs this process may run on (the affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def machine_facts() -> list[str]:
    """One line per fact about the machine and the software versions."""
    return [
        f"CPUs available: {cpu_count()} (os.cpu_count() = {os.cpu_count()}); "
        f"{platform.machine()}, {platform.processor() or 'unknown processor'}",
        f"OS: {platform.platform()}",
        f"Python {platform.python_version()}, TensorFlow {tf.__version__}, numpy {np.__version__}, "
        f"zcache {zcache.__version__}",
        f"TensorFlow devices: {', '.join(d.device_type for d in tf.config.list_physical_devices())}",
    ]


def load_average() -> str:
    """The 1-minute load average, or 'n/a' where the OS does not report one."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except (AttributeError, OSError):
        return "n/a"


def render(
    results: list[tuple[str, list[Section], float]],
    quick: bool,
    command: str,
    wall_s: float,
    loads: tuple[str, str],
) -> str:
    """The Markdown report: header, machine, then every module's sections."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# zcache benchmark results",
        "",
        "Produced by `make bench`, i.e. `.venv-bench/bin/python benchmarks/run_all.py`.",
        f"This file: `{command}`" + (" (**quick mode**: small N, few repeats; a smoke test, "
                                     "not a measurement)" if quick else "") + ".",
        "",
        f"- Date: {now}; total run time {wall_s:.0f} s",
        *[f"- {fact}" for fact in machine_facts()],
        f"- 1-minute load average: {loads[0]} at the start, {loads[1]} at the end",
        "",
        f"Timings were taken on a {cpu_count()}-core machine, on the CPU, in one process, with "
        "every comparison interleaved repeat by repeat, so that ratios compare neighbouring "
        "samples. A load average near or above the core count means other processes competed "
        "for the CPUs: absolute times then vary between tables (TensorFlow splits each large op "
        "over both cores), while the ratios inside a table stay comparable.",
        "",
    ]
    for module, sections, seconds in results:
        lines += [f"## `{module}` ({seconds:.0f} s)", ""]
        for title, body in sections:
            lines += [f"### {title}", "", body.rstrip(), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks and write the report; returns the exit status."""
    parser = argparse.ArgumentParser(description="Run zcache's benchmarks and write RESULTS.md.")
    parser.add_argument("--quick", action="store_true", help="small N and few repeats (smoke test)")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="report path")
    parser.add_argument("--only", nargs="*", default=None, metavar="MODULE",
                        help="run only these modules (e.g. bench_core)")
    args = parser.parse_args(argv)
    modules = discover() if not args.only else [m for m in discover() if m in args.only]
    start = time.perf_counter()
    load_start = load_average()
    results = []
    for name in modules:
        t0 = time.perf_counter()
        print(f"[run_all] {name} ...", file=sys.stderr, flush=True)
        sections = importlib.import_module(name).run(args.quick)
        results.append((name, sections, time.perf_counter() - t0))
        print(f"[run_all] {name} done in {results[-1][2]:.1f} s", file=sys.stderr, flush=True)
    python = Path(sys.executable)
    if python.is_relative_to(HERE.parent):
        python = python.relative_to(HERE.parent)
    argv_shown = " ".join([str(python), "benchmarks/run_all.py", *(sys.argv[1:] if argv is None else argv)])
    report = render(results, args.quick, argv_shown, time.perf_counter() - start,
                    (load_start, load_average()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report, encoding="utf-8")
    print(f"[run_all] wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
