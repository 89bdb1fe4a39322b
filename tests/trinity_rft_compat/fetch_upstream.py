"""Download Trinity-RFT's own CPU unit tests, unmodified, into ``upstream/``.

The files are Trinity-RFT's (Apache-2.0, https://github.com/modelscope/Trinity-RFT); they
are not committed here (see README.md). Each is pinned to a commit and checked against the
SHA-256 of the copy these compatibility tests were written against::

    python tests/trinity_rft_compat/fetch_upstream.py

then ``pytest tests/trinity_rft_compat`` runs them against our packages (see conftest.py).
``--examples`` fetches Trinity-RFT's example configs into ``upstream_examples/`` instead, for
test_upstream_examples.py.
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
    "buffer/sql_test.py": (
        "tests/buffer/sql_test.py",
        "163b53a6f1ff0726db40db7dc6a4f7805bf9053e",
        "931f1066fc769e3ed0ee0a10e278fb248a62045b8fc45005be92a383d43a2a5c",
    ),
    "explorer/step_wise_workflow_test.py": (
        "tests/explorer/step_wise_workflow_test.py",
        "7a933e4fd1a93537d3c7a4430e558ace0b80f2dc",
        "8b82debef3015903aa16bedc707300ed4207e94a9535ab4c03faff7add4e6dba",
    ),
    "utils/eval_utils_test.py": (
        "tests/utils/eval_utils_test.py",
        "8e2776b90bdad23156e6077515db7bfa28211d2a",
        "b71eb16d5c39a374ecbd5df2ffb5eb44b1b486817d211b67bbb9fc13c390714f",
    ),
    "utils/registry_test.py": (
        "tests/utils/registry_test.py",
        "b66c303314f15aa633eca040d9263182a1c6dd8a",
        "dbbac5478a21f4eb1a90a415ace3a675c08ca69dcb0d073056185b213407cc41",
    ),
    # helpers the tests import as ``tests.tools`` / ``tests.utils.plugins.*`` (conftest.py
    # makes ``tests.*`` resolve under upstream/ first)
    "tools.py": (
        "tests/tools.py",
        "b79a14686388aa6438361b361499b8117c487859",
        "748f04aa53a3aa5d9bd29f0c0ca45a1e1f298c1bc503558f535ce562dab58133",
    ),
    "utils/plugins/main.py": (
        "tests/utils/plugins/main.py",
        "d422bbd9ef965778c6a5a28e4b719fb2085eb04f",
        "dcc88b1ec96ee97789dbdac1dbb65a6de4902705bf6f72dcc00e9fd2ec4fba05",
    ),
    "utils/plugins/dependencies.py": (
        "tests/utils/plugins/dependencies.py",
        "54c2d72b8475f91261f0cb67c37ff955f5430b68",
        "b157334e4c94426638537826c60f6e6ebc5a6df55ec985e808180c666cc9b848",
    ),
}

#: files whose pinned commit was taken from another repository of the same fork network (the
#: repository's later name, or a maintainer's fork): local path -> owner/name to fetch from
FILE_REPOS: dict[str, str] = {
    "utils/registry_test.py": "agentscope-ai/Trinity-RFT",
    "tools.py": "agentscope-ai/Trinity-RFT",
    "utils/plugins/main.py": "pan-x-c/Trinity-RFT",
    "utils/plugins/dependencies.py": "yanxi-chen/Trinity-RFT",
}


#: Trinity-RFT's example configs checked by test_upstream_examples.py, fetched with
#: ``--examples`` into ``upstream_examples/`` under their repository paths: path -> commit (a
#: pinned commit fixes the content; several are the pre-0.6 versions still in its history)
EXAMPLES_DIR = Path(__file__).resolve().parent / "upstream_examples"
EXAMPLES: dict[str, str] = {
    "examples/agentscope_react/gsm8k.yaml": "2acdbc6d985c86ccd75ba39a2b1e677b19f326f1",
    "examples/asymre_gsm8k/gsm8k.yaml": "705d548d6554144295641a6ca98f358a3becddf8",
    "examples/asymre_math/math.yaml": "3b3f4b0fae29e7ae08c6cdbce41123915dd46eac",
    "examples/async_gsm8k/trainer.yaml": "656650f42e9a5ced4b88ca4989d93cb369466ccc",
    "examples/dapo_math/dapo.yaml": "656650f42e9a5ced4b88ca4989d93cb369466ccc",
    "examples/dpo_human_in_the_loop/dpo.yaml": "049b898540ca76bffaaa3cbb188deb94501379ed",
    "examples/dpo_humanlike/dpo.yaml": "049b898540ca76bffaaa3cbb188deb94501379ed",
    "examples/grpo_alfworld_general_multi_step/alfworld.yaml": (
        "1d081044980fbbc6623392a0ba8b245bc5f717a8"
    ),
    "examples/grpo_frozen_lake/frozen_lake.yaml": "176451357203de9de58e2635ffb6d915fe6ccced",
    "examples/grpo_gsm8k/gsm8k.yaml": "c3d094d59bec0f069408f457944cafd0d1157af0",
    "examples/grpo_lora_gsm8k/gsm8k.yaml": "d00b0e77e3b41fdd1c1f572215035740868811f1",
    "examples/grpo_toolcall/toolace.yaml": "e3103b4431dbd1f4f6d46678c9d1cf2a07e795c4",
    "examples/learn_to_ask/train.yaml": "253e92c42c4a48d71a53db19803b3e1beef5a7c8",
    "examples/mix_chord/mix_chord.yaml": "041433056e9067e35a42a3943ecbaf89bef24518",
    "examples/mix_math/mix_math.yaml": "18960d4eea98ceed25cba954ffeb2da132057e8c",
    "examples/opmd_gsm8k/opmd_gsm8k.yaml": "0a967ab1283f24455066448da22412c4406ad177",
    "examples/ppo_countdown/countdown.yaml": "049b898540ca76bffaaa3cbb188deb94501379ed",
    "examples/ppo_countdown_megatron/countdown.yaml": "e3f5924d77a59f861edfcc2d90256fea9c9dd019",
    "examples/rec_gsm8k/gsm8k.yaml": "049b898540ca76bffaaa3cbb188deb94501379ed",
    "examples/sft_mot/sft.yaml": "f1dce148c8e6c755f8f8387d5ce074fa7a8e659b",
    "examples/tinker/tinker.yaml": "9a4927f8490cb63734fa688f342c23c259077508",
}


def fetch_examples() -> int:
    """Download :data:`EXAMPLES` into ``upstream_examples/`` (repository paths kept)."""
    for path, commit in EXAMPLES.items():
        url = f"https://raw.githubusercontent.com/{REPO}/{commit}/{path}"
        data = urllib.request.urlopen(url, timeout=60).read()  # noqa: S310 - fixed https URL
        target = EXAMPLES_DIR / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        print(f"{path} <- {url}")
    return 0


def main() -> int:
    if "--examples" in sys.argv[1:]:
        return fetch_examples()
    bad = 0
    for local, (path, commit, sha) in FILES.items():
        repo = FILE_REPOS.get(local, REPO)
        url = f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"
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
