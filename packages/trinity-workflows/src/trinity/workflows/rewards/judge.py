"""LLM-as-judge reward: an auxiliary (not trained) model grades each response.

The judge is one of ``explorer.auxiliary_models``. Workflows hand them over in one of three
forms, all accepted: :class:`~trinity.common.models.model.ModelWrapper` objects (what the
explorer passes; the judge uses their sync OpenAI client), ``openai.OpenAI`` clients (the older
API), or ``openai.AsyncOpenAI`` clients (what async workflows expose as ``self.auxiliary_models``).
With an async client the reward function is a coroutine function (``async __call__``), which
:func:`~trinity.workflows.rewards.base.compute_reward_async` awaits on the workflow's own loop;
every other form is called synchronously in a worker thread.

The judge is asked to end with ``Score: <number>``; :func:`parse_judge_score` takes the last
such line (``**Score:** 8``, ``Score: 7/10``, ``score = [[6]]`` all work) and clamps it to
``[0, max_score]``. A reply without a score raises ``ValueError`` quoting the reply, so
``compute_reward`` records reward 0 with ``reward_error`` instead of a silent, fake grade.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import Any, Optional

from trinity.common.models.model import ModelWrapper
from trinity.common.rewards.reward_fn import REWARD_FUNCTIONS, RewardFn

__all__ = [
    "DEFAULT_JUDGE_PROMPT_TEMPLATE",
    "DEFAULT_JUDGE_SYSTEM_PROMPT",
    "DEFAULT_RUBRIC",
    "AsyncLLMJudgeRewardFn",
    "LLMJudgeRewardFn",
    "parse_judge_score",
]

DEFAULT_RUBRIC = (
    "Judge how well the response answers the question. Correctness matters most, then "
    "completeness and clarity. A wrong, evasive or missing answer earns a low score."
)
DEFAULT_JUDGE_SYSTEM_PROMPT = "You are a careful, impartial grader."
DEFAULT_JUDGE_PROMPT_TEMPLATE = (
    "{rubric}\n\n"
    "[Question]\n{prompt}\n"
    "{reference}\n"
    "[Response to grade]\n{response}\n\n"
    "Grade the response on a scale from 0 to {max_score}. Explain your judgement briefly, then "
    'end with a last line of the form "Score: <number>".'
)
#: Placeholders a ``prompt_template`` may use.
TEMPLATE_FIELDS = ("rubric", "prompt", "response", "truth", "reference", "max_score")

_SCORE_RE = re.compile(
    r"score\s*\**\s*[:=]\s*\**\s*[\[(]*\s*(-?\d+(?:\.\d+)?)\s*[\])]*"
    r"(?:\s*(?:/|out\s+of)\s*(\d+(?:\.\d+)?))?",
    re.IGNORECASE,
)


def parse_judge_score(text: Optional[str], max_score: float) -> float:
    """The judge's score from its reply, clamped to ``[0, max_score]``.

    Takes the *last* ``Score: <number>`` (a judge often quotes the scale before grading). A
    score written as a fraction (``Score: 3/5``, ``7 out of 10``) is rescaled to ``max_score``.

    Raises:
        ValueError: the reply has no score; the message quotes the reply.
    """
    matches = list(_SCORE_RE.finditer(text or ""))
    if not matches:
        shown = (text or "")[-500:]
        raise ValueError(f"the judge's reply has no 'Score: <number>' line: {shown!r}")
    value_text, denominator = matches[-1].group(1), matches[-1].group(2)
    value = float(value_text)
    if denominator is not None and float(denominator) > 0:
        value = value / float(denominator) * max_score
    return min(max(value, 0.0), float(max_score))


def _pick_judge(auxiliary_models: Optional[Sequence[Any]], judge_index: Any) -> Any:
    if not auxiliary_models:
        raise ValueError(
            "llm_judge_reward needs a judge model, but no auxiliary model was given: configure "
            "explorer.auxiliary_models (the judge is auxiliary model judge_index, default 0)"
        )
    if isinstance(judge_index, bool) or not isinstance(judge_index, int):
        raise ValueError(f"llm_judge_reward: judge_index must be an int, got {judge_index!r}")
    if not 0 <= judge_index < len(auxiliary_models):
        raise ValueError(
            f"llm_judge_reward: judge_index={judge_index} but only {len(auxiliary_models)} "
            "auxiliary model(s) are configured (explorer.auxiliary_models)"
        )
    return auxiliary_models[judge_index]


def _is_async_client(obj: Any) -> bool:
    try:
        import openai
    except ImportError:  # pragma: no cover - openai comes with trinity-core
        return False
    return isinstance(obj, openai.AsyncOpenAI)


@REWARD_FUNCTIONS.register_module("llm_judge_reward")
class LLMJudgeRewardFn(RewardFn):
    """Reward = a judge model's grade of the response, normalised to ``[0, 1]``.

    Returns ``{"judge_score": score / max_score}``.

    Args:
        auxiliary_models: the auxiliary models (passed by the workflow); required.
        rubric: what the judge should value (a generic default).
        judge_index: which auxiliary model grades (0).
        max_score: top of the grading scale (10).
        temperature: judge sampling temperature (0.0: as deterministic as the engine allows).
        max_tokens: cap on the judge's reply (None: the engine's default).
        prompt_template: the user message, a ``str.format`` template with the placeholders
            ``{response}`` (required), ``{prompt}``, ``{truth}``, ``{reference}`` (a
            "[Reference answer]" block, empty without a reference), ``{rubric}``,
            ``{max_score}``. It should ask for a final ``Score: <number>`` line.
        system_prompt: the judge's system message.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> LLMJudgeRewardFn:
        # An AsyncOpenAI judge needs an awaitable __call__; pick the async twin so the callers'
        # async reward path awaits it on their loop (an async client is bound to its loop).
        if cls is LLMJudgeRewardFn:
            models = kwargs.get("auxiliary_models")
            index = kwargs.get("judge_index", 0)
            if models and isinstance(index, int) and 0 <= index < len(models):
                if _is_async_client(models[index]):
                    cls = AsyncLLMJudgeRewardFn
        return super().__new__(cls)

    def __init__(
        self,
        *,
        auxiliary_models: Optional[Sequence[Any]] = None,
        rubric: str = DEFAULT_RUBRIC,
        judge_index: int = 0,
        max_score: float = 10,
        temperature: float = 0.0,
        max_tokens: Optional[int] = None,
        prompt_template: Optional[str] = None,
        system_prompt: Optional[str] = DEFAULT_JUDGE_SYSTEM_PROMPT,
    ) -> None:
        judge = _pick_judge(auxiliary_models, judge_index)
        if not isinstance(rubric, str):
            raise ValueError(f"llm_judge_reward: rubric must be a string, got {rubric!r}")
        if isinstance(max_score, bool) or not isinstance(max_score, (int, float)) or max_score <= 0:
            raise ValueError(f"llm_judge_reward: max_score must be a number > 0, got {max_score!r}")
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, (int, float))
            or temperature < 0
        ):
            raise ValueError(f"llm_judge_reward: temperature must be >= 0, got {temperature!r}")
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            raise ValueError(
                f"llm_judge_reward: max_tokens must be a positive int or None, got {max_tokens!r}"
            )
        self.prompt_template = prompt_template or DEFAULT_JUDGE_PROMPT_TEMPLATE
        self._check_template(self.prompt_template)
        self.rubric = rubric
        self.judge_index = judge_index
        self.max_score = float(max_score)
        self.temperature = float(temperature)
        self.max_tokens = max_tokens
        self.system_prompt = system_prompt
        self.client, self.model_name = self._resolve_client(judge)

    # ------------------------------------------------------------------ setup
    @staticmethod
    def _check_template(template: str) -> None:
        try:
            fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
        except ValueError as exc:
            raise ValueError(
                f"llm_judge_reward: prompt_template is not a valid format string: {exc}"
            ) from exc
        unknown = sorted(f for f in fields if f not in TEMPLATE_FIELDS)
        if unknown:
            raise ValueError(
                f"llm_judge_reward: prompt_template uses unknown placeholder(s) "
                f"{', '.join('{' + f + '}' for f in unknown)}; allowed: "
                f"{', '.join('{' + f + '}' for f in TEMPLATE_FIELDS)}"
            )
        if "response" not in fields:
            raise ValueError("llm_judge_reward: prompt_template must contain {response}")

    def _resolve_client(self, judge: Any) -> tuple[Any, Optional[str]]:
        """(sync client, model name or None to look up) for a wrapper or an OpenAI client."""
        import openai

        if isinstance(judge, ModelWrapper):
            return judge.get_openai_client(), judge.model_path
        if isinstance(judge, openai.OpenAI):
            return judge, getattr(judge, "model_path", None)
        raise TypeError(
            "llm_judge_reward: the judge (auxiliary model "
            f"{self.judge_index}) must be a ModelWrapper, an openai.OpenAI or an "
            f"openai.AsyncOpenAI client; got {type(judge).__name__}"
        )

    # ------------------------------------------------------------------ grading
    def build_messages(
        self, response: Any, prompt: Optional[str] = None, truth: Any = None
    ) -> list[dict[str, str]]:
        """The judge's chat messages for one response."""
        reference = f"\n[Reference answer]\n{truth}\n" if truth not in (None, "") else ""
        user = self.prompt_template.format(
            rubric=self.rubric,
            prompt="" if prompt is None else prompt,
            response="" if response is None else response,
            truth="" if truth is None else truth,
            reference=reference,
            max_score=f"{self.max_score:g}",
        )
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages.append({"role": "user", "content": user})
        return messages

    def _request(self, messages: list[dict[str, str]], model_name: str) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": model_name,
            "messages": messages,
            "temperature": self.temperature,
        }
        if self.max_tokens is not None:
            kwargs["max_tokens"] = self.max_tokens
        return kwargs

    def _result(self, completion: Any) -> dict[str, float]:
        text = completion.choices[0].message.content if completion.choices else None
        score = parse_judge_score(text, self.max_score)
        return {"judge_score": score / self.max_score}

    def __call__(  # type: ignore[override]
        self, response: Any = None, prompt: Optional[str] = None, truth: Any = None, **kwargs: Any
    ) -> dict[str, float]:
        """Grade ``response`` (to ``prompt``, against ``truth`` when given)."""
        if self.model_name is None:
            self.model_name = self.client.models.list().data[0].id
        completion = self.client.chat.completions.create(
            **self._request(self.build_messages(response, prompt, truth), self.model_name)
        )
        return self._result(completion)


class AsyncLLMJudgeRewardFn(LLMJudgeRewardFn):
    """:class:`LLMJudgeRewardFn` over an ``openai.AsyncOpenAI`` judge (``async __call__``).

    Built automatically by ``LLMJudgeRewardFn(...)`` when the judge is an async client; await it
    (``compute_reward_async`` does).
    """

    def _resolve_client(self, judge: Any) -> tuple[Any, Optional[str]]:
        if not _is_async_client(judge):
            raise TypeError(
                "AsyncLLMJudgeRewardFn needs an openai.AsyncOpenAI judge, got "
                f"{type(judge).__name__}"
            )
        return judge, getattr(judge, "model_path", None)

    async def __call__(  # type: ignore[override]
        self, response: Any = None, prompt: Optional[str] = None, truth: Any = None, **kwargs: Any
    ) -> dict[str, float]:
        if self.model_name is None:
            self.model_name = (await self.client.models.list()).data[0].id
        completion = await self.client.chat.completions.create(
            **self._request(self.build_messages(response, prompt, truth), self.model_name)
        )
        return self._result(completion)
