"""The command line that serves a Streamlit page of this package (``trinity studio``,
``trinity view``): headless, on the address and port given, without usage statistics."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def streamlit_command(
    app_path: str, port: int, address: str = "127.0.0.1", extra: Sequence[str] = ()
) -> list[str]:
    """``python -m streamlit run APP_PATH ...`` with this interpreter."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        app_path,
        "--server.port",
        str(port),
        "--server.address",
        address,
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        *extra,
    ]
