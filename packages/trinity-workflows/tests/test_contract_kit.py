"""Every built-in workflow and reward function passes the plugin authors' contract kit.

One test class per registered name (``WORKFLOWS`` and ``REWARD_FUNCTIONS``), generated from the
registries, each run on the deterministic fake model with a task its workflow accepts. Workflows
whose environment is not installed here skip, saying which package is missing (their adapters
are tested with doubles in test_env_adapters.py).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from trinity.common.config import FormatConfig
from trinity.common.models.testing import FakeModelWrapper, format_tool_call
from trinity.common.rewards import REWARD_FUNCTIONS
from trinity.common.workflows import WORKFLOWS
from trinity.testing import RewardFnContract, WorkflowContract, make_contract_tests

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_env_adapters  # noqa: E402 - the ALFWorld test double lives there

#: the ALFWorld double (textworld / alfworld modules with a one-room game) as a fixture here
alfworld_double = test_env_adapters.alfworld
#: class attributes that run a contract class on the ALFWorld double
USES_ALFWORLD_DOUBLE = {"pytestmark": [pytest.mark.usefixtures("alfworld_double")]}

MATH = {"raw_task": {"prompt": "What is 2+2?", "response": "4"}}
MATH_OTHER = {"raw_task": {"prompt": "What is 3+3?", "response": "6"}}
WEATHER = {
    "name": "get_weather",
    "description": "Weather of a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
_NO_BWRAP = (
    None if shutil.which("bwrap") else "bubblewrap is not installed (apt install bubblewrap)"
)


def _calculator_agent(messages, sample_index):
    if not any(m["role"] == "tool" for m in messages):
        return format_tool_call("calculator", {"expression": "2+2"})
    return "The answer is 4."


def _judge(messages, sample_index):
    return "Looks right.\nScore: 9" if sample_index % 2 == 0 else "Wrong.\nScore: 2"


def _game_player(messages, sample_index):
    return "I look around.\n```look```"


def _ruler_judge(messages, sample_index):
    return "The first is right, the second is not.\n[1.0, 0.0]"


def _self_judge(messages, sample_index):
    if messages[0]["content"].startswith("You are an impartial judge"):
        return "[1.0, 0.0]"
    return ["<answer>4</answer>", "<answer>5</answer>"][sample_index % 2]


def _sudoku_player(messages, sample_index):
    """Fill the first empty cell with the smallest digit that keeps the board consistent."""
    from trinity.workflows.envs.sudoku_board import is_consistent

    lines = messages[-1]["content"].split("Board:\n", 1)[1].strip().splitlines()
    board = [[int(v) for v in line.split()] for line in lines]
    for r, row in enumerate(board):
        for c, v in enumerate(row):
            if v == 0:
                for digit in range(1, len(board) + 1):
                    row[c] = digit
                    if is_consistent(board):
                        return f"{r} {c} {digit}"
                return "stuck"
    return "done"


def _alfworld_player(messages, sample_index):
    """Wins the double's game from any observation, in the three-part RAFT format."""
    seen = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    action = "move apple 1 to fridge 1" if "pick up" in seen else "take apple 1 from table 1"
    return f"<experience>seen</experience><think>go</think><action>{action}</action>"


SQL_ROW = {
    "query": "Names of the French singers, youngest first?",
    "gold": "SELECT name FROM singer WHERE country = 'France' ORDER BY age",
    "db": "concert",
    "setup_sql": "CREATE TABLE singer (name TEXT, age INT, country TEXT);"
    "INSERT INTO singer VALUES ('Ann', 30, 'France'), ('Bob', 25, 'Spain');",
}


def _sql_agent(messages, sample_index):
    turn = sum(m["role"] == "assistant" for m in messages)
    action = ["SELECT name FROM singer WHERE country = 'France'", "submit"][min(turn, 1)]
    return f"<think>turn {turn}</think><action>{action}</action>"


EMAIL_ROW = {
    "question": "Where is the meeting?",
    "answer": "Houston",
    "message_ids": ["<m1>"],
    "inbox_address": "sara@enron.com",
    "query_date": "2001-05-20",
    "emails": [
        {
            "message_id": "<m1>",
            "date": "2001-05-01 10:00:00",
            "subject": "Meeting",
            "body": "The meeting is in Houston.",
            "from": "jeff@enron.com",
            "to": ["sara@enron.com"],
        }
    ],
}


