"""Peak memory of one side's first fit of a symbolic model, measured in a child process.

The peak resident set of a process only grows, so each side's fit runs in a fresh process
(``python _rss_fit.py SIDE MODEL DATA.npz FREE.json``): it imports only its own side (the
tensorwaves child never imports TensorFlow or zcache), builds the ampform model, computes
``doit()``, loads the events the parent drew, reads its baseline resident set, then runs the
first fit (build + first call + fit, as ``bench_symbolic.py`` times it), reads its peak resident
set, then runs the warm fits asked for (the same object's further fits from the same start: a
process with one library in it, as a user runs it) and reports on one line of JSON. zcache's
child starts with an empty compile cache (``ZCACHE_CACHE_DIR`` in a temporary folder).
:func:`measure` is the parent's side.

The peak is ``VmHWM`` of ``/proc/self/status`` (the high-water mark of this process image),
not ``getrusage(RUSAGE_SELF).ru_maxrss``: on Linux ``ru_maxrss`` survives ``fork`` and
``exec``, so a child of a large parent reports at least the parent's resident set at the
fork (seen here: both children reported the parent's 1458 MiB). Where /proc is missing
(macOS), ``ru_maxrss`` is the fallback.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["measure", "import_rss_mib", "child_env", "current_rss_mib", "peak_rss_mib", "read_inputs", "write_inputs"]

HERE = Path(__file__).resolve().parent
_MARK = "RSS-RESULT "


def _proc_status_mib(field: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def current_rss_mib() -> float:
    """This process's resident set now (``VmRSS``; the peak so far where /proc is missing)."""
    now = _proc_status_mib("VmRSS")
    return peak_rss_mib() if now is None else now


def peak_rss_mib() -> float:
    """This process image's peak resident set (``VmHWM``; else ``ru_maxrss``, KiB on Linux, bytes on macOS)."""
    peak = _proc_status_mib("VmHWM")
    if peak is not None:
        return peak
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss / 1024.0 / (1024.0 if sys.platform == "darwin" else 1.0)


