"""``trinity studio``: start the Studio's Streamlit server on this machine."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence

from trinity.utils.plugin_loader import PLUGIN_DIRS_ENV as PLUGIN_DIRS_ENV_VAR

APP_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "config_manager.py")


def streamlit_command(
    port: int = 8501, address: str = "127.0.0.1", extra: Sequence[str] = ()
) -> list[str]:
    """The ``python -m streamlit run`` command line that serves the Studio."""
    from trinity.launcher.streamlit_run import streamlit_command as command

    return command(APP_PATH, port, address, extra)


def run_studio(port: int, address: str, plugin_dirs: Sequence[str] = ()) -> int:
    """Replace this process with the Streamlit server (returns only on bad input)."""
    if importlib.util.find_spec("streamlit") is None:
        print(
            "error: Trinity Studio needs Streamlit: pip install 'trinity-launcher[studio]'",
            file=sys.stderr,
        )
        return 2
    dirs = [os.path.abspath(d) for d in plugin_dirs]
    for d in dirs:
        if not os.path.isdir(d):
            print(f"error: --plugin-dir {d}: no such directory", file=sys.stderr)
            return 2
    if dirs:
        known = [p for p in os.environ.get(PLUGIN_DIRS_ENV_VAR, "").split(os.pathsep) if p]
        os.environ[PLUGIN_DIRS_ENV_VAR] = os.pathsep.join(dict.fromkeys(known + dirs))
    print(f"Trinity Studio on http://{address}:{port}", flush=True)
    command = streamlit_command(port, address)
    os.execv(command[0], command)
    return 0  # pragma: no cover - execv does not return
