"""Matrix products: ``dyntile.matmul`` (Cython GEMM) beside NumPy (OpenBLAS) and torch.

One class, the library a parameter beside dyntile (like NumPy's ``bench_linalg.py``):

* ``time_matmul``   -- ``(m, k) @ (k, n)`` into a preallocated ``out``, every library
  limited to ``threads`` threads (threadpoolctl for OpenBLAS, ``torch.set_num_threads``);
* ``peakmem_matmul`` -- the process's peak memory around one product: dyntile's only
  extra allocation is its packing buffers (``dyntile.cpu.gemm.packing_buffer_bytes``:
  ``threads`` MC x KC blocks of A and a KC x NC block of B, one per thread for tall
  products that run in row slabs, else one that a team packs up to 8 MiB of at once;
  on AVX2, 1.5 MiB for n = 2048 on one thread, 3.0 MiB on two).

Targets (issue 3): dyntile at least NumPy's speed at one thread for n >= 256 and the
transformer-layer shape, at least 0.9x at two threads. Run OpenBLAS with
``OPENBLAS_CORETYPE`` / ``OPENBLAS_L2_SIZE`` unset; ``asv_benches/gemm_compare.py``
prints the same comparison as one table.
"""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_limits

import dyntile

try:  # imported once, in asv's forkserver, rather than in every benchmark process
    import torch
except ImportError:  # torch parameters are skipped
    torch = None

SEED = 3
#: square sizes n (n x n @ n x n), one odd size (thin edge micro-panels of A and B)
#: and the transformer-layer shape (m x k @ k x n)
SHAPES = {
    "64": (64, 64, 64),
    "256": (256, 256, 256),
    "257": (257, 257, 257),
    "512": (512, 512, 512),
    "1024": (1024, 1024, 1024),
    "2048": (2048, 2048, 2048),
    "4096x768x768": (4096, 768, 768),
}


class Matmul:
    params = [list(SHAPES), ["float32", "float64"], [1, 2], ["dyntile", "numpy", "torch"]]
    param_names = ["shape", "dtype", "threads", "library"]
    timeout = 120

    def setup(self, shape, dtype, threads, library):
        m, k, n = SHAPES[shape]
        rng = np.random.default_rng(SEED)
        self.a = rng.standard_normal((m, k)).astype(dtype)
        self.b = rng.standard_normal((k, n)).astype(dtype)
        self.out = np.empty((m, n), dtype)
        self._limits = None
        self._torch_threads = None
        if library == "dyntile":
            self._fn = lambda: dyntile.matmul(self.a, self.b, out=self.out, threads=threads)
        elif library == "numpy":
            self._limits = threadpool_limits(limits=threads, user_api="blas")
            self._fn = lambda: np.matmul(self.a, self.b, out=self.out)
        else:
            if torch is None:
                raise NotImplementedError("torch is not installed")
            self._torch_threads = torch.get_num_threads()
            torch.set_num_threads(threads)
            ta, tb, tc = (torch.from_numpy(x) for x in (self.a, self.b, self.out))
            self._fn = lambda: torch.matmul(ta, tb, out=tc)
        self._fn()  # warm-up: first-touch pages, thread pools

    def teardown(self, shape, dtype, threads, library):
        if self._limits is not None:
            self._limits.restore_original_limits()
        if self._torch_threads is not None:
            torch.set_num_threads(self._torch_threads)

    def time_matmul(self, shape, dtype, threads, library):
        self._fn()

    def peakmem_matmul(self, shape, dtype, threads, library):
        self._fn()
