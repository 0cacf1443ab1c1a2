"""Lightning glue: :class:`TelemetryCallback`, real tokens per step and per second.

The samplers need no Lightning glue (docs: "Training frameworks"); this module
holds the telemetry callback, which logs each training batch's figures
(:mod:`loaders.telemetry`) through ``pl_module.log_dict`` under ``telemetry/`` names.
"""

from __future__ import annotations

import lightning

from ..telemetry import StepTelemetry

__all__ = ["TelemetryCallback"]


class TelemetryCallback(lightning.Callback):
    """Logs per training batch: ``real_tokens``, ``loss_tokens``, ``padded_fraction``,
    ``attention_waste``, ``real_tokens_per_s`` (``Trainer(callbacks=[TelemetryCallback()])``);
    the batch is the collate's dict. ``callback.history`` keeps every step's figures.

    >>> import torch
    >>> callback = TelemetryCallback()
    >>> callback.on_train_batch_start(None, None, {"input_ids": torch.zeros(2, 4, dtype=torch.long)}, 0)
    >>> callback.history
    []
    """

    def __init__(self, **options):
        self.steps = StepTelemetry(**options)

    @property
    def history(self) -> list[dict]:
        return self.steps.history

    def on_train_start(self, trainer, pl_module):
        self.steps.start()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.steps.observe(batch)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        figures = self.steps.step_end()
        logs = {f"telemetry/{k}": float(v) for k, v in figures.items()}
        pl_module.log_dict(logs, on_step=True, on_epoch=False)
