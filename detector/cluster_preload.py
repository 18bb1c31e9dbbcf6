"""Loads every compiled packet kernel on import: the embedded cluster's fork server imports this once.

detector.cluster starts --workers' processes by forking a server that imported FORKSERVER_PRELOAD. With
this module among those, the kernels (numba's machine code, loaded from its cache) are in the server's
memory before any fork, so no worker loads them again on its first partition: one load for the cluster,
not one a worker (and none for a worker that replaces one that died). Nothing else imports it.
"""
from __future__ import annotations

from .cpu import compile_kernels
from .warmup import KERNEL_MODULES

compile_kernels(tuple(name for half in KERNEL_MODULES for name in half))
