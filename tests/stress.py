"""``make stress``: run the stateful machines for many random sequences, in parallel worker processes.

Machines: ``CacheMachine`` (tests/test_properties.py: parameters, data, caches of caches,
``@cached`` models, set_value / set_data / invalidate / clear_graph_cache, graph and autograd
modes, eager and traced reads, plain ``tf.function``, gradients and tapes, failing caches, bad
input, threads, temporary models that are dropped) and ``FitMachine`` (the fitting layer,
tests/test_properties_fit.py, imported lazily: skipped with a message where it does not exist).
Every step is checked against an uncached reference.

The parent process hands out *batches* (one hypothesis run of ``--batch`` fresh sequences with
its own seed) to ``--workers`` worker processes, gathers sequences, steps and failures (each
printed with its falsifying sequence and the seed that replays it), and stops when the requested
number of sequences ran, the ``--minutes`` limit is reached (no batch is started that would not
end in time), or on SIGTERM / SIGINT (the batches under way finish; a second signal stops the
workers at once). ``--machine both`` (the default) mixes batches of the two machines: 20
CacheMachine sequences of at most 10 steps, or 4 FitMachine sequences of at most 8 steps, the fit
machine's whenever its share of the sequences handed out is below ``--fit-share`` (why that share:
design/reliability.md, "The run's mix"). Worker 0 takes those fit batches; another worker takes one only
when the fit machine is more than ``FIT_LAG_BATCHES`` batches behind its share: a fit batch costs most in
a worker life's first ones (its programs' traces and XLA compiles), so gathering them in one worker's
lives makes those lives' warm batches many, and the other worker's lives, holding only the cache
machine's worlds, grow slowly and are rarely replaced. Each worker runs TensorFlow with one intra-op thread and
is replaced by a fresh process once its RSS after a batch reaches ``--recycle-mib`` (or after
``--recycle`` batches, if given): a worker life's first fit batches trace and compile (XLA) the
programs of every floating set they meet, which a new life does again, so a worker lives as long
as its memory allows. The workers share one compile-cache folder for the run (``ZCACHE_CACHE_DIR``,
made by the parent, which spawned workers inherit), so a new life may load the XLA programs its
predecessors compiled; TensorFlow's keys hold its trace counter, which differs between lives, so
most of a new life's programs still compile again.

The summary prints, per machine, the count per rule (and the rules drawn fewer than ``RARE_RULE``
times), each rule's share of the time, the sequences per worker-minute and the CPU seconds per
sequence, then the workers' RSS by batches run (what ``--recycle-mib`` bounds) and their lives.

Warnings are errors, as under pytest. Shrinking is off by default so that every counted
sequence is a generated one; ``--replay SEED --shrink`` reruns one failing batch in this
process and shrinks it to a minimal sequence.

Usage::

    make stress                                          # the recorded run: tests/stress.py's defaults
    .venv/bin/python tests/stress.py --sequences 200 --minutes 5
    .venv/bin/python tests/stress.py --machine cache --replay 12345 --batch 20 --shrink
    .venv/bin/python tests/stress.py --machine both --rounds 6 --seed 5000   # one worker's batches, cost of each
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("OMP_NUM_THREADS", "1")
if "ZCACHE_TEST_SESSION_CACHE" not in os.environ:  # compiled programs in a temporary folder, as under pytest
    _folder = tempfile.mkdtemp(prefix="zcache-stress-cache-")
    os.environ["ZCACHE_CACHE_DIR"] = os.environ["ZCACHE_TEST_SESSION_CACHE"] = _folder
    atexit.register(shutil.rmtree, _folder, True)

import argparse  # noqa: E402
import functools  # noqa: E402
import gc  # noqa: E402
import multiprocessing as mp  # noqa: E402
import queue  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
import weakref  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402

TESTS = Path(__file__).resolve().parent
# The checkout this file is in, not the zcache an editable install points at (a git worktree's run would
# otherwise test another checkout's code); spawned workers run this too.
if str(TESTS.parent) not in sys.path:
    sys.path.insert(0, str(TESTS.parent))
MACHINES = {"cache": ("test_properties", "CacheMachine"), "fit": ("test_properties_fit", "FitMachine")}
#: --recycle-mib's default: a worker's RSS after a batch at which it is replaced. A new life compiles its XLA programs
#: again (about 170 s of a worker's time), and the fit worker's RSS levels off at 7.0-7.5 GiB, so the limit sits above
#: that; 2 workers at it and their Dask clusters' processes, about 2 GiB each, fit in this machine's 23 GiB
#: (design/reliability.md, "the record of the full run")
RECYCLE_MIB = 9216.0
#: --fit-share's default: the FitMachine's share of the run's sequences (design/reliability.md, "The run's mix")
FIT_SHARE = 0.05
#: a rule drawn fewer times than this in a run is named in the summary (the mix or the batches starve it)
RARE_RULE = 100
#: worker 0 runs the fit batches; another worker takes one only when the fit machine's sequences are more than
#: this many fit batches behind --fit-share (design/reliability.md, "The run's mix")
FIT_LAG_BATCHES = 2


# == in a worker (or in this process for --replay) ========================================
class Missing(Exception):
    """The machine's module or class does not exist (yet)."""


