"""User plugin modules, importable as ``trinity.plugins.<name>`` (Trinity-RFT 0.6's package).

Nothing of ours lives here. :func:`trinity.utils.plugin_loader.load_plugins` imports each file
of a plugin directory as ``trinity.plugins.<file name>``; on import this package puts the
directories of ``TRINITY_PLUGIN_DIRS`` on its ``__path__``, so a process that never called
``load_plugins`` (a Ray worker unpickling a plugin's class) still finds the module by that name.
``trinity/plugins`` folders elsewhere on ``sys.path`` (the guides' layout) join it too.
"""

from pkgutil import extend_path

from trinity.utils.plugin_loader import attach_env_dirs

__path__ = extend_path(__path__, __name__)
attach_env_dirs(__path__)
