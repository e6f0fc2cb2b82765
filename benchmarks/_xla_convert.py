"""What TensorFlow's conversion of a graph to XLA costs, per op and for the bridge's fused programs.

Not part of ``make bench``: ``PYTHONPATH=. .venv-bench/bin/python benchmarks/_xla_convert.py``.

1. Per op type: a chain of 5 and of 45 ops of one type inside a ``jit_compile`` function, converted
   to HLO (``experimental_get_compiler_ir(...)(stage="hlo")``: TensorFlow's graph-to-HLO step only,
   no XLA compilation); the difference over 40 is the cost of one op. TensorFlow 2.21 converts the
   types of ``zcache._engine.xla_ops.SLOW_TO_CONVERT`` through a per-op MLIR legalization.
2. The D0 -> K- pi+ pi0 and J/psi -> gamma pi0 pi0 models of ``bench_symbolic`` bridged with every
   parameter free: the conversion of each fused group's forward and backward program (as
   ``zcache.amplitude._fused`` builds them) with zcache's spellings (``xla_ops``, ``tf_internals``
   item 17), and with TensorFlow's own ops (both switched off in this process), alternately.
   This conversion runs at the first call of each program in every process, before the persistent
   compile cache is looked up.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from zcache._engine import tf_internals, xla_ops  # noqa: E402

X = tf.constant(np.random.default_rng(0).uniform(0.5, 1.5, 1000))
Z = tf.complex(X, X)
FLOAT, COMPLEX = "float64", "complex128"
#: op type -> (input kind, one op applied to y, giving the same kind)
OPS: dict[str, tuple[str, Any]] = {
    "Mul": (FLOAT, lambda y: y * 1.0001), "RealDiv": (FLOAT, lambda y: 1.0 / y), "Pow": (FLOAT, lambda y: tf.pow(y, 0.5)),
    "Sin": (FLOAT, tf.sin), "Log": (FLOAT, tf.math.log), "Cast": (FLOAT, lambda y: tf.cast(tf.cast(y, tf.float32), tf.float64)),
    "Inv": (FLOAT, lambda y: tf.raw_ops.Inv(x=y)),
    "Complex": (FLOAT, lambda y: tf.raw_ops.Cast(x=tf.complex(y, y), DstT=tf.float64)),
    "Conj": (COMPLEX, tf.math.conj), "ComplexAbs": (COMPLEX, lambda w: tf.cast(tf.abs(w), tf.complex128)),
    "Reciprocal": (FLOAT, tf.math.reciprocal), "Sqrt": (FLOAT, tf.sqrt), "Exp": (FLOAT, tf.exp), "Cos": (FLOAT, tf.cos),
    "Abs": (FLOAT, tf.abs), "Tanh": (FLOAT, tf.tanh),
    "Real": (COMPLEX, lambda w: tf.cast(tf.math.real(w), tf.complex128)),
    "Imag": (COMPLEX, lambda w: tf.cast(tf.math.imag(w), tf.complex128)),
}


def convert_seconds(fn: Any, *args: Any) -> float:
    """Seconds of TensorFlow's graph-to-HLO conversion of ``fn`` (traced before timing)."""
    jitted = tf.function(fn, autograph=False, jit_compile=True)
    jitted.get_concrete_function(*args)
    t0 = time.perf_counter()
    jitted.experimental_get_compiler_ir(*args)(stage="hlo")
    return time.perf_counter() - t0


def per_op_ms(kind: str, op: Any) -> float:
    """Milliseconds to convert one op: (45 ops - 5 ops) / 40, the better of two tries."""
    arg = X if kind == FLOAT else Z

    def chain(n: int) -> Any:
        def fn(a: tf.Tensor) -> tf.Tensor:
            for _ in range(n):
                a = op(a)
            return a
        return fn

    return 1e3 * min((convert_seconds(chain(45), arg) - convert_seconds(chain(5), arg)) / 40 for _ in range(2))


def per_op_table() -> str:
    convert_seconds(lambda a: a * 2.0, X)  # the first conversion in a process sets XLA up
    rows = ["| op | converts through MLIR (`SLOW_TO_CONVERT`) | ms per op |", "|---|---|---:|"]
    for name, (kind, op) in OPS.items():
        rows.append(f"| {name} | {'yes' if name in xla_ops.SLOW_TO_CONVERT else 'no'} | {per_op_ms(kind, op):.3f} |")
    return "\n".join(rows)


# -- the fused programs of a bridged model ------------------------------------------------------
def _three_arguments(fn: Any) -> Any:
    def program(stack: tf.Tensor, events: tf.Tensor, values: list[tf.Tensor]) -> Any:
        return fn(stack, events, values)
    return program


