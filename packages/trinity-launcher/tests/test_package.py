"""trinity-launcher installs on its own, owns only `trinity.launcher` and depends on Trinity packages
through bounded ranges that the installed versions satisfy."""

from trinity.utils.distribution import check_distribution


def test_distribution_is_sound():
    deps = {"trinity-core", "trinity-algorithms", "trinity-buffer", "trinity-workflows"}
    assert check_distribution("trinity-launcher", "trinity.launcher", deps) == []
