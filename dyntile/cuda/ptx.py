"""Compile every CUDA kernel of the ``"gpu"`` profile to PTX (no device needed).

Needs the CUDA toolkit's NVVM and NVRTC (for instance ``pip install
"numba-cuda[cu13]"``) and must run without the simulator. Used by the PTX test and
by ``asv_benches/gpu_check.py``; ``python -m dyntile.cuda.ptx`` prints a summary.

>>> sorted({name.split("_")[0] for name in KERNEL_SIGNATURES})
['attention', 'gemm', 'pad', 'tile', 'untile']
"""

from __future__ import annotations

import sys

from .config import attention_blocking, gemm_blocking

__all__ = ["KERNEL_SIGNATURES", "compile_all"]

_ARR = {1: "[::1]", 2: "[:, ::1]", 3: "[:, :, ::1]", 5: "[:, :, :, :, ::1]"}

# kernel name -> Numba signature on C-contiguous operands (one representative dtype
# for the copy kernels; they compile per dtype on first launch)
KERNEL_SIGNATURES = {
    "gemm_float32": "void(float32{3}, float32{3}, float32{3}, int32{1}, int32{1}, int64)",
    "gemm_float64": "void(float64{3}, float64{3}, float64{3}, int32{1}, int32{1}, int64)",
    "pad_float32": "void(float32{1}, int64{2}, float32{3}, float32, boolean)",
    "pad_int64": "void(int64{1}, int64{2}, int64{3}, int64, boolean)",
    "tile_float32": "void(float32{3}, float32{5}, float32)",
    "untile_float32": "void(float32{5}, float32{3})",
}

# attention kernels: one per dtype and head-dimension chunk count (``_c1``: D <= dc,
# the row tile resident in shared memory; ``_c2``: dc < D <= 2 dc, e.g. D = 128 in float32)
_ATTENTION = {
    "forward": "void(int64{2}, {t}{3}, {t}{3}, {t}{3}, {t}{3}, {t}{2}, {t}, boolean)",
    "dq": "void(int64{2}, {t}{3}, {t}{3}, {t}{3}, {t}{3}, {t}{2}, {t}{2}, {t}{3}, {t}, boolean)",
    "dkdv": "void(int64{2}, {t}{3}, {t}{3}, {t}{3}, {t}{3}, {t}{2}, {t}{2}, {t}{3}, {t}{3}, {t}, boolean)",
}
for _dt, _chunks in (("float32", (1, 2)), ("float64", (1,))):
    for _kind, _sig in _ATTENTION.items():
        for _c in _chunks:
            KERNEL_SIGNATURES[f"attention_{_kind}_{_dt}_c{_c}"] = _sig.replace("{t}", _dt)
    KERNEL_SIGNATURES[f"attention_delta_{_dt}"] = "void({t}{3}, {t}{3}, {t}{2}, boolean, {t}{2})".replace(
        "{t}", _dt
    )
KERNEL_SIGNATURES["attention_zero3_float32"] = "void(int64{1}, float32{3})"
KERNEL_SIGNATURES["attention_zero2_float32"] = "void(int64{1}, float32{2})"


def _attention_pyfunc(name: str):
    from . import attention

    _, kind, dtype_name, *rest = name.split("_")
    if kind == "delta":
        return attention.make_delta_pyfunc(dtype_name)
    if kind in ("zero3", "zero2"):
        return attention.zero_rows3_pyfunc if kind == "zero3" else attention.zero_rows2_pyfunc
    make = {
        "forward": attention.make_forward_pyfunc,
        "dq": attention.make_dq_pyfunc,
        "dkdv": attention.make_dkdv_pyfunc,
    }[kind]
    return make(attention_blocking(dtype_name, kind != "forward", "gpu"), dtype_name, int(rest[0][1:]))


def _pyfunc(name: str):
    from . import gemm, pad, tile

    if name.startswith("attention_"):
        return _attention_pyfunc(name)
    kind, dtype_name = name.split("_", 1)
    if kind == "gemm":
        return gemm.make_gemm_pyfunc(gemm_blocking(dtype_name, "gpu"), dtype_name)
    return {"pad": pad.pad_pyfunc, "tile": tile.tile_pyfunc, "untile": tile.untile_pyfunc}[kind]


def compile_all(cc: tuple[int, int] = (9, 0)) -> dict[str, str]:
    """PTX text of every kernel for compute capability ``cc`` (``{name: ptx}``)."""
    from numba import cuda

    if cuda.config.ENABLE_CUDASIM:
        raise RuntimeError("compile_all needs the real CUDA target: unset NUMBA_ENABLE_CUDASIM")
    out = {}
    for name, sig in KERNEL_SIGNATURES.items():
        for nd, layout in _ARR.items():
            sig = sig.replace(f"{{{nd}}}", layout)
        ptx, _ = cuda.compile_ptx(_pyfunc(name), sig, cc=cc)
        out[name] = ptx
    return out


def main() -> int:
    for name, ptx in compile_all().items():
        target = next((ln.split()[1] for ln in ptx.splitlines() if ln.startswith(".target")), "?")
        print(f"{name:28s} {target}  {len(ptx):7d} chars  {ptx.count('.local'):3d} .local")
    return 0


if __name__ == "__main__":
    sys.exit(main())
