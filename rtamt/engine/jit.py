"""numba compilation options shared by every rtamt kernel.

``fastmath={'contract'}`` only (FMA contraction, deterministic per element); no
reassociation and no ``nnan``/``ninf`` assumptions, so a kernel gives the same bits for
a sample whatever block it arrives in.  ``cache=True`` keeps the machine code on disk.
"""
JIT = dict(nogil=True, cache=True, fastmath={"contract"}, error_model="numpy")
# helpers inlined into the kernels that call them (numba IR inlining)
INLINE = dict(JIT, inline="always")
