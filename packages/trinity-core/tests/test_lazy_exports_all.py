"""``lazy_exports`` makes its table the package's ``__all__``: the public names cannot drift from
where they live (``trinity.testing``'s list is pinned to what it exported before)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

#: ``trinity.testing.__all__`` as it was hand-written beside the table.
TESTING_ALL = (
    "AdvantageFnContract ComponentContract EntropyLossContract ExperienceOperatorContract "
    "KLFnContract ListReader PolicyLossContract RewardFnContract RuleBroken "
    "SampleStrategyContract WorkflowContract build_like_the_framework check_metrics "
    "make_contract_tests rule"
).split()


def test_the_table_becomes_all_in_its_order():
    code = textwrap.dedent(
        """
        import sys, types
        from trinity.utils.lazy import lazy_exports

        pkg = types.ModuleType("lazy_all_pkg")
        sys.modules["lazy_all_pkg"] = pkg
        pkg.__getattr__, pkg.__dir__ = lazy_exports(
            "lazy_all_pkg", {"gcd": "math", "Fraction": "fractions"}
        )
        assert pkg.__all__ == ["gcd", "Fraction"], pkg.__all__
        assert "fractions" not in sys.modules  # listing the names imports nothing
        ns = {}
        exec("from lazy_all_pkg import *", ns)
        import fractions, math
        assert ns["Fraction"] is fractions.Fraction and ns["gcd"] is math.gcd
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_testing_exports_the_same_names_as_before():
    import trinity.testing

    assert trinity.testing.__all__ == TESTING_ALL
    assert trinity.testing.__all__ == list(trinity.testing._EXPORTS)
    for name in TESTING_ALL:
        assert getattr(trinity.testing, name) is not None


def test_build_like_the_framework_is_the_framework_s_builder():
    from trinity.testing import build_like_the_framework
    from trinity.utils.build import build_component

    assert build_like_the_framework is build_component
