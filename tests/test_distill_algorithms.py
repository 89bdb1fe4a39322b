"""The distillation algorithm types with this release's distillation workflows (both packages:
trinity-algorithms checks the config, trinity-workflows ships the workflows)."""

from __future__ import annotations

import pytest


def test_the_distillation_algorithms_take_these_workflows_and_need_a_teacher(tmp_path):
    from trinity.common.config import load_config

    data = tmp_path / "tasks.jsonl"
    data.write_text('{"question": "1+1?", "answer": "2"}\n')

    def config(workflow: str, teacher: bool) -> dict:
        explorer = {"auxiliary_models": [{"model_path": "teacher"}]} if teacher else {}
        return {
            "algorithm": {"algorithm_type": "on_policy_distill"},
            "buffer": {
                "explorer_input": {
                    "taskset": {"path": str(data), "default_workflow_type": workflow}
                }
            },
            "explorer": explorer,
        }

    from trinity.algorithm import ALGORITHM_TYPE

    for name in ("on_policy_distill", "jsd"):
        check = ALGORITHM_TYPE.get(name).check_config
        assert check(load_config(config("on_policy_distill_math_workflow", teacher=True))) == []
        with pytest.raises(ValueError, match="explorer.auxiliary_models is empty"):
            check(load_config(config("on_policy_distill_workflow", teacher=False)))
        with pytest.raises(ValueError, match="'math_workflow' does not"):
            check(load_config(config("math_workflow", teacher=True)))
