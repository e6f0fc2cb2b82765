"""The fitting layer's private parts: what the public fitting modules build on.

``corrections`` (the error corrections a loss's weights and constraints ask for, below the
objective), ``minuit2`` (what zcache knows of iminuit's Minuit2 and works around), ``batched_bfgs`` (the
lockstep minimizer of :mod:`zcache.scale`), ``compiled_fit`` (a whole serial fit in one program)
and ``per_loss`` (the registry of per-loss programs). The coherent-sum core lives with the
amplitudes, in :mod:`zcache.amplitude`.
"""
