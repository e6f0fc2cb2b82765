"""Scaling a fit out: many toys in one program, more events than memory, a likelihood on several machines.

What to use when:

- **many fits of one model to many datasets** (toy studies, scans, toy-based limits):
  :class:`BatchedLoss` evaluates a batch of datasets in one compiled program and
  :meth:`BatchedLoss.minimize` fits them in lockstep (a :class:`BatchedFit`);
  :func:`padded_toys` makes datasets of different sizes one batch (padding of weight 0). Usually you do not call them
  yourself: :func:`zcache.toys.run_toys` (``batch=``) and :mod:`zcache.inference` do.
- **one fit to more events than fit in memory**: :class:`ChunkedLoss`, an unbinned NLL evaluated a
  chunk at a time over :class:`Chunks` (arrays, ``.npy`` files read block by block with
  :func:`npy_blocks`, ROOT trees); :func:`release_freed_memory` hands freed heap memory back to the
  operating system (the loss calls it after each chunk).
- **one fit whose events live on several machines**: :class:`DistributedLoss`, a likelihood
  summed over parts held by Dask workers (the ``dask`` extra; ``import zcache.scale`` does not
  import Dask); :class:`CallStats` counts its calls.

Each loss here is a :class:`zcache.loss.BaseLoss`: :class:`zcache.minimize.Minuit` fits it as any
other loss.

Examples
--------
>>> import numpy as np, zcache
>>> from zcache.models import Space, Gaussian
>>> from zcache.scale import ChunkedLoss, Chunks
>>> model = Gaussian(Space("x", -5.0, 5.0), zcache.Parameter("mu_scale", 0.1), 1.0)
>>> loss = ChunkedLoss(model, Chunks.from_array(np.random.default_rng(3).normal(0.2, 1.0, 500), 200))
>>> len(loss.parts)
3
"""

from .._engine.tf_internals import leave_to_python as _leave_to_python
from . import _batch, _chunks, _distributed
from ._batch import BatchedFit, BatchedLoss, padded_toys
from ._chunks import ChunkedLoss, Chunks, npy_blocks, release_freed_memory
from ._distributed import CallStats, DistributedLoss

# Autograph calls this package's code as Python (tf_internals item 3). `import zcache` does not import
# the package (`zcache.toys` does, when first used), so the package marks its modules itself.
for _module in (_batch, _chunks, _distributed):
    _leave_to_python(_module.__name__)
_leave_to_python(__name__)
del _module, _leave_to_python

__all__ = [
    # many datasets at once (toys)
    "BatchedLoss",
    "BatchedFit",
    "padded_toys",
    # more events than memory
    "Chunks",
    "ChunkedLoss",
    "npy_blocks",
    "release_freed_memory",
    # several machines (Dask)
    "DistributedLoss",
    "CallStats",
]