def measure(side: str, model: str, phsp: dict[str, np.ndarray], data: dict[str, np.ndarray],
            free: list[str], fused: bool | str = "auto", warm: int = 0) -> dict[str, Any]:
    """Run the first fit of ``side`` (``"zcache"`` or ``"tensorwaves"``) in a child process.

    Parameters
    ----------
    side : str
        ``"zcache"`` or ``"tensorwaves"``.
    model : str
        A key of ``_peers_tensorwaves.REACTIONS``.
    phsp, data : dict of str to numpy.ndarray
        The events, as the parent drew them.
    free : list of str
        Names of the free parameters (sympy symbols' names).
    fused : bool or "auto"
        zcache only: the bridged model's ``fused`` option (default ``"auto"``, zcache's default).
    warm : int
        How many warm fits follow the first (after its peak is read).

    Returns
    -------
    dict
        ``peak_mib``, ``baseline_mib``, ``seconds`` (the first fit in the child), ``valid``, ``path``;
        ``peak_private_mib`` and ``baseline_private_mib`` (``RssAnon``: sampled peak during the fit, and at
        the baseline) and ``baseline_files_mib`` (``RssFile``, the libraries' pages, at the baseline);
        ``warm_seconds`` (one per warm fit) and ``warm_valid``.
    """
    env = child_env()
    with tempfile.TemporaryDirectory() as tmp:
        # zcache's persistent XLA compile cache starts empty (a new one per child): the child's first fit is
        # then a first fit in a fresh process on a machine that never ran it, as tensorwaves' (jax keeps no
        # compile cache on disk unless told to)
        env["ZCACHE_CACHE_DIR"] = str(Path(tmp) / "zcache_cache")
        events, names = write_inputs(Path(tmp), phsp, data, free)
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), side, model, str(events), str(names),
                               {True: "fused", False: "plain"}.get(fused, "auto"), str(int(warm))],
                              capture_output=True, text=True, env=env, cwd=HERE.parent)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(_MARK)]
    if proc.returncode or not lines:
        raise RuntimeError(f"_rss_fit.py {side} {model} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len(_MARK):])


def import_rss_mib(module: str) -> float:
    """The resident set (MiB) of a fresh Python process right after ``import module``, and nothing else.

    Parameters
    ----------
    module : str
        A module name (``"tensorflow"``, ``"jax"``).

    Returns
    -------
    float
        ``VmRSS`` of the child after the import.
    """
    # /proc read inline: importing this module (numpy) would add to the footprint being measured
    code = (f"import {module}\n"
            "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmRSS:')][0])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), check=True)
    return int(proc.stdout.split()[-1]) / 1024.0


def child_env() -> dict[str, str]:
    """This process's environment, with the zcache it imported first on ``PYTHONPATH``.

    The child then imports the same zcache (a worktree on ``PYTHONPATH`` wins over the editable install).
    """
    import zcache

    env = dict(os.environ)
    root = str(Path(zcache.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return env


def write_inputs(folder: Path, phsp: dict[str, np.ndarray], data: dict[str, np.ndarray],
                 free: list[str]) -> tuple[Path, Path]:
    """The events (``events.npz``) and the free parameters' names (``free.json``) for a child, in ``folder``."""
    events, names = folder / "events.npz", folder / "free.json"
    np.savez(events, **{f"phsp:{k}": v for k, v in phsp.items()}, **{f"data:{k}": v for k, v in data.items()})
    names.write_text(json.dumps(free))
    return events, names


def read_inputs(model_key: str, events: str, names: str) -> tuple[Any, Any, dict, dict, list[str]]:
    """In a child: the ampform model, its ``doit()`` expression, the events and the sorted free names."""
    import _peers_tensorwaves as peers

    _, model = peers.build_model(model_key)
    expression = model.expression.doit()
    with np.load(events) as npz:
        phsp = {k.split(":", 1)[1]: npz[k] for k in npz.files if k.startswith("phsp:")}
        data = {k.split(":", 1)[1]: npz[k] for k in npz.files if k.startswith("data:")}
    return model, expression, phsp, data, sorted(set(json.loads(Path(names).read_text())))


class _PrivatePeak:
    """The largest ``RssAnon`` (private, anonymous memory) seen while the block runs, sampled every ``every`` s.

    ``VmHWM`` counts the shared libraries' file-backed pages too: 400 MiB of TensorFlow's 660 MiB
    after ``import tensorflow`` are its libraries' pages (``RssFile``), against a few tens for jax. The
    kernel keeps no peak of ``RssAnon``, so a thread samples it; a spike shorter than ``every`` can
    be missed. None where /proc is missing.
    """

    def __init__(self, every: float = 0.005) -> None:
        import threading

        self.every, self.peak, self._stop = every, _proc_status_mib("RssAnon"), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.every):
            now = _proc_status_mib("RssAnon")
            if now is not None and self.peak is not None:
                self.peak = max(self.peak, now)

    def __enter__(self) -> _PrivatePeak:
        if self.peak is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        now = _proc_status_mib("RssAnon")
        if now is not None and self.peak is not None:
            self.peak = max(self.peak, now)


def _child(side: str, model_key: str, events: str, names: str, variant: str = "auto", warm: str = "0") -> dict[str, Any]:
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import _peers_tensorwaves as peers

    if side == "zcache":
        import bench_symbolic as bench  # imports zcache (TensorFlow): before the baseline
    else:
        import jax

        jax.config.update("jax_enable_x64", True)
    model, expression, phsp, data, free = read_inputs(model_key, events, names)
    baseline = current_rss_mib()
    baseline_private, baseline_files = _proc_status_mib("RssAnon"), _proc_status_mib("RssFile")
    t0 = time.perf_counter()
    with _PrivatePeak() as private:
        if side == "zcache":
            zc = bench.ZcacheFit(model, expression, phsp, data, free, f"{model_key}_rss",
                                   fused={"fused": True, "plain": False}.get(variant, "auto"))
            fit = zc.fit()
        else:
            tw = peers.TensorwavesFit(expression, dict(model.parameter_defaults), phsp, data,
                                      [s for s in model.parameter_defaults if s.name in free], peers.fit_limits)
            fit = tw.fit()
    seconds = time.perf_counter() - t0
    peak = peak_rss_mib()
    # warm fits after the peak is read: the same object's further fits from the same start, in a process of
    # this side's library alone
    warm_fits = [(zc if side == "zcache" else tw).fit() for _ in range(int(warm))]
    return {"warm_seconds": [w["seconds"] for w in warm_fits], "warm_valid": all(w["valid"] for w in warm_fits),
            "peak_mib": peak, "baseline_mib": baseline, "seconds": seconds, "valid": bool(fit["valid"]),
            "peak_private_mib": private.peak, "baseline_private_mib": baseline_private,
            "baseline_files_mib": baseline_files,
            "path": fit.get("path", "iminuit MIGRAD"),
            "ru_maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}


if __name__ == "__main__":
    print(_MARK + json.dumps(_child(*sys.argv[1:7])), flush=True)
