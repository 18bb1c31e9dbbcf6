"""The fork server an embedded cluster's worker processes come from (detector.cluster, `--workers N`).

The workers are forked from a server that has imported FORKSERVER_PRELOAD once, kernels loaded
(detector.cluster_preload), rather than spawned, each importing all of it on its own. Everything the server
imports is in front of the first worker, so it is started as early as the command line can: this module is
light (the standard library only), so `detector analyze --workers N` starts the server before importing the
rest of detector, and the server's imports run beside the command's own.
"""
from __future__ import annotations

# What the embedded cluster's worker processes import before they are forked (module names): a spawned
# worker would import them itself, each on its own, and load the compiled kernels on its first partition
# (cluster_preload loads them in the fork server). Two workers on this machine under load, 2026-11-27:
# from cluster start to a first partition folded on each, 8-10 s spawned, 3.8-5.3 s forked from here. Not
# pandas: a fold, and an --each analysis without a report, never import it (tests/test_cluster.py).
FORKSERVER_PRELOAD = ("distributed", "numpy", "numba", "detector.cluster", "detector.analysis", "detector.flows",
                      "detector.detectors", "detector.cluster_preload")


def start() -> None:
    """Start the fork server, importing FORKSERVER_PRELOAD (nothing if it runs already). Also before Dask is
    imported in this process: Dask's own choice of what a fork server preloads (cluster._preload_forkserver)
    imports every package it knows of here first, about a second."""
    import multiprocessing
    from multiprocessing import forkserver
    multiprocessing.get_context("forkserver").set_forkserver_preload(list(FORKSERVER_PRELOAD))
    forkserver.ensure_running()
