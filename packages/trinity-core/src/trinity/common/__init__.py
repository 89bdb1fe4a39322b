"""Trinity core contracts shared by every Trinity package.

``trinity`` itself is a PEP 420 namespace; this distribution owns
``trinity.common`` and ``trinity.utils`` and imports no sibling package.
"""
