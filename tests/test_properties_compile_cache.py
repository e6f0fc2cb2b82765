"""A stateful machine for the compile cache: damage its entries between runs; every run gives the right numbers.

Each run is a fresh process (two of zcache's XLA programs, compiled or loaded from a shared cache folder);
between runs the rules damage the folder as users' accidents do: a flipped bit, a truncation, an entry
replaced by another valid one, another user's file, an entry and its record from another key's folder,
a missing record (young or old), half-written temporary files. The property: every run exits normally
and returns the numbers numpy computes; an entry the next run finds must either match its writer's
record or not be loaded (it is compiled anew). Not generated: a change that keeps an entry's size, mtime
and inode (bit rot below the file system, or a deliberate write that resets the mtime), which the
per-entry fast path does not see (design/invariants.md, "Compiled programs on disk").

Costly (each run starts TensorFlow, 6-12 s here; 3 sequences of 4 steps: 40-60 s alone, 130 s beside other
tests): marked slow, a few sequences in ``make test-all``;
``HYPOTHESIS_PROFILE=stress`` runs more.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np
import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import engine as hypothesis_engine
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from zcache._engine import compile_cache as cc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent('''
    import json
    import tensorflow as tf
    import zcache
    zcache.set_jit_mode(True)

    @zcache.function
    def f(x):
        def body(i, y):
            return i + 1, tf.sin(y) * 1.5 + tf.cos(y * 0.5)
        return tf.reduce_sum(tf.while_loop(lambda i, y: i < 5, body, (tf.constant(0), x))[1])

    @zcache.function
    def h(x):
        return tf.reduce_sum(tf.exp(-x * x) * 2.0 + x)

    x = tf.linspace(0.0, 1.0, 50)
    print(json.dumps({"f": [float(f(x)) for _ in range(3)][-1], "h": [float(h(x)) for _ in range(3)][-1],
                      "managed": zcache.compile_cache_info().managed}))
''')


def expected() -> dict[str, float]:
    x = np.linspace(0.0, 1.0, 50, dtype=np.float32)
    y = x
    for _ in range(5):
        y = np.sin(y) * np.float32(1.5) + np.cos(y * np.float32(0.5))
    return {"f": float(np.sum(y, dtype=np.float64)), "h": float(np.sum(np.exp(-x * x) * 2 + x, dtype=np.float64))}


def run(cache: str) -> tuple[dict, str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("TF_XLA_FLAGS", "ZCACHE_COMPILE_CACHE")}
    environ.update(ZCACHE_CACHE_DIR=cache, PYTHONPATH=ROOT, ZCACHE_TF_LOGS="1", TF_CPP_MIN_LOG_LEVEL="0",
                   TF_CPP_VMODULE="device_executable_persistor=1")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, errors="replace",
                          env=environ, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, f"the run died ({proc.returncode}): {proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@functools.cache
def pristine() -> str:
    """A cache folder that one run filled (two entries and their records), copied for each sequence."""
    folder = tempfile.mkdtemp(prefix="zcache-machine-")
    atexit.register(shutil.rmtree, folder, True)
    report, _ = run(os.path.join(folder, "zcache"))
    assert report["managed"]
    return os.path.join(folder, "zcache")


def entry_folder(cache: str) -> str:
    (key,) = os.listdir(os.path.join(cache, "xla"))
    return os.path.join(cache, "xla", key)


class CompileCacheMachine(RuleBasedStateMachine):
    @initialize()
    def start(self):
        self.tmp = tempfile.mkdtemp(prefix="zcache-machine-seq-")
        self.cache = os.path.join(self.tmp, "zcache")
        shutil.copytree(pristine(), self.cache, symlinks=True)
        self.folder = entry_folder(self.cache)
        self.names = sorted(n for n in os.listdir(self.folder) if n.endswith(".pb"))
        assert len(self.names) == 2
        self.program = {name: _program_of(os.path.join(self.folder, name)) for name in self.names}
        assert sorted(self.program.values()) == ["f", "h"]
        self.damaged = False
        self.untrusted: set[str] = set()  # programs whose entry no longer is the one recorded (since the last run)

    def teardown(self):
        if getattr(self, "damaged", False):
            self.run_once()
        if hasattr(self, "tmp"):
            shutil.rmtree(self.tmp, ignore_errors=True)

    def spoil(self, i: int) -> None:
        self.damaged = True
        self.untrusted.add(self.program[self.names[i % 2]])

    def path(self, i: int) -> str:
        return os.path.join(self.folder, self.names[i % 2])

    def writable(self, i: int) -> str | None:
        path = self.path(i)
        if not os.path.exists(path):
            return None
        os.chmod(path, 0o600)  # published entries are read-only: an accident that writes anyway
        return path

    @rule(i=st.integers(0, 1), where=st.floats(0.0, 1.0), bit=st.integers(0, 7), in_code=st.booleans())
    def flip_a_bit(self, i, where, bit, in_code):
        path = self.writable(i)
        if path is None:
            return
        data = bytearray(pathlib.Path(path).read_bytes())
        start = data.find(b"\x7fELF") if in_code else 0
        pos = min(len(data) - 1, start + int(where * (len(data) - start)))
        data[pos] ^= 1 << bit
        pathlib.Path(path).write_bytes(bytes(data))
        self.spoil(i)

    @rule(i=st.integers(0, 1), keep=st.floats(0.0, 0.999))
    def truncate(self, i, keep):
        path = self.writable(i)
        if path is None:
            return
        with open(path, "r+b") as f:
            f.truncate(int(keep * os.path.getsize(path)))
        self.spoil(i)

    @rule(i=st.integers(0, 1))
    def replace_with_the_other_entry(self, i):
        if all(os.path.exists(self.path(j)) for j in (0, 1)):
            tmp = self.path(i) + ".x"
            shutil.copyfile(self.path(i + 1), tmp)
            os.replace(tmp, self.path(i))
            if self._as_recorded(i):
                # The other file held this entry's own bytes (entry_and_record_from_another_key wrote them there):
                # the entry is again the one its writer recorded, and loading it is right (a harness fault, CI run
                # of 2026-12-01, seed 46364893494429878831823704505674116501).
                self.untrusted.discard(self.program[self.names[i % 2]])
            else:
                self.spoil(i)

    def _as_recorded(self, i: int) -> bool:
        """Entry ``i``'s bytes and record are those its writer made (the pristine cache's)."""
        name = self.names[i % 2]
        pristine_path = os.path.join(pristine(), "xla", os.path.basename(self.folder), name)
        same = pathlib.Path(self.path(i)).read_bytes() == pathlib.Path(pristine_path).read_bytes()
        record, pristine_record = self.path(i) + ".sha256", pristine_path + ".sha256"
        return same and os.path.exists(record) and os.path.exists(pristine_record) and \
            pathlib.Path(record).read_text().split()[:2] == pathlib.Path(pristine_record).read_text().split()[:2]

    @rule(i=st.integers(0, 1))
    def another_users_file(self, i):
        path = self.path(i)
        if os.getuid() == 0 and os.path.exists(path):
            os.chown(path, 54321, 54321)
            self.spoil(i)

    @rule(i=st.integers(0, 1))
    def entry_and_record_from_another_key(self, i):
        src = os.path.join(pristine(), "xla", os.path.basename(self.folder), self.names[(i + 1) % 2])
        data = pathlib.Path(src).read_bytes()
        name = self.names[i % 2]
        for suffix in (".sha256", ""):
            _unlink(self.path(i) + suffix)
        pathlib.Path(self.path(i)).write_bytes(data)  # the other program's bytes under this name
        os.chmod(self.path(i), 0o400)
        digest = cc._digest("tf-another-key", name, data)  # recorded by a writer in another key's folder
        pathlib.Path(self.path(i) + ".sha256").write_text(f"{digest} {len(data)} 0 0\n")
        self.spoil(i)

    @rule(i=st.integers(0, 1), old=st.booleans())
    def lose_the_record(self, i, old):
        if _unlink(self.path(i) + ".sha256") and old:
            past = time.time() - cc.UNRECORDED_GRACE_S - 10
            os.utime(self.path(i), (past, past))
        self.spoil(i)

    @rule(i=st.integers(0, 1))
    def half_written_files(self, i):
        pathlib.Path(self.path(i) + "4711.tmp").write_bytes(b"\x0a\x05half")
        stage = os.path.join(self.folder, "proc", "otherhost-1-ab")
        os.makedirs(stage, exist_ok=True)
        pathlib.Path(stage, self.names[i % 2]).write_bytes(b"\x0a\x05half")

    @rule()
    def run_once(self):
        report, err = run(self.cache)
        want = expected()
        assert report["managed"]
        assert abs(report["f"] - want["f"]) <= 1e-5 * abs(want["f"]), (report, want)
        assert abs(report["h"] - want["h"]) <= 1e-5 * abs(want["h"]), (report, want)
        # No entry changed since its record was loaded (TensorFlow's log names the program it loads).
        for program in self.untrusted:
            assert f"Loading cached entry for: __inference_{program}_" not in err, f"{program}'s damaged entry loaded"
        self.untrusted = set()
        # What is published now is what its writer recorded (the full hash, not the fast path).
        for name in os.listdir(self.folder):
            if not name.endswith(".pb"):
                continue
            record = cc._read_record(os.path.join(self.folder, name))
            data = pathlib.Path(self.folder, name).read_bytes()
            if record is not None:
                assert record[0] == cc._digest(self.folder, name, data), name
        self.damaged = False


def _program_of(path: str) -> str:
    """Which of SCRIPT's programs an entry holds (its HLO names the traced function)."""
    data = pathlib.Path(path).read_bytes()
    return "f" if b"inference_f_" in data else "h"


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