_COUNTED: dict[str, type] = {}
#: per machine: how often each rule ran (steps = their sum; bad_value/bad_data: bad inputs tried)
RULE_CALLS: dict[str, Counter[str]] = {}
#: per machine: the seconds spent in each rule (wall clock, its checks included; not the invariants)
RULE_SECONDS: dict[str, Counter[str]] = {}
SEQUENCES: Counter[str] = Counter()


#: per machine: the names of its rules (a rule never drawn is missing from RULE_CALLS)
RULE_NAMES: dict[str, list[str]] = {}


def _count_rule_calls(cls: type, calls: Counter[str], seconds: Counter[str]) -> list[str]:
    """Wrap every rule of ``cls`` (and of its bases) so that ``calls`` counts its calls and ``seconds`` times them;
    the rules' names."""
    from hypothesis import stateful

    names = []
    for klass in cls.__mro__:
        for name, attr in vars(klass).items():
            rule = getattr(attr, stateful.RULE_MARKER, None)
            function = getattr(rule, "function", None)
            if function is None:
                continue
            names.append(name)
            if getattr(function, "_stress_counted", False):
                continue

            @functools.wraps(function)
            def counted(*args, __function=function, __name=name, **kwargs):
                calls[__name] += 1
                start = time.perf_counter()
                try:
                    return __function(*args, **kwargs)
                finally:
                    seconds[__name] += time.perf_counter() - start

            counted._stress_counted = True
            rule.function = counted
    return sorted(set(names))


def _machine(name: str) -> type:
    """The machine ``name``, subclassed to count its sequences; raises Missing if absent."""
    if name not in _COUNTED:
        module_name, class_name = MACHINES[name]
        if str(TESTS) not in sys.path:
            sys.path.insert(0, str(TESTS))
        try:
            module = __import__(module_name)
        except ModuleNotFoundError as err:
            if err.name != module_name:
                raise
            raise Missing(f"tests/{module_name}.py does not exist") from None
        base = getattr(module, class_name, None)
        if base is None:
            raise Missing(f"tests/{module_name}.py has no {class_name}")
        calls = RULE_CALLS.setdefault(name, Counter())
        RULE_NAMES[name] = _count_rule_calls(base, calls, RULE_SECONDS.setdefault(name, Counter()))

        def __init__(self, __base=base, __name=name):
            SEQUENCES[__name] += 1
            __base.__init__(self)

        # Same name as the machine: hypothesis prints it in the falsifying sequence.
        _COUNTED[name] = type(base.__name__, (base,), {"__init__": __init__, "__module__": base.__module__})
    return _COUNTED[name]


def _warnings_as_errors() -> None:
    """The pytest configuration's filter (setup.cfg): zcache warnings fail a sequence."""
    warnings.simplefilter("error")
    for module in ("tensorflow", "keras", "google", "flatbuffers", "absl"):
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=module)
    warnings.filterwarnings("ignore", message=r".*np\.find_common_type.*", category=DeprecationWarning)


