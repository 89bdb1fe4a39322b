"""Multi-modal messages: Trinity-RFT 0.6's ``build_mm_message`` and friends, and every form of
image reference a task set can hold."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from trinity.common.models.mm_utils import (
    build_mm_message,
    has_multi_modal_content,
    image_refs,
    load_image,
    should_use_processor,
)


def png(color: str = "red", size: tuple[int, int] = (8, 6)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def test_images_go_where_their_tags_are_and_surplus_media_first():
    message = build_mm_message("First <image> then <video> and <image>", ["a", "b", "c"], ["v"])
    assert message == {
        "role": "user",
        "content": [
            {"type": "image", "image": "c"},
            {"type": "text", "text": "First "},
            {"type": "image", "image": "a"},
            {"type": "text", "text": " then "},
            {"type": "video", "video": "v"},
            {"type": "text", "text": " and "},
            {"type": "image", "image": "b"},
        ],
    }


def test_a_prompt_without_media_stays_text():
    assert build_mm_message("2+2=", [], []) == {"role": "user", "content": "2+2="}


def test_more_tags_than_images_is_refused():
    with pytest.raises(ValueError, match=r"more <image> tags than the 1 image"):
        build_mm_message("<image><image>", ["a"], [])


def test_has_multi_modal_content():
    assert not has_multi_modal_content([{"role": "user", "content": "hi"}])
    assert not has_multi_modal_content([{"role": "user", "content": [{"type": "text"}]}])
    assert has_multi_modal_content([{"role": "user", "content": [{"type": "image_url"}]}])


def test_image_refs_reads_hf_and_openai_parts_in_order():
    messages = [
        {"role": "system", "content": "s"},
        {
            "role": "user",
            "content": [
                {"type": "image", "image": "a.png"},
                {"type": "text", "text": "x"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
                {"type": "image", "path": "c.png"},
            ],
        },
    ]
    assert image_refs(messages) == ["a.png", "data:image/png;base64,AA", "c.png"]


def test_video_parts_and_empty_image_parts_are_refused_naming_the_message():
    with pytest.raises(ValueError, match=r"messages\[0\]: video parts are not supported yet"):
        image_refs([{"role": "user", "content": [{"type": "video", "video": "v.mp4"}]}])
    with pytest.raises(ValueError, match=r"messages\[1\]: an 'image' part without an image"):
        image_refs(
            [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "image"}]}]
        )


def test_every_image_form_loads_to_the_same_rgb_image(tmp_path):
    data = png()
    path = tmp_path / "red.png"
    path.write_bytes(data)
    forms = [
        Image.open(io.BytesIO(data)),
        str(path),
        path,
        f"file://{path}",
        "data:image/png;base64," + base64.b64encode(data).decode(),
        data,
        {"bytes": data, "path": None},
        {"bytes": None, "path": str(path)},
        {"url": str(path)},
    ]
    expected = Image.open(io.BytesIO(data)).convert("RGB").tobytes()
    for form in forms:
        image = load_image(form)
        assert image.mode == "RGB" and image.size == (8, 6), form
        assert image.tobytes() == expected, type(form)


def test_bad_image_references_say_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.png"):
        load_image(str(tmp_path / "missing.png"))
    with pytest.raises(ValueError, match="URLs are not downloaded"):
        load_image("https://example.com/cat.png")
    with pytest.raises(ValueError, match="not an image Pillow can read"):
        load_image(b"not a png")
    with pytest.raises(ValueError, match="must be base64-encoded"):
        load_image("data:image/png,abc")
    with pytest.raises(ValueError, match="needs 'bytes', 'path' or 'url'"):
        load_image({"src": "x"})
    with pytest.raises(ValueError, match="got int"):
        load_image(3)


def test_should_use_processor_looks_for_a_preprocessor_config(tmp_path):
    assert not should_use_processor(tmp_path)
    assert not should_use_processor(tmp_path / "absent")
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "preprocessor_config.json").write_text("{}")
    assert should_use_processor(tmp_path)
    assert should_use_processor(tmp_path / "config.json")
