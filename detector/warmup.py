"""The first run: every packet kernel compiled for this machine once, before the work, in two processes.

numba compiles one function at a time per process, and a first run would
otherwise compile each kernel when the command first calls it, one after the
other. `prepare_kernels` says so once, compiles the first half of the kernels
here while a second process compiles the other half into the same cache
(detector.cpu: declared kernels, their signatures, a cache keyed by what they
import), and lets the command start on a warm cache.
"""
from __future__ import annotations

import subprocess
import sys

from numba import config

from .cpu import PACKAGE, cold_kernels, compile_kernels
from .decode.kernel import decode_batch

# What a first run costs on a 2-core machine (docs/manual/performance.md, "Start-up"): every kernel is
# compiled once for this processor and kept in the __pycache__ folders (numba's cache).
FIRST_COMPILE_S = 40

# Every module that declares kernels, in two halves of about equal compile time (some 30 s each on
# this machine, 2026-11-26: the decoder and the flow pass 13-14 s each, every application table 2-4 s).
# A first run compiles the first half (the record walks and the decoder, which every command needs
# first, and the writers) in its own process while a second process compiles the other (flows,
# hashes, detectors): numba compiles one function at a time per process.
KERNEL_MODULES = (
    ("detector.ingest.walk", "detector.decode.kernel", "detector.decode.addr", "detector.flows.export",
     "detector.capfile", "detector.detect.grouping", "detector.decode.app.vrrp",
     "detector.decode.app.ospf", "detector.decode.app.dhcp4", "detector.detect.quality"),
    ("detector.flows.kernel", "detector.flows.merge", "detector.flows.keys", "detector.flows.community_id",
     "detector.rss", "detector.detectors.mss_violation", "detector.decode.app.rip",
     "detector.detectors.routing_loop", "detector.detectors.ospf_instability", "detector.decode.app.dhcp6",
     "detector.detect.neighbors", "detector.decode.app.nd", "detector.detectors.unicast_flood"),
)

SECOND_PROCESS = "import sys; from detector.cpu import compile_kernels; compile_kernels(tuple(sys.argv[1:]))"


def prepare_kernels(stream) -> bool:
    """On a first run, say so once and compile every kernel before the work starts, in two processes.

    The decoder, which every command runs, stands for all: when it is
    compiled, the other kernels are too (or load or compile in seconds, as
    needed). A second process that fails leaves its kernels to be compiled
    here when they are first called, as they would be without it.
    """
    if config.DISABLE_JIT or not cold_kernels(decode_batch):
        return False
    print(f"detector: compiling the packet kernels for this machine, once (up to {FIRST_COMPILE_S} s on two cores; "
          f"later runs start at once)", file=stream, flush=True)
    first, second = KERNEL_MODULES
    # run from the folder that holds this package, so `-c` imports this very package, whatever the user's folder
    helper = subprocess.Popen([sys.executable, "-c", SECOND_PROCESS, *second], cwd=PACKAGE.parent,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        compile_kernels(first)
        helper.wait()
    finally:
        if helper.poll() is None:     # interrupted: the helper's half is not wanted any more
            helper.kill()
            helper.wait()
    return True
