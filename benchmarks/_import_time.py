"""``import zcache`` against TensorFlow's own import, and the first fit after it (issue 54).

``python benchmarks/_import_time.py [REPEATS] [--fit] [--compare OLD_TREE]``:
runs, interleaved, each in a fresh process,
``python -c "import tensorflow"`` and ``python -c "import zcache"`` (wall and CPU time of the whole
process, so the interpreter's start is in both; bytecode cached as for an installed package), REPEATS
times (default 7), and prints every figure with the load average at the time and the medians. On a
loaded machine the CPU time is the steadier figure. With ``--fit`` it also times, in a fresh process each, the
first fit of a 50k-event Gaussian + Exponential extended fit with ``zcache.minimize.Minuit``
(``import zcache`` excluded: the clock starts after it). Run from the repository root (the working
tree's ``zcache`` is imported). ``--compare OLD_TREE`` (a checkout of older code) instead times zcache's
own share in the old tree and this one alternately: the CPU of ``import zcache`` after ``import
tensorflow`` in one process, and with ``--fit`` the first fit. ``RESULTS.md``, "``import zcache`` (issue 54)".
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time

FIRST_FIT = """
import time
t0 = time.perf_counter()
import zcache
from zcache.loss import ExtendedUnbinnedNLL
from zcache.minimize import Minuit
from zcache.models import Exponential, Gaussian, Space, SumPdf
t_import = time.perf_counter() - t0
t0 = time.perf_counter()
zcache.models.set_seed(54)
space = Space("x", 0.0, 10.0)
mu, sigma = zcache.Parameter("mu", 5.0), zcache.Parameter("sigma", 1.0, lower=0.1)
lam = zcache.Parameter("lam", -0.3, upper=-0.01)
ns, nb = zcache.Parameter("ns", 20000.0, lower=0.0), zcache.Parameter("nb", 30000.0, lower=0.0)
model = SumPdf([Gaussian(space, mu, sigma), Exponential(space, lam)], yields=[ns, nb])
data = model.sample(50000)
zcache.set_values([mu, sigma, lam, ns, nb], [5.2, 1.1, -0.25, 21000.0, 29000.0])
loss = ExtendedUnbinnedNLL(model, data)
t_build = time.perf_counter() - t0
t0 = time.perf_counter()
result = Minuit().minimize(loss)
t_fit = time.perf_counter() - t0
assert result.valid, result
print(f"{t_import:.3f} {t_build:.3f} {t_fit:.3f}")
"""


# zcache's own share, in one process: CPU seconds of `import zcache` after `import tensorflow`, and the
# full passes of Python's collector during it (the steadiest figure on a loaded machine).
AFTER_TF = """
import gc, time
import tensorflow
passes = []
gc.callbacks.append(lambda phase, info: passes.append(1) if phase == "start" and info["generation"] == 2 else None)
t0, w0 = time.process_time(), time.perf_counter()
import zcache
print(f"{time.process_time() - t0:.3f} {time.perf_counter() - w0:.3f} {len(passes)}")
"""


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _env() -> dict[str, str]:
    """The children's environment: bytecode cached outside the tree, as an installed package has it."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(os.environ.get("TMPDIR", "/tmp"), "zcache-import-time-pyc")
    return env


def _run(code: str, cwd: str | None = None) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of a fresh ``python -c code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=_env(), cwd=cwd)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _compare(repeats: int, old: str) -> None:
    """``--compare OLD_TREE``: zcache's own share (``AFTER_TF``), the old tree's and this one's alternately."""
    trees = {"old": old, "new": os.getcwd()}
    for tree in trees.values():
        _run("import zcache", cwd=tree)  # writes the bytecode cache, not timed
    seen: dict[str, list[tuple[float, float, int]]] = {k: [] for k in trees}
    for k in range(repeats):
        for name, tree in trees.items():
            out = subprocess.run([sys.executable, "-c", AFTER_TF], check=True, capture_output=True, text=True,
                                 env=_env(), cwd=tree)
            cpu, wall, passes = out.stdout.split()
            seen[name].append((float(cpu), float(wall), int(passes)))
            print(f"{k} {name}: import zcache after tensorflow: CPU {float(cpu):.3f} s, wall {float(wall):.3f} s, "
                  f"{passes} full collector passes  (load {_load()})", flush=True)
    fits: dict[str, list[float]] = {k: [] for k in trees}
    for k in range(repeats if "--fit" in sys.argv else 0):
        for name, tree in trees.items():
            out = subprocess.run([sys.executable, "-c", FIRST_FIT], check=True, capture_output=True, text=True,
                                 env=_env(), cwd=tree)
            fits[name].append(float(out.stdout.split()[2]))
            print(f"{k} {name}: first fit {fits[name][-1]:.2f} s  (load {_load()})", flush=True)
    for name in trees:
        if fits[name]:
            print(f"{name} first fit median {statistics.median(fits[name]):.2f} s")
        print(f"{name} medians: CPU {statistics.median(s[0] for s in seen[name]):.3f} s, "
              f"wall {statistics.median(s[1] for s in seen[name]):.3f} s")


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    repeats = int(args[0]) if args else 7
    if "--compare" in sys.argv:
        _compare(repeats, sys.argv[sys.argv.index("--compare") + 1])
        return
    _run("import zcache")  # writes the bytecode cache, not timed
    times: dict[str, list[tuple[float, float]]] = {"tensorflow": [], "zcache": []}
    for k in range(repeats):
        for name in times:
            wall, cpu = _run(f"import {name}")
            times[name].append((wall, cpu))
            print(f"{k} import {name:10s} wall {wall:6.2f} s, CPU {cpu:6.2f} s  (load {_load()})", flush=True)
    for i, what in enumerate(["wall", "CPU"]):
        tf = statistics.median(t[i] for t in times["tensorflow"])
        zc = statistics.median(t[i] for t in times["zcache"])
        print(f"{what} medians: tensorflow {tf:.2f} s, zcache {zc:.2f} s, zcache adds {zc - tf:.2f} s")
    if "--fit" in sys.argv:
        fits = []
        for k in range(repeats):
            out = subprocess.run([sys.executable, "-c", FIRST_FIT], check=True, capture_output=True, text=True,
                                 env=_env())
            t_import, t_build, t_fit = map(float, out.stdout.split())
            fits.append((t_import, t_build, t_fit))
            print(f"{k} fresh process: import {t_import:.2f} s, build + sample {t_build:.2f} s, "
                  f"first fit {t_fit:.2f} s  (load {_load()})", flush=True)
        print("medians: import {:.2f} s, build + sample {:.2f} s, first fit {:.2f} s".format(
            *(statistics.median(f[i] for f in fits) for i in range(3))))


if __name__ == "__main__":
    main()
