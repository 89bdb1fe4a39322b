"""The ``trinity view`` page (Streamlit): an experience table, a page of rows at a time.

``trinity view`` checks its options and starts this script with the target in the environment
(:meth:`trinity.launcher.viewer.ViewTarget.environment`); the data access and decoding are in
:mod:`trinity.launcher.viewer`, so this file is only layout. The sidebar filters by reward and
model version range and by EID; the table shows id, EID, reward, model version, prompt and
response lengths and text; the selected row shows its metrics, info, prompt and response (or,
``--schema sft``, its conversation) and the log-prob of every response token. Every rerun
(any widget, or Refresh) reads the table again, so a run that is still writing shows its new
rows.
"""

from __future__ import annotations

import math
import os
from typing import Any, Optional

import streamlit as st

from trinity.launcher.viewer import (
    ENV_SCHEMA,
    ENV_TABLE,
    ENV_TOKENIZER,
    ENV_URL,
    ExperienceRow,
    ExperienceTable,
    RowFilter,
    ViewError,
    decode_experience,
    load_tokenizer,
    messages_of,
    token_details,
)

PREVIEW_CHARS = 200


@st.cache_resource(show_spinner=False)
def _table(url: str, table: str) -> ExperienceTable:
    # one open table per (database, table) for the server's lifetime: reruns reuse it
    return ExperienceTable(url, table)


@st.cache_resource(show_spinner="Loading the tokenizer...")
def _tokenizer(path: str) -> Any:
    return load_tokenizer(path)


def _number(label: str, key: str, cast: type) -> Optional[Any]:
    """A sidebar text box read as a number (empty: no bound); a bad value is shown and
    ignored rather than stopping the page."""
    text = st.sidebar.text_input(label, key=key).strip()
    if not text:
        return None
    try:
        return cast(text)
    except ValueError:
        st.sidebar.error(f"{label}: {text!r} is not a number")
        return None


def _filters() -> RowFilter:
    st.sidebar.header("Filters")
    return RowFilter(
        reward_min=_number("Reward from", "reward_min", float),
        reward_max=_number("Reward to", "reward_max", float),
        version_min=_number("Model version from", "version_min", int),
        version_max=_number("Model version to", "version_max", int),
        eid_contains=st.sidebar.text_input("EID contains", key="eid_contains").strip(),
    )


def _preview(text: str) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _record(row: ExperienceRow, tokenizer: Any, schema: str) -> dict[str, Any]:
    """One line of the page's table."""
    decoded = decode_experience(row.experience, tokenizer)
    record: dict[str, Any] = {
        "id": row.id,
        "eid": row.eid,
        "reward": row.reward,
        "model version": row.model_version,
        "prompt tokens": decoded.prompt_length,
        "response tokens": decoded.response_length,
    }
    if schema == "sft":
        turns = messages_of(row.experience, tokenizer)
        record["turns"] = len(turns)
        record["last message"] = _preview(turns[-1]["content"]) if turns else ""
    else:
        record["prompt"] = _preview(decoded.prompt_text)
        record["response"] = _preview(decoded.response_text)
    return record


def _set_page(page: int) -> None:
    st.session_state["page"] = page


def _pager(total: int, per_page: int) -> int:
    """The page number box and Previous / Next; returns the page to show."""
    pages = max(1, math.ceil(total / per_page))
    if int(st.session_state.get("page", 1)) > pages:  # fewer rows match now
        st.session_state["page"] = pages
    page = int(st.session_state.get("page", 1))
    prev_col, page_col, next_col = st.columns([1, 2, 1])
    prev_col.button(
        "Previous", key="previous", disabled=page <= 1, on_click=_set_page, args=(page - 1,)
    )
    page_col.number_input(f"Page (of {pages})", min_value=1, max_value=pages, step=1, key="page")
    next_col.button(
        "Next", key="next", disabled=page >= pages, on_click=_set_page, args=(page + 1,)
    )
    return int(st.session_state["page"])


def _detail(row: ExperienceRow, tokenizer: Any, schema: str) -> None:
    """The selected row: metrics, info, its text and its response tokens' log-probs."""
    exp = row.experience
    decoded = decode_experience(exp, tokenizer)
    st.subheader(f"Experience #{row.id}: {row.eid}")
    cols = st.columns(4)
    cols[0].metric("Reward", "-" if row.reward is None else f"{row.reward:.4f}")
    cols[1].metric("Model version", "-" if row.model_version is None else row.model_version)
    cols[2].metric("Prompt tokens", decoded.prompt_length)
    cols[3].metric("Response tokens", decoded.response_length)
    left, right = st.columns(2)
    with left:
        st.markdown("**Metrics**")
        st.json(exp.metrics or {})
    with right:
        st.markdown("**Info**")
        st.json(exp.info or {}, expanded=False)
    if schema == "sft":
        st.markdown("**Conversation**")
        for turn in messages_of(exp, tokenizer):
            with st.chat_message(turn["role"] or "user"):
                st.text(turn["content"])
    else:
        st.markdown("**Prompt**")
        st.code(decoded.prompt_text, language=None, wrap_lines=True)
        st.markdown("**Response**")
        st.code(decoded.response_text, language=None, wrap_lines=True)
    tokens = token_details(exp, tokenizer)
    logprobs = [t["logprob"] for t in tokens if t["logprob"] is not None]
    title = "**Response tokens**"
    if logprobs:
        title += f" (mean log-prob {sum(logprobs) / len(logprobs):.4f})"
    st.markdown(title)
    if tokens:
        st.dataframe(tokens, hide_index=True)
    else:
        st.caption("No response tokens.")


def main() -> None:
    """The page (run by Streamlit on every interaction)."""
    st.set_page_config(page_title="Trinity experience viewer", layout="wide")
    url, table_name = os.environ.get(ENV_URL, ""), os.environ.get(ENV_TABLE, "")
    tokenizer_path = os.environ.get(ENV_TOKENIZER, "")
    schema = os.environ.get(ENV_SCHEMA, "experience") or "experience"
    st.title("Trinity experience viewer")
    if not (url and table_name and tokenizer_path):
        st.error("Start this page with `trinity view --url URL --table TABLE --tokenizer PATH`.")
        st.stop()
    try:
        table = _table(url, table_name)
        tokenizer = _tokenizer(tokenizer_path)
    except ViewError as exc:
        st.error(str(exc))
        st.stop()
    st.caption(f"Table `{table_name}` in `{url}` · schema {schema}")

    filters = _filters()
    st.sidebar.divider()
    newest_first = st.sidebar.checkbox("Newest first", key="newest_first")
    per_page = int(
        st.sidebar.number_input(
            "Rows per page", min_value=1, max_value=100, value=20, key="per_page"
        )
    )
    st.sidebar.button("Refresh", key="refresh", help="read the table again")

    total = table.count(filters)
    all_rows = table.count()
    page = _pager(total, per_page)
    rows = table.rows((page - 1) * per_page, per_page, filters, newest_first)
    st.caption(f"{total} of {all_rows} experiences match the filters")
    if not rows:
        st.info("No experiences match the filters." if all_rows else "The table is empty.")
        return
    st.dataframe([_record(r, tokenizer, schema) for r in rows], hide_index=True)

    by_id = {r.id: r for r in rows}
    if st.session_state.get("selected") not in by_id:  # another page or filter
        st.session_state["selected"] = rows[0].id
    selected = st.selectbox(
        "Show experience",
        options=list(by_id),
        format_func=lambda i: f"#{i}  {by_id[i].eid}  reward={by_id[i].reward}",
        key="selected",
    )
    _detail(by_id[selected], tokenizer, schema)


main()
