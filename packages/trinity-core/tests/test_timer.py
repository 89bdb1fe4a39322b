"""``trinity.utils.timer.Timer``: Trinity-RFT's way of timing a block into a metrics dict."""

from __future__ import annotations

import time

import pytest

from trinity.utils.timer import Timer


def test_timer_writes_the_block_s_seconds_under_the_key_as_given():
    metrics: dict = {"other": 1}
    with Timer(metrics, "time/train_step") as timer:
        time.sleep(0.02)
    assert set(metrics) == {"other", "time/train_step"}
    assert metrics["time/train_step"] == timer.elapsed >= 0.02


def test_timer_records_a_block_that_raises_and_lets_the_error_through():
    metrics: dict = {}
    with pytest.raises(ValueError, match="boom"):
        with Timer(metrics, "read_time"):
            raise ValueError("boom")
    assert metrics["read_time"] >= 0.0
