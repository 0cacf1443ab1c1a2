"""CUDA entry points under Numba's simulator: cost of the first call (import + JIT
of the simulated kernel path) in a fresh interpreter. Real-GPU timings live in
``asv_benches/gpu_check.py``, which needs a device."""
from __future__ import annotations


class CudaFirstCall:
    """``timeraw_``: a fresh process runs one tiny pad and one tiny matmul."""

    params = [["pad", "matmul"]]
    param_names = ["entry"]
    timeout = 120

    def timeraw_first_call(self, entry):
        setup = "import os; os.environ['NUMBA_ENABLE_CUDASIM'] = '1'; import numpy as np"
        if entry == "pad":
            code = ("from dyntile.cuda import pad_into\n"
                    "pad_into([np.ones(3, np.float32), np.ones(5, np.float32)], (2, 8), np.float32, 0.0, False)")
        else:
            code = ("from numba import cuda\nfrom dyntile.cuda import matmul\n"
                    "matmul(cuda.to_device(np.ones((9, 5), np.float32)), cuda.to_device(np.ones((5, 7), np.float32)))")
        return code, setup
