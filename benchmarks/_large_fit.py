"""One measurement of ``bench_large.py``, run in a child process: build a loss, time it, fit it, read the peak RSS.

``python benchmarks/bench_large.py --child SPEC.json`` calls :func:`measure_all` on a list of specs (full runs:
one spec per process, so that each row's peak resident set is its own; quick runs: all rows in one process,
to save the imports). A spec says which loss to build (``kind``):

- ``"unchunked"``: :class:`zcache.loss.UnbinnedNLL` on all events of the file, loaded whole;
- ``"chunked"``: ``zcache.scale.ChunkedLoss`` on ``Chunks.from_npy(file, chunk)`` (optionally under a cache
  budget of ``budget_fraction`` times the bytes its caches hold after the first call);
- ``"distributed"``: ``zcache.scale.DistributedLoss`` on ``zcache.toys.local_cluster(workers)``, one part
  of the file per worker (each part's loss built on its worker by :func:`build_part`).

Every loss fits the demo's five-component model (``demos.amplitude.build_model``) with the couplings
and the K*(892) mass and width free, normalized on the phase-space sample of ``mc_path``, from the same start
(:func:`start_values`: the truth shifted by a fixed-seed amount), with ``Minuit(compiled=False)`` (MIGRAD +
HESSE: the path the chunked and distributed losses take, so that every row runs the same algorithm).

The calls to the APIs of issue 28 (``zcache.scale.ChunkedLoss``, ``set_cache_budget``, ``zcache.scale.DistributedLoss``) are the
small functions :func:`chunked_loss`, :func:`budget_bytes_held`, :func:`distributed_loss`; :func:`available`
says which of them this zcache has.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _large_events import log
from _rss_fit import current_rss_mib, peak_rss_mib

__all__ = ["available", "measure_all", "build_part", "start_values", "worker_peak_mib"]

KSTAR = "K*(892)"


def available() -> dict[str, bool]:
    """Which of issue 28's APIs this zcache has (``chunks``, ``budget``, ``distributed``)."""
    import zcache

    def here(module: str) -> bool:  # in this zcache's folder (an editable install elsewhere may also offer it)
        spec = importlib.util.find_spec(module)
        return spec is not None and Path(zcache.__file__).resolve().parent in Path(spec.origin).resolve().parents

    has = {"chunks": here("zcache.scale._chunks"),
           "budget": hasattr(zcache, "set_cache_budget") and hasattr(zcache, "cache_budget_info"),
           "distributed": here("zcache.scale._distributed")}
    try:
        import distributed  # noqa: F401
    except ImportError:
        has["distributed"] = False
    return has


def model_pdf(mc_path: str, free_mass: bool = True) -> Any:
    """The demo's AmplitudePdf on the phase-space sample of ``mc_path`` (K*(892) mass and width floating if
    ``free_mass``)."""
    import zcache
    from demos.amplitude import build_model  # the repository root is on sys.path (_large_events)
    from zcache.amplitude import AmplitudePdf

    model = build_model(1000)  # its own small phase-space sample is not used
    obs = model["pdf"].space.obs
    mc = zcache.Data(np.load(mc_path), name="phsp", obs=obs)
    pdf = AmplitudePdf(model["sum"], mc, name="D+ -> K- pi+ pi+")
    kstar = next(a for a in model["sum"].amplitudes if a.name == KSTAR)
    kstar.mass.floating = kstar.width.floating = bool(free_mass)
    return pdf


def start_values(params: list[Any]) -> np.ndarray:
    """The fit's start: the truth shifted by a fixed-seed amount (magnitudes and the width by up to 10 %,
    phases by up to 0.2, the mass by up to 3 MeV)."""
    rng = np.random.default_rng(7)
    x = []
    for p in params:
        u, v = rng.uniform(-1.0, 1.0), float(p)
        if p.name.endswith("_phase"):
            x.append(v + 0.2 * u)
        elif p.name.endswith("_mass"):
            x.append(v + 0.003 * u)
        else:
            x.append(v * (1.0 + 0.1 * u))
    return np.array(x)


def _obs(pdf: Any) -> Any:
    return pdf.space.obs


def unchunked_loss(pdf: Any, path: str) -> Any:
    """UnbinnedNLL on every event of ``path`` (loaded whole), precomputed for the floating parameters."""
    import zcache
    from zcache.loss import UnbinnedNLL

    loss = UnbinnedNLL(pdf, zcache.Data(np.load(path), name="data", obs=_obs(pdf)))
    zcache.precompute(loss)
    return loss


