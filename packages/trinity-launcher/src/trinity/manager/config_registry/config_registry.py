"""``CONFIG_GENERATORS``: the registry of the Studio's config entries (the guide's extension API).

An entry is a ``set_<name>`` function that draws Streamlit widgets for session-state key
``<name>``; an optional ``check_<name>`` function flags it as unfinished. Both are registered
with decorators::

    @CONFIG_GENERATORS.register_config(
        default_value=96,
        visible=lambda: st.session_state["trainer_gpu_num"] > 0,
        other_configs={"_train_batch_size_per_gpu": 16},
    )
    def set_train_batch_size(**kwargs): ...

    @CONFIG_GENERATORS.register_check()
    def check_train_batch_size(unfinished_fields: set, key: str): ...

The registry calls ``set_<name>(key=name)`` and ``check_<name>(key=name,
unfinished_fields=...)``, exactly as the guide says. Beyond the guide, ``register_config``
takes ``config_path="buffer.train_batch_size"``: where the value goes in the YAML. With it, the
Studio writes the value, reads it back from a loaded YAML and shows schema errors of that field
next to its widget, so a plugin entry needs no edit of ``config_manager.py``.

Names are unique, as in every Trinity registry: a second entry under a taken name (or a
default key another entry declared) is refused, naming both.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Optional

try:
    import streamlit as st
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "Trinity Studio needs Streamlit: pip install 'trinity-launcher[studio]'"
    ) from exc

from trinity.utils.registry import DuplicateModuleError, Registry, UnknownModuleError


def _origin(func: Callable[..., Any]) -> str:
    func = getattr(func, "func", func)  # a partial made by this registry
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


class ConfigRegistry(Registry):
    """Config entries (``set_*``), their checks (``check_*``), defaults and visibility."""

    def __init__(self, name: str) -> None:
        super().__init__(name, entry_point_group="trinity.config_generators")
        self._default_config: dict[str, Any] = {}
        self._config_visibles: dict[str, Callable[[], bool]] = {}
        self._config_paths: dict[str, str] = {}
        self._owners: dict[str, str] = {}  # default key -> origin of the entry that declared it
        self.unfinished_fields: set[str] = set()
        #: keys whose widgets were drawn in the current script run (reset by ConfigManager)
        self.rendered: set[str] = set()
        #: a placeholder under each drawn widget, where schema errors of that field go
        self.placeholders: dict[str, Any] = {}

    # ------------------------------------------------------------------ state of a run
    def set_unfinished_fields(self, unfinished_fields: set[str]) -> None:
        """Track the fields that block generation in this script run."""
        self.unfinished_fields = unfinished_fields

    def start_run(self, unfinished_fields: set[str]) -> None:
        """Reset per-run bookkeeping at the top of a Streamlit script run."""
        self.set_unfinished_fields(unfinished_fields)
        self.rendered = set()
        self.placeholders = {}

    @property
    def default_config(self) -> dict[str, Any]:
        """Every session-state key the entries declared, with its default value."""
        return self._default_config

    @property
    def config_paths(self) -> dict[str, str]:
        """``{key: dotted YAML path}`` of the entries registered with ``config_path``."""
        return dict(self._config_paths)

    def is_visible(self, config_name: str) -> bool:
        visible = self._config_visibles.get(config_name)
        return True if visible is None else bool(visible())

    # ------------------------------------------------------------------ lookup
    def get(self, config_name: str) -> Optional[Callable[..., Any]]:  # type: ignore[override]
        """The entry's ``set_`` function, or ``None`` when its ``visible`` says hidden."""
        if config_name not in self._modules:
            raise UnknownModuleError(self.name, config_name, sorted(self._default_config))
        if not self.is_visible(config_name):
            return None
        return self._modules[config_name]

    def get_check_func(self, config_name: str) -> Optional[Callable[..., Any]]:
        """The entry's ``check_`` function, or ``None`` when it has none."""
        return self._modules.get(f"check_{config_name}")

    def add_placeholder(self, key: str) -> None:
        """Reserve the spot under the widget of ``key`` for its schema errors (list entries)."""
        self.rendered.add(key)
        self.placeholders[key] = st.empty()

    def get_configs(
        self,
        *config_names: str,
        columns_spec: Optional[list[int]] = None,
        columns_config: Optional[list[int]] = None,
    ) -> None:
        """Draw the visible entries side by side (one column each), then run their checks.

        ``columns_spec`` (or the older spelling ``columns_config``) gives relative column
        widths, as ``st.columns`` takes them.
        """
        pairs = []
        for name in config_names:
            func = self.get(name)
            if func is not None:
                pairs.append((name, func))
        if not pairs:
            return
        spec = columns_spec or columns_config or len(pairs)
        columns = st.columns(spec)
        for column, (name, func) in zip(columns, pairs, strict=False):
            with column:
                func()
                self.add_placeholder(name)
        for name, _ in pairs:
            check = self.get_check_func(name)
            if check is not None:
                check(unfinished_fields=self.unfinished_fields)

    # ------------------------------------------------------------------ registration
    def unregister_config(self, config_name: str) -> None:
        """Remove an entry, its check and the default keys it declared (tests, notebooks)."""
        origin = self._owners.get(config_name)
        for key in [k for k, owner in self._owners.items() if owner == origin]:
            self._owners.pop(key, None)
            if key != f"check_{config_name}":
                self._default_config.pop(key, None)
        self._owners.pop(f"check_{config_name}", None)
        self._config_visibles.pop(config_name, None)
        self._config_paths.pop(config_name, None)
        self.unregister(config_name)
        self.unregister(f"check_{config_name}")

    def _claim(self, key: str, origin: str) -> None:
        owner = self._owners.get(key)
        if owner is not None and owner != origin:
            raise DuplicateModuleError(
                f"Cannot register Studio config {key!r} for {origin}: the name is already "
                f"taken by {owner}. Choose another name."
            )
        self._owners[key] = origin

    def _register_config(
        self,
        config_name: str,
        config_func: Callable[..., Any],
        default_value: Any = None,
        visible: Optional[Callable[[], bool]] = None,
        other_configs: Optional[dict[str, Any]] = None,
        config_path: Optional[str] = None,
    ) -> None:
        origin = _origin(config_func)
        for key in [config_name, *(other_configs or {})]:
            self._claim(key, origin)
        self._default_config[config_name] = default_value
        if visible is not None:
            self._config_visibles[config_name] = visible
        else:
            self._config_visibles.pop(config_name, None)
        if config_path:
            self._config_paths[config_name] = config_path
        for key, value in (other_configs or {}).items():
            self._default_config[key] = value
        # re-registration by the same function (a module reloaded) replaces the old one
        self.register_module(config_name, config_func, force=True)

    def register_config(
        self,
        default_value: Any = None,
        config_func: Optional[Callable[..., Any]] = None,
        visible: Optional[Callable[[], bool]] = None,
        other_configs: Optional[dict[str, Any]] = None,
        config_path: Optional[str] = None,
    ) -> Callable[..., Any]:
        """Register a ``set_<name>`` function as config entry ``<name>`` (decorator).

        Args:
            default_value: the entry's initial session-state value.
            config_func: the function, when not used as a decorator.
            visible: a callable; while it returns False the entry is neither drawn, checked
                nor written to the YAML.
            other_configs: further session-state keys the entry uses, with defaults.
            config_path: dotted YAML path of the value (Trinity extension, optional).

        The registered function is called with ``key=<name>``.
        """

        def _register(func: Callable[..., Any]) -> Callable[..., Any]:
            name = func.__name__
            if not name.startswith("set_") or name == "set_":
                raise ValueError(
                    f"Config function names must start with 'set_' (the rest is the config "
                    f"name), got {name!r}"
                )
            name = name[len("set_") :]
            bound = partial(func, key=name)
            self._register_config(
                name, bound, default_value, visible, other_configs, config_path=config_path
            )
            return bound

        if config_func is not None:
            return _register(config_func)
        return _register

    def register_check(self, check_func: Optional[Callable[..., Any]] = None) -> Callable[..., Any]:
        """Register ``check_<name>(unfinished_fields, key)`` for a registered entry (decorator).

        The check runs after the entry is drawn; it adds ``key`` to ``unfinished_fields`` (and
        usually shows ``st.warning``) to keep the page from generating a config.
        """

        def _register(func: Callable[..., Any]) -> Callable[..., Any]:
            name = func.__name__
            if not name.startswith("check_") or name == "check_":
                raise ValueError(f"Check function names must start with 'check_', got {name!r}")
            config_name = name[len("check_") :]
            if config_name not in self._default_config:
                raise ValueError(
                    f"{name}: no config entry {config_name!r} is registered; register "
                    f"set_{config_name} first"
                )
            bound = partial(func, key=config_name)
            self._claim(f"check_{config_name}", _origin(func))
            self.register_module(f"check_{config_name}", bound, force=True)
            return bound

        if check_func is not None:
            return _register(check_func)
        return _register


#: The global registry of Studio config entries.
CONFIG_GENERATORS = ConfigRegistry("config_generators")
