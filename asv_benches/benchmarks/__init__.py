"""dyntile's airspeed-velocity benchmarks, one module per area (like NumPy's and SciPy's suites).

* ``bench_padding`` -- ``pad_batch``/``pad_to``/``tile``/``untile`` against NumPy and
  ``torch.nn.utils.rnn.pad_sequence``;
* ``bench_import``  -- ``import dyntile`` (and ``loaders``) and the first CUDA call
  under Numba's simulator, each in a fresh interpreter;
* ``bench_matmul``, ``bench_collate``, ``bench_planning``, ``bench_packing`` --
  GEMM, collate, planner and sampler, packing.

Each class holds one topic: ``params``/``param_names`` with the library beside
dyntile as a parameter, every allocation in ``setup``, ``time_*`` for speed,
``peakmem_*`` for memory and ``track_*`` for quality figures (lower is better).
"""
