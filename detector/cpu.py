"""Conventions and CPU hints for the compiled kernels, among them a software prefetch numba lacks.

Caching: only the kernels that Python calls are cached (declared with
`kernel`, which lists the argument types they are called with). The helpers
they call are plain `njit` functions compiled into them and live in their
cache; a cache of a helper's own would cost about a millisecond at every
import (numba checks that the cache folder is writable) for nothing. A
kernel's cache is keyed by its own source and by every module of the package
it imports (`imports_digest`), so an edit of a constant in schema.py or here
recompiles the kernels that read it instead of leaving them stale.

Packet bytes of a large capture come from main memory, not from the cache.
A kernel that reads one header per record waits for each of those loads in
turn (the next record's position depends on this one's length, and a long
decode keeps the processor from looking ahead on its own), so telling the
memory system what comes next is worth three to four times the speed of a
record walk. A prefetch never faults: a hint past the end of the buffer is
harmless, which is why `prefetch` does no bounds check.

With NUMBA_DISABLE_JIT=1 the kernels run as Python (the mutation run does
so: a mutant then costs no compile), and `prefetch` is a no-op.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import re
from pathlib import Path

from llvmlite import binding as llvm
from llvmlite import ir
from numba import config, njit, types
from numba.core import caching, cgutils, sigutils
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
    def prefetch(array, index) -> None:
        """Nothing: interpreted kernels have no cache line to ask for."""


# (dispatcher, signatures) of every kernel declared so far, in declaration order
KERNELS: list = []


def kernel(*signatures: str, **options):
    """Declare a kernel that Python calls: compiled by numba on first use, cached on disk.

    `signatures` are the argument types its callers pass (numba's notation:
    "(u1[::1], i8)"): a first run compiles them ahead (compile_kernels), and
    tests/test_first_run.py checks no caller needs another. The helpers a
    kernel calls are plain `njit` functions compiled into it.
    """
    # a kernel touches arrays only: it lets the other threads of the pipeline (the reader, the decoders, the
    # consumers) run while it works
    options.setdefault("nogil", True)

    def declare(function):
        dispatcher = njit(cache=True, **options)(function)
        KERNELS.append((dispatcher, signatures))
        return dispatcher
    return declare


def compile_kernels(modules) -> None:
    """Compile (or load from the cache) every kernel the `modules` declare, for its declared signatures."""
    for name in modules:
        importlib.import_module(name)
    for dispatcher, signatures in list(KERNELS):
        if not config.DISABLE_JIT and dispatcher.py_func.__module__ in modules:
            for signature in signatures:
                # as a tuple of types: the cache keys an entry by the signature as passed, and calls pass types
                dispatcher.compile(tuple(sigutils.normalize_signature(signature)[0]))


def cold_kernels(*dispatchers) -> list[str]:
    """Names of the cached kernels among `dispatchers` with nothing compiled on disk for their source as it is."""
    cold = []
    for dispatcher in dispatchers:
        try:
            # numba keeps no public way to ask; an index written for an older source reads as empty
            index = dispatcher._cache._cache_file._load_index()
        except Exception:   # an unreadable cache is numba's to rebuild; nothing to announce
            continue
        if not index:
            cold.append(dispatcher.__name__)
    return cold


# ---- a cache that cannot go stale --------------------------------------------
# numba keys a kernel's cache by its own source file, yet compiles in the constants it imports from
# other modules: after an edit of schema.py the cached decoder read the old column layout and
# reported `ip_version 61, ttl 4`. The kernels of this package are keyed by the content of every
# module of the package their module imports, directly or not, as well.
PACKAGE = Path(__file__).resolve().parent
_RELATIVE_IMPORT = re.compile(r"^[ \t]*from[ \t]+(\.+)([\w.]*)[ \t]+import[ \t]+(.+)$", re.MULTILINE)


@functools.cache
def _module_file(package_dir: Path, dotted: str) -> Path | None:
    base = package_dir.joinpath(*dotted.split(".")) if dotted else package_dir
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def _module(path: Path) -> tuple[frozenset, bytes]:
    """The package's own modules that `path` imports with a relative import (as files), and the SHA-256 of its
    content with its path in the package before it: each module is read once per process, however many kernels
    import it."""
    text = path.read_bytes()
    found = set()
    for dots, dotted, names in _RELATIVE_IMPORT.findall(text.decode("utf-8")):
        package_dir = path.parent
        for _ in range(len(dots) - 1):
            package_dir = package_dir.parent
        module = _module_file(package_dir, dotted)
        if module is not None:
            found.add(module)
        for name in re.findall(r"\w+", names):     # `from . import schema` names modules
            submodule = _module_file(package_dir, f"{dotted}.{name}" if dotted else name)
            if submodule is not None:
                found.add(submodule)
    name = str(path.relative_to(PACKAGE)).encode()
    return frozenset(found), name + b"\0" + hashlib.sha256(text).digest()


def _imports(path: Path) -> frozenset:
    """The package's own modules that `path` imports with a relative import, as files."""
    return _module(path)[0]


@functools.cache
def imports_digest(path: Path) -> str:
    """SHA-256 over the content of every package module `path` imports, directly or not (over each module's own
    SHA-256, computed once)."""
    seen, pending = set(), [path]
    while pending:
        for module in _imports(pending.pop()):
            if module not in seen:
                seen.add(module)
                pending.append(module)
    digest = hashlib.sha256()
    for module in sorted(seen):
        digest.update(_module(module)[1])
    return digest.hexdigest()


class _KeyedByImports:
    """A numba cache locator for this package's kernels whose stamp covers the modules they import."""

    @classmethod
    def from_function(cls, py_func, py_file):
        if not Path(py_file).resolve().is_relative_to(PACKAGE):
            return None         # someone else's kernel: numba's own locators
        return super().from_function(py_func, py_file)

    def get_source_stamp(self):
        return super().get_source_stamp(), imports_digest(Path(self._py_file).resolve())


class _UserProvidedKeyed(_KeyedByImports, caching.UserProvidedCacheLocator):
    """NUMBA_CACHE_DIR"""


class _InTreeKeyed(_KeyedByImports, caching.InTreeCacheLocator):
    """__pycache__ beside the module"""


class _UserWideKeyed(_KeyedByImports, caching.UserWideCacheLocator):
    """the user's cache folder, where the package's folder is not writable"""


caching.CacheImpl._locator_classes[:0] = [_UserProvidedKeyed, _InTreeKeyed, _UserWideKeyed]
