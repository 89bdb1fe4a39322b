"""Trinity-RFT's ``trinity.buffer.buffer`` module: the reader and writer factories.

Code written for Trinity-RFT imports ``get_buffer_reader`` / ``get_buffer_writer`` from here;
they are this package's factories (:mod:`trinity.buffer.buffer_reader`,
:mod:`trinity.buffer.buffer_writer`), which take a ``TasksetConfig``, an
``ExperienceBufferConfig`` or a ``StorageConfig`` alike.
"""

from __future__ import annotations

from trinity.buffer.buffer_reader import BufferReader, get_buffer_reader
from trinity.buffer.buffer_writer import BufferWriter, get_buffer_writer

__all__ = ["BufferReader", "BufferWriter", "get_buffer_reader", "get_buffer_writer"]
