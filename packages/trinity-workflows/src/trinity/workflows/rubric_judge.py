"""Rubric-judged answers: an LLM judge rates each response against the row's rubrics.

``rubric_judge_workflow`` (Trinity-RFT 0.6's name; after "Rubrics as Rewards",
arXiv:2507.17746, its implicit-aggregation variant) asks the task's prompt, samples
``repeat_times`` answers, and has a judge rate each one from 1 to 10 against the rubrics the
row lists under ``rubric`` (``[{"description": ..., "weight": ...}, ...]``), weighing them as a
whole. The reward is ``rating / 10``. A judge reply without a usable rating (no JSON block, no
``rating`` key, a rating outside 1-10) scores 0; the share of the task's responses the judge
rated is every response's ``judge_success`` metric, so a judge that stops following the
format shows in the metrics instead of as silently low rewards.

The judge is the first of ``explorer.auxiliary_models`` (``rubric_judge_workflow``), or an
external OpenAI-compatible API (``rubric_judge_openai_workflow``: ``workflow_args``
``judge_model_name``, and the environment variables named by ``judge_api_base_url_env`` /
``judge_api_key_env``, default ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``). It is asked at
temperature 0 and begins its reply with a fenced JSON block ``{"rating": <1-10>}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from typing import Any, Optional

from trinity.common.config import Field
from trinity.common.experience import Experience
from trinity.common.models.calls import call_model
from trinity.common.models.model import ModelWrapper
from trinity.common.workflows import WORKFLOWS, Task
from trinity.utils.log import get_logger
from trinity.workflows.common import generation_kwargs
from trinity.workflows.rewards.base import RewardSpec
from trinity.workflows.single_turn import SimpleWorkflow, SingleTurnArgs

__all__ = [
    "RUBRIC_JUDGE_SYSTEM_PROMPT",
    "RubricJudgeWorkflow",
    "RubricJudgeWorkflowWithAPI",
    "format_rubrics",
    "parse_rating",
]

logger = get_logger(__name__)

#: the answering model's default system prompt (``format.system_prompt`` replaces it)
ANSWER_SYSTEM_PROMPT = (
    "A conversation between a user and an assistant. The assistant thinks the question "
    "through first, then gives the user its answer."
)
RUBRIC_JUDGE_SYSTEM_PROMPT = (
    "You grade a response to a prompt against a list of rubrics. Rate its overall quality "
    "from 1 (poor) to 10 (excellent) by how well it meets the rubrics taken together: a "
    "response that breaks several of them rates low, one that meets all of them rates high. "
    'Begin your reply with a fenced JSON block, ```json {"rating": <integer 1-10>} ```, and '
    "put nothing else in that block."
)
RUBRIC_JUDGE_PROMPT = (
    "Rate the response to the prompt below from 1 to 10 against the rubrics.\n"
    "<prompt>\n{prompt}\n</prompt>\n<response>\n{response}\n</response>\n"
    "<rubrics>\n{rubrics}\n</rubrics>\nYour JSON rating:"
)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def format_rubrics(rubrics: Any, who: str = "rubric_judge_workflow") -> str:
    """The rubrics as the judge reads them, one per line: ``Rubric i (weight w): text``.

    Raises:
        ValueError: ``rubrics`` is not a list of ``{"description", "weight"}`` mappings.
    """
    if not rubrics:
        return "No rubrics were given: rate the response on its own merits."
    if not isinstance(rubrics, list):
        raise ValueError(
            f"{who}: the row's 'rubric' must be a list of {{'description', 'weight'}} "
            f"entries, got {type(rubrics).__name__}"
        )
    lines = []
    for i, rubric in enumerate(rubrics):
        if not isinstance(rubric, dict) or "description" not in rubric:
            raise ValueError(
                f"{who}: rubric {i} of the row is {rubric!r}; allowed: a mapping with "
                "'description' (and 'weight')"
            )
        lines.append(f"Rubric {i} (weight: {rubric.get('weight', 1)}): {rubric['description']}")
    return "\n".join(lines)


def parse_rating(reply: Optional[str]) -> Optional[float]:
    """The judge's rating normalised to ``[0.1, 1]`` (``rating / 10``), or ``None`` when its
    reply holds no fenced JSON block with an integer-valued ``rating`` from 1 to 10."""
    match = _FENCE.search(reply or "")
    if match is None:
        return None
    try:
        rating = json.loads(match.group(1).strip()).get("rating")
    except (json.JSONDecodeError, AttributeError):
        return None
    if isinstance(rating, bool) or not isinstance(rating, (int, float)):
        return None
    if not 1 <= rating <= 10:
        return None
    return float(rating) / 10.0


@WORKFLOWS.register_module("rubric_judge_workflow")
class RubricJudgeWorkflow(SimpleWorkflow):
    """Answers rated by a judge against the row's rubrics (see the module docstring).

    Task row: the prompt under ``format.prompt_key``; ``rubric``: the list of rubrics
    (optional: without it the judge rates on the response's own merits, with a warning).
    Experience: ``reward`` = rating / 10 (0 when the judge gave no usable rating),
    ``judge_success`` metric = share of the task's responses rated.
    """

    default_system_prompt = ANSWER_SYSTEM_PROMPT

    def reward_spec(self, task: Task) -> RewardSpec:
        return None  # the judge rates; a task reward function is not used (as in 0.6)

    def reset(self, task: Task) -> None:
        super().reset(task)
        rubrics = self.raw_task.get("rubric")
        if not rubrics:
            logger.warning("%s: the task row has no 'rubric' list", self.workflow_name)
        self.rubric_text = format_rubrics(rubrics, self.workflow_name)

    def judge(self) -> tuple[Any, str]:
        """``(sync OpenAI client, model name)`` of the judge: the first auxiliary model."""
        judges = self.auxiliary_model_wrappers or []
        if not judges:
            raise ValueError(
                f"{self.workflow_name} needs a judge model: configure one under "
                "explorer.auxiliary_models (the first one rates the responses)"
            )
        judge: ModelWrapper = judges[0]
        return judge.get_openai_client(), judge.model_path

    def rate(self, client: Any, model_name: str, response: str) -> Optional[float]:
        """The judge's normalised rating of ``response`` (``None``: no usable rating)."""
        user = RUBRIC_JUDGE_PROMPT.format(
            prompt=self.task_desc, response=response, rubrics=self.rubric_text
        )
        completion = client.chat.completions.create(
            model=model_name,
            messages=[
                {"role": "system", "content": RUBRIC_JUDGE_SYSTEM_PROMPT},
                {"role": "user", "content": user},
            ],
            temperature=0.0,
        )
        reply = completion.choices[0].message.content if completion.choices else None
        rating = parse_rating(reply)
        if rating is None:
            logger.warning(
                "%s: no usable rating in the judge's reply %r", self.workflow_name, reply
            )
        return rating

    async def run_async(self) -> list[Experience]:
        client, model_name = self.judge()
        responses = await call_model(
            self.model,
            "chat",
            self.format_messages(),
            **generation_kwargs(self.rollout_args, n=self.repeat_times),
        )
        ratings = await asyncio.gather(
            *(
                asyncio.to_thread(self.rate, client, model_name, exp.response_text or "")
                for exp in responses
            )
        )
        rated = sum(r is not None for r in ratings) / len(ratings) if ratings else 0.0
        for i, (exp, rating) in enumerate(zip(responses, ratings, strict=True)):
            exp.reward = 0.0 if rating is None else rating
            exp.metrics = {**(exp.metrics or {}), "judge_success": rated}
            exp.eid.run = self.run_id_base + i
        return list(responses)


@WORKFLOWS.register_module("rubric_judge_openai_workflow")
class RubricJudgeWorkflowWithAPI(RubricJudgeWorkflow):
    """:class:`RubricJudgeWorkflow` with an external OpenAI-compatible judge.

    ``workflow_args``: ``judge_model_name`` (required), ``judge_api_base_url_env`` /
    ``judge_api_key_env``: the environment variables that hold the API's URL and key (the
    values never go into a config file).
    """

    class Args(SingleTurnArgs):
        """``workflow_args`` of ``rubric_judge_openai_workflow``."""

        judge_model_name: Optional[str] = Field(
            None, description="The judge's model name at the API (required)."
        )
        judge_api_base_url_env: str = Field(
            "OPENAI_BASE_URL", description="Environment variable holding the API's base URL."
        )
        judge_api_key_env: str = Field(
            "OPENAI_API_KEY", description="Environment variable holding the API key."
        )

    def judge(self) -> tuple[Any, str]:
        import openai

        args = self.args
        if not args.judge_model_name:
            raise ValueError(
                f"{self.workflow_name}: workflow_args.judge_model_name is missing; allowed: "
                "the judge's model name at the API"
            )
        url = os.environ.get(args.judge_api_base_url_env, "")
        if not url:
            raise ValueError(
                f"{self.workflow_name}: the environment variable {args.judge_api_base_url_env} "
                "(workflow_args.judge_api_base_url_env) holds no API base URL"
            )
        client = getattr(self, "_api_client", None)
        if client is None or str(client.base_url).rstrip("/") != url.rstrip("/"):
            api_key = os.environ.get(args.judge_api_key_env) or "EMPTY"
            client = self._api_client = openai.OpenAI(base_url=url, api_key=api_key, max_retries=1)
        return client, args.judge_model_name
