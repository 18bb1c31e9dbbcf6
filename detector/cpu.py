"""Conventions and CPU hints for the compiled kernels, among them a software prefetch numba lacks.

Caching: only the kernels that Python calls carry `cache=True`. The helpers
they call are compiled into them and live in their cache; a cache of a
helper's own would never be read, yet setting one up costs about a
millisecond at every import (numba checks that the cache folder is
writable): some 40 ms of every start for the sixty helpers.

Packet bytes of a large capture come from main memory, not from the cache.
A kernel that reads one header per record waits for each of those loads in
turn (the next record's position depends on this one's length, and a long
decode keeps the processor from looking ahead on its own), so telling the
memory system what comes next is worth three to four times the speed of a
record walk. A prefetch never faults: a hint past the end of the buffer is
harmless, which is why `prefetch` does no bounds check.

numba caches a compiled kernel by the source file it lives in: a change here
does not invalidate the kernels that inline `prefetch` (delete the
__pycache__ folders after editing this file).

With NUMBA_DISABLE_JIT=1 the kernels run as Python (the mutation run does
so: a mutant then costs no compile), and `prefetch` is a no-op.
"""
from __future__ import annotations

from llvmlite import binding as llvm
from llvmlite import ir
from numba import config, types
from numba.core import cgutils
from numba.extending import intrinsic

# llvm.prefetch arguments: read (0), locality 3 (keep in all cache levels), data cache (1)
_READ, _KEEP_ALL_LEVELS, _DATA = 0, 3, 1
# The intrinsic is named after its pointer type: i8* up to LLVM 16, opaque `ptr` from LLVM 17 on.
_PREFETCH = "llvm.prefetch.p0" if llvm.llvm_version_info[0] >= 17 else "llvm.prefetch.p0i8"


@intrinsic
def prefetch(typingctx, array, index):
    """Ask for the cache line holding array[index] (a contiguous 1-D array) to be loaded."""
    if not isinstance(array, types.Array) or array.ndim != 1 or not isinstance(index, types.Integer):
        return None
    sig = types.void(array, index)

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        offset = context.cast(builder, args[1], signature.args[1], types.intp)
        address = builder.gep(data, [offset])
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [address.type, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, _PREFETCH)
        builder.call(fn, [address, ir.Constant(i32, _READ), ir.Constant(i32, _KEEP_ALL_LEVELS),
                          ir.Constant(i32, _DATA)])
        return context.get_dummy_value()

    return sig, codegen


if config.DISABLE_JIT:
    def prefetch(array, index) -> None:    # noqa: F811 - a hint has no Python equivalent
        """Nothing: interpreted kernels have no cache line to ask for."""


# What a first run costs on a 2-core machine (README.md, "First run and start-up"): every kernel is
# compiled once for this processor and kept in the __pycache__ folders (numba's cache).
FIRST_COMPILE_S = 30


def cold_kernels(*dispatchers) -> list[str]:
    """Names of the cached kernels among `dispatchers` with nothing compiled on disk for their source as it is."""
    cold = []
    for kernel in dispatchers:
        try:
            # numba keeps no public way to ask; an index written for an older source reads as empty
            index = kernel._cache._cache_file._load_index()
        except Exception:   # an unreadable cache is numba's to rebuild; nothing to announce
            continue
        if not index:
            cold.append(kernel.__name__)
    return cold
