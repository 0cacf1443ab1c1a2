"""Start-up costs, each timed in a fresh interpreter (``timeraw_``).

* ``Import``  -- ``import dyntile`` (lazy: never torch or numba), the first public
  name (``from dyntile import pad_batch``: NumPy and the Cython kernels) and
  ``import dyntile, loaders`` (torch);
* ``CudaSimulatorFirstCall`` -- the first ``dyntile.cuda`` call under Numba's CUDA
  simulator: importing the kernel modules and preparing the kernel for one tiny
  pad and one tiny GEMM (``NUMBA_ENABLE_CUDASIM=1`` is set before numba loads).
  Skipped when numba-cuda is not installed.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

_COUNT_MODULES = textwrap.dedent("""
    import sys
    before = set(sys.modules)
    import {stmt}
    print(len(set(sys.modules) - before))
""")


class Import:
    """``import dyntile`` and ``import dyntile, loaders`` in a new process."""

    repeat = (3, 10, 20.0)

    def timeraw_import_dyntile(self):
        return "import dyntile"

    def timeraw_import_pad_batch(self):
        """What the first call pays: NumPy and the Cython copy kernels."""
        return "from dyntile import pad_batch"

    def timeraw_import_dyntile_loaders(self):
        return "import dyntile, loaders"

    def track_modules_imported_by_dyntile(self):
        """Modules that ``import dyntile`` adds to ``sys.modules`` (names load lazily)."""
        code = _COUNT_MODULES.format(stmt="dyntile")
        return int(
            subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
        )

    track_modules_imported_by_dyntile.unit = "modules"


_SIM_SETUP = textwrap.dedent("""
    import os
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    import numpy as np
    from numba import cuda
""")


class CudaSimulatorFirstCall:
    """First call of the CUDA path under Numba's simulator (import + kernel set-up)."""

    repeat = (3, 5, 30.0)

    def setup(self):
        if importlib.util.find_spec("numba") is None or importlib.util.find_spec("numba_cuda") is None:
            raise NotImplementedError("numba and numba-cuda are not installed")

    def timeraw_first_pad_into(self):
        setup = _SIM_SETUP + textwrap.dedent("""
            samples = [cuda.to_device(np.arange(3, dtype=np.float32)),
                       cuda.to_device(np.arange(5, dtype=np.float32))]
        """)
        code = textwrap.dedent("""
            from dyntile import cuda as dc
            dc.pad_into(samples, (2, 8), np.float32, 0.0, False)
        """)
        return code, setup

    def timeraw_first_matmul(self):
        setup = _SIM_SETUP + textwrap.dedent("""
            a = cuda.to_device(np.ones((3, 4), np.float32))
            b = cuda.to_device(np.ones((4, 5), np.float32))
        """)
        code = textwrap.dedent("""
            from dyntile import cuda as dc
            dc.matmul(a, b)
        """)
        return code, setup
