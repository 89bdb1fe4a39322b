"""Trinity-RFT's ``trinity.trainer.verl`` paths (see :mod:`trinity.trainer`)."""
