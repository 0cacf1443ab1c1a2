"""The ``dyntile`` command: see what planned shapes do for a training loop.

Subcommands (``dyntile --help``):

* ``demo`` (:mod:`dyntile.cli.demo`) -- embedded real corpus (docstrings of the
  Python standard library, :mod:`dyntile.cli.stdlib_docs`, word-level tokenizer
  :mod:`dyntile.cli.tokenizer`) or a user file (:mod:`dyntile.cli.readers`), held as a
  :class:`~dyntile.cli.corpus.Corpus`; batched four ways (:mod:`dyntile.cli.methods`,
  baselines in :mod:`dyntile.cli.baselines`); a loader pass and a short
  ``torch.compile`` training run of a small transformer (:mod:`dyntile.cli.model`,
  :mod:`dyntile.cli.train`); one table (:mod:`dyntile.cli.table`) and an optional
  figure (:mod:`dyntile.cli.plot`);
* ``plan`` -- bucket boundaries, batch sizes and expected padding for a lengths
  file, saved as JSON for ``BucketPlan.load`` (:mod:`dyntile.cli.plan_cmd`);
* ``bench`` -- a quick GEMM and collate comparison against NumPy / torch
  (:mod:`dyntile.cli.bench_cmd`).

Plain ``dyntile`` prints help; entry point :func:`dyntile.cli.main.main`. torch is
imported only inside the subcommands that need it (:mod:`dyntile.cli.torch_import`).

Layers: the command is an application of both ``dyntile`` and ``loaders``, shipped in
``dyntile`` so that ``dyntile`` and ``python -m dyntile`` run it. ``loaders`` builds on
``dyntile``, so the command reaches it in one place only: the demo's batching methods
(:func:`dyntile.cli.methods.build_batching`) import its public names inside the function,
when a torch-facing command runs. ``import dyntile``, the parser and ``dyntile plan``
import neither torch nor ``loaders``; from ``dyntile`` the command imports only names a
module lists in ``__all__`` (``tests/api/test_layering.py`` checks both).
"""
