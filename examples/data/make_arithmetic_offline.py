"""Build the small offline sets of the learning matrix (``benchmarks/learning_matrix.py``).

Written on the arithmetic vocabulary of the quickstart's tiny model (digits, ``+``, ``=``, chat
words), so a randomly initialised 2-layer model can learn them on a CPU in a few minutes:

* ``arithmetic_sft/{train,test}.jsonl`` — ``{"question": "3+4=", "answer": "7"}`` for every
  ``a+b`` with single digits and a single-digit sum (55 problems), shuffled with a fixed seed
  and split 44 / 11. The test split is held out: SFT's metric is the greedy answer accuracy on
  problems it never trained on (the model has to learn addition, not a lookup table).
* ``arithmetic_dpo/{train,test}.jsonl`` — the same split as preference pairs: the prompt as
  chat messages, ``chosen`` the right sum, ``rejected`` a wrong one: one pair per wrong digit
  (9 per problem; 396 to train on, 99 held out). DPO's metric is the share of held-out
  problems whose chosen answer wins *every* one of its pairs, a pair won when its implicit
  reward ``log pi(chosen)/pi_ref(chosen) - log pi(rejected)/pi_ref(rejected)`` is positive
  (chance: about 0.1; a single pair's chance is 0.5, too close to the bar to show learning).
* ``arithmetic_cpt/{train,test}.jsonl`` — the same split as raw text for ``cpt`` (continued
  pre-training, no chat template): ``{"text": "3+4=7\n"}``, the newline ending the problem
  (the tiny vocabulary has no other separator) so a greedy continuation of ``"3+4="`` stops
  after the answer. CPT's metric is the greedy raw-text continuation's accuracy on the held-out
  problems.
* ``arithmetic_multi_turn/train.jsonl`` — the quickstart's 25 problems (a+b, a and b in 0..4)
  as two-turn conversations for ``multi_step_grpo``: ``{"questions": ["2+4=", "1+3="],
  "answers": ["6", "4"]}``, the second question another of the 25
  (``arithmetic_multi_turn_workflow`` asks one per turn).

Deterministic: running it again rewrites the same files (``python
examples/data/make_arithmetic_offline.py``; the generated files are committed).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 0
TEST_SHARE = 5  # one problem in five is held out


def problems() -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The (train, test) split of every ``a+b`` with ``a, b, a+b`` in 0..9."""
    pairs = [(a, b) for a in range(10) for b in range(10) if a + b <= 9]
    rng = random.Random(SEED)
    rng.shuffle(pairs)
    k = len(pairs) // TEST_SHARE
    return pairs[k:], pairs[:k]


def _rejected(total: int) -> list[int]:
    """Every wrong digit (9 pairs per problem)."""
    return [k for k in range(10) if k != total]


def write(out_dir: Path = HERE) -> list[Path]:
    """Write both sets under ``out_dir``; return the files written."""
    train, test = problems()
    written: list[Path] = []
    for split, pairs in (("train", train), ("test", test)):
        sft = out_dir / "arithmetic_sft" / f"{split}.jsonl"
        dpo = out_dir / "arithmetic_dpo" / f"{split}.jsonl"
        cpt = out_dir / "arithmetic_cpt" / f"{split}.jsonl"
        for path in (sft, dpo, cpt):
            path.parent.mkdir(parents=True, exist_ok=True)
        with cpt.open("w", encoding="utf-8") as fc:
            fc.writelines(json.dumps({"text": f"{a}+{b}={a + b}\n"}) + "\n" for a, b in pairs)
        dpo_rows = []
        with sft.open("w", encoding="utf-8") as fs:
            for a, b in pairs:
                question, answer = f"{a}+{b}=", str(a + b)
                fs.write(json.dumps({"question": question, "answer": answer}) + "\n")
                for wrong in _rejected(a + b):
                    row = {
                        "prompt": [{"role": "user", "content": question}],
                        "chosen": [{"role": "assistant", "content": answer}],
                        "rejected": [{"role": "assistant", "content": str(wrong)}],
                    }
                    dpo_rows.append(row)
        # the trainer reads the file in order: a problem's 9 pairs side by side would fill a
        # whole batch with one or two problems (DPO then barely learned: 0.67 -> 0.83 pair
        # accuracy on these pairs in 160 steps), so the pairs are shuffled
        random.Random(SEED + 1).shuffle(dpo_rows)
        with dpo.open("w", encoding="utf-8") as fd:
            fd.writelines(json.dumps(row) + "\n" for row in dpo_rows)
        written += [sft, dpo, cpt]
    quick = [(a, b) for a in range(5) for b in range(5)]
    rng = random.Random(SEED + 2)
    multi = out_dir / "arithmetic_multi_turn" / "train.jsonl"
    multi.parent.mkdir(parents=True, exist_ok=True)
    with multi.open("w", encoding="utf-8") as f:
        for a, b in quick:
            c, d = rng.choice(quick)
            row = {"questions": [f"{a}+{b}=", f"{c}+{d}="], "answers": [str(a + b), str(c + d)]}
            f.write(json.dumps(row) + "\n")
    written.append(multi)
    return written


if __name__ == "__main__":
    for path in write():
        print(path)