_STRESS = os.environ.get("HYPOTHESIS_PROFILE") == "stress"
#: Every step starts a process (6-12 s), so shrinking a failing sequence reruns it many times: once more than
#: 5 minutes of CI (hypothesis's own bound, ``MAX_SHRINKING_SECONDS``). Outside the stress profile shrinking stops
#: after this many seconds (checked after each rerun, so it ends within one more sequence, 4 steps), and the explain
#: phase, which reruns the failure once per step, is off: generation, which finds the failure, is as before, and
#: the failure is reported shrunk as far as the bound allowed, with the blob that replays it
#: (``@reproduce_failure``) and shrinks it further locally under ``HYPOTHESIS_PROFILE=stress``.
CI_SHRINK_SECONDS = 60
_PHASES = tuple(Phase) if _STRESS else (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)
CompileCacheMachine.TestCase.settings = settings(max_examples=40 if _STRESS else 3,
                                                 stateful_step_count=8 if _STRESS else 4, deadline=None,
                                                 phases=_PHASES, print_blob=True)
test_compile_cache_machine = pytest.mark.slow(CompileCacheMachine.TestCase)


@pytest.fixture(autouse=True)
def _bounded_shrinking(monkeypatch):
    """Hypothesis documents its engine's limits as ones a user may monkeypatch; this module's tests only."""
    if not _STRESS:
        monkeypatch.setattr(hypothesis_engine, "MAX_SHRINKING_SECONDS", CI_SHRINK_SECONDS)


def test_ci_runs_shrink_for_a_bounded_time():
    """A failure outside the stress profile is shrunk for at most CI_SHRINK_SECONDS (no explain phase), with its
    blob; the generation phases are those of the default settings."""
    got = CompileCacheMachine.TestCase.settings
    assert got.print_blob
    assert {Phase.explicit, Phase.reuse, Phase.generate, Phase.target} <= set(got.phases)
    if not _STRESS:
        assert Phase.shrink in got.phases and Phase.explain not in got.phases
        assert hypothesis_engine.MAX_SHRINKING_SECONDS == CI_SHRINK_SECONDS < 300
