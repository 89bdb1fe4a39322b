"""Trinity-RFT's older ``trinity.data`` paths, which its developer guide's prose still names.

``trinity.data.operators`` and ``trinity.data.pipelines`` are the same objects as
``trinity.buffer.operators`` and ``trinity.buffer.pipelines`` (where Trinity-RFT's current code
and the guide's code examples have them): registering an operator through either path registers
it once, in the one ``EXPERIENCE_OPERATORS``.
"""
