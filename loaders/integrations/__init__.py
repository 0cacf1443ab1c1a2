"""Glue between dyntile's samplers and the training frameworks.

* :mod:`loaders.integrations.accelerate` -- ``prepare_data_loader``: accelerate's
  ``prepare`` for a loader on a dyntile sampler, its batches kept whole;
* :mod:`loaders.integrations.huggingface` -- ``DynTileTrainer`` and
  ``SamplerEpochCallback``: Hugging Face's ``Trainer`` on a dyntile sampler;
  ``register_attention`` (:mod:`~loaders.integrations.hf_attention`): dyntile's varlen
  attention as a model's ``attn_implementation``;
* :mod:`loaders.integrations.hf_telemetry`, :mod:`loaders.integrations.lightning` --
  ``TelemetryCallback``: real tokens, loss tokens, padding and attention waste per step.

Lightning, plain ``torchrun`` + DDP and torchdata's ``StatefulDataLoader`` need no
glue: the samplers are torch ``BatchSampler`` s that take a framework's ranks
(docs: "Training frameworks"). Each module imports its framework; this package
and :mod:`loaders` import none.
"""
