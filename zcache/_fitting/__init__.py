"""The fitting layer's private parts: what the public fitting modules build on.

``coherent`` (the |sum c A|^2 core under :mod:`zcache.amplitudes` and :mod:`zcache.symbolic`),
``minuit2`` (what zcache knows of iminuit's Minuit2 and works around) and ``batched_bfgs`` (the
lockstep minimizer of :mod:`zcache.batch`).
"""
