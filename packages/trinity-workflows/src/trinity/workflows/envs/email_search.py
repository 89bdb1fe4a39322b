"""Email search: an agent answers a question from a user's mailbox (ART's Enron email task).

Trinity-RFT 0.6's ``email_search_workflow``. The agent gets the question, the user's address
and today's date, and three tools over the email database (:mod:`.email_db`):

* ``search_emails(inbox_address, query_date, keywords)``: up to 10 emails of that inbox sent
  up to that date holding every keyword, newest first, as ``message_id`` and snippet;
* ``read_email(message_id)``: one email, headers and body;
* ``generate_response(answer, sources)``: the final answer and the ``message_id`` s it rests on
  (``"I don't know"`` with no sources when the mail does not say); this ends the episode.

The conversation runs through the agent loop of :class:`~trinity.workflows.agent.AgentWorkflow`
(one experience per model call, exactly as sampled, ``eid.step`` = the call). A reply without a
tool call does not end the episode while turns remain: the agent is reminded to finish with
``generate_response`` (as 0.6's AgentScope agent is).

Reward (0.6's, after ART), the sum of ``accuracy`` and ``format``, on every step:

* no ``generate_response`` call: ``accuracy`` 0, ``format`` -1;
* ``reward_fn_args.llm_as_a_judge: false``: ``accuracy`` 1 when the answer appears in the
  reference answer (case-insensitive), ``format`` 0;
* otherwise a judge (the first auxiliary model) decides whether the answer is right. Partial
  credit, 0.1 each: the right email was found by a search, was read, is among the sources.
  A wrong answer: ``accuracy`` -1, ``format`` the partial credit. ``"I don't know"`` (when the
  judge does not accept it): likewise. A right answer: ``accuracy`` 1, ``format`` 1 + 0.3 for
  right sources + 0.1 / number of sources + 0.1 * (1 - turns / max_turns).

Task row (0.6's fields): ``question``, ``answer``, ``message_ids`` (the email(s) holding the
answer, the first one counts), ``inbox_address``, ``query_date``; ``id`` and ``how_realistic``
are kept if present. The database: the row's ``emails`` (a small mailbox built in memory), else
``db_path`` (row or ``workflow_args``), else the ``DEFAULT_EMAIL_DB_PATH`` environment variable
(0.6's setting). ``workflow_args``: ``max_turns`` (default 10), ``tool_obs_char_limit`` (longest
tool output shown, default 8000), and those of ``agent_workflow``.
"""

from __future__ import annotations

import datetime
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Optional

from pydantic import BaseModel, ValidationError, field_validator

from trinity.common.experience import Experience
from trinity.common.workflows import WORKFLOWS, Task
from trinity.workflows.agent import AgentEpisode, AgentWorkflow, run_agent_loop
from trinity.workflows.agent_loop import _int_arg, _isolated_model, openai_request_kwargs
from trinity.workflows.common import MissingTaskFieldError
from trinity.workflows.envs.base import as_bool
from trinity.workflows.envs.email_db import EmailStore
from trinity.workflows.rewards.base import RewardResult
from trinity.workflows.ruler import ask_judge
from trinity.workflows.tools import Tool, ToolError, ToolSet

__all__ = ["EmailQuery", "EmailRubric", "EmailSearchWorkflow", "rubric_reward"]

EMAIL_DB_SETUP = (
    "0.6 builds the Enron email database with its example's prepare_data.py from the Hugging "
    "Face data set corbt/enron-emails; point workflow_args.db_path (or the environment "
    "variable DEFAULT_EMAIL_DB_PATH) at that SQLite file, or give the row an 'emails' list."
)

EMAIL_SYSTEM_PROMPT = """You search a user's email to answer their question. Use the tools: \
search_emails finds emails by keywords, read_email opens one. You have up to {max_turns} \
turns; when a search finds nothing useful, try other keywords.
Say briefly what you found and what you will do next. As soon as you know the answer, call \
generate_response with the answer and the message_ids of the emails it comes from, and put \
nothing else in it. If the emails do not hold the answer, call generate_response with \
"I don't know" and no sources.

The user's email address is {inbox_address}. Today is {query_date}."""

