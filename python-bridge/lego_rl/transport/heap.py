"""glibc heap settings for a receiving process, set by the process itself.

ZeroMQ allocates every received message with malloc. glibc serves an
allocation over its mmap threshold with a fresh mapping (and its dynamic
threshold starts at 128 KiB), so each batch would land on pages the kernel
must fault in and zero: on the 2-core VM ~500-1000 minor faults and
+0.1-0.2 CPU-s per GB on the receiver. A fixed threshold of 32 MiB (glibc's
maximum on 64-bit) and a high trim threshold keep batches (<= 16 MiB by
construction) on heap pages that are reused from one batch to the next.

It is process-wide, so it is a call, not a side effect of importing or
constructing a Receiver: `python -m lego_rl.transport receive` makes it
(unless --no-tune-malloc); a trainer that hosts a Receiver can call it at
start. Setting MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ in the
environment has the same effect.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

# From glibc's malloc.h.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 * 1024 * 1024
TRIM_THRESHOLD = 1024 * 1024 * 1024


def reuse_heap_memory(mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD) -> bool:
    """Sets glibc's mmap and trim thresholds; False where there is no glibc `mallopt` (macOS, musl)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(_M_TRIM_THRESHOLD, trim_threshold))
