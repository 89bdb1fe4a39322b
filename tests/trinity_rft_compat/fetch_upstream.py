"""Download Trinity-RFT's own CPU unit tests, unmodified, into ``upstream/``.

The files are Trinity-RFT's (Apache-2.0, https://github.com/modelscope/Trinity-RFT); they
are not committed here (see README.md). Each is pinned to a commit and checked against the
SHA-256 of the copy these compatibility tests were written against::

    python tests/trinity_rft_compat/fetch_upstream.py

then ``pytest tests/trinity_rft_compat`` runs them against our packages (see conftest.py).
"""

from __future__ import annotations

import hashlib
import sys
import urllib.request
from pathlib import Path

REPO = "modelscope/Trinity-RFT"
HERE = Path(__file__).resolve().parent / "upstream"

#: local path under upstream/ -> (path in the repository, commit, sha256 of the file)
FILES: dict[str, tuple[str, str, str]] = {
    "algorithm/policy_loss_test.py": (
        "tests/algorithm/policy_loss_test.py",
        "1492a4639af5d3a2a710192d4d89d0d68d9b889f",
        "1f677efe13672fa8c32dd31daf87c8af9c737bd8be54f15e5b9e88100478d33e",
    ),
    "algorithm/kl_fn_test.py": (
        "tests/algorithm/kl_fn_test.py",
        "4560efabd7b5d9dc9a1393ac21c6de48eecb3e28",
        "3daa2f5cdaa95d16d45acaad7166dcb245e02773fcf35f2e973f2bf6908677e7",
    ),
    "algorithm/advantage_fn_test.py": (
        "tests/algorithm/advantage_fn_test.py",
        "1de687fd2c806de7722940bc23eeb0cb86a77c01",
        "7e5d836f28bca44f8a5d3985455f42e678610550151431b8d0954055b989acc8",
    ),
    "common/experience_test.py": (
        "tests/common/experience_test.py",
        "2ae942650622962d613711eae46115b83980b038",
        "104173d294cf5ed22b8ddfe8e8bb32bb0b67383fcbc5ff933eef9637246da49b",
    ),
    "common/registry_test.py": (
        "tests/common/registry_test.py",
        "24543d6934ff20f68ef6d85deb7e844dd8c79c29",
        "39f881147d7ec9fdf31d833592483b0fe5564afa6290629f6d8137da3fcf7da5",
    ),
    "buffer/reward_shaping_mapper_test.py": (
        "tests/buffer/reward_shaping_mapper_test.py",
        "dc72b7aa836f828bbc919893317cc746ff4057d1",
        "e1c9ce49fb3e32cce0548326145d51989c85b9a4ee2a83d8caff8e1ccb4d65b5",
    ),
}


def main() -> int:
    bad = 0
    for local, (path, commit, sha) in FILES.items():
        url = f"https://raw.githubusercontent.com/{REPO}/{commit}/{path}"
        data = urllib.request.urlopen(url, timeout=60).read()  # noqa: S310 - fixed https URL
        digest = hashlib.sha256(data).hexdigest()
        if digest != sha:
            print(f"WARNING {local}: sha256 {digest} differs from the pinned {sha}")
            bad += 1
        target = HERE / local
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        print(f"{local} <- {url}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
