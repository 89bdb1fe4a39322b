"""TRL's side of ``benchmarks/trl_compare.py``: TRL's ``GRPOTrainer`` on a run spec.

Runs in its own environment (``.venvs/benchmark``: the ``benchmark`` dependency group, TRL and
trinity-workflows, no verl), started by ``trl_compare.py``::

    .venvs/benchmark/bin/python benchmarks/trl_side.py SPEC.json

``SPEC.json`` holds the settings both sides share (model, task rows, batch, lr, entropy
coefficient, response length, temperature, seed, steps) and ``launched_at``, the
``time.time()`` at which the orchestrator started this process. Each optimizer step appends
one line to ``SPEC["out"]``: ``{"step", "t", "reward"}``, ``t`` being seconds since
``launched_at`` at the end of the step, ``reward`` the mean reward of the step's samples as TRL
logs it. The reward function is Trinity's own ``arithmetic_reward`` (the same code scores both
sides).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    launched_at = float(spec["launched_at"])

    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trinity.workflows.rewards.arithmetic import ArithmeticRewardFn

    torch.manual_seed(int(spec["seed"]))
    score = ArithmeticRewardFn()

    def arithmetic_reward(completions, answer, **_):  # TRL's reward-function contract
        out = []
        for completion, truth in zip(completions, answer, strict=True):
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            out.append(float(score(response=text, truth=truth)["accuracy"]))
        return out

    rows = [json.loads(line) for line in Path(spec["data"]).read_text().splitlines() if line]
    dataset = Dataset.from_list(
        [
            {"prompt": [{"role": "user", "content": r["question"]}], "answer": r["answer"]}
            for r in rows
        ]
    )
    out = Path(spec["out"])

    class StepLog(TrainerCallback):
        """One line per optimizer step: its end time since launch and its mean reward (TRL
        logs a step after its ``on_step_end``, so the time is kept until the log arrives)."""

        t = 0.0

        def on_step_end(self, args, state, control, **kwargs):
            self.t = time.time() - launched_at

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs:
                line = {"step": state.global_step, "t": self.t, "reward": float(logs["reward"])}
                with out.open("a") as f:
                    f.write(json.dumps(line) + "\n")

    batch = int(spec["batch_size"]) * int(spec["repeat_times"])
    args = GRPOConfig(
        output_dir=str(out.parent / "trl-output"),
        max_steps=int(spec["steps"]),
        per_device_train_batch_size=batch,  # completions per step: tasks x repeats
        num_generations=int(spec["repeat_times"]),
        steps_per_generation=1,
        num_iterations=1,
        max_completion_length=int(spec["max_response_tokens"]),
        temperature=float(spec["temperature"]),
        top_p=1.0,
        learning_rate=float(spec["lr"]),
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=float(spec["weight_decay"]),
        adam_beta1=float(spec["betas"][0]),
        adam_beta2=float(spec["betas"][1]),
        max_grad_norm=float(spec["grad_clip"]),
        beta=0.0,  # no KL term, no reference model (as the Trinity side)
        epsilon=0.2,
        loss_type="dapo",  # token-mean over the batch: Trinity's default aggregation
        scale_rewards="group",
        entropy_coef=float(spec["entropy_coef"]),
        use_cpu=True,
        bf16=False,
        fp16=False,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=int(spec["seed"]),
        data_seed=int(spec["seed"]),
        dataloader_num_workers=0,
        disable_tqdm=True,
        log_completions=False,
    )
    trainer = GRPOTrainer(
        model=spec["model"],
        reward_funcs=arithmetic_reward,
        args=args,
        train_dataset=dataset,
        callbacks=[StepLog()],
    )
    trainer.train()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
