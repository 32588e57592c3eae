"""Framework adapters: :class:`~vinlens.health.TrainingMonitor` inside loops that own their step.

Each adapter is an optional extra and imports its framework only when imported itself:

* :mod:`vinlens.integrations.lightning` (``pip install 'vinlens[lightning]'``): a Lightning 2
  ``Callback`` (``lightning`` or ``pytorch_lightning``).
* :mod:`vinlens.integrations.transformers` (``pip install 'vinlens[transformers]'``): a
  Hugging Face ``TrainerCallback``.

Both are ``TrainingMonitorCallback(**monitor_kwargs)``: they build the monitor when the
model is known, check every optimizer step's gradients before the optimizer steps, and
replay a non-finite step through the framework's own training step to name its origin.
A loop of your own (``torchrun`` included) keeps :meth:`TrainingMonitor.run_step`.
"""

from __future__ import annotations
