"""Check every dyntile CUDA kernel against NumPy, then time them on the GPU.

Usage::

    python asv_benches/gpu_check.py                 # on a CUDA machine (< 5 minutes)
    NUMBA_ENABLE_CUDASIM=1 python asv_benches/gpu_check.py --tiny   # simulator smoke run

Checks (fresh random data from a time-based seed, outputs poisoned with NaN or a
sentinel first): float32/float64 GEMM on odd and edge shapes, batched and
broadcast; pad of host and device samples, 1-D and 2-D, left and right; tile and
untile round trips; varlen attention kernels (forward and backward, causal and not,
float32 and float64, segments of 0, 1 and more tokens than a tile, padding between
them) against a float64 per-segment NumPy reference; with a CUDA torch, the public
API on CUDA tensors (float32 and bfloat16) against the same calls on CPU tensors,
the attention kernels on CUDA tensors, and ``dyntile.varlen_attention`` (when this
checkout has it) forward and backward through autograd against a per-segment
float64 SDPA reference. Any mismatch prints FAIL and the script exits with status 1.

Timings (CUDA events, median of several runs after a warm-up):

* GEMM float32 at 1024, 2048, 4096, 8192 against ``torch.matmul`` with TF32
  disabled (cuBLAS SGEMM), in GFLOP/s and as a ratio; the register-capped
  variant (``max_registers=128``) is timed beside the default;
* pad (device samples) and tile/untile in GB/s (bytes read + written) against a
  device-to-device copy of the output;
* varlen attention, float32, packed 2048-token rows of short segments, H=4, D=64:
  dyntile's kernels (and ``dyntile.varlen_attention`` through autograd, when present)
  against torch SDPA with the dense block-diagonal causal mask and against a loop of
  per-segment causal SDPA calls, forward and forward+backward, in ms and useful
  GFLOP/s: ``4 * H * D * pairs`` for the forward (``pairs = sum_s L_s (L_s + 1) / 2``,
  the attended query-key pairs; QK^T and PV, 2 flops a multiply-add) and 2.5x that
  for the backward (flash-attention's convention), whatever a method computes.

Expected on an H100/H200 (float32 non-tensor-core peak ~60-67 TFLOP/s, cuBLAS
SGEMM ~45-55 TFLOP/s at 4096): the 128x128x8 kernel with 8x8 per-thread tiles,
conflict-free scalar shared loads and double buffering should reach 0.6-0.8x
cuBLAS at 4096 and 8192 (it does no 128-bit vector loads and keeps Numba's 64-bit
index arithmetic, which costs registers: ~145 per thread, one 256-thread block per
SM); lower at 1024, where 64 blocks cannot fill 132 SMs and launch overhead from
Python (~20-40 us) is comparable to the kernel. The copy kernels are memory
bound: expect 60-85% of device-to-device copy bandwidth (pad pays one extra
staging copy of the samples; tile's writes are contiguous per tile row).
If the GEMM ratio falls below 0.7 at 4096, compare the ``max_registers=128`` line.
The attention kernels run on CUDA cores (no tensor cores from Numba), so against
SDPA's dense-mask path they gain by skipping the ~95% masked-out scores, not by a
faster product; the per-segment loop pays one launch sequence per segment.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEVICE = "cuda"  # where the torch sections put their tensors (the CPU test runs them on "cpu")


def _poisoned(cuda, shape, dtype):
    dtype = np.dtype(dtype)
    fill = np.nan if dtype.kind == "f" else np.iinfo(dtype).min
    return cuda.to_device(np.full(shape, fill, dtype))


class Checks:
    """Correctness checks; each records PASS/FAIL with the largest error."""

    def __init__(self, cuda, rng, tiny: bool):
        self.cuda, self.rng, self.tiny, self.failures = cuda, rng, tiny, 0

    def report(self, name: str, ok: bool, detail: str = "") -> None:
        self.failures += not ok
        print(f"  {'PASS' if ok else 'FAIL'}  {name} {detail}")

    def gemm(self) -> None:
        from dyntile.cuda import matmul

        shapes = [((33, 29), (29, 17)), ((3, 9, 5), (5, 7)), ((2, 1, 6, 4), (3, 4, 5)), ((7,), (7, 3))]
        if not self.tiny:
            shapes += [((257, 131), (131, 385)), ((4, 130, 259), (4, 259, 127)), ((1000, 1), (1, 999))]
        for dtype, tol in ((np.float32, 1e-4), (np.float64, 1e-11)):
            for a_shape, b_shape in shapes:
                a = self.rng.standard_normal(a_shape).astype(dtype)
                b = self.rng.standard_normal(b_shape).astype(dtype)
                ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
                out = _poisoned(self.cuda, ref.shape, dtype)
                matmul(self.cuda.to_device(a), self.cuda.to_device(b), out=out)
                got = out.copy_to_host()
                err = float(np.max(np.abs(got - ref) / (1 + np.abs(ref)))) if ref.size else 0.0
                self.report(
                    f"matmul {np.dtype(dtype).name} {a_shape} @ {b_shape}",
                    bool(err < tol),
                    f"max rel err {err:.2e}",
                )

    def pad(self) -> None:
        from dyntile.cuda import pad_into

        n = 12 if self.tiny else 300
        for shapes, dtype in (
            ([(int(k),) for k in self.rng.integers(0, n, 5)], np.float32),
            ([tuple(int(v) for v in s) for s in self.rng.integers(0, n // 3 + 1, (4, 2))], np.int32),
        ):
            padded = tuple(max(s[a] for s in shapes) + 3 for a in range(len(shapes[0])))
            xs = [
                self.rng.standard_normal(s).astype(dtype)
                if dtype == np.float32
                else self.rng.integers(-1000, 1000, s).astype(dtype)
                for s in shapes
            ]
            for left in (False, True):
                ref = np.full((len(xs), *padded), -7, dtype)
                for b, x in enumerate(xs):
                    idx = tuple(slice(p - s, p) if left else slice(0, s) for s, p in zip(x.shape, padded))
                    ref[(b, *idx)] = x
                for where, samples in (("host", xs), ("device", [self.cuda.to_device(x) for x in xs])):
                    out = _poisoned(self.cuda, ref.shape, dtype)
                    pad_into(samples, ref.shape, dtype, -7, left, out=out)
                    ok = np.array_equal(out.copy_to_host(), ref)
                    self.report(
                        f"pad {where} {len(padded)}-D {np.dtype(dtype).name} {'left' if left else 'right'} "
                        f"{ref.shape}",
                        ok,
                    )

    def tile(self) -> None:
        from dyntile.cuda import tile_into, untile_from

        cases = [((5, 7), (2, 4)), ((2, 9, 13), (4, 8))]
        if not self.tiny:
            cases += [((3, 1000, 1030), (8, 128)), ((130, 257), (16, 16))]
        for shape, (tm, tn) in cases:
            x = self.rng.standard_normal(shape).astype(np.float32)
            *lead, M, N = shape
            gm, gn = -(-M // tm), -(-N // tn)
            padded = np.full((*lead, gm * tm, gn * tn), -1, np.float32)
            padded[..., :M, :N] = x
            ref = np.moveaxis(padded.reshape(*lead, gm, tm, gn, tn), -3, -2)
            t = _poisoned(self.cuda, ref.shape, np.float32)
            tile_into(self.cuda.to_device(x), (tm, tn), -1.0, out=t)
            back = _poisoned(self.cuda, shape, np.float32)
            untile_from(t, (M, N), out=back)
            ok = np.array_equal(t.copy_to_host(), ref) and np.array_equal(back.copy_to_host(), x)
            self.report(f"tile/untile {shape} by {(tm, tn)}", ok)

    def attention(self) -> None:
        """The varlen attention kernels against the float64 NumPy reference, outputs poisoned."""
        from dyntile.cuda.attention import varlen_attention_forward

        lengths = [0, 1, 2, 5, 17] if self.tiny else [0, 1, 2, 63, 64, 65, 257, 300]
        dims = (
            ((16, np.float32), (5, np.float64))
            if self.tiny
            else ((16, np.float32), (33, np.float32), (64, np.float32), (128, np.float32), (64, np.float64))
        )
        for D, dtype in dims:
            for causal in (False, True):
                starts, lengths_, N = _segments(self.rng, lengths)
                H = 2
                q, k, v, dout = (self.rng.standard_normal((N, H, D)).astype(dtype) for _ in range(4))
                scale = 1 / math.sqrt(D)
                ref = _attention_reference(q, k, v, dout, starts, lengths_, causal, scale)
                dev = [self.cuda.to_device(x) for x in (q, k, v, dout)]
                out, lse = _poisoned(self.cuda, (N, H, D), dtype), _poisoned(self.cuda, (N, H), dtype)
                varlen_attention_forward(
                    *dev[:3], starts, lengths_, causal=causal, scale=scale, out=out, lse=lse
                )
                grads = [_poisoned(self.cuda, (N, H, D), dtype) for _ in range(3)]
                _backward_call(grads, dev[3], *dev[:3], out, lse, starts, lengths_, causal, scale)()
                got = [a.copy_to_host() for a in (out, lse, *grads)]
                err = max(_rel_err(g, r) for g, r in zip(got, ref))
                tol = 2e-4 if dtype == np.float32 else 1e-10
                self.report(
                    f"attention {np.dtype(dtype).name} D={D} {'causal' if causal else 'full'} "
                    f"N={N} lengths {lengths}",
                    bool(err < tol),
                    f"max rel err {err:.2e} (out, lse, dq, dk, dv)",
                )

    def attention_torch(self) -> None:
        """The attention kernels on CUDA torch tensors, and ``dyntile.varlen_attention``
        (when present) through autograd, against per-segment float64 SDPA."""
        torch = _torch_cuda()
        if torch is None:
            print("  skip  attention on CUDA torch tensors (torch with CUDA is not available)")
            return
        from dyntile.cuda.attention import varlen_attention_backward, varlen_attention_forward

        lengths = [0, 1, 2, 63, 64, 65, 257, 300]
        starts, lengths_, N = _segments(self.rng, lengths)
        H, D = 4, 64
        scale = 1 / math.sqrt(D)  # varlen_attention's default
        q, k, v, dout = (torch.randn(N, H, D, device=DEVICE) for _ in range(4))
        ref = _sdpa_reference(torch, q, k, v, dout, starts, lengths_, True, scale)
        out, lse = varlen_attention_forward(q, k, v, starts, lengths_, causal=True, scale=scale)
        grads = varlen_attention_backward(dout, q, k, v, out, lse, starts, lengths_, causal=True, scale=scale)
        ok_kind = all(
            torch.is_tensor(t) and t.device == q.device and t.dtype == torch.float32
            for t in (out, lse, *grads)
        )
        err = max(_rel_err(a.cpu().numpy(), b) for a, b in zip((out, *grads), ref))
        self.report(
            f"attention kernels on CUDA torch tensors N={N} H={H} D={D}",
            ok_kind and err < 2e-4,
            f"max rel err {err:.2e}",
        )
        import dyntile as dt

        api = getattr(dt, "varlen_attention", None)
        if api is None:
            print("  skip  dyntile.varlen_attention (not in this checkout)")
            return
        cu = torch.tensor(np.concatenate([[0], np.cumsum(lengths_)]), dtype=torch.int32, device=DEVICE)
        qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
        pack = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lengths_)]).astype(np.int64)
        idx = torch.as_tensor(pack, device=DEVICE)  # the tokens in cu_seqlens order
        try:
            o = api(qg[idx], kg[idx], vg[idx], cu_seqlens=cu, causal=True)
            o.backward(dout[idx])
        except Exception as exc:  # report the refusal, then go on
            self.report("dyntile.varlen_attention on CUDA torch tensors", False, f"raised {exc!r}")
            return
        got = [o.detach().cpu().numpy()] + [g.grad[idx].cpu().numpy() for g in (qg, kg, vg)]
        want = [r[pack] for r in ref]
        err = max(_rel_err(a, b) for a, b in zip(got, want))
        self.report(
            f"dyntile.varlen_attention CUDA float32 causal (cu_seqlens, autograd) total={len(pack)}",
            o.device == q.device and o.dtype == torch.float32 and err < 2e-4,
            f"max rel err {err:.2e}",
        )

    def torch_tensors(self) -> None:
        """The public API on CUDA torch tensors (float32, and bfloat16 moved as its bits)
        against the same calls on CPU tensors; skipped without a CUDA torch."""
        torch = _torch_cuda()
        if torch is None:
            print("  skip  CUDA torch tensors (torch with CUDA is not available)")
            return
        import dyntile as dt

        for dtype in (torch.float32, torch.bfloat16):
            xs = [torch.randn(int(n), 3).to(dtype) for n in self.rng.integers(1, 40, 5)]
            for side in ("right", "left"):
                got, lengths = dt.pad_batch([x.cuda() for x in xs], multiple=8, fill=-1.5, side=side)
                ref, ref_lengths = dt.pad_batch(xs, multiple=8, fill=-1.5, side=side)
                ok = (
                    got.is_cuda
                    and got.dtype == dtype
                    and torch.equal(got.cpu(), ref)
                    and torch.equal(torch.as_tensor(lengths).cpu(), ref_lengths)
                )
                self.report(f"pad_batch CUDA torch {dtype} {side} {tuple(ref.shape)}", ok)
            x = torch.randn(2, 33, 70).to(dtype)
            t = dt.tile(x.cuda(), (8, 32), fill=0.5)
            back = dt.untile(t, (33, 70))
            ok = (
                t.dtype == dtype
                and torch.equal(t.cpu(), dt.tile(x, (8, 32), fill=0.5))
                and torch.equal(back.cpu(), x)
            )
            self.report(f"tile/untile CUDA torch {dtype} {tuple(x.shape)}", ok)
        a, b = torch.randn(3, 40, 50).to(torch.bfloat16), torch.randn(50, 60).to(torch.bfloat16)
        c = dt.matmul(a.cuda(), b.cuda())
        self.report(
            "matmul CUDA torch bfloat16 (torch.matmul)",
            c.is_cuda and c.dtype == torch.bfloat16 and torch.equal(c, torch.matmul(a.cuda(), b.cuda())),
        )


def _rel_err(got, ref) -> float:
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if not np.isfinite(got).all():
        return math.inf
    return float(np.max(np.abs(got - ref) / (1 + np.abs(ref)))) if ref.size else 0.0


def _segments(rng, lengths):
    """Shuffled segments of ``lengths`` with 0-2 padding tokens around each: (starts, lengths, N)."""
    order = rng.permutation(len(lengths))
    starts, lens, t = [], [], 0
    for i in order:
        t += int(rng.integers(0, 3))
        starts.append(t)
        lens.append(lengths[i])
        t += lengths[i]
    return np.array(starts, np.int64), np.array(lens, np.int64), t + int(rng.integers(0, 3))


def _attention_reference(q, k, v, dout, starts, lengths, causal, scale):
    """float64 ``(out, lse, dq, dk, dv)`` per segment: softmax(scale Q K^T) V and its gradients."""
    q, k, v, dout = (np.asarray(x, np.float64) for x in (q, k, v, dout))
    out, lse = np.zeros_like(q), np.zeros(q.shape[:2])
    dq, dk, dv = np.zeros_like(q), np.zeros_like(q), np.zeros_like(q)
    for s, n in zip(starts, lengths):
        if n == 0:
            continue
        seg = slice(s, s + n)
        Q, K, V, dO = (x[seg].transpose(1, 0, 2) for x in (q, k, v, dout))  # [H, n, D]
        S = scale * Q @ K.transpose(0, 2, 1)
        if causal:
            S = np.where(np.tril(np.ones((n, n), bool)), S, -np.inf)
        m = S.max(-1, keepdims=True)
        P = np.exp(S - m)
        total = P.sum(-1, keepdims=True)
        P /= total
        O = P @ V  # noqa: E741 (the attention output, named as in the papers)
        dS = P * (dO @ V.transpose(0, 2, 1) - (dO * O).sum(-1, keepdims=True))
        out[seg] = O.transpose(1, 0, 2)
        lse[seg] = (m + np.log(total))[..., 0].T
        dq[seg] = (scale * dS @ K).transpose(1, 0, 2)
        dk[seg] = (scale * dS.transpose(0, 2, 1) @ Q).transpose(1, 0, 2)
        dv[seg] = (P.transpose(0, 2, 1) @ dO).transpose(1, 0, 2)
    return out, lse, dq, dk, dv


def _sdpa_reference(torch, q, k, v, dout, starts, lengths, causal, scale):
    """``(out, dq, dk, dv)`` as float64 NumPy from per-segment float64 SDPA (zeros on padding)."""
    F = torch.nn.functional
    qd, kd, vd = (x.double().detach().requires_grad_(True) for x in (q, k, v))
    out = torch.zeros_like(qd)
    for s, n in zip(starts.tolist(), lengths.tolist()):
        if n:
            seg = [x[s : s + n].transpose(0, 1).unsqueeze(0) for x in (qd, kd, vd)]  # [1, H, n, D]
            out[s : s + n] = F.scaled_dot_product_attention(*seg, is_causal=causal, scale=scale)[0].transpose(
                0, 1
            )
    out.backward(dout.double())
    return [x.detach().cpu().numpy() for x in (out, qd.grad, kd.grad, vd.grad)]


class Timer:
    """Median milliseconds of a GPU callable: CUDA events on a device, wall clock on the simulator."""

    def __init__(self, cuda, repeats: int):
        self.cuda, self.repeats = cuda, repeats
        self.events = not cuda.config.ENABLE_CUDASIM

    def __call__(self, fn) -> float:
        fn()  # warm-up (and JIT compile)
        self.cuda.synchronize()
        times = []
        for _ in range(self.repeats):
            if self.events:
                start, end = self.cuda.event(), self.cuda.event()
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(self.cuda.event_elapsed_time(start, end))
            else:
                t0 = time.perf_counter()
                fn()
                self.cuda.synchronize()
                times.append(1e3 * (time.perf_counter() - t0))
        return statistics.median(times)


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _torch_ms(torch, fn, repeats: int) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def time_gemm(cuda, rng, sizes, repeats) -> None:
    from dyntile.cuda.config import gemm_blocking
    from dyntile.cuda.gemm import gemm_kernel
    from dyntile.cuda.launch import gemm_launch
    from dyntile.cuda.products import matmul

    torch = _torch_cuda()
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    timer = Timer(cuda, repeats)
    print(f"GEMM float32 (median of {repeats}; cuBLAS via torch.matmul, TF32 off)")
    for n in sizes:
        a = cuda.to_device(rng.standard_normal((n, n)).astype(np.float32))
        b = cuda.to_device(rng.standard_normal((n, n)).astype(np.float32))
        c = _poisoned(cuda, (n, n), np.float32)
        flop = 2.0 * n**3
        ms = timer(lambda: matmul(a, b, out=c))
        line = f"  n={n:5d}  dyntile {flop / ms / 1e6:9.1f} GFLOP/s ({ms:8.3f} ms)"
        if not cuda.config.ENABLE_CUDASIM:
            capped = gemm_kernel("float32", 128)
            a3, b3, c3 = a.reshape(1, n, n), b.reshape(1, n, n), c.reshape(1, n, n)
            idx = cuda.to_device(np.zeros(1, np.int32))
            ((z0, grid, block),) = gemm_launch(1, n, n, gemm_blocking("float32"))
            ms_cap = timer(lambda: capped[grid, block](a3, b3, c3, idx, idx, z0))
            line += f"  max_registers=128 {flop / ms_cap / 1e6:9.1f} GFLOP/s"
        if torch is not None:
            ta, tb = torch.as_tensor(a, device="cuda"), torch.as_tensor(b, device="cuda")
            tc = torch.empty((n, n), device="cuda")
            ms_t = _torch_ms(torch, lambda: torch.matmul(ta, tb, out=tc), repeats)
            line += f"  cuBLAS {flop / ms_t / 1e6:9.1f} GFLOP/s  ratio {ms_t / ms:5.2f}x"
        print(line, flush=True)


def time_copies(cuda, rng, tiny: bool, repeats: int) -> None:
    from dyntile.cuda import pad_into, tile_into, untile_from

    timer = Timer(cuda, repeats)
    batch, max_len = (4, 16) if tiny else (512, 8192)
    lengths = rng.integers(max_len // 8, max_len, batch)
    samples = [cuda.to_device(rng.standard_normal(int(k)).astype(np.float32)) for k in lengths]
    padded = (batch, int(math.ceil(lengths.max() / 128) * 128))
    out = cuda.device_array(padded, np.float32)
    copy_src = cuda.device_array(padded, np.float32)
    nbytes = out.nbytes
    ms_copy = timer(lambda: out.copy_to_device(copy_src))
    copy_gbs = 2 * nbytes / ms_copy / 1e6
    print(f"copies (GB/s counts bytes read + written; median of {repeats}; ratio to the copy's GB/s)")
    print(f"  device-to-device copy       {copy_gbs:8.1f} GB/s  ({nbytes / 1e6:.1f} MB)")
    ms_pad = timer(lambda: pad_into(samples, padded, np.float32, 0.0, False, out=out))
    gbs = (4 * int(lengths.sum()) + nbytes) / ms_pad / 1e6
    print(f"  pad {batch} device samples {gbs:8.1f} GB/s  ratio {gbs / copy_gbs:4.2f}")
    shape = (2, 33, 70) if tiny else (16, 2048, 2048)
    x = cuda.to_device(rng.standard_normal(shape).astype(np.float32))
    t = tile_into(x, (8, 128), 0.0)
    back = cuda.device_array(shape, np.float32)
    ms_tile = timer(lambda: tile_into(x, (8, 128), 0.0, out=t))
    ms_untile = timer(lambda: untile_from(t, shape[-2:], out=back))
    nb = x.nbytes + t.nbytes
    for name, ms in ((f"tile {shape} by (8, 128)", ms_tile), ("untile", ms_untile)):
        print(f"  {name:27s} {nb / ms / 1e6:8.1f} GB/s  ratio {nb / ms / 1e6 / copy_gbs:4.2f}")


def _packed_rows(rng, rows: int, T: int, median: int):
    """Lengths of segments packing ``rows`` rows of ``T`` tokens exactly (log-normal lengths
    around ``median``, the last segment of a row cut to fit): ``(starts, lengths)``."""
    starts, lengths = [], []
    for b in range(rows):
        t = 0
        while t < T:
            n = int(min(T - t, max(1, rng.lognormal(math.log(median), 0.8))))
            starts.append(b * T + t)
            lengths.append(n)
            t += n
    return np.array(starts, np.int64), np.array(lengths, np.int64)


def time_attention(cuda, rng, tiny: bool, repeats: int) -> None:
    """Forward and forward+backward of varlen attention against torch SDPA (dense
    block-diagonal mask, and a per-segment loop); dyntile's kernels alone on the simulator."""
    from dyntile.cuda.attention import varlen_attention_forward

    rows, T, H, D, median = (1, 16, 1, 8, 4) if tiny else (8, 2048, 4, 64, 50)
    starts, lengths = _packed_rows(rng, rows, T, median)
    N, scale = rows * T, 1 / math.sqrt(D)
    pairs = int((lengths * (lengths + 1) // 2).sum())
    flop_fwd = 4.0 * H * D * pairs
    print(
        f"varlen attention float32 causal: {rows} packed rows of {T} tokens, {len(lengths)} segments (median "
        f"length {int(np.median(lengths))}), H={H}, D={D}; {pairs / (rows * T * T):.1%} of the T x T scores "
        f"are attended (median of {repeats}; useful GFLOP/s: 4*H*D*pairs forward, x3.5 with backward)"
    )
    torch = _torch_cuda()
    timer = Timer(cuda, repeats)
    results = []
    if torch is None:
        host = [rng.standard_normal((N, H, D)).astype(np.float32) for _ in range(4)]
        q, k, v, dout = (cuda.to_device(x) for x in host)
        out, lse = cuda.device_array((N, H, D), np.float32), cuda.device_array((N, H), np.float32)
        grads = [cuda.device_array((N, H, D), np.float32) for _ in range(3)]
        ms = timer(
            lambda: varlen_attention_forward(
                q, k, v, starts, lengths, causal=True, scale=scale, out=out, lse=lse
            )
        )
        ms_b = timer(_backward_call(grads, dout, q, k, v, out, lse, starts, lengths, True, scale))
        results.append(("dyntile CUDA kernels", ms, ms + ms_b))
    else:
        results += _time_attention_torch(torch, starts, lengths, rows, T, H, D, scale, repeats)
    print(f"  {'method':38s} {'fwd ms':>9s} {'GFLOP/s':>8s} {'fwd+bwd ms':>11s} {'GFLOP/s':>8s}")
    for name, ms_f, ms_fb in results:
        print(
            f"  {name:38s} {ms_f:9.3f} {flop_fwd / ms_f / 1e6:8.1f} {ms_fb:11.3f} "
            f"{3.5 * flop_fwd / ms_fb / 1e6:8.1f}"
        )
    for mine, _, mine_fb in (r for r in results if r[0].startswith("dyntile")):
        for name, _, ms_fb in (r for r in results if not r[0].startswith("dyntile")):
            print(f"  fwd+bwd: {mine} {ms_fb / mine_fb:6.2f}x faster than {name}")


def _backward_call(grads, dout, q, k, v, out, lse, starts, lengths, causal: bool, scale: float):
    """A call of the attention kernels' backward pass that writes ``dq, dk, dv`` into
    ``grads`` (imported here, outside any timed region)."""
    from dyntile.cuda.attention import varlen_attention_backward

    dq, dk, dv = grads
    return lambda: varlen_attention_backward(
        dout, q, k, v, out, lse, starts, lengths, causal=causal, scale=scale, dq=dq, dk=dk, dv=dv
    )


def _time_attention_torch(torch, starts, lengths, rows, T, H, D, scale, repeats):
    import dyntile as dt
    from dyntile.cuda.attention import varlen_attention_forward

    F = torch.nn.functional
    N = rows * T
    q, k, v, dout = (torch.randn(N, H, D, device=DEVICE) for _ in range(4))
    out, lse = torch.empty(N, H, D, device=DEVICE), torch.empty(N, H, device=DEVICE)
    grads = [torch.empty(N, H, D, device=DEVICE) for _ in range(3)]
    kernels_bwd = _backward_call(grads, dout, q, k, v, out, lse, starts, lengths, True, scale)

    def kernels_fwd():
        varlen_attention_forward(q, k, v, starts, lengths, causal=True, scale=scale, out=out, lse=lse)

    def kernels_fwd_bwd():
        kernels_fwd()
        kernels_bwd()

    results = [
        (
            "dyntile CUDA kernels",
            _torch_ms(torch, kernels_fwd, repeats),
            _torch_ms(torch, kernels_fwd_bwd, repeats),
        )
    ]
    leaf = [x.clone().requires_grad_(True) for x in (q, k, v)]
    api = getattr(dt, "varlen_attention", None)
    if api is not None:
        cu = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32, device=DEVICE)

        def api_fwd_bwd():
            for x in leaf:
                x.grad = None
            api(*leaf, cu_seqlens=cu, causal=True, scale=scale).backward(dout)

        try:
            with torch.no_grad():
                ms_f = _torch_ms(
                    torch, lambda: api(q, k, v, cu_seqlens=cu, causal=True, scale=scale), repeats
                )
            results.append(
                ("dyntile.varlen_attention (autograd)", ms_f, _torch_ms(torch, api_fwd_bwd, repeats))
            )
        except Exception as exc:  # the check above reports it as FAIL
            print(f"  skip  timing dyntile.varlen_attention: raised {exc!r}")
    # dense: [rows, H, T, D] with a [rows, 1, T, T] same-segment causal mask
    seg_id = np.repeat(np.arange(len(lengths)), lengths).reshape(rows, T)
    ids = torch.as_tensor(seg_id, device=DEVICE)
    mask = (ids[:, :, None] == ids[:, None, :]) & torch.ones(T, T, dtype=torch.bool, device=DEVICE).tril()
    mask = mask[:, None]
    dense = [
        x.detach().reshape(rows, T, H, D).transpose(1, 2).contiguous().requires_grad_(True) for x in (q, k, v)
    ]
    g_dense = dout.reshape(rows, T, H, D).transpose(1, 2).contiguous()

    def dense_fwd_bwd():
        for x in dense:
            x.grad = None
        F.scaled_dot_product_attention(*dense, attn_mask=mask, scale=scale).backward(g_dense)

    with torch.no_grad():
        ms_f = _torch_ms(
            torch, lambda: F.scaled_dot_product_attention(*dense, attn_mask=mask, scale=scale), repeats
        )
    results.append(("torch SDPA, dense block-diagonal mask", ms_f, _torch_ms(torch, dense_fwd_bwd, repeats)))
    segs = list(zip(starts.tolist(), lengths.tolist()))

    def loop_fwd():
        o = torch.empty(N, H, D, device=DEVICE)
        for s, n in segs:
            part = [x[s : s + n].transpose(0, 1)[None] for x in leaf]
            o[s : s + n] = F.scaled_dot_product_attention(*part, is_causal=True, scale=scale)[0].transpose(
                0, 1
            )
        return o

    def loop_fwd_bwd():
        for x in leaf:
            x.grad = None
        loop_fwd().backward(dout)

    with torch.no_grad():
        ms_f = _torch_ms(torch, loop_fwd, repeats)
    results.append(("torch SDPA, per-segment loop", ms_f, _torch_ms(torch, loop_fwd_bwd, repeats)))
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="small sizes (for the CUDA simulator)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--seed", type=int, default=None, help="the random seed (default: from the clock)")
    parser.add_argument(
        "--sizes", type=int, nargs="*", default=None, help="GEMM sizes (default 1024 .. 8192)"
    )
    args = parser.parse_args(argv)
    from numba import cuda

    if cuda.config.ENABLE_CUDASIM and not args.tiny:
        print("the CUDA simulator is on: run with --tiny (full sizes would take days)")
        return 2
    if not cuda.is_available():
        print("no CUDA device available")
        return 2
    if cuda.config.ENABLE_CUDASIM:  # the simulator's block manager polls its threads: switch often
        sys.setswitchinterval(1e-5)
    seed = time.time_ns() % 2**32 if args.seed is None else args.seed
    rng = np.random.default_rng(seed)
    print(
        f"device: {'simulator' if cuda.config.ENABLE_CUDASIM else cuda.get_current_device().name}"
        f"  seed {seed}"
    )
    checks = Checks(cuda, rng, args.tiny)
    print("checks against NumPy")
    checks.gemm()
    checks.pad()
    checks.tile()
    checks.attention()
    checks.torch_tensors()
    checks.attention_torch()
    repeats = args.repeats or (2 if args.tiny else 10)
    sizes = args.sizes if args.sizes is not None else ([16] if args.tiny else [1024, 2048, 4096, 8192])
    time_gemm(cuda, rng, sizes, repeats)
    time_copies(cuda, rng, args.tiny, repeats)
    time_attention(cuda, rng, args.tiny, repeats)
    print(f"{checks.failures} check(s) failed" if checks.failures else "all checks passed")
    return 1 if checks.failures else 0


if __name__ == "__main__":
    sys.exit(main())
