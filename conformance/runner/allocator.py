"""Keeping freed memory for reuse while the checks run.

The size regimes' cases are arrays of millions of float64 elements, and every NumPy operation over them
allocates a fresh one. glibc's malloc hands blocks that large to the kernel and back (mmap, and trimming the
heap's top as soon as a block is freed), so each new array is page-faulted in again, zero-filled: on a small
virtual machine that took a fifth of a size regime's time. Raising malloc's mmap and trim thresholds keeps
freed blocks in the heap for the next array of that size. The checks' results are untouched: this is where
memory comes from, not what is computed in it.
"""

from __future__ import annotations

import ctypes
import sys

#: mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3

#: blocks up to this size come from the heap (glibc's largest allowed mmap threshold on 64-bit systems)
MMAP_THRESHOLD = 32 << 20
#: free memory the heap keeps at its top before returning any of it to the kernel
TRIM_THRESHOLD = 1 << 30
#: extra room the heap takes whenever it grows
TOP_PAD = 64 << 20


def keep_freed_memory() -> bool:
    """Raise this process's malloc thresholds where the C library is glibc's; whether it did."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no C library to load, or one without mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    settings = ((M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_TOP_PAD, TOP_PAD))
    return all(mallopt(param, value) == 1 for param, value in settings)
