""":class:`TelemetryCallback` for Hugging Face's ``Trainer``: real tokens per step and per second.

The ``Trainer`` shows its callbacks no batch, so the callback reads the batches where
the model does: a forward pre-hook on the trained model, counting only calls in
training mode (:class:`loaders.telemetry.StepTelemetry`). Each step's figures go
into ``callback.history`` and into the logs of the next ``on_log``, under
``telemetry/`` names.
"""

from __future__ import annotations

from transformers import TrainerCallback

from ..telemetry import StepTelemetry

__all__ = ["TelemetryCallback"]


class TelemetryCallback(TrainerCallback):
    """Per step: ``real_tokens``, ``loss_tokens``, ``padded_fraction``, ``attention_waste``
    and ``real_tokens_per_s``; ``Trainer(..., callbacks=[TelemetryCallback()])``.

    >>> import torch
    >>> callback = TelemetryCallback()
    >>> callback.on_train_begin(None, None, None)
    >>> ids, mask = torch.tensor([[1, 2, 0]]), torch.tensor([[1, 1, 0]])
    >>> callback.steps.observe({"input_ids": ids, "attention_mask": mask})  # what the model hook does
    >>> callback.on_step_end(None, None, None)
    >>> callback.history[-1]["real_tokens"]
    2
    """

    def __init__(self, **options):
        self.steps = StepTelemetry(**options)
        self._hook = None
        self._pending: dict = {}

    @property
    def history(self) -> list[dict]:
        return self.steps.history

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if model is not None and self._hook is None:
            self._hook = model.register_forward_pre_hook(self._observe, with_kwargs=True)
        self.steps.start()

    def _observe(self, module, args, kwargs):
        if module.training and "input_ids" in kwargs:
            self.steps.observe(kwargs)

    def on_step_end(self, args, state, control, **kwargs):
        self._pending = {f"telemetry/{k}": v for k, v in self.steps.step_end().items()}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is not None and self._pending and "loss" in logs:
            logs.update(self._pending)

    def on_train_end(self, args, state, control, **kwargs):
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
