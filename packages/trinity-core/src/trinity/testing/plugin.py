"""pytest plugin of the Trinity contract kit (entry point ``pytest11: trinity``).

Loaded by pytest in any environment where ``trinity-core`` is installed; it only defines
fixtures and imports nothing heavy until a test asks for one. Disable it with ``-p no:trinity``.

Fixtures:

* ``trinity_fake_model``: a factory ``make(responses=None, **options) -> FakeModelWrapper``
  (the deterministic in-process model of ``trinity.common.models.testing``);
* ``trinity_experiences``: the kit's standard explore step (four task groups, edge cases
  included; see ``trinity.testing.inputs.standard_experiences``);
* ``trinity_list_reader``: a factory ``make(experiences, batch_size=4) -> ListReader``, an
  in-memory ``ExperienceReader`` for sample strategies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture
def trinity_fake_model() -> Callable[..., Any]:
    """Factory of :class:`~trinity.common.models.testing.FakeModelWrapper` models."""
    from trinity.common.models.testing import FakeModelWrapper

    def make(responses: Any = None, **options: Any) -> FakeModelWrapper:
        return FakeModelWrapper(responses, **options)

    return make


@pytest.fixture
def trinity_experiences() -> list[Any]:
    """The kit's standard explore step: ten experiences in four task groups."""
    from trinity.testing.inputs import standard_experiences

    return standard_experiences()


@pytest.fixture
def trinity_list_reader() -> Callable[..., Any]:
    """Factory of in-memory experience readers (``ListReader(experiences, batch_size)``)."""
    from trinity.testing.sampling import ListReader

    return ListReader