def _email_agent(messages, sample_index):
    tools = sum(m["role"] == "tool" for m in messages)
    if tools == 0:
        args = {"inbox_address": "sara@enron.com", "query_date": "2001-05-20"}
        return format_tool_call("search_emails", {**args, "keywords": ["meeting"]})
    if tools == 1:
        return format_tool_call("read_email", {"message_id": "<m1>"})
    return format_tool_call("generate_response", {"answer": "Houston", "sources": ["<m1>"]})


# the images are references the workflow places in the message (the fake model reads no pixels)
MM_FORMAT = FormatConfig(image_key="images")
MM = {
    "raw_task": {"prompt": "<image> How many squares?", "response": "2", "images": ["two.png"]},
    "format_args": MM_FORMAT,
}
MM_OTHER = {
    "raw_task": {"prompt": "How many?", "response": "3", "images": ["three.png"]},
    "format_args": MM_FORMAT,
}

SUDOKU = [[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 0]]
SUDOKU_OTHER = [[0, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 0, 1]]


WORKFLOW_ATTRS = {
    "simple_workflow": {"task_args": MATH, "other_task_args": MATH_OTHER, "responses": ["4", "5"]},
    "async_simple_workflow": {
        "task_args": MATH,
        "other_task_args": MATH_OTHER,
        "responses": ["4", "5"],
    },
    "simple_mm_workflow": {
        "task_args": MM,
        "other_task_args": MM_OTHER,
        "responses": ["\\boxed{2}", "\\boxed{5}"],
    },
    "async_simple_mm_workflow": {
        "task_args": MM,
        "other_task_args": MM_OTHER,
        "responses": ["\\boxed{2}", "\\boxed{5}"],
    },
    "math_workflow": {
        "task_args": MATH,
        "other_task_args": MATH_OTHER,
        "responses": ["<think>2+2</think><answer>4</answer>", "<answer>5</answer>"],
    },
    "async_math_workflow": {
        "task_args": MATH,
        "other_task_args": MATH_OTHER,
        "responses": ["<think>2+2</think><answer>4</answer>", "<answer>5</answer>"],
    },
    "math_boxed_workflow": {
        "task_args": MATH,
        "other_task_args": MATH_OTHER,
        "responses": ["So \\boxed{4}", "\\boxed{5}"],
    },
    "math_rm_workflow": {
        "task_args": MATH,
        "other_task_args": MATH_OTHER,
        "responses": ["<answer>4</answer>", "<answer>5</answer>"],
        "auxiliary_responses": (_judge,),
    },
    "async_math_boxed_workflow": {
        "task_args": MATH,
        "other_task_args": MATH_OTHER,
        "responses": ["So \\boxed{4}", "\\boxed{5}"],
    },
    "async_math_rm_workflow": {
        "task_args": MATH,
        "other_task_args": MATH_OTHER,
        "responses": ["<answer>4</answer>", "<answer>5</answer>"],
        "auxiliary_responses": (_judge,),
    },
    "on_policy_distill_workflow": {  # the auxiliary model is the teacher (scores only)
        "task_args": MATH,
        "other_task_args": MATH_OTHER,
        "responses": ["So \\boxed{4}", "\\boxed{5}"],
        "auxiliary_responses": ("never asked to generate",),
    },
    "on_policy_distill_math_workflow": {
        "task_args": MATH,
        "other_task_args": MATH_OTHER,
        "responses": ["So \\boxed{4}", "The answer is 5"],
        "auxiliary_responses": ("never asked to generate",),
    },
    "rubric_judge_workflow": {
        "task_args": {
            "raw_task": {"prompt": "Capital of France?", "rubric": [{"description": "Paris"}]}
        },
        "other_task_args": {"raw_task": {"prompt": "Capital of Spain?", "rubric": []}},
        "responses": ["Paris.", "Lyon."],
        "auxiliary_responses": ('```json {"rating": 8} ```',),
    },
    "rubric_judge_openai_workflow": {
        "unavailable": "needs an external OpenAI-compatible judge API (test_rubric_judge.py "
        "runs it against a local HTTP server)",
    },
    "math_trainable_ruler_workflow": {  # the policy judges its own group
        "task_args": MATH,
        "other_task_args": MATH_OTHER,
        "responses": _self_judge,
    },
    "math_eval_workflow": {
        "task_args": MATH,
        "other_task_args": MATH_OTHER,
        "responses": ["So \\boxed{4}", "The answer is 5"],
    },
    "async_math_eval_workflow": {
        "task_args": MATH,
        "other_task_args": MATH_OTHER,
        "responses": ["So \\boxed{4}", "The answer is 5"],
    },
    "math_ruler_workflow": {
        "task_args": MATH,
        "other_task_args": MATH_OTHER,
        "responses": ["<think>2+2</think><answer>4</answer>", "<answer>5</answer>"],
        "auxiliary_responses": (_ruler_judge,),
    },
    "async_math_ruler_workflow": {
        "task_args": MATH,
        "other_task_args": MATH_OTHER,
        "responses": ["<think>2+2</think><answer>4</answer>", "<answer>5</answer>"],
        "auxiliary_responses": (_ruler_judge,),
    },
    "bots_math_boxed_workflow": {
        "task_args": {
            "raw_task": {"prompt": [{"role": "user", "content": "What is 2+2?"}], "response": "4"}
        },
        "other_task_args": MATH_OTHER,
        "responses": ["So \\boxed{4}", "\\boxed{5}"],
    },
    "learn2ask_workflow": {
        "task_args": {
            "raw_task": {
                "prompt": [{"role": "user", "content": "My head hurts."}],
                "decision_truth": "continue",
                "info_truth": "fever",
            }
        },
        "other_task_args": {"raw_task": {"prompt": "I cough.", "decision_truth": "stop"}},
        "responses": ["Any fever, chills, or neither?", "<stop />"],
        "auxiliary_responses": (
            "<think>ok</think><format_score>1.0</format_score><content_score>1.0</content_score>",
        ),
    },
    "sudoku_workflow": {
        "task_args": {"raw_task": {"puzzle": SUDOKU}},
        "other_task_args": {"raw_task": {"puzzle": SUDOKU_OTHER}},
        "responses": _sudoku_player,
    },
    "countdown_workflow": {
        "task_args": {"raw_task": {"nums": [1, 2, 3], "target": 6}},
        "other_task_args": {"raw_task": {"nums": [2, 5, 1], "target": 9}},
        "responses": ["<answer>1 + 2 + 3</answer>", "<answer>1 * 2</answer>"],
    },
    "arithmetic_workflow": {
        "task_args": {"raw_task": {"prompt": "2+2", "response": "4"}},
        "other_task_args": {"raw_task": {"prompt": "3*3", "response": "9"}},
        "responses": ["4", "7"],
    },
    "arithmetic_multi_turn_workflow": {
        "task_args": {"raw_task": {"questions": ["2+2=", "1+3="]}},
        "other_task_args": {"raw_task": {"questions": ["3+3=", "0+1="]}},
        "responses": ["4", "7"],
    },
    "code_workflow": {
        "task_args": {
            "raw_task": {
                "question": "Read a and b, print a + b.",
                "input_output": json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]}),
            },
            "format_args": {"prompt_key": "question"},
            "reward_fn_args": {"timeout": 1.5, "sandbox": {"cpu_time_s": 1}},
        },
        "responses": ["```python\na, b = map(int, input().split())\nprint(a + b)\n```", "no"],
        "unavailable": _NO_BWRAP,
    },
    "frozen_lake_workflow": {
        "task_args": {"raw_task": {"desc": ["SF", "FG"]}, "workflow_args": {"max_steps": 3}},
        "other_task_args": {"raw_task": {"desc": ["SH", "FG"]}, "workflow_args": {"max_steps": 3}},
        "responses": ["```down```", "```right```"],
    },
    "text_game_workflow": {
        "task_args": {"raw_task": {"seed": 5}, "workflow_args": {"max_steps": 3}},
        "other_task_args": {"raw_task": {"seed": 6}, "workflow_args": {"max_steps": 3}},
        "responses": _game_player,
    },
    "agent_workflow": {
        "task_args": {
            **MATH,
            "reward_fn": "accuracy_reward",
            "workflow_args": {"tools": ["calculator"]},
        },
        "responses": _calculator_agent,
    },
    "tool_call_workflow": {
        "task_args": {
            "raw_task": {
                "prompt": "Weather in Paris?",
                "tools": json.dumps([WEATHER]),
                "response": json.dumps([{"name": "get_weather", "arguments": {"city": "Paris"}}]),
            }
        },
        "responses": [format_tool_call("get_weather", {"city": "Paris"}), "It is sunny."],
    },
    "alfworld_workflow": {
        "task_args": {"raw_task": {"game_file": "/data/game.tw-pddl"}},
        "requires": ("alfworld", "textworld"),
    },
    "step_wise_alfworld_workflow": {
        "task_args": {"raw_task": {"game_file": "/data/a/game.tw-pddl"}},
        "other_task_args": {"raw_task": {"game_file": "/data/b/game.tw-pddl"}},
        "responses": _alfworld_player,
        "model_args": {"enable_history": True},
        **USES_ALFWORLD_DOUBLE,
    },
    "RAFT_alfworld_workflow": {
        "task_args": {"raw_task": {"game_file": "/data/a/game.tw-pddl"}},
        "other_task_args": {"raw_task": {"game_file": "/data/b/game.tw-pddl"}},
        "responses": _alfworld_player,
        **USES_ALFWORLD_DOUBLE,
    },
    "RAFT_reflect_alfworld_workflow": {
        "task_args": {"raw_task": {"game_file": "/data/a/game.tw-pddl"}},
        "other_task_args": {"raw_task": {"game_file": "/data/b/game.tw-pddl"}},
        "responses": _alfworld_player,
        **USES_ALFWORLD_DOUBLE,
    },
    "intercode_sql_workflow": {  # on the SQLite stand-in (the real one needs Docker + MySQL)
        "task_args": {"raw_task": SQL_ROW, "workflow_args": {"backend": "sqlite"}},
        "other_task_args": {
            "raw_task": {**SQL_ROW, "gold": "SELECT name FROM singer"},
            "workflow_args": {"backend": "sqlite"},
        },
        "responses": _sql_agent,
    },
    "email_search_workflow": {  # on a one-email mailbox built from the row
        "task_args": {"raw_task": EMAIL_ROW},
        "other_task_args": {"raw_task": {**EMAIL_ROW, "answer": "Dallas"}},
        "responses": _email_agent,
        "auxiliary_responses": ("true",),
    },
    "sciworld_workflow": {
        "task_args": {"raw_task": {"task_name": "boil"}},
        "requires": ("scienceworld",),
    },
    "webshop_workflow": {
        "task_args": {"raw_task": {"session_id": 3}},
        "requires": ("web_agent_site",),
    },
}
# Trinity-RFT's earlier name of the tool-call workflow: the same class, the same task
WORKFLOW_ATTRS["toolcall_workflow"] = WORKFLOW_ATTRS["tool_call_workflow"]

