"""Task selectors (Trinity-RFT's ``trinity.buffer.selector`` package; its classes are in
``trinity.buffer.selector.selector`` there, and here too)."""

from trinity.buffer.selector.selector import SELECTORS, BaseSelector

__all__ = ["SELECTORS", "BaseSelector"]
