"""The built-in vision task: "how many squares are in the picture?" (answers 1-5).

Images are drawn locally with Pillow, so the task needs no download and a tiny VLM (the
``vlm`` preset of :mod:`trinity.launcher.tiny_model`) can learn it on a CPU: ``n`` black squares
of 20 pixels on a white 84 x 84 canvas, in cells of a 3 x 3 grid chosen at random (seeded),
so the count is what varies and the squares never touch.

``python -m trinity.launcher.counting_task DIR [--rows N] [--seed S]`` writes ``DIR/train.jsonl``
and ``DIR/test.jsonl``: one row per picture, ``{"question", "answer", "images": [PATH]}`` with
the PNGs in ``DIR/images`` (absolute paths; ``format.image_key: images``).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Optional

__all__ = ["COUNTING_QUESTION", "draw_squares", "write_counting_taskset"]

COUNTING_QUESTION = "How many squares?"
#: 3 x 3 cells of 28 pixels: with the ``vlm`` preset's 14-pixel patches merged 2 x 2, each
#: cell is exactly one image token, so the count is the number of dark tokens
_CANVAS = 84
_SQUARE = 20


def draw_squares(count: int, seed: int = 0, size: tuple[int, int] = (_CANVAS, _CANVAS)) -> Any:
    """A white RGB ``PIL.Image`` of ``size`` with ``count`` (0-9) black squares in distinct
    cells of a 3 x 3 grid chosen with ``seed``."""
    from PIL import Image, ImageDraw

    if not 0 <= count <= 9:
        raise ValueError(f"count must be between 0 and 9 (cells of a 3 x 3 grid), got {count}")
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    cell_w, cell_h = size[0] // 3, size[1] // 3
    side = max(2, min(_SQUARE, cell_w - 4, cell_h - 4))
    for cell in random.Random(seed).sample(range(9), count):
        x = (cell % 3) * cell_w + (cell_w - side) // 2
        y = (cell // 3) * cell_h + (cell_h - side) // 2
        draw.rectangle([x, y, x + side - 1, y + side - 1], fill="black")
    return image


def write_counting_taskset(
    directory: Path, rows: int = 64, seed: int = 0, test_rows: Optional[int] = None
) -> Path:
    """Write ``train.jsonl`` (``rows`` pictures) and ``test.jsonl`` (``test_rows``, default a
    quarter) with their PNGs under ``directory``; counts 1-5, evenly spread."""
    directory = Path(directory)
    (directory / "images").mkdir(parents=True, exist_ok=True)
    test_rows = max(5, rows // 4) if test_rows is None else test_rows
    for split, count, offset in (("train", rows, 0), ("test", test_rows, 1_000_000)):
        lines = []
        for index in range(count):
            answer = 1 + index % 5
            name = f"images/{split}_{index:05d}.png"
            draw_squares(answer, seed=seed + offset + index).save(directory / name)
            lines.append(
                json.dumps(
                    {
                        "question": COUNTING_QUESTION,
                        "answer": str(answer),
                        "images": [str((directory / name).resolve())],
                    }
                )
            )
        (directory / f"{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return directory


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m trinity.launcher.counting_task DIR``: write the counting task set."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory")
    parser.add_argument("--rows", type=int, default=64, help="training pictures (default 64)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(write_counting_taskset(Path(args.directory), args.rows, args.seed))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