REWARD_ATTRS = {
    "math_reward": {
        "call_args": [
            {"response": "<think>x</think><answer>4</answer>", "truth": "4"},
            {"response": "<answer>5</answer>", "truth": "4"},
        ]
    },
    "math_boxed_reward": {
        "call_args": [{"response": "\\boxed{4}", "truth": "4"}, {"response": "5", "truth": "4"}]
    },
    "countdown_reward": {
        "call_args": [
            {
                "response": "<answer>1 + 2 + 3</answer>",
                "truth": json.dumps({"numbers": [1, 2, 3], "target": 6}),
            },
        ]
    },
    "code_test_reward": {
        "call_args": [
            {
                "response": "```python\nprint(3)\n```",
                "raw_task": {"input_output": json.dumps({"inputs": [""], "outputs": ["3\n"]})},
            }
        ],
        "component_args": {"timeout": 1.5, "sandbox": {"cpu_time_s": 1}},
        "unavailable": _NO_BWRAP,
    },
    "llm_judge_reward": {
        "call_args": [{"response": "4", "truth": "4", "prompt": "2+2?"}],
        "component_args": {"auxiliary_models": [FakeModelWrapper(_judge, model_path="fake/judge")]},
    },
    "rlcr_reward": {
        "call_args": [
            {
                "response": "<think>2+2</think><answer>4</answer>"
                "<analysis>sure</analysis><confidence>0.9</confidence>",
                "truth": "4",
            },
            {"response": "<answer>5</answer><confidence>0.2</confidence>", "truth": "4"},
        ]
    },
    "tool_call_reward": {
        "call_args": [
            {
                "response": format_tool_call("get_weather", {"city": "Paris"}),
                "truth": json.dumps([{"name": "get_weather", "arguments": {"city": "Paris"}}]),
            }
        ]
    },
}

# the AgentScope adapters' settings (agentscope_contract_attrs.py, beside this file)
from agentscope_contract_attrs import AGENTSCOPE_WORKFLOW_ATTRS  # noqa: E402

WORKFLOW_ATTRS.update(AGENTSCOPE_WORKFLOW_ATTRS)

globals().update(
    make_contract_tests(WorkflowContract, WORKFLOWS, prefix="Workflow", attrs=WORKFLOW_ATTRS)
)
globals().update(
    make_contract_tests(RewardFnContract, REWARD_FUNCTIONS, prefix="Reward", attrs=REWARD_ATTRS)
)


@pytest.mark.parametrize(
    "registry, prefix", [(WORKFLOWS, "Workflow"), (REWARD_FUNCTIONS, "Reward")]
)
def test_every_registered_name_has_a_contract_class(registry, prefix):
    for name in registry.list():
        assert globals()[f"Test{prefix}_{name}"].component is registry.get(name)
