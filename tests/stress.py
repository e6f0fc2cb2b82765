"""``make stress``: run the stateful ``CacheMachine`` (tests/test_properties.py) for many sequences.

Each sequence is a fresh random program over the public API (parameters, data, caches of
caches, ``@cached`` models, set_value / set_data / invalidate / clear_graph_cache, graph and
autograd modes, eager and traced reads, gradients, bad input, temporary models that are
dropped), checked against an uncached reference after every step. The script runs batches
of fresh seeds until the requested number of sequences ran (or the time is up), and prints
how many ran and how many failed; each failure is printed with its falsifying sequence.

Warnings are errors, as under pytest. Shrinking is off by default so that every counted
sequence is a generated one; pass ``--shrink`` to get a minimal failing sequence.

Usage::

    make stress                                    # 10,000 sequences (hours on 2 cores)
    .venv/bin/python tests/stress.py --sequences 200 --minutes 20
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse  # noqa: E402
import functools  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import test_properties  # noqa: E402
from hypothesis import HealthCheck, Phase, settings, stateful  # noqa: E402
from hypothesis.stateful import run_state_machine_as_test  # noqa: E402

#: How often each rule ran (bad_value and bad_data are the bad inputs tried).
RULE_CALLS: Counter[str] = Counter()


def _count_rule_calls(cls: type) -> None:
    """Wrap every rule of ``cls`` so that RULE_CALLS counts its calls."""
    for name, attr in vars(cls).items():
        rule = getattr(attr, stateful.RULE_MARKER, None)
        if rule is None or not hasattr(rule, "function"):
            continue

        @functools.wraps(rule.function)
        def counted(*args, __function=rule.function, __name=name, **kwargs):
            RULE_CALLS[__name] += 1
            return __function(*args, **kwargs)

        rule.function = counted


class CountedMachine(test_properties.CacheMachine):
    """The machine, counting the sequences it starts and the steps they take."""

    sequences = 0
    steps_run = 0

    def __init__(self) -> None:
        CountedMachine.sequences += 1
        super().__init__()

    def teardown(self) -> None:
        CountedMachine.steps_run += self.steps
        super().teardown()


def _warnings_as_errors() -> None:
    """The pytest configuration's filter (setup.cfg): zcache warnings fail a sequence."""
    warnings.simplefilter("error")
    for module in ("tensorflow", "keras", "google", "flatbuffers", "absl"):
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=module)
    warnings.filterwarnings("ignore", message=r".*np\.find_common_type.*", category=DeprecationWarning)


STOP = {"requested": False}


def _stop(signum: int, frame: object) -> None:
    """SIGTERM / SIGINT (also in a background job, where SIGINT is ignored): stop after this batch.

    A flag, not an exception: an exception raised here could land in any code, e.g. in a
    garbage-collection finalizer, where Python only prints and ignores it.
    """
    STOP["requested"] = True


def main(argv: list[str] | None = None) -> int:
    """Run the batches; the exit status is 1 if any sequence failed."""
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    _count_rule_calls(test_properties.CacheMachine)  # here, not at import (pytest imports this file)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=10_000, help="sequences to run in total")
    parser.add_argument("--steps", type=int, default=25, help="steps per sequence at most")
    parser.add_argument("--batch", type=int, default=50, help="sequences per hypothesis run (one seed)")
    parser.add_argument("--minutes", type=float, default=None, help="stop after this many minutes")
    parser.add_argument("--shrink", action="store_true", help="shrink failures (their shrink runs are counted apart)")
    args = parser.parse_args(argv)
    _warnings_as_errors()
    phases = [Phase.generate, Phase.shrink] if args.shrink else [Phase.generate]
    start = time.perf_counter()
    ran = failed = shrink_runs = batches = 0
    while ran < args.sequences:
        if args.minutes is not None and time.perf_counter() - start > 60.0 * args.minutes:
            print(f"[stress] time limit of {args.minutes:g} min reached", flush=True)
            break
        if STOP["requested"]:
            print("[stress] stopped by a signal", flush=True)
            break
        size = min(args.batch, args.sequences - ran)
        before = CountedMachine.sequences
        batches += 1
        try:
            run_state_machine_as_test(CountedMachine, settings=settings(
                max_examples=size, stateful_step_count=args.steps, deadline=None, database=None,
                phases=phases, suppress_health_check=list(HealthCheck), print_blob=True,
            ))
            ran += CountedMachine.sequences - before
        except Exception as err:  # noqa: BLE001 - a failing sequence: report it and go on
            failed += 1
            if args.shrink:  # hypothesis reran the failure while shrinking; count the batch as run
                shrink_runs += CountedMachine.sequences - before - size
                ran += size
            else:
                ran += CountedMachine.sequences - before
            print(f"[stress] FAILURE {failed} in batch {batches}:", flush=True)
            traceback.print_exception(err, limit=-3)
        elapsed = time.perf_counter() - start
        print(f"[stress] {ran} sequences, {failed} failed, {CountedMachine.steps_run} steps, "
              f"{RULE_CALLS['bad_value'] + RULE_CALLS['bad_data']} bad inputs, {elapsed / 60:.1f} min "
              f"({elapsed / max(ran, 1):.2f} s per sequence)", flush=True)
    elapsed = time.perf_counter() - start
    print("[stress] rule calls: " + ", ".join(f"{name} {count}" for name, count in sorted(RULE_CALLS.items())))
    bad = RULE_CALLS["bad_value"] + RULE_CALLS["bad_data"]
    print(f"[stress] bad inputs tried (bad_value + bad_data rules): {bad}")
    print(f"stress: {ran} sequences run (at most {args.steps} steps each, {CountedMachine.steps_run} steps in "
          f"all), {failed} failed" + (f" ({shrink_runs} more runs while shrinking)" if args.shrink else "")
          + f", in {elapsed / 60:.1f} min", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
