"""trinity.algorithm: filled by its own issue; the package is published from day one so
that the workspace, its lock and the per-package test matrix are real."""

__version__ = "0.1.0"
