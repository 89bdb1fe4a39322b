"""Image prompts the vision-language tests share (pictures from the built-in counting task)."""

from __future__ import annotations

from typing import Any

from trinity.launcher.counting_task import draw_squares


def squares(n: int, size: tuple[int, int] = (112, 112)) -> Any:
    """A picture of ``n`` squares (seeded by ``n``)."""
    return draw_squares(n, seed=n, size=size)


def ask(image: Any) -> list[dict]:
    """A user message asking about ``image`` (any form ``load_image`` reads)."""
    return [
        {
            "role": "user",
            "content": [{"type": "image", "image": image}, {"type": "text", "text": "="}],
        }
    ]