FINISH_HINT = (
    "You have not called generate_response yet. Keep searching, or call generate_response with "
    "your answer and its sources to finish."
)

JUDGE_SYSTEM_PROMPT = """You check an AI assistant's answer to a question against a reference \
answer.
First decide exactly what the question asks for (who, what, when, how many ...). Keep only \
the facts of the reference answer that this needs; the rest is context. Accept the assistant's \
answer when it states every one of those facts with the same meaning; wording, order and extra \
details that do not contradict them do not matter. Reject it when one is missing or wrong.
Reply with one word: true to accept, false to reject."""


class EmailQuery(BaseModel):
    """A task row of the email-search data set (0.6's ``QueryModel`` fields)."""

    question: str
    answer: str
    message_ids: list[str]
    inbox_address: str
    query_date: str
    id: Optional[int] = None
    how_realistic: Optional[float] = None

    @field_validator("query_date", mode="before")
    @classmethod
    def _date_text(cls, value: Any) -> Any:
        if isinstance(value, (datetime.date, datetime.datetime)):
            return value.strftime("%Y-%m-%d")
        return value


@dataclass
class EmailRubric:
    """What an episode did, as the reward reads it (ART's rubric)."""

    answer_correct: bool = False
    sources_correct: bool = False
    attempted_answer: bool = False
    returned_i_dont_know: bool = False
    ever_found_right_email: bool = False
    ever_read_right_email: bool = False
    num_sources: int = 0
    num_turns: int = 0


def rubric_reward(rubric: EmailRubric, max_turns: int) -> dict[str, float]:
    """``{"accuracy", "format"}`` of an answered episode (see the module docstring)."""
    partial = 0.1 * sum(
        (rubric.ever_found_right_email, rubric.ever_read_right_email, rubric.sources_correct)
    )
    if rubric.attempted_answer and not rubric.answer_correct:
        return {"accuracy": -1.0, "format": partial}
    if rubric.returned_i_dont_know:
        return {"accuracy": 0.0, "format": partial}
    if rubric.answer_correct:
        bonus = 1.0 + (0.3 if rubric.sources_correct else 0.0)
        bonus += 0.1 / rubric.num_sources if rubric.num_sources > 0 else 0.0
        bonus += 0.1 * (1 - rubric.num_turns / max_turns)
        return {"accuracy": 1.0, "format": bonus}
    return {"accuracy": 0.0, "format": 0.0}  # an empty answer the judge did not accept


@dataclass
class EmailSearchState:
    """One episode's mailbox view: what the agent found, read and answered."""

    store: EmailStore
    found_ids: list[str] = field(default_factory=list)
    read_ids: list[str] = field(default_factory=list)
    answer: Optional[str] = None
    sources: list[str] = field(default_factory=list)
    judge_error: Optional[str] = None

    def search_emails(self, inbox_address: str, query_date: str, keywords: list[str]) -> Any:
        """Search the user's mailbox for emails containing every keyword.

        Args:
            inbox_address: the user's email address.
            query_date: today's date, YYYY-MM-DD; only emails sent up to it are searched.
            keywords: words that must all appear in an email's subject or body.
        """
        try:
            day = datetime.datetime.strptime(query_date, "%Y-%m-%d")
        except (TypeError, ValueError) as exc:
            raise ToolError(f"query_date must be YYYY-MM-DD, got {query_date!r}") from exc
        if isinstance(keywords, str):
            keywords = keywords.split()  # a model often sends "a b" for ["a", "b"]
        if not isinstance(keywords, list):
            raise ToolError("keywords must be a list of strings")
        next_day = (day + datetime.timedelta(days=1)).strftime("%Y-%m-%d")
        try:
            found = self.store.search(inbox_address, keywords, sent_before=next_day)
        except ValueError as exc:
            raise ToolError(str(exc)) from exc
        self.found_ids.extend(r["message_id"] for r in found)
        return found

    def read_email(self, message_id: str) -> Any:
        """Read one email: its headers, recipients and body.

        Args:
            message_id: the message_id of the email, as a search returned it.
        """
        self.read_ids.append(message_id)
        email = self.store.read(message_id)
        if email is None:
            raise ToolError(f"no email with message_id {message_id!r}")
        return email

    def generate_response(self, answer: str, sources: list[str]) -> str:
        """Give the final answer; this ends the task.

        Args:
            answer: the answer to the user's question, or "I don't know".
            sources: the message_ids of the emails the answer comes from (empty if none).
        """
        if isinstance(sources, str) or not isinstance(sources, list):
            raise ToolError("sources must be a list of message_ids")
        self.answer, self.sources = str(answer), [str(s) for s in sources]
        return "Answer recorded."

    def tools(self) -> list[Tool]:
        fns = (self.search_emails, self.read_email, self.generate_response)
        return [Tool.from_function(fn, run_in_thread=fn != self.generate_response) for fn in fns]