def chunked_loss(pdf: Any, path: str, chunk: int, start: int = 0, stop: int | None = None) -> Any:
    """``ChunkedLoss`` on chunks of ``chunk`` events read from ``path`` (rows ``start:stop``), precomputed."""
    import zcache
    from zcache.scale import ChunkedLoss, Chunks

    loss = ChunkedLoss(pdf, Chunks.from_npy(path, chunk, name="data", obs=_obs(pdf), start=start, stop=stop))
    zcache.precompute(loss)
    return loss


def budget_bytes_held() -> int:
    """Bytes the caches hold now (``zcache.cache_budget_info()``)."""
    import zcache

    return int(zcache.cache_budget_info().held_bytes)


def budget_info() -> dict[str, Any]:
    """``zcache.cache_budget_info()`` as a dict."""
    import dataclasses

    import zcache

    info = zcache.cache_budget_info()
    return dataclasses.asdict(info) if dataclasses.is_dataclass(info) else dict(vars(info))


def build_part(part: tuple[str, int, int, str, int, bool]) -> Any:
    """The loss of one part ``(path, start, stop, mc_path, chunk, free_mass)`` of the events: runs on a Dask worker."""
    path, start, stop, mc_path, chunk, free_mass = part
    pdf = model_pdf(mc_path, free_mass)
    if chunk and stop - start > chunk:
        return chunked_loss(pdf, path, chunk, start, stop)
    import zcache
    from zcache.loss import UnbinnedNLL

    return UnbinnedNLL(pdf, zcache.Data(np.array(np.load(path, mmap_mode="r")[start:stop]), name="data", obs=_obs(pdf)))


def worker_peak_mib() -> float:
    """This worker's peak resident set (``VmHWM``), for ``client.run``."""
    return peak_rss_mib()


def distributed_loss(spec: dict[str, Any]) -> tuple[Any, Any]:
    """A ``DistributedLoss`` over ``spec['workers']`` parts of the file, and the client (to close)."""
    from distributed import Client

    from zcache.scale import DistributedLoss
    from zcache.toys import local_cluster

    client = Client(local_cluster(spec["workers"]))
    n, k = spec["n"], spec["workers"]
    bounds = [round(i * n / k) for i in range(k + 1)]
    parts = [(spec["path"], bounds[i], bounds[i + 1], spec["mc_path"], spec.get("chunk") or 0, spec["free_mass"])
             for i in range(k)]
    return DistributedLoss(build_part, parts, client), client


def _log_calls(loss: Any, t0: float) -> None:
    """Log each value, gradient and Hessian call the fit makes (a 1e8 fit runs for an hour or more)."""
    for name in ("value_at", "value_gradient_at", "hessian_at"):
        method = getattr(loss, name, None)
        if method is None:
            continue

        def logged(*args: Any, _method: Callable[..., Any] = method, _name: str = name, **kwargs: Any) -> Any:
            started = time.perf_counter()
            out = _method(*args, **kwargs)
            log(f"fit: {_name} {time.perf_counter() - started:.1f} s (at {time.perf_counter() - t0:.0f} s)")
            return out

        setattr(loss, name, logged)


