"""Utilities shared by every Trinity package (registry, plugin loading, logging)."""