def _setup_process(threads: int) -> None:
    """TensorFlow with few threads (N workers share the cores), warnings as errors."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(max(2, threads))
    _warnings_as_errors()


def _zcache_traces() -> weakref.WeakKeyDictionary:
    """The trace count of every live zcache function, held weakly (a rule's dropped function must still be freed)."""
    from zcache._engine.function import _FUNCTIONS

    return weakref.WeakKeyDictionary({f: f.trace_count for f in list(_FUNCTIONS)})


def _traces_since(before: weakref.WeakKeyDictionary) -> int:
    """Graphs traced since ``before`` by the zcache functions alive now: a rate that the machine's load does not
    change (tracing is most of a FitMachine sequence's time). A function collected meanwhile is not counted, so this
    is a lower bound, never negative (the sum of live counts was, when more traced functions died than were made)."""
    return sum(count - before.get(f, 0) for f, count in _zcache_traces().items())


def _children_cpu() -> float:
    """CPU seconds of this process's live child processes and theirs (the distributed_parts rule's Dask cluster:
    work of a batch that process_time() does not see; a child that exited takes its count with it); 0 without
    psutil (installed with distributed, which that rule needs)."""
    try:
        import psutil
    except ImportError:
        return 0.0

    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:  # exited meanwhile
            continue
        total += times.user + times.system
    return total


#: A worker's full garbage collection after a batch: once its RSS has grown by this much since the last one
GARBAGE_MIB = 384.0
_AFTER_FULL_PASS = {"rss_mib": 0.0}  # this process's RSS after its last full collection


def run_batch(machine: str, seed: int, size: int, steps: int, shrink: bool, collect_at_mib: float = 0.0) -> dict:
    """One hypothesis run of ``size`` sequences of ``machine`` with ``seed``; a summary dict.

    After the batch the young generations are collected, and every generation once the RSS has grown by
    ``GARBAGE_MIB`` since the last full pass or reaches ``collect_at_mib`` (0: always), so that the RSS reported
    against ``--recycle-mib`` is what the worker holds."""
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis import seed as with_seed
    from hypothesis.stateful import run_state_machine_as_test

    try:
        cls = _machine(machine)
    except Missing as err:
        return {"machine": machine, "seed": seed, "missing": str(err)}
    except Exception as err:  # noqa: BLE001 - the machine's module does not import
        return {"machine": machine, "seed": seed, "sequences": 0, "steps": 0, "calls": {}, "seconds": 0.0,
                "import_error": "".join(traceback.format_exception(err))}
    calls, rule_seconds = RULE_CALLS[machine], RULE_SECONDS[machine]
    before_calls, before_seq = sum(calls.values()), SEQUENCES[machine]
    before, before_seconds = Counter(calls), Counter(rule_seconds)

    @with_seed(seed)
    def factory():
        return cls()

    phases = [Phase.generate, Phase.shrink] if shrink else [Phase.generate]
    failure = None
    traces = _zcache_traces()
    start, cpu, children = time.perf_counter(), time.process_time(), _children_cpu()
    try:
        run_state_machine_as_test(factory, settings=settings(
            max_examples=size, stateful_step_count=steps, deadline=None, database=None,
            phases=phases, suppress_health_check=list(HealthCheck), print_blob=True,
        ))
    except Exception as err:  # noqa: BLE001 - a failing sequence: report it and go on
        failure = "".join(traceback.format_exception(err, limit=-3))
    # The batch's garbage (TensorFlow's traced graphs are reference cycles, which the collector's thresholds let
    # pile up in a large heap) collected in the batch's own time. A full pass over a worker's heap costs 0.5-1 s,
    # about 6 % of a worker's time after every batch, so the young generations are collected after each batch and
    # all of them once the RSS has grown by GARBAGE_MIB since the last full pass, or reaches collect_at_mib (the
    # parent's --recycle-mib): the RSS the parent compares with that is then what the worker holds.
    gc.collect(1)
    rss = _rss_now_mib()
    if rss >= collect_at_mib or rss >= _AFTER_FULL_PASS["rss_mib"] + GARBAGE_MIB:
        gc.collect()
        rss = _AFTER_FULL_PASS["rss_mib"] = _rss_now_mib()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    children = max(_children_cpu() - children, 0.0)
    ran = SEQUENCES[machine] - before_seq
    if shrink and failure:  # hypothesis reran the failure while shrinking: count the batch once
        ran = min(ran, size)
    return {"machine": machine, "seed": seed, "sequences": ran, "steps": sum(calls.values()) - before_calls,
            "calls": dict(Counter(calls) - before), "rule_seconds": dict(Counter(rule_seconds) - before_seconds),
            "seconds": seconds, "cpu": cpu, "children_cpu": children, "failure": failure,
            "traces": _traces_since(traces), "rules": RULE_NAMES.get(machine, []),
            "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # peak so far (Linux: KiB)
            "rss_now_mib": rss}


def _rss_now_mib() -> float:
    """This process's resident memory now (what it holds; its peak also counts XLA's compiles' passing use)."""
    with open("/proc/self/statm") as statm:  # Linux: size, resident, ... in pages
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _next_machine(active: list[str], handed: Counter[str], fit_share: float, fit_worker: bool = True,
                  lag: int = 0) -> str:
    """The machine of the next batch: the fit machine while its share of the sequences handed out is below
    ``fit_share``, else the cache machine (one of them if only one runs).

    Only the fit worker (``fit_worker``) takes fit batches at the share; another worker takes one only when the
    fit machine's sequences are more than ``lag`` behind the share (the fit worker being slower than the share
    asks, or starting a new life), so that the fit batches gather in one worker's lives (why: the module
    docstring)."""
    if len(active) == 1:
        return active[0]
    total = sum(handed[m] for m in active)
    behind = fit_share * max(total, 1) - handed["fit"]
    return "fit" if behind > (0 if fit_worker else lag) else "cache"


def _worker(tasks: mp.Queue, results: mp.Queue, wid: int, threads: int) -> None:
    """A worker process: run the batches it is given until it gets None (or the parent dies)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    parent = os.getppid()
    _setup_process(threads)
    results.put({"ready": wid})
    while True:
        try:
            task = tasks.get(timeout=5.0)
        except queue.Empty:
            if os.getppid() != parent:
                return
            continue
        if task is None:
            return
        result = run_batch(*task)
        result["worker"] = wid
        results.put(result)


# == the parent ===========================================================================
STOP = {"signals": 0}


def _stop(signum: int, frame: object) -> None:
    """SIGTERM / SIGINT (also in a background job, where SIGINT is ignored): start no more batches.

    A flag, not an exception: an exception raised here could land in any code. A second signal
    stops the workers at once (their batches under way are not counted).
    """
    STOP["signals"] += 1


class Worker:
    def __init__(self, ctx, results, wid: int, threads: int) -> None:
        self.wid, self.tasks = wid, ctx.Queue()
        self.process = ctx.Process(target=_worker, args=(self.tasks, results, wid, threads), daemon=True)
        self.process.start()
        self.task: tuple | None = None  # the batch under way
        self.started = 0.0
        self.batches = 0


class Totals:
    def __init__(self) -> None:
        self.sequences: Counter[str] = Counter()
        self.steps: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.calls: dict[str, Counter[str]] = {}
        self.rules: dict[str, set[str]] = {}  # every rule of each machine, drawn or not
        self.rule_seconds: dict[str, Counter[str]] = {}
        self.busy_seconds: Counter[str] = Counter()
        self.cpu_seconds: Counter[str] = Counter()
        self.children_cpu: Counter[str] = Counter()  # of the workers' child processes (Dask clusters)
        self.traces: Counter[str] = Counter()
        self.batches = 0
        self.rss_mib: list[tuple[int, float]] = []  # (batches the worker had run, its peak RSS) per result
        self.rss_now_mib: list[tuple[int, float]] = []  # (batches the worker had run, its RSS then) per result
        self.lives = 0  # worker processes started (recycled or replacing a dead one), beyond the first ones

    def add(self, result: dict) -> None:
        m = result["machine"]
        self.batches += 1
        self.sequences[m] += result["sequences"]
        self.steps[m] += result["steps"]
        self.busy_seconds[m] += result["seconds"]
        self.cpu_seconds[m] += result.get("cpu", 0.0)
        self.children_cpu[m] += result.get("children_cpu", 0.0)
        self.traces[m] += result.get("traces", 0)
        self.calls.setdefault(m, Counter()).update(result["calls"])
        self.rules.setdefault(m, set()).update(result.get("rules", ()))
        self.rule_seconds.setdefault(m, Counter()).update(result.get("rule_seconds", {}))

    def per_sequence(self, machine: str | None = None) -> float | None:
        """Seconds per sequence in a worker (of ``machine``; of all if None or not yet known)."""
        if machine is not None and self.sequences[machine]:
            return self.busy_seconds[machine] / self.sequences[machine]
        n = sum(self.sequences.values())
        return sum(self.busy_seconds.values()) / n if n else None


def _commit() -> str:
    """The checkout's commit (with ``+changes`` if its tracked files differ), for the record of a run."""
    import subprocess

    def git(*argv: str) -> str:
        return subprocess.run(["git", "-C", str(TESTS.parent), *argv], capture_output=True, text=True,
                              timeout=30).stdout.strip()

    try:
        return (git("rev-parse", "--short", "HEAD") or "?") + ("+changes" if git("status", "--porcelain",
                                                                                  "--untracked-files=no") else "")
    except (OSError, subprocess.SubprocessError):
        return "?"


def _load() -> str:
    """``uptime``'s load averages (1, 5, 15 min): how quiet the machine was."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _print_failure(result: dict, number: int, args: argparse.Namespace) -> None:
    m, seed = result["machine"], result["seed"]
    text = result.get("failure") or result.get("import_error") or ""
    print(f"[stress] FAILURE {number} ({m} machine, seed {seed}, worker {result.get('worker')}); replay with: "
          f"{sys.executable} tests/stress.py --machine {m} --replay {seed} --batch {result.get('size', args.batch)} "
          f"--steps {result.get('steps_max', args.steps)} --shrink\n{text}", flush=True)


def _rounds(args: argparse.Namespace) -> int:
    """``--rounds N``: the batches a worker runs, in this process, with each batch's cost (what a short run in
    fresh workers cannot show: there the first batches' traces and XLA compiles are most of the time)."""
    _setup_process(args.threads)
    machines = ["cache", "fit"] if args.machine == "both" else [args.machine]
    seed = args.seed if args.seed is not None else 0
    size = {"cache": args.batch, "fit": args.fit_batch}
    steps = {"cache": args.steps, "fit": args.fit_steps}
    failed = 0
    for r in range(args.rounds):
        for k, m in enumerate(machines):
            res = run_batch(m, seed + len(machines) * r + k, size[m], steps[m], False, args.recycle_mib)
            n = max(res.get("sequences", 0), 1)
            top = sorted(res.get("rule_seconds", {}).items(), key=lambda kv: -kv[1])[:3]
            print(f"[stress] round {r} {m}: {res.get('sequences', 0)} sequences, {res.get('cpu', 0.0):.1f} s CPU "
                  f"({res.get('cpu', 0.0) / n:.2f} per sequence) + {res.get('children_cpu', 0.0):.1f} s CPU of child "
                  f"processes, {res.get('seconds', 0.0):.1f} s wall, "
                  f"{res.get('traces', 0)} zcache traces, RSS {res.get('rss_now_mib', 0.0):.0f} MiB (peak "
                  f"{res.get('rss_mib', 0.0):.0f}); costliest rules: "
                  + ", ".join(f"{name} {sec:.1f} s" for name, sec in top), flush=True)
            if res.get("failure") or res.get("import_error") or res.get("missing"):
                failed += 1
                print(res.get("failure") or res.get("import_error") or res.get("missing"), flush=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Run the batches; the exit status is 1 if any sequence failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=10_000, help="sequences to run in total")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--machine", choices=["cache", "fit", "both"], default="both",
                        help="which state machine ('both' mixes batches, see --fit-share)")
    parser.add_argument("--steps", type=int, default=10, help="steps per CacheMachine sequence at most")
    parser.add_argument("--batch", type=int, default=20, help="CacheMachine sequences per batch (one seed)")
    parser.add_argument("--fit-steps", type=int, default=8, help="steps per FitMachine sequence at most")
    parser.add_argument("--fit-batch", type=int, default=4, help="FitMachine sequences per batch")
    parser.add_argument("--fit-share", type=float, default=FIT_SHARE,
                        help="with --machine both: the share of the sequences that are FitMachine's (design/"
                             "reliability.md, 'The run's mix')")
    parser.add_argument("--minutes", type=float, default=None, help="start no batch that would end after this")
    parser.add_argument("--seed", type=int, default=None, help="base seed (batch i runs seed + i); random if omitted")
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow intra-op threads per worker")
    parser.add_argument("--recycle", type=int, default=0,
                        help="restart a worker after this many batches (0: only at --recycle-mib)")
    parser.add_argument("--recycle-mib", type=float, default=RECYCLE_MIB,
                        help="restart a worker once its RSS after a batch reaches this many MiB (0: never)")
    parser.add_argument("--replay", type=int, default=None, metavar="SEED",
                        help="run one batch with this seed in this process (with --machine, --batch, --steps)")
    parser.add_argument("--shrink", action="store_true", help="shrink failures (with --replay: a minimal sequence)")
    parser.add_argument("--rounds", type=int, default=None, metavar="N",
                        help="in this process: N rounds of one batch per machine (--machine both: a cache batch, then "
                             "a fit batch; seeds --seed + batch number), each batch's CPU seconds, zcache traces and "
                             "peak RSS printed: a worker's steady-state cost per sequence, which the load barely moves")
    args = parser.parse_args(argv)
    if not 0.0 <= args.fit_share <= 1.0:
        parser.error(f"--fit-share is a share of the sequences, from 0 to 1, not {args.fit_share:g}")
    if args.replay is not None:
        return _replay(args)
    if args.rounds is not None:
        return _rounds(args)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    machines = ["cache", "fit"] if args.machine == "both" else [args.machine]
    base_seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**40)
    steps = {"cache": args.steps, "fit": args.fit_steps}
    batch = {"cache": args.batch, "fit": args.fit_batch}
    shown = ", ".join(f"{m}: batches of {batch[m]}, at most {steps[m]} steps" for m in machines)
    if len(machines) > 1:
        shown += f"; fit share {args.fit_share:g}"
    print(f"[stress] {args.sequences} sequences ({shown}), {args.workers} workers, seeds {base_seed} + batch number; "
          f"the zcache of {TESTS.parent} at {_commit()}; {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; load average "
          f"{_load()}", flush=True)
    ctx = mp.get_context("spawn")  # TensorFlow does not survive fork
    results: mp.Queue = ctx.Queue()
    workers = [Worker(ctx, results, i, args.threads) for i in range(args.workers)]
    totals, failures, skipped = Totals(), 0, {}
    ready: set[int] = set()
    assigned = 0  # sequences handed out and not yet reported
    handed: Counter[str] = Counter()  # sequences handed out per machine (the mix follows --fit-share)
    next_batch = 0
    start = time.perf_counter()
    deadline = None if args.minutes is None else start + 60.0 * args.minutes
    stop_reason = None
    last_report = start

    def ran() -> int:
        return sum(totals.sequences.values())

    while True:
        now = time.perf_counter()
        if stop_reason is None:
            if STOP["signals"]:
                stop_reason = "stopped by a signal; waiting for the batches under way"
            elif deadline is not None and now >= deadline:
                stop_reason = f"time limit of {args.minutes:g} min reached"
            elif ran() >= args.sequences:
                stop_reason = "done"
            if stop_reason and stop_reason != "done":
                print(f"[stress] {stop_reason}", flush=True)
        if STOP["signals"] > 1:
            print("[stress] second signal: stopping the workers now", flush=True)
            break
        active = [m for m in machines if m not in skipped]
        if not active and stop_reason is None:
            stop_reason = "no machine to run"
        # hand out batches to idle workers
        for w in workers:
            if stop_reason is not None or w.task is not None or w.wid not in ready:
                continue
            left = args.sequences - ran() - assigned
            if left <= 0:
                continue
            machine = _next_machine(active, handed, args.fit_share, fit_worker=w.wid == 0,
                                    lag=FIT_LAG_BATCHES * batch.get("fit", 0))
            size = min(batch[machine], left)
            per_seq = totals.per_sequence(machine)
            if deadline is not None and per_seq is not None:  # no batch that would end after the limit
                size = min(size, int((deadline - now) / per_seq))
                if size < 1:
                    continue
            w.task = (machine, base_seed + next_batch, size, steps[machine], False, args.recycle_mib)
            w.started, next_batch = now, next_batch + 1
            assigned += size
            handed[machine] += size
            w.tasks.put(w.task)
        if all(w.task is None for w in workers) and (stop_reason is not None or not active):
            break
        try:
            result = results.get(timeout=1.0)
        except queue.Empty:
            result = None
        if result is not None and "ready" in result:
            ready.add(result["ready"])
        elif result is not None:
            w = workers[result["worker"]]
            result["size"], result["steps_max"] = w.task[2], w.task[3]
            assigned -= w.task[2]
            w.task, w.batches = None, w.batches + 1
            if "missing" in result:
                if result["machine"] not in skipped:
                    skipped[result["machine"]] = result["missing"]
                    print(f"[stress] skipping the {result['machine']} machine: {result['missing']}", flush=True)
            else:
                totals.add(result)
                if "rss_mib" in result:
                    totals.rss_mib.append((w.batches, result["rss_mib"]))
                    totals.rss_now_mib.append((w.batches, result["rss_now_mib"]))
                if result.get("failure") or result.get("import_error"):
                    failures += 1
                    totals.failed[result["machine"]] += 1
                    _print_failure(result, failures, args)
                    if result.get("import_error"):
                        skipped[result["machine"]] = "its module does not import (counted as a failure)"
            # bound memory growth: a fresh process (a new life traces and compiles its programs again)
            if stop_reason is None and ran() < args.sequences and ((args.recycle and w.batches >= args.recycle) or (
                    args.recycle_mib and result.get("rss_now_mib", 0.0) >= args.recycle_mib)):
                totals.lives += 1
                w.tasks.put(None)
                w.process.join(30)
                ready.discard(w.wid)
                workers[w.wid] = Worker(ctx, results, w.wid, args.threads)
        for w in workers:  # a worker that died (killed, out of memory, crashed)
            if not w.process.is_alive() and (w.task is not None or stop_reason is None):
                if w.task is not None:
                    failures += 1
                    totals.failed[w.task[0]] += 1
                    assigned -= w.task[2]
                    print(f"[stress] FAILURE {failures}: worker {w.wid} died (exit code {w.process.exitcode}) "
                          f"in the {w.task[0]} batch with seed {w.task[1]}", flush=True)
                ready.discard(w.wid)
                if stop_reason is None:
                    totals.lives += 1
                    workers[w.wid] = Worker(ctx, results, w.wid, args.threads)
                else:
                    w.task = None
        if time.perf_counter() - last_report > 60.0 or (result is not None and "worker" in result):
            last_report = time.perf_counter()
            elapsed = last_report - start
            per = ", ".join(f"{m} {totals.busy_seconds[m] / totals.sequences[m]:.2f} s "
                            f"({totals.cpu_seconds[m] / totals.sequences[m]:.2f} s CPU)"
                            for m in machines if totals.sequences[m])
            print(f"[stress] {ran()} sequences, {failures} failed, {sum(totals.steps.values())} steps, "
                  f"{elapsed / 60:.1f} min ({elapsed / max(ran(), 1):.2f} s per sequence; in a worker: "
                  f"{per or '-'})", flush=True)

    for w in workers:
        if STOP["signals"] > 1:
            w.process.terminate()
        else:
            w.tasks.put(None)
    for w in workers:
        w.process.join(30)
        if w.process.is_alive():
            w.process.terminate()
    elapsed = time.perf_counter() - start
    for m in machines:
        calls, rule_seconds = totals.calls.get(m, Counter()), totals.rule_seconds.get(m, Counter())
        if calls:
            print(f"[stress] {m} rule calls: " + ", ".join(f"{name} {count}" for name, count in sorted(calls.items())))
            drawn = sorted((calls[name], name) for name in totals.rules.get(m, set()) | set(calls))
            rare = [(count, name) for count, name in drawn if count < RARE_RULE]
            print(f"[stress] {m} rules drawn fewer than {RARE_RULE} times: "
                  + (", ".join(f"{name} {count}" for count, name in rare) or "none")
                  + f" (least drawn: {drawn[0][1]} {drawn[0][0]}; {len(drawn)} rules)")
            # where a worker's time goes: each rule's seconds per call and its share of the machine's busy time
            busy = totals.busy_seconds[m]
            print(f"[stress] {m} rule seconds (per call, share of {busy:.0f} s busy): " + ", ".join(
                f"{name} {rule_seconds[name] / count:.3f} s {100 * rule_seconds[name] / max(busy, 1e-9):.0f}%"
                for name, count in sorted(calls.items(), key=lambda kv: -rule_seconds[kv[0]])))
            rate = 60.0 * totals.sequences[m] / max(busy, 1e-9)
            print(f"[stress] {m}: {totals.sequences[m]} sequences, {rate:.1f} per worker-minute "
                  f"({busy / max(totals.sequences[m], 1):.2f} s per sequence, "
                  f"{totals.cpu_seconds[m] / max(totals.sequences[m], 1):.2f} s CPU and "
                  f"{totals.children_cpu[m] / max(totals.sequences[m], 1):.2f} s CPU of child processes; "
                  "invariants, setup and hypothesis: "
                  f"{100 * (1 - sum(rule_seconds.values()) / max(busy, 1e-9)):.0f}% of it; "
                  f"{totals.traces[m] / max(totals.sequences[m], 1):.1f} zcache traces per sequence)")
        if m in skipped:
            print(f"[stress] {m} machine skipped: {skipped[m]}")
    for what, samples in (("peak RSS", totals.rss_mib), ("RSS", totals.rss_now_mib)):
        if not samples:  # what --recycle-mib bounds: a worker's memory against the batches it had run
            continue
        by_age = sorted(samples)
        print(f"[stress] worker {what}: {by_age[0][1]:.0f} MiB after {by_age[0][0]} batch(es), "
              f"{by_age[-1][1]:.0f} MiB after {by_age[-1][0]}")
        # the growth per batch, to set --recycle-mib from: the largest value after each number of batches
        growth: dict[int, float] = {}
        for batches, rss in by_age:
            growth[batches] = max(rss, growth.get(batches, 0.0))
        print(f"[stress] worker {what} by batches run: "
              + ", ".join(f"{b}: {rss:.0f}" for b, rss in sorted(growth.items())) + " MiB")
    print(f"[stress] worker lives: {args.workers} + {totals.lives} recycled or replaced (--recycle-mib "
          f"{args.recycle_mib:g}, --recycle {args.recycle}); load average at the end {_load()}")
    bad = sum(c["bad_value"] + c["bad_data"] for c in totals.calls.values())
    print(f"[stress] bad inputs tried (bad_value + bad_data rules): {bad}")
    parts = ", ".join(f"{m} {totals.sequences[m]} of at most {steps[m]} steps" for m in machines
                      if m not in skipped or totals.sequences[m])
    print(f"stress: {ran()} sequences run ({parts or 'none'}; {args.workers} workers), "
          f"{failures} failed, {sum(totals.steps.values())} steps, in {elapsed / 60:.1f} min", flush=True)
    return 1 if failures else 0


def _replay(args: argparse.Namespace) -> int:
    """--replay SEED: one batch in this process (shrunk with --shrink), printed in full."""
    if args.machine == "both":
        print("stress: --replay needs --machine cache or --machine fit", file=sys.stderr)
        return 2
    _setup_process(args.threads)
    start = time.perf_counter()
    result = run_batch(args.machine, args.replay, args.batch, args.steps, args.shrink)
    if "missing" in result:
        print(f"stress: the {args.machine} machine is missing: {result['missing']}")
        return 0
    failed = int(bool(result.get("failure") or result.get("import_error")))
    if failed:
        result["worker"] = "-"
        _print_failure(result, 1, args)
    print(f"stress: {result['sequences']} sequences run ({args.machine}, seed {args.replay}), {failed} failed, "
          f"{result['steps']} steps, {result.get('traces', 0)} zcache traces, {result.get('cpu', 0.0):.1f} s CPU, "
          f"in {(time.perf_counter() - start) / 60:.1f} min", flush=True)
    return failed


if __name__ == "__main__":
    sys.exit(main())
