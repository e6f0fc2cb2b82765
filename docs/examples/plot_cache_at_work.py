"""
A cache at work
===============

A cached sub-expression is computed once and read back until a parameter it depends on moves.
"""

import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf

import zcache

x = zcache.Data(np.linspace(-3.0, 3.0, 10_000), name="x")
width = zcache.Parameter("width", 1.0, lower=0.1)
shape = zcache.CachedTensor(lambda: tf.exp(-0.5 * (x.value() / width.value()) ** 2), name="shape")

fig, ax = plt.subplots()
ax.plot(x.numpy(), shape.value().numpy())
print(shape.stats)
