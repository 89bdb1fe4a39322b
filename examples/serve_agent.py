"""An agent deployed elsewhere, training the served model through mode serve.

It asks the quickstart's addition questions with the plain `openai` client, 8 answers per
question, scores each (the first number must be the sum), sends the rewards to /feedback (one
task per question: a GRPO group) and commits each group. Run it beside
examples/serve_arithmetic.yaml (the service) and examples/serve_train_arithmetic.yaml.
"""

import argparse
import json
import random
import re
from concurrent.futures import ThreadPoolExecutor

import openai
import requests

p = argparse.ArgumentParser()
p.add_argument("--url", default="http://127.0.0.1:8010")
p.add_argument("--requests", type=int, default=200)
p.add_argument("--data", default="examples/data/arithmetic/train.jsonl")
args = p.parse_args()
client = openai.OpenAI(base_url=f"{args.url}/v1", api_key="EMPTY")
model = client.models.list().data[0].id
rows = [json.loads(line) for line in open(args.data)]


def ask(question: str, answer: str) -> tuple[str, float, int]:
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": question}], max_tokens=2
    )
    found = re.search(r"-?\d+", r.choices[0].message.content or "")
    return r.id, float(bool(found) and found.group() == answer), r.model_extra["model_version"]


with ThreadPoolExecutor(8) as pool:
    for group in range(args.requests // 8):
        row = random.choice(rows)
        answers = list(pool.map(lambda _, row=row: ask(row["question"], row["answer"]), range(8)))
        for msg_id, reward, _ in answers:
            requests.post(
                f"{args.url}/feedback",
                json={"msg_ids": [msg_id], "reward": reward, "task_id": f"q{group}"},
                timeout=30,
            )
        requests.post(f"{args.url}/commit", timeout=60)
        mean = sum(a[1] for a in answers) / 8
        print(f"group {group}: {row['question']} reward {mean:.2f} (version {answers[-1][2]})")
