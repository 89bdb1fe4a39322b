"""The installation checks find what they are meant to find."""

from __future__ import annotations

from trinity.utils.distribution import (
    check_distribution,
    check_installation,
    installed_trinity_distributions,
)


def _fake_dist(root, name, requires):
    info = root / f"{name.replace('-', '_')}-0.3.0.dist-info"
    info.mkdir()
    lines = [f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.3.0"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


def test_core_itself_is_sound():
    assert "trinity-core" in installed_trinity_distributions()
    assert check_distribution("trinity-core", "trinity.common", set()) == []
    assert check_installation() == []


def test_bad_ranges_missing_deps_and_unexpected_deps_are_reported(tmp_path, monkeypatch):
    _fake_dist(
        tmp_path,
        "trinity-badpkg",
        ["trinity-core>=0.1", "trinity-core<0.0.5", "trinity-missing>=1,<2"],
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    problems = check_distribution("trinity-badpkg", "trinity.common", {"trinity-core"})
    text = "\n".join(problems)
    assert "but trinity-core 0.1.0 is installed" in text
    assert (
        "trinity-missing>=1,<2, which is not installed" in text or "trinity-missing<2,>=1" in text
    )
    assert "expected ['trinity-core']" in text
    assert any("trinity-badpkg" in p for p in check_installation())


def test_unbounded_range_and_missing_distribution(tmp_path, monkeypatch):
    _fake_dist(tmp_path, "trinity-loose", ["trinity-core>=0.1"])
    monkeypatch.syspath_prepend(str(tmp_path))
    assert any("no upper bound" in p for p in check_distribution("trinity-loose", "trinity.common"))
    assert check_distribution("trinity-nothere", "trinity.common") == [
        "distribution trinity-nothere is not installed"
    ]
