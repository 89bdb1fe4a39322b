"""Config entries of the Studio, one module per scope (as in the developer guide).

Importing this package registers every built-in entry in
:data:`~trinity.manager.config_registry.config_registry.CONFIG_GENERATORS`.
"""

from trinity.manager.config_registry.config_registry import CONFIG_GENERATORS, ConfigRegistry

# Registration order matters only for readability; each module registers its own entries.
from trinity.manager.config_registry import (  # noqa: E402, F401  isort: skip
    model_config_manager,
    algorithm_config_manager,
    buffer_config_manager,
    explorer_config_manager,
    trainer_config_manager,
)

__all__ = ["CONFIG_GENERATORS", "ConfigRegistry"]
