"""Build the Cython kernels of ``dyntile.cpu``.

Every ``dyntile/cpu/*.pyx`` becomes one extension module. The build never uses
``-march=native``: SIMD code paths are compiled per function with target
attributes (see ``dyntile/cpu/include/dyntile_simd.h``) and chosen at run time.

When torch is importable at build time (``pip install --no-build-isolation``
after installing torch), ``dyntile/cpu/_torch_tensors.cpp`` is built too, against
that torch's headers: a native reader of CPU tensors' sizes and pointers that
``dyntile.tensor_reader`` uses under that torch version only. It is optional:
without it (or if it fails to compile) the same calls read tensors through torch's
Python bindings, slower for many small tensors.
"""

import glob
import os
import sys

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def openmp_flags():
    """OpenMP compile and link flags for the current platform."""
    if sys.platform.startswith("linux"):
        return ["-fopenmp"], ["-fopenmp"]
    if sys.platform == "darwin":  # Apple clang needs libomp; build single-threaded otherwise
        return [], []
    if sys.platform == "win32":
        return ["/openmp"], []
    return [], []


def header_depends(module: str) -> list[str]:
    """The headers and .pxd files whose change rebuilds ``module``: a header named for a
    module (``gemm_*.h``, ``attention*.h``) belongs to that module, the others to all."""
    owned = ("gemm", "attention")
    headers = glob.glob(os.path.join("dyntile", "cpu", "include", "*.h"))
    mine = [
        h
        for h in headers
        if not os.path.basename(h).startswith(owned) or os.path.basename(h).startswith(module)
    ]
    return sorted(mine + glob.glob(os.path.join("dyntile", "cpu", "*.pxd")))


def extensions():
    omp_c, omp_l = openmp_flags()
    opt = ["-O3", "-fno-strict-aliasing"] if sys.platform != "win32" else ["/O2"]
    exts = []
    for pyx in sorted(glob.glob(os.path.join("dyntile", "cpu", "*.pyx"))):
        name = pyx[:-4].replace(os.sep, ".")
        exts.append(
            Extension(
                name,
                [pyx],
                depends=header_depends(os.path.basename(pyx)[:-4]),
                include_dirs=[np.get_include(), os.path.join("dyntile", "cpu", "include")],
                define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
                extra_compile_args=opt + omp_c,
                extra_link_args=omp_l,
            )
        )
    return cythonize(
        exts,
        language_level=3,
        compiler_directives={
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
    )


def torch_extension():
    """The optional native tensor reader, or nothing when torch is not importable."""
    try:
        import torch
        from torch.utils.cpp_extension import CppExtension
    except Exception:  # no torch in this build environment (e.g. pip's build isolation)
        return []
    if sys.platform == "win32":
        return []
    return [
        CppExtension(
            "dyntile.cpu._torch_tensors",
            [os.path.join("dyntile", "cpu", "_torch_tensors.cpp")],
            depends=[os.path.join("dyntile", "cpu", "include", h) for h in ("pylong_read.h", "rows_write.h")],
            include_dirs=[os.path.join("dyntile", "cpu", "include")],  # pylong_read.h, rows_write.h
            define_macros=[
                ("DYNTILE_TORCH_VERSION", f'"{torch.__version__}"'),
                ("_GLIBCXX_USE_CXX11_ABI", str(int(torch._C._GLIBCXX_USE_CXX11_ABI))),
            ],
            extra_compile_args=["-O2", "-std=c++20"],
            optional=True,  # a failed compile leaves the Python route, never a failed install
        )
    ]


setup(ext_modules=extensions() + torch_extension())
