"""An agent deployed elsewhere, training the served model through mode serve.

It asks the quickstart's addition questions with the plain `openai` client, 8 answers per
question, scores each (the first number must be the sum), sends the rewards to /feedback (one
task per question: a GRPO group) and commits each step's 16 questions, the trainer's batch
(examples/serve_train_arithmetic.yaml). Before a step it waits until the service serves the
weights of the step before: an agent in step with its trainer learns as a one-step-off run.
"""

import argparse
import json
import random
import re
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import requests

p = argparse.ArgumentParser()
p.add_argument("--url", default="http://127.0.0.1:8010")
p.add_argument("--steps", type=int, default=40)
p.add_argument("--data", default="examples/data/arithmetic/train.jsonl")
args = p.parse_args()
client = openai.OpenAI(base_url=f"{args.url}/v1", api_key="EMPTY")
model = client.models.list().data[0].id
rows = [json.loads(line) for line in open(args.data)]


def ask(row: dict) -> tuple[str, float]:
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": row["question"]}], max_tokens=2
    )
    found = re.search(r"-?\d+", r.choices[0].message.content or "")
    return r.id, float(bool(found) and found.group() == row["answer"])


with ThreadPoolExecutor(32) as pool:
    for step in range(args.steps):
        while requests.get(f"{args.url}/metrics").json()["serve/model_version"] < step - 1:
            time.sleep(0.2)  # the trainer has not caught up yet
        questions = [row for row in random.sample(rows, 16) for _ in range(8)]
        answers = list(pool.map(ask, questions))
        for i, (msg_id, reward) in enumerate(answers):
            feedback = {"msg_ids": [msg_id], "reward": reward, "task_id": f"s{step}q{i // 8}"}
            requests.post(f"{args.url}/feedback", json=feedback, timeout=30)
        requests.post(f"{args.url}/commit", timeout=60)
        print(f"step {step}: reward {sum(r for _, r in answers) / len(answers):.2f}")
