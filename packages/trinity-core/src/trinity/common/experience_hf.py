"""Experiences to and from Hugging Face ``datasets``: defined in
:mod:`trinity.common.experience.hf`, re-exported here (the module path of earlier releases)."""

from trinity.common.experience.hf import from_hf_datasets, to_hf_datasets

__all__ = ["from_hf_datasets", "to_hf_datasets"]
