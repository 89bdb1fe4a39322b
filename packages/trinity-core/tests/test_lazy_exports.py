"""``trinity.utils.lazy.lazy_exports``: a package's names imported when first read."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_names_resolve_on_first_use_once_and_are_listed_before():
    code = textwrap.dedent(
        """
        import sys, types
        from trinity.utils.lazy import lazy_exports

        pkg = types.ModuleType("lazy_pkg")
        sys.modules["lazy_pkg"] = pkg
        exports = {"Fraction": "fractions", "x": "fractions"}
        pkg.__getattr__, pkg.__dir__ = lazy_exports("lazy_pkg", exports)
        assert "fractions" not in sys.modules  # nothing imported yet
        assert "Fraction" in dir(pkg) and "Fraction" not in vars(pkg)
        import fractions
        assert pkg.Fraction is fractions.Fraction
        assert vars(pkg)["Fraction"] is fractions.Fraction  # kept: later reads skip __getattr__
        for name in ("x", "nope"):  # listed but missing in its module, and unknown
            try:
                getattr(pkg, name)
            except AttributeError as exc:
                print(name, exc)
            else:
                raise AssertionError(name)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "nope module 'lazy_pkg' has no attribute 'nope'" in done.stdout
    assert "x module 'fractions' has no attribute 'x'" in done.stdout


def test_a_missing_provider_says_what_to_install():
    """Core re-exports a sibling's names (Trinity-RFT's paths); without it installed the
    error names the distribution to install."""
    code = textwrap.dedent(
        """
        import sys, types
        from trinity.utils.lazy import lazy_exports

        pkg = types.ModuleType("shim_pkg")
        sys.modules["shim_pkg"] = pkg
        exports = {"helper": "trinity_absent_sibling.tools", "fraction": "fractions"}
        pkg.__getattr__, pkg.__dir__ = lazy_exports("shim_pkg", exports, provider="trinity-x")
        try:
            pkg.helper
        except ImportError as exc:
            print(type(exc).__name__, exc)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "ImportError shim_pkg.helper is provided by the trinity-x package, which is not "
        "installed (pip install trinity-x)"
    )