_STORES: dict[str, EmailStore] = {}
_STORES_LOCK = threading.Lock()


def _shared_store(path: str) -> EmailStore:
    """One read-only store per database file, shared by all workflows of the process."""
    with _STORES_LOCK:
        store = _STORES.get(path)
        if store is None:
            store = _STORES[path] = EmailStore(path)
        return store


@WORKFLOWS.register_module("email_search_workflow")
class EmailSearchWorkflow(AgentWorkflow):
    """The email-search agent with ART's rubric reward (see the module docstring)."""

    default_max_turns = 10
    default_system_prompt = None
    default_reward_fn = None

    def prepare(self, task: Task) -> None:
        who = self.workflow_name
        try:
            self.query = EmailQuery.model_validate(self.raw_task)
        except ValidationError as exc:
            raise MissingTaskFieldError(
                f"{who}: the task row is not an email-search query ({exc.error_count()} "
                f"problem(s): {_problems(exc)}); the row has keys {sorted(self.raw_task)}"
            ) from None
        self.task_desc = task.task_desc or self.query.question
        self.truth = task.truth or self.query.answer
        self.reward_fn = None
        self.use_judge = as_bool(
            self.reward_fn_args.get("llm_as_a_judge", True), "llm_as_a_judge", who
        )
        if self.use_judge and not (self.auxiliary_model_wrappers or self.auxiliary_models):
            raise ValueError(
                f"{who} needs a judge model: configure one under explorer.auxiliary_models, "
                "or set reward_fn_args.llm_as_a_judge: false to score by string match"
            )
        # 0.6's name for the limit; emails run up to 5000 characters, so the default shows one
        limit = (
            self.max_tool_output_chars if "max_tool_output_chars" in self.workflow_args else 8000
        )
        self.max_tool_output_chars = _int_arg(self.workflow_args, "tool_obs_char_limit", limit, who)
        self.store = self._store()
        system = self.system_prompt or EMAIL_SYSTEM_PROMPT.format(
            max_turns=self.max_turns,
            inbox_address=self.query.inbox_address,
            query_date=self.query.query_date,
        )
        self.initial_messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": self.task_desc},
        ]
        self.tools = EmailSearchState(self.store).tools()
        self.tool_schemas = [t.schema for t in self.tools]

    def _store(self) -> EmailStore:
        emails = self.raw_task.get("emails")
        if emails:
            return EmailStore(emails=emails)
        path = (
            self.raw_task.get("db_path")
            or self.workflow_args.get("db_path")
            or os.environ.get("DEFAULT_EMAIL_DB_PATH")
        )
        if not path:
            raise MissingTaskFieldError(
                f"{self.workflow_name}: no email database. {EMAIL_DB_SETUP}"
            )
        return _shared_store(os.path.abspath(os.path.expanduser(str(path))))

    # ------------------------------------------------------------------ episode hooks
    def new_episode(self, index: int) -> AgentEpisode:
        state = EmailSearchState(self.store)
        toolset = ToolSet(
            state.tools(), timeout=self.tool_timeout, max_output_chars=self.max_tool_output_chars
        )
        messages = [dict(m) for m in self.initial_messages]
        return AgentEpisode(index=index, messages=messages, toolset=toolset, state=state)

    def episode_done(self, episode: AgentEpisode) -> bool:
        return episode.state.answer is not None

    async def run_episode(self, index: int) -> list[Experience]:
        """Play episode ``index`` until ``generate_response`` or the turn limit; reward it."""
        model = _isolated_model(self.model, self.workflow_name)
        episode = self.new_episode(index)
        turns_left = self.max_turns
        while turns_left > 0:
            before = len(episode.turns)
            await run_agent_loop(
                model,
                episode,
                turns_left,
                request_kwargs=openai_request_kwargs(self.rollout_args),
                is_done=self.episode_done,
            )
            turns_left -= len(episode.turns) - before
            if episode.stop_reason != "final_answer" or turns_left < 1:
                break
            episode.messages.append({"role": "user", "content": FINISH_HINT})
        for number, turn in enumerate(episode.turns):
            turn.index = number  # the loop numbered each stretch from 0
        result = await self.score_episode(episode)
        info = self.episode_info(episode)
        run_id = self.run_id_base + index
        if self.trajectory_mode == "whole":
            return [await self._whole_experience(episode, result, info, run_id)]
        return [self._turn_experience(episode, t, result, info, run_id) for t in episode.turns]

    async def score_episode(self, episode: AgentEpisode) -> RewardResult:
        state: EmailSearchState = episode.state
        if state.answer is None:
            parts = {"accuracy": 0.0, "format": -1.0}
        elif not self.use_judge:
            accuracy = float(state.answer.lower() in str(self.truth).lower())
            parts = {"accuracy": accuracy, "format": 0.0}
        else:
            right = self.query.message_ids[0] if self.query.message_ids else None
            rubric = EmailRubric(
                attempted_answer=state.answer != "",
                returned_i_dont_know=state.answer == "I don't know",
                ever_found_right_email=right is not None and right in state.found_ids,
                ever_read_right_email=right is not None and right in state.read_ids,
                sources_correct=right is not None and right in state.sources,
                num_sources=len(state.sources),
                num_turns=len(episode.turns),
                answer_correct=await self.judge_answer(state),
            )
            parts = rubric_reward(rubric, self.max_turns)
        return RewardResult(sum(parts.values()), parts)

    async def judge_answer(self, state: EmailSearchState) -> bool:
        """Whether the judge accepts the answer (a failing judge counts as a rejection)."""
        judge = (self.auxiliary_model_wrappers or self.auxiliary_models or [None])[0]
        user = (
            f"Question: {self.query.question}\nReference answer: {self.query.answer}\n"
            f"AI answer: {state.answer}"
        )
        messages = [
            {"role": "system", "content": JUDGE_SYSTEM_PROMPT},
            {"role": "user", "content": user},
        ]
        try:
            reply = await ask_judge(judge, messages, None)
        except Exception as exc:  # noqa: BLE001 - the episode is scored as a rejection
            state.judge_error = f"{type(exc).__name__}: {exc}"
            self.logger.warning("%s: the judge failed: %s", self.workflow_name, state.judge_error)
            return False
        return "true" in reply.lower()

    def episode_info(self, episode: AgentEpisode) -> dict[str, Any]:
        state: EmailSearchState = episode.state
        info = {
            **super().episode_info(episode),
            "actual_turns": len(episode.turns),
            "answer": state.answer,
            "sources": list(state.sources),
        }
        if state.judge_error:
            info["judge_error"] = state.judge_error
        return info


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'row'}: {err['msg']}" for err in exc.errors()
    )
