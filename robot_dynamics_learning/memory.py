"""
Keep freed memory in the process instead of handing it back to the OS after every call.

glibc serves allocations of 128 kB and more with fresh `mmap` pages and trims freed memory
at the top of the heap. The batched dynamics and the models create many 0.1-1 MB temporary
tensors per call, so each call can page-fault its temporaries back in: whether it does
depends on the history of the heap and changed batch-1000 CRBA from 1.0 to 2.1 ms between
identical processes. Raising both thresholds makes freed blocks reusable (a bounded cost in
resident memory: the peak working set stays mapped).
"""
import ctypes
import ctypes.util
import functools

# mallopt parameter numbers from glibc's malloc.h.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 64 << 20
TRIM_THRESHOLD_BYTES = 256 << 20


@functools.lru_cache(maxsize=None)
def retain_freed_memory() -> bool:
    """Tune glibc malloc once per process; return False where there is no glibc."""
    name = ctypes.util.find_library('c')
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS, Windows)
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
                and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
