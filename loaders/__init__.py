"""PyTorch integration for dyntile: collate functions and batch samplers.

``loaders`` builds on :mod:`dyntile` (never the other way round) and imports torch.
"""
