"""trinity-algorithms installs on its own, owns only `trinity.algorithm` and depends on Trinity packages
through bounded ranges that the installed versions satisfy."""

from trinity.utils.distribution import check_distribution


def test_distribution_is_sound():
    deps = {"trinity-core"}
    assert check_distribution("trinity-algorithms", "trinity.algorithm", deps) == []
