"""Trinity-RFT 0.6's ``trinity.explorer`` package path.

The explorer here is :mod:`trinity.launcher.explorer` (its runner pool
:mod:`trinity.launcher.runner`), with a different API; Trinity-RFT's explorer internals (Ray
actors driving vLLM engines by index) are not reimplemented. :mod:`.workflow_runner` exists so
code that imports its names alongside others loads; building its runner raises
``NotImplementedError`` naming what to use instead.
"""