def _fit(loss: Any, params: list[Any], x0: np.ndarray) -> dict[str, Any]:
    import zcache
    from zcache.minimize import Minuit

    zcache.set_values(params, x0)
    t0 = time.perf_counter()
    _log_calls(loss, t0)
    result = Minuit(compiled=False).minimize(loss, params)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "valid": bool(result.valid), "fmin": float(result.fmin), "edm": float(result.edm),
            "nfcn": int(result.nfcn), "ngrad": int(result.ngrad), "nhessian": int(result.nhessian),
            "path": result.path, "values": {k: float(v) for k, v in result.values.items()},
            "errors": {k: float(v) for k, v in result.errors.items()}}


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """Build, time and fit one loss of ``spec`` (see the module); a dict of JSON-able numbers."""
    import zcache

    out: dict[str, Any] = {"label": spec["label"], "baseline_mib": current_rss_mib()}
    client = None
    log(f"{spec['label']}: building")
    t0 = time.perf_counter()
    if spec["kind"] == "distributed":
        loss, client = distributed_loss(spec)
        params = loss.params
    else:
        pdf = model_pdf(spec["mc_path"], spec["free_mass"])
        loss = unchunked_loss(pdf, spec["path"]) if spec["kind"] == "unchunked" else \
            chunked_loss(pdf, spec["path"], spec["chunk"])
        params = loss.params
    out["build_s"] = time.perf_counter() - t0
    try:
        names = [p.name for p in params]
        x0 = start_values(params)
        out.update(names=names, x_start=x0.tolist())
        t0 = time.perf_counter()
        value, gradient = loss.value_gradient_at(x0, params)
        out["first_s"] = time.perf_counter() - t0
        out.update(value=float(value), gradient=np.asarray(gradient, dtype=float).tolist())
        if spec.get("budget_fraction"):
            held = budget_bytes_held()
            out["budget_bytes"] = int(spec["budget_fraction"] * held)
            out["cache_bytes_unbudgeted"] = held
            zcache.set_cache_budget(out["budget_bytes"])
            t0 = time.perf_counter()  # the first call under the budget runs the caches' miss branches first
            loss.value_gradient_at(x0, params)
            out["first_budgeted_s"] = time.perf_counter() - t0
            log(f"{spec['label']}: caches held {held / 2**20:.1f} MiB, budget set to {out['budget_bytes'] / 2**20:.1f} MiB")
        log(f"{spec['label']}: first value + gradient {out['first_s']:.1f} s; timing {spec['repeats']} warm calls")
        samples = []
        for _ in range(spec["repeats"]):
            t0 = time.perf_counter()
            again = loss.value_gradient_at(x0, params)
            samples.append(time.perf_counter() - t0)
        out["warm_samples_ms"] = [1e3 * s for s in samples]
        out["warm_ms"] = 1e3 * statistics.median(samples)
        out["warm_value"] = float(again[0])
        out["peak_before_fit_mib"] = peak_rss_mib()
        if spec.get("do_fit", True):
            log(f"{spec['label']}: warm value + gradient {out['warm_ms']:.0f} ms; fitting")
            out["fit"] = _fit(loss, params, x0)
            log(f"{spec['label']}: fit {out['fit']['seconds']:.1f} s, {out['fit']['nfcn']} calls, "
                f"valid {out['fit']['valid']}")
        if available()["budget"]:
            out["budget_info"] = budget_info()
        if client is not None:
            out["workers_peak_mib"] = sorted(client.run(worker_peak_mib).values())
            out["stats"] = _jsonable(getattr(loss, "stats", None))
    finally:
        if client is not None:
            close = getattr(loss, "close", None)
            if close:
                close()
            client.close()
            client.cluster.close() if getattr(client, "cluster", None) else None
        if spec.get("budget_fraction") and available()["budget"]:
            zcache.set_cache_budget(None)
    out["peak_mib"] = peak_rss_mib()
    out["status"] = "ok"
    return out


def _jsonable(value: Any) -> Any:
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, (list, tuple)) and len(value) > 8 and all(isinstance(v, (int, float)) for v in value):
        return {"count": len(value), "median": float(np.median(value)), "max": float(np.max(value))}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    if isinstance(value, np.generic):
        return value.item()
    return repr(value)


def _watch(limit_mib: float, write: Callable[[str], None]) -> None:
    """Stop this process when its resident set passes ``limit_mib`` (the machine is shared: better a row that
    says so than other processes killed by the kernel)."""
    while True:
        time.sleep(0.25)
        if current_rss_mib() > limit_mib:
            write(f"stopped: the resident set passed {limit_mib / 1024:.1f} GiB (--max-rss-gib)")
            os._exit(3)


def measure_all(specs: list[dict[str, Any]], result_path: str | None = None,
                max_rss_mib: float | None = None) -> list[dict[str, Any]]:
    """:func:`measure` for each spec in turn; a spec that raises gives ``status: 'failed: ...'``.

    With ``result_path`` the results are written there as JSON (also the rows not done when the resident set
    passes ``max_rss_mib``: their status says so).
    """
    results: list[dict[str, Any]] = []

    def write(stop: str | None = None) -> None:
        rows = results + [{"label": s["label"], "status": stop, "peak_mib": peak_rss_mib()}
                          for s in specs[len(results):]] if stop else results
        if result_path:
            Path(result_path).write_text(json.dumps(rows))

    if max_rss_mib:
        threading.Thread(target=_watch, args=(max_rss_mib, write), daemon=True).start()
    for spec in specs:
        try:
            results.append(measure(spec))
        except Exception as err:  # noqa: BLE001 - a row that fails is reported, the others still run
            import traceback

            traceback.print_exc()
            results.append({"label": spec["label"], "status": f"failed: {type(err).__name__}: {err}"[:300],
                            "peak_mib": peak_rss_mib()})
    write()
    return results