def _captured_programs(key: str) -> list[tuple[Any, list[Any]]]:
    """(function, its arguments) of every fused program of ``key``'s all-free bridged model (its first value +
    gradient builds them: each moved group's program, and the one that multiplies its couplings in)."""
    sys.path.insert(0, os.path.dirname(__file__))
    import _peers_tensorwaves as peers
    import bench_symbolic as bench

    import zcache.amplitude._symbolic_programs as programs  # where the bridge calls fused_program

    captured: list[tuple[Any, int]] = []
    original = programs.fused_program

    def spy(fn: Any, signature: Any, n_values: int) -> Any:
        # a plain function of three arguments (fn may be a functools.partial, which tf.function binds badly)
        captured.append((_three_arguments(fn), n_values))
        return original(fn, signature, n_values)

    programs.fused_program = spy
    try:
        cfg = bench.Config(n_data=20_000, n_phsp=20_000, repeats=1)
        sample = bench.make_sample(key, cfg, peers.tensorwaves_status() == "ok")
        fit = bench.ZcacheFit(sample.model, sample.expression, sample.phsp, sample.data,
                              sorted(s.name for s in sample.free("all")), f"{key}_convert")
    finally:
        programs.fused_program = original
    stack, events = fit.bridged._data_stack(fit.data), fit.bridged._events(fit.data)
    return [(fn, [stack, events, [tf.constant(0.5 + 0.01 * k, tf.float64) for k in range(n)]]) for fn, n in captured]


def _vjp(fn: Any) -> Any:
    def vjp(stack: tf.Tensor, events: tf.Tensor, values: list[tf.Tensor]) -> tf.Tensor:
        with tf.GradientTape() as tape:
            tape.watch(values)
            out = fn(stack, events, values)
            out = tf.stack(out) if isinstance(out, (list, tuple)) else out
        return tf.stack(tape.gradient(out, values, output_gradients=tf.ones_like(out),
                                      unconnected_gradients=tf.UnconnectedGradients.ZERO))
    return vjp


class _TensorFlowsOwnOps:
    """Within the block zcache's spellings and its gradient of Complex under XLA are off."""

    def __enter__(self) -> None:
        self._in_xla = xla_ops._in_xla
        xla_ops._in_xla = lambda: False
        entry = tf_internals._GRADIENT_REGISTRY["Complex"]
        self._complex = entry["type"]
        entry["type"] = self._complex.tensorflow_gradient

    def __exit__(self, *exc: Any) -> None:
        xla_ops._in_xla = self._in_xla
        tf_internals._GRADIENT_REGISTRY["Complex"]["type"] = self._complex


def _slow_ops(fn: Any, args: list[Any]) -> int:
    graph = tf.function(fn, autograph=False, jit_compile=True).get_concrete_function(*args).graph
    return len(xla_ops.slow_to_convert(graph))


def programs_table(keys: tuple[str, ...] = ("dzero", "jpsi"), repeats: int = 3) -> str:
    rows = ["| model | program | slow ops, TensorFlow's / zcache's | conversion, TensorFlow's ops [ms] | "
            "zcache's [ms] | ratio |", "|---|---|---|---:|---:|---:|"]
    totals: dict[str, list[float]] = {}
    for key in keys:
        for g, (fn, args) in enumerate(_captured_programs(key)):
            for part, build in (("forward", fn), ("backward", _vjp(fn))):
                times: dict[str, list[float]] = {"tf": [], "zc": []}
                slow: dict[str, int] = {}
                for _ in range(repeats):
                    for label in ("tf", "zc"):
                        with _TensorFlowsOwnOps() if label == "tf" else contextlib.nullcontext():
                            times[label].append(convert_seconds(build, *args))
                            slow[label] = _slow_ops(build, args)
                t_tf, t_zc = 1e3 * float(np.median(times["tf"])), 1e3 * float(np.median(times["zc"]))
                totals.setdefault(key, [0.0, 0.0])
                totals[key][0] += t_tf
                totals[key][1] += t_zc
                rows.append(f"| {key} | program {g}, {part} | {slow['tf']} / {slow['zc']} | {t_tf:.0f} | {t_zc:.0f} | "
                            f"{t_zc / t_tf:.2f} |")
        t_tf, t_zc = totals[key]
        rows.append(f"| {key} | **all** | | **{t_tf:.0f}** | **{t_zc:.0f}** | {t_zc / t_tf:.2f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(f"TensorFlow {tf.__version__}, {os.cpu_count()} CPUs\n")
    print(per_op_table())
    print()
    print(programs_table())
