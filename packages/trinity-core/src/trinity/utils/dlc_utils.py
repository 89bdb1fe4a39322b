"""Trinity-RFT 0.6's PAI-DLC helpers (``setup_ray_cluster``, ``stop_ray_cluster``,
``ClusterStatus``, ``is_running``, ``get_dlc_env_vars``), which AgentScope's tuner imports from
here: they ship in trinity-launcher (``trinity.launcher.dlc``, the ``--dlc`` start) and resolve
here on first use, without core importing its sibling."""

from trinity.utils.lazy import lazy_exports

_IMPLEMENTATION = "trinity.launcher.dlc"

__getattr__, __dir__ = lazy_exports(
    __name__,
    dict.fromkeys(
        (
            "ClusterStatus",
            "get_dlc_env_vars",
            "is_running",
            "setup_ray_cluster",
            "stop_ray_cluster",
        ),
        _IMPLEMENTATION,
    ),
    provider="trinity-launcher",
)
