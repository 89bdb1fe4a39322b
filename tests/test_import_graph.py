"""No import circle inside any Trinity package.

A circle (``a`` imports ``b`` which imports ``a``, at module level or inside a function) means
neither module can be read, tested or moved without the other. The graph is grimp's (the
library import-linter is built on), with ``if TYPE_CHECKING:`` imports left out because they
never run. A failure prints each circle as a readable chain ``a -> b -> a``.
"""

from __future__ import annotations

import grimp

#: The Trinity packages, by import name (trinity-core ships three).
PACKAGES = (
    "trinity.common",
    "trinity.utils",
    "trinity.testing",
    "trinity.algorithm",
    "trinity.buffer",
    "trinity.data",
    "trinity.workflows",
    "trinity.launcher",
    "trinity.manager",
    "trinity.explorer",
    "trinity.cli",
    "trinity.trainer",
)

#: Known circles, in files other work still changes (issue 21); remove an entry when its circle
#: is gone. A circle is allowed only when ALL its modules match one entry: a new module joining
#: a known circle still fails.
KNOWN_CIRCLES: tuple[tuple[str, str], ...] = ()


def _allowed(circle: list[str]) -> bool:
    for entry in KNOWN_CIRCLES:
        if all(
            m in entry or any(p.endswith(".") and m.startswith(p) for p in entry) for m in circle
        ):
            return True
    return False


def _strongly_connected(nodes: set[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative): the groups of modules that reach each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    group.append(m)
                    if m == node:
                        break
                if len(group) > 1:
                    out.append(sorted(group))
    return out


def _chain(group: list[str], edges: dict[str, set[str]]) -> str:
    """One concrete circle through ``group``'s first module, as ``a -> b -> a``."""
    members = set(group)
    start = group[0]
    # breadth-first search back to start, inside the group
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt_frontier = []
        for node in frontier:
            for nxt in sorted(edges[node] & members):
                if nxt == start:
                    path = [start]
                    while node != start:
                        path.append(node)
                        node = parents[node]
                    path.append(start)
                    return " -> ".join([path[0], *reversed(path[1:-1]), start])
                if nxt not in parents:
                    parents[nxt] = node
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    return " <-> ".join(group)  # pragma: no cover - a strongly connected group has a circle


def find_circles() -> list[tuple[list[str], str]]:
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True)
    circles = []
    for package in PACKAGES:
        nodes = {m for m in graph.modules if m == package or m.startswith(package + ".")}
        edges = {m: graph.find_modules_directly_imported_by(m) & nodes for m in nodes}
        for group in _strongly_connected(nodes, edges):
            circles.append((group, _chain(group, edges)))
    return circles


def test_no_import_circle_inside_a_package() -> None:
    circles = find_circles()
    new = [chain for group, chain in circles if not _allowed(group)]
    assert not new, "import circles (move the shared names down into a base module):\n" + (
        "\n".join(new)
    )


def test_known_circles_still_exist() -> None:
    """An allow-list entry whose circle is gone must be deleted, so the list stays honest."""
    circles = [group for group, _ in find_circles()]
    for entry in KNOWN_CIRCLES:
        assert any(
            all(m in entry or any(p.endswith(".") and m.startswith(p) for p in entry) for m in g)
            for g in circles
        ), f"the known circle {entry} is gone: delete it from KNOWN_CIRCLES"
