"""Download Trinity-RFT's own CPU unit tests, unmodified, into ``upstream/``.

The files are Trinity-RFT's (Apache-2.0, https://github.com/modelscope/Trinity-RFT); they
are not committed here (see README.md). Each is pinned to a commit and checked against the
SHA-256 of the copy these compatibility tests were written against::

    python tests/trinity_rft_compat/fetch_upstream.py

or, without network, from a local clone (or bare mirror) holding the pinned commits::

    python tests/trinity_rft_compat/fetch_upstream.py --from-git PATH/TO/Trinity-RFT[.git]

then ``pytest tests/trinity_rft_compat`` runs them against our packages (see conftest.py).
``--examples`` fetches Trinity-RFT's example configs into ``upstream_examples/`` instead, for
test_upstream_examples.py.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import urllib.request
from pathlib import Path

REPO = "modelscope/Trinity-RFT"
HERE = Path(__file__).resolve().parent / "upstream"

#: local path under upstream/ -> (path in the repository, commit, sha256 of the file). Every
#: file is the version of Trinity-RFT 0.5.2's tree (commit 9051d637, 2026-04-09, the newest
#: state of its test suite we could check offline), pinned to the last commit that changed it.
FILES: dict[str, tuple[str, str, str]] = {
    "algorithm/policy_loss_test.py": (
        "tests/algorithm/policy_loss_test.py",
        "85b8577213aceff2048848ccc4f44cf4f1352e58",
        "7d6ed124bec637b2fa8c4e99a795edb50d057e755d1498b899056bedbd4baf34",
    ),
    "algorithm/kl_fn_test.py": (
        "tests/algorithm/kl_fn_test.py",
        "85b8577213aceff2048848ccc4f44cf4f1352e58",
        "9aae821d34b69a2454aafe1190dff6c5b01e4f360ef21c2c270339e32fa96fb7",
    ),
    "algorithm/advantage_fn_test.py": (
        "tests/algorithm/advantage_fn_test.py",
        "1120aedd21466f19f397648566aea0cb2d0632b4",
        "93b37eba1480224b81d7b21d1c5518f75cdf4e9029fad52a9f3496252289ee91",
    ),
    "common/experience_test.py": (
        "tests/common/experience_test.py",
        "b838531cc2ebb1ccfc86810dc396e5fd2eb0b927",
        "7b91cea0ca1a47a644f0868bf5dfd6146877d2f8cfec5687fa0e452a27d3bdd9",
    ),
    "buffer/reward_shaping_mapper_test.py": (
        "tests/buffer/reward_shaping_mapper_test.py",
        "31f9b790ba141f33a38b7e3b2850ce497aecffec",
        "9da1024ef37cee018f1292ece52bd1a94a8aa995d0084dca84a90fca2b82e1a9",
    ),
    "buffer/sql_test.py": (
        "tests/buffer/sql_test.py",
        "a348d96739929c94f6c1145ccb8d01880993825c",
        "d1b73c401381ea703478d0342ae9a4127fe4f60300d1a6e67c13fa7c97cc1421",
    ),
    "explorer/step_wise_workflow_test.py": (
        "tests/explorer/step_wise_workflow_test.py",
        "4132f0cdb78657042afea251180696d9d33db840",
        "f46fa39519ea9097af51b909cb3aaeb6fa7ab0c8356766824dced1d84a5a251e",
    ),
    "utils/eval_utils_test.py": (
        "tests/utils/eval_utils_test.py",
        "cecbaed4428a0e3e18a389d782c11cba20674b61",
        "1b2e4701d28382058f052f78da7a0fa63565e1b47ada0a097d9348f60f9185bc",
    ),
    "utils/registry_test.py": (
        "tests/utils/registry_test.py",
        "85b8577213aceff2048848ccc4f44cf4f1352e58",
        "ffefb89d43beb3fef6e933ad9716c5953c140df93594ade2e73caa3573026ae4",
    ),
    "buffer/formatter_test.py": (
        "tests/buffer/formatter_test.py",
        "6bb56fed74b036cf1de7212bf9397df87d02c276",
        "10d8dc5810864d1f2a528239a64a43dfb01df4b0ad5d63a398470ba28977de9a",
    ),
    "buffer/experience_storage_test.py": (
        "tests/buffer/experience_storage_test.py",
        "7601bb93f39f0deae12984a47ec6b9b7f2d787cf",
        "8acbaada757a431cd3f2172967ac51ded2f192fc830221be6736c4fdc3c7c0c3",
    ),
    "buffer/reader_test.py": (
        "tests/buffer/reader_test.py",
        "7601bb93f39f0deae12984a47ec6b9b7f2d787cf",
        "23a42defc041e123bf1b301e9d0d8c3c861269639676e0e220a8781dab0a893a",
    ),
    "buffer/task_storage_test.py": (
        "tests/buffer/task_storage_test.py",
        "980cffcbded9ef1f3df61db1fd31fe2f48b58ae4",
        "8b04f9434b71e8d90f3bb797b9972abb77cdf745f5cbb1280cef0572f096f6e0",
    ),
    "buffer/sample_strategy_test.py": (
        "tests/buffer/sample_strategy_test.py",
        "7601bb93f39f0deae12984a47ec6b9b7f2d787cf",
        "67bf2becda20774f81694abee11b9ea7077732617624bd08278f881ad9deb8f5",
    ),
    "buffer/queue_test.py": (
        "tests/buffer/queue_test.py",
        "b838531cc2ebb1ccfc86810dc396e5fd2eb0b927",
        "c1a8d0ceeaa562bed05b25abd2cfe95aa0f42ac405b546f3cbf0c2627047bcc4",
    ),
    "buffer/file_test.py": (
        "tests/buffer/file_test.py",
        "39dd1d44f8f7dfe975de05f56f56a29847540edc",
        "3c3620830848319317f405fcf0a7c5f1a252e5e2f4f215e05e58a2dad5931667",
    ),
    "buffer/task_scheduler_test.py": (
        "tests/buffer/task_scheduler_test.py",
        "514c171ce8542ee00f3335ff5d9f756c78f6255a",
        "1a18f5652b9333152656a1bf4d0cb55efba852283e5b0716eb61d6ce18794ef7",
    ),
    "buffer/experience_pipeline_test.py": (
        "tests/buffer/experience_pipeline_test.py",
        "b838531cc2ebb1ccfc86810dc396e5fd2eb0b927",
        "cc0d10d6d59d82d29d2f74f98d61fd36ecc13455ec24fd646aeea5fa2c744928",
    ),
    "common/config_test.py": (
        "tests/common/config_test.py",
        "eb0ce06943156f1e64e2bf5136713e5dff34bf40",
        "f9d1c74d21c1fbe3f0a9c39a591964eccb3505cdb1c20585cdc720614bee14f7",
    ),
    "common/sudoku_test.py": (
        "tests/common/sudoku_test.py",
        "837f826b1437932181c4707afb643db3b55956ab",
        "2638ad3c3d2e9ddd88bcfbc36a37eaf91ff61193c64cc058628c40af60577131",
    ),
    "common/models/utils_test.py": (
        "tests/common/models/utils_test.py",
        "514c171ce8542ee00f3335ff5d9f756c78f6255a",
        "ffccec5e96a90568dc64de3b94a1da051fd0767b106289422d54f4822b6a0026",
    ),
    "explorer/workflow_test.py": (
        "tests/explorer/workflow_test.py",
        "31f9b790ba141f33a38b7e3b2850ce497aecffec",
        "af61841659d2a28858576b46800220c68bfc74c3964c5774e5ba57da7f97de8a",
    ),
    "explorer/proxy_test.py": (
        "tests/explorer/proxy_test.py",
        "38ba481c04e074be3d0e0dd193a75e47c896c179",
        "33d01f225c22ae0b0f458b32aab993d0ac8eaec030a80b23bb0ccc70051987bd",
    ),
    "utils/log_test.py": (
        "tests/utils/log_test.py",
        "d193f201b37ab453af10c0d4af7804dde72a135c",
        "39fda7f0a72d4b19d54ca317543726b62d6b6ec4eeb7216079e7662f5d403333",
    ),
    "utils/plugin_test.py": (
        "tests/utils/plugin_test.py",
        "85b8577213aceff2048848ccc4f44cf4f1352e58",
        "f07058fbcb97ad17a067c64022055c6c6264a1886489a5469f439801efd138a3",
    ),
    "cli/launcher_test.py": (
        "tests/cli/launcher_test.py",
        "31f9b790ba141f33a38b7e3b2850ce497aecffec",
        "cc8ad5115039d4f9d77dd9dbd4ac8089caad4e47d3119ff917c085df7dbcc294",
    ),
    "manager/log_manager_test.py": (
        "tests/manager/log_manager_test.py",
        "c3d356c0ab77193c1efaa60bc58d76d77155f5da",
        "aef9952db68266260429b65d5b4b3bea91561ccd42c264c891eff7328f38f581",
    ),
    # the package files of Trinity-RFT's tests/ (empty but one), the helpers the tests import
    # as ``tests.tools`` / ``tests.utils.plugins.*`` (conftest.py makes ``tests.*`` resolve
    # under upstream/ first), and the data they read from ``tests/template`` (the template
    # config, data sets and a chat template)
    "__init__.py": (
        "tests/__init__.py",
        "fde0a4a256f8bba919a36fe922069b32f5ce2fad",
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    ),
    "algorithm/__init__.py": (
        "tests/algorithm/__init__.py",
        "48dab7283b6de5bf9c8ca88304290f84e2ce7da3",
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    ),
    "buffer/__init__.py": (
        "tests/buffer/__init__.py",
        "d5ed9082002759734784ea8c2a39f1ea0e8c5654",
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    ),
    "cli/__init__.py": (
        "tests/cli/__init__.py",
        "eebced30d7dfd8906e7b20c42e45e99f7fd2569a",
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    ),
    "common/__init__.py": (
        "tests/common/__init__.py",
        "d5ed9082002759734784ea8c2a39f1ea0e8c5654",
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    ),
    "common/models/__init__.py": (
        "tests/common/models/__init__.py",
        "514c171ce8542ee00f3335ff5d9f756c78f6255a",
        "8b084a9f378124b2b1a51563bf3c22444eb7ff33692017da28b2136ae56987ed",
    ),
    "explorer/__init__.py": (
        "tests/explorer/__init__.py",
        "d5ed9082002759734784ea8c2a39f1ea0e8c5654",
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    ),
    "manager/__init__.py": (
        "tests/manager/__init__.py",
        "48dab7283b6de5bf9c8ca88304290f84e2ce7da3",
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    ),
    "utils/__init__.py": (
        "tests/utils/__init__.py",
        "f862e118a37d4fdfb275b8c365ae181387338f22",
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    ),
    "utils/plugins/__init__.py": (
        "tests/utils/plugins/__init__.py",
        "f862e118a37d4fdfb275b8c365ae181387338f22",
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    ),
    "tools.py": (
        "tests/tools.py",
        "cbd10f8b1521c4bf7ef88f484f384c78a86cf9e0",
        "b3ee0da846498d918f4a61a66ae2230f9b7129e7f8a3a3563d6aafc45907965e",
    ),
    "utils/plugins/main.py": (
        "tests/utils/plugins/main.py",
        "54c2d72b8475f91261f0cb67c37ff955f5430b68",
        "2a4f24be06cf34fae1fcc01c0805a8d53e56802bbdfee3b5d2949b54cf29e48c",
    ),
    "utils/plugins/dependencies.py": (
        "tests/utils/plugins/dependencies.py",
        "54c2d72b8475f91261f0cb67c37ff955f5430b68",
        "b157334e4c94426638537826c60f6e6ebc5a6df55ec985e808180c666cc9b848",
    ),
    "utils/plugins/my_workflow.py": (
        "tests/utils/plugins/my_workflow.py",
        "0adb26ed36206c556d490fb05655b59cbbf0f211",
        "d1f97ce65db7437e7759bf14af034510c2881a86511ea5d2291f1747eef12ca8",
    ),
    "utils/plugins/my_monitor.py": (
        "tests/utils/plugins/my_monitor.py",
        "2e5333625403c859c2c8611b06396034d56c6896",
        "307363510a9067c7ffa51efa3e2dafe9b909a5a2eb144e652c613d0969b8c7a6",
    ),
    "template/config.yaml": (
        "tests/template/config.yaml",
        "6bb56fed74b036cf1de7212bf9397df87d02c276",
        "d822bbcd3c41b8720cd75a065bfba08454765da5b39e728d69af696b10cba2cf",
    ),
    "template/custom_chat_template.j2": (
        "tests/template/custom_chat_template.j2",
        "bf5c134e4ca4e9ebc6d55397bb71d3cb9195500e",
        "a43491c0763a34fbe5a6c6cbf8a1f7c22389255a7a8a1f16af24a6acbd7d55cb",
    ),
    "template/data/countdown/test.jsonl": (
        "tests/template/data/countdown/test.jsonl",
        "3651ad8c6cbed5980792206a23968ae627d86a14",
        "9f0e82c7d96c846a6c076f467b4d75782286143a9fc18f90038a7e2bb52fd8f7",
    ),
    "template/data/countdown/train.jsonl": (
        "tests/template/data/countdown/train.jsonl",
        "8bc98cdd3ef817d7de3f5f7cc5da617d8f8ed14a",
        "5cc6c1cadc2b7d87800ed9c004b94f54bda21337ca4e9204dacbab8f31e4b26d",
    ),
    "template/data/eval_long/test.jsonl": (
        "tests/template/data/eval_long/test.jsonl",
        "3316e5bb63de3337b9acfa1e17393309aba67970",
        "f559d72ae522073bf8876b2294cd75a6b3fcda6e559fd3ca511d9e7c48e9622b",
    ),
    "template/data/eval_short/test.jsonl": (
        "tests/template/data/eval_short/test.jsonl",
        "3316e5bb63de3337b9acfa1e17393309aba67970",
        "77db3cee0acdcb54270aa91ab7a45a449c5c12be8fec64017448c23e65c9fa5f",
    ),
    "template/data/geometry/train.parquet": (
        "tests/template/data/geometry/train.parquet",
        "90d65caf638996db4ba68a31f75a8c9a111b75dd",
        "25baca14b2e57f5e8689b98a093321fcc8033fb7120ac608ebeb33b44afdaa91",
    ),
    "template/data/gsm8k/test.jsonl": (
        "tests/template/data/gsm8k/test.jsonl",
        "cbd10f8b1521c4bf7ef88f484f384c78a86cf9e0",
        "77db3cee0acdcb54270aa91ab7a45a449c5c12be8fec64017448c23e65c9fa5f",
    ),
    "template/data/gsm8k/train.jsonl": (
        "tests/template/data/gsm8k/train.jsonl",
        "531f38c676bfe634517d54129e370ce6ecee923c",
        "b198d33bef222436974c9b93206fb4810b725b6d59f457eb3617ab158f698ccc",
    ),
    "template/data/human_like/train.jsonl": (
        "tests/template/data/human_like/train.jsonl",
        "531f38c676bfe634517d54129e370ce6ecee923c",
        "ce4368782eb03e94e07306dcbba3756d05a2d1393d57c4aaa2c26266199f59b9",
    ),
    "template/data/sft_for_gsm8k/sft.jsonl": (
        "tests/template/data/sft_for_gsm8k/sft.jsonl",
        "30d281860479e4f442e6b7730f98c813dabb5019",
        "5546e2d7028ad984418d01b9a9174a29cc794c45295f231130d5da064040278d",
    ),
    "template/data/sft_with_tools/sft_with_tools.jsonl": (
        "tests/template/data/sft_with_tools/sft_with_tools.jsonl",
        "f79e20358c9a5387f9e6ce49e16e3bc20d72d494",
        "061b06e7b16d290be7fd6c623d1165d534a78189892b3a0f6ac8f37b3341b279",
    ),
    "template/data/task_scheduler/subset_1/train.jsonl": (
        "tests/template/data/task_scheduler/subset_1/train.jsonl",
        "ac5f8f4ce0d883739ea9079c2be2e39cfc4e9ed3",
        "a829014feed57cc9bc4bd0ccaf0528f2c4f8f6ae5be6ce87f328d8d258e4ac99",
    ),
    "template/data/task_scheduler/subset_2/train.jsonl": (
        "tests/template/data/task_scheduler/subset_2/train.jsonl",
        "ac5f8f4ce0d883739ea9079c2be2e39cfc4e9ed3",
        "ffd84025b106ac0c216724c123044fa676cf6ae5a8eb7acd54b3cf4e86385e58",
    ),
}

#: The fork of the same network the commits above were taken from (a maintainer's fork with the
#: full history up to 0.5.2); ``modelscope/Trinity-RFT`` serves the same commits once merged.
MIRROR_REPO = "yanxi-chen/Trinity-RFT"

#: local path -> owner/name to fetch it from (default :data:`REPO`)
FILE_REPOS: dict[str, str] = {local: MIRROR_REPO for local in FILES}


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


def _from_network(local: str, path: str, commit: str) -> tuple[bytes, str]:
    repo = FILE_REPOS.get(local, REPO)
    url = f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"
    data = urllib.request.urlopen(url, timeout=60).read()  # noqa: S310 - fixed https URL
    return data, url


def _from_git(git_dir: str, path: str, commit: str) -> tuple[bytes, str]:
    """The bytes of ``path`` at ``commit`` in the git repository (work tree or bare) ``git_dir``."""
    data = subprocess.run(
        ["git", "-C", git_dir, "show", f"{commit}:{path}"],  # noqa: S607 - git from PATH
        check=True,
        capture_output=True,
    ).stdout
    return data, f"{git_dir} {commit[:12]}:{path}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "--examples" in args:
        return fetch_examples()
    git_dir = None
    if "--from-git" in args:
        i = args.index("--from-git")
        if i + 1 >= len(args):
            print("usage: fetch_upstream.py [--from-git GIT_DIR | --examples]")
            return 2
        git_dir = args[i + 1]
    bad = 0
    for local, (path, commit, sha) in FILES.items():
        if git_dir is None:
            data, source = _from_network(local, path, commit)
        else:
            data, source = _from_git(git_dir, path, commit)
        digest = hashlib.sha256(data).hexdigest()
        if digest != sha:
            print(f"WARNING {local}: sha256 {digest} differs from the pinned {sha}")
            bad += 1
        target = HERE / local
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        print(f"{local} <- {source}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
