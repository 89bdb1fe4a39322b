"""``trainer.trainer_config``: the verl keys a config names, plus a read-only view of the
settings the trainer derives (docs/compat.md D11).

Why: Trinity-RFT 0.6's ``check_and_update`` replaces ``trainer.trainer_config`` by a veRL
config object, and code written for it reads derived values as attributes
(``config.trainer.trainer_config.actor_rollout_ref.actor.ppo_max_token_len_per_gpu``). Here the
trainer derives those values itself when it starts, and whether a key was written changes what
it derives (a budget the user set is used as written, a derived one may be raised: D7), so the
field must keep exactly the keys the config names. :class:`TrainerConfigDict` is that dict:
items, iteration, ``in``, equality, dumps and YAML are the user's keys only. Its *attributes*
read the view: what the installed trainer derives from the config as ``check_and_update`` left
it (a snapshot, as Trinity-RFT's object is), over the keys the config names.

The view comes from the trainer's own package through the ``trinity.trainer_views`` entry point
(:data:`TRAINER_VIEWS`, one function per ``trainer.trainer_type`` taking the checked
``Config`` and returning verl-shaped nested dicts), so core imports no sibling and the view
shows the values that trainer will really use, not a second derivation that could drift from
it. It is computed on the first attribute read, not in ``check_and_update``: importing the
trainer takes seconds and the view is only for code that asks for it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Optional

from trinity.utils.registry import Registry

from ._utils import _deep_merge, _set_derived

if TYPE_CHECKING:
    from ._core import Config

__all__ = ["TRAINER_VIEWS", "TrainerConfigDict", "TrainerViewError", "bind_trainer_view"]

#: ``trainer.trainer_type`` -> a function ``(checked Config) -> nested dict`` in verl's shape
#: (``{"actor_rollout_ref": {"actor": {...}}, "critic": {...}, "trainer": {...}}``): the values
#: that trainer derives. Entry-point group ``trinity.trainer_views`` (trinity-launcher
#: advertises ``verl``).
TRAINER_VIEWS: Registry[Callable[[Any], Mapping[str, Any]]] = Registry("trainer_views")

_FIELD = "trainer.trainer_config"


class TrainerViewError(AttributeError):
    """The derived view of ``trainer.trainer_config`` cannot be read here.

    An ``AttributeError``, so ``hasattr`` / ``getattr(..., default)`` treat the attribute as
    absent, as they would on Trinity-RFT's plain dict before ``check_and_update``.
    """


class TrainerConfigDict(dict):
    """The keys a config names under ``trainer.trainer_config`` (a plain ``dict`` to every
    dict operation), whose attributes read the trainer's derived view (module docstring).

    Attribute reads (``tc.actor_rollout_ref.actor.optim.lr``) need ``check_and_update`` to
    have run (it binds a snapshot of the config) and a trainer package advertising a view for
    ``trainer.trainer_type``; otherwise they raise :class:`TrainerViewError`. Item access
    (``tc["actor_rollout_ref"]``) always reads the config's own keys. The view is read-only.
    """

    __slots__ = ("_source", "_view")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._source: Optional[Config] = None
        self._view: Optional[dict[str, Any]] = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        view = self._derived_view(name)
        if name not in view:
            raise AttributeError(
                f"{_FIELD}.{name}: neither a key the config names nor a setting the trainer "
                f"derives; the view has: {', '.join(sorted(view)) or 'nothing'}"
            )
        return _wrap(view[name], f"{_FIELD}.{name}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in TrainerConfigDict.__slots__:
            super().__setattr__(name, value)
            return
        raise AttributeError(
            f"{_FIELD}.{name} is read-only: its attributes show what the trainer derives. "
            f"Set the verl key as an item instead ({_FIELD}[{name!r}] = ...), then run "
            "check_and_update() again"
        )

    def _derived_view(self, name: str) -> dict[str, Any]:
        """The user's keys overlaid with the trainer's derived values (computed once)."""
        if self._view is not None:
            return self._view
        source = self._source
        if source is None:
            raise TrainerViewError(
                f"{_FIELD}.{name}: the trainer's derived view is filled by "
                "Config.check_and_update(); call it first (before it, item access "
                f"{_FIELD}[{name!r}] reads the keys the config names)"
            )
        trainer_type = source.trainer.trainer_type
        if trainer_type not in TRAINER_VIEWS:
            raise TrainerViewError(
                f"{_FIELD}.{name}: the settings the {trainer_type} trainer derives "
                "(micro-batch budgets, optimizer, GPU counts) come from the trainer's package, "
                f"and no installed package provides them for trainer_type {trainer_type!r} "
                "(the verl trainer's is trinity-launcher: pip install trinity-launcher). Item "
                f"access ({_FIELD}[{name!r}]) reads the keys the config names."
            )
        try:
            derived = TRAINER_VIEWS[trainer_type](source)
        except ValueError as exc:
            raise ValueError(
                f"{_FIELD}.{name}: the {trainer_type} trainer refuses this config, so it has no "
                f"derived settings to show: {exc}"
            ) from exc
        user = dict(source.trainer.trainer_config or {})
        self._view = _deep_merge(copy.deepcopy(user), derived)
        return self._view

    # A copy or a pickle (Ray sends configs to its workers) keeps the snapshot, not the cache.
    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (dict(self), self._source))

    def __copy__(self) -> TrainerConfigDict:
        return _rebuild(dict(self), self._source)

    def __deepcopy__(self, memo: dict[int, Any]) -> TrainerConfigDict:
        # the snapshot is never changed after binding, so copies share it
        return _rebuild(copy.deepcopy(dict(self), memo), self._source)


def _rebuild(items: dict[str, Any], source: Optional[Config]) -> TrainerConfigDict:
    out = TrainerConfigDict(items)
    out._source = source
    return out


class _ViewSection(Mapping[str, Any]):
    """A nested part of the derived view: a read-only mapping whose keys are attributes too."""

    __slots__ = ("_data", "_path")

    def __init__(self, data: Mapping[str, Any], path: str) -> None:
        object.__setattr__(self, "_data", data)
        object.__setattr__(self, "_path", path)

    def __getitem__(self, key: str) -> Any:
        return _wrap(self._data[key], f"{self._path}.{key}")

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(
                f"{self._path}.{name}: neither a key the config names nor a setting the "
                f"trainer derives; {self._path} has: {', '.join(sorted(self._data)) or 'nothing'}"
            ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(
            f"{self._path}.{name} is read-only: it shows what the trainer derives; set verl "
            f"keys as items of {_FIELD} before check_and_update()"
        )

    def __repr__(self) -> str:
        return f"<{self._path}: {dict(self._data)!r}>"


def _wrap(value: Any, path: str) -> Any:
    return _ViewSection(value, path) if isinstance(value, Mapping) else value


def bind_trainer_view(config: Config) -> None:
    """Give ``config.trainer.trainer_config`` its derived view, from a snapshot of ``config``
    as it is now (``check_and_update`` calls this last; nothing is derived until read).

    The snapshot is a deep copy whose own ``trainer_config`` is unbound, so binding again
    (a second ``check_and_update``) does not chain snapshots.
    """
    items = config.trainer.trainer_config
    if items is None:  # an explicit ``trainer_config: null`` stays null
        return
    snapshot = config.model_copy(deep=True)
    _set_derived(snapshot.trainer, "trainer_config", TrainerConfigDict(items))
    _set_derived(config.trainer, "trainer_config", _rebuild(dict(items), snapshot))


def as_trainer_config(value: Any) -> Any:
    """The schema's conversion: a validated ``trainer_config`` mapping becomes a
    :class:`TrainerConfigDict` (a bound one passes through, keeping its view)."""
    if value is None or isinstance(value, TrainerConfigDict):
        return value
    return TrainerConfigDict(value)
