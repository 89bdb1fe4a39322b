"""Multi-modal chat messages: images in prompts, as Trinity-RFT 0.6's ``mm_utils`` names them.

A message's ``content`` is text, or a list of parts: ``{"type": "text", "text": ...}``,
``{"type": "image", "image": REF}`` (Hugging Face's form) or OpenAI's
``{"type": "image_url", "image_url": {"url": REF}}``. An image ``REF`` is whatever a task set
holds for an image (:func:`load_image` reads each of them):

* a ``PIL.Image.Image``;
* a local path, or a ``file://`` URL;
* a ``data:image/...;base64,`` URL (what OpenAI clients send);
* raw ``bytes`` of an encoded image (PNG, JPEG, ...);
* a dict as Hugging Face ``datasets`` stores an ``Image`` feature undecoded:
  ``{"bytes": ..., "path": ...}``.

Images are not downloaded: an ``http(s)://`` URL is refused, saying so. Pillow is needed only
once an image is read.
"""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path
from typing import Any, Union

__all__ = [
    "build_mm_message",
    "has_multi_modal_content",
    "image_refs",
    "load_image",
    "should_use_processor",
]

_PROCESSOR_FILES = (
    "processor_config.json",
    "preprocessor_config.json",
    "video_preprocessor_config.json",
)


def should_use_processor(model_path: Union[str, Path]) -> bool:
    """Whether the model directory holds a processor (image or video preprocessor config),
    i.e. the model reads images as well as text."""
    path = Path(model_path)
    if path.is_file():
        path = path.parent
    return path.is_dir() and any((path / name).is_file() for name in _PROCESSOR_FILES)


def build_mm_message(prompt: str, images: list[Any], videos: list[Any]) -> dict[str, Any]:
    """A user message whose content places ``images`` and ``videos`` at the ``<image>`` and
    ``<video>`` tags of ``prompt`` (in order); media beyond the tags' count come first.

    A prompt without media stays a plain text message.

    Raises:
        ValueError: more ``<image>`` (or ``<video>``) tags than images (videos).
    """
    content: list[dict[str, Any]] = []
    used = {"image": 0, "video": 0}
    media = {"image": list(images), "video": list(videos)}
    for segment in re.split(r"(<image>|<video>)", prompt):
        if segment in ("<image>", "<video>"):
            kind = segment[1:-1]
            if used[kind] >= len(media[kind]):
                raise ValueError(
                    f"the prompt has more {segment} tags than the {len(media[kind])} "
                    f"{kind}(s) given"
                )
            content.append({"type": kind, kind: media[kind][used[kind]]})
            used[kind] += 1
        elif segment:
            content.append({"type": "text", "text": segment})
    surplus = [
        {"type": kind, kind: ref}
        for kind in ("image", "video")
        for ref in media[kind][used[kind] :]
    ]
    content = surplus + content
    if len(content) == 1 and content[0]["type"] == "text":
        return {"role": "user", "content": content[0]["text"]}
    return {"role": "user", "content": content}


def has_multi_modal_content(messages: list[dict[str, Any]]) -> bool:
    """Whether any message has a content part other than text."""
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            if any(part.get("type", "text") != "text" for part in content):
                return True
    return False


def image_refs(messages: list[dict[str, Any]]) -> list[Any]:
    """The image references of ``messages``' image parts, in order (the order the chat
    template writes their ``<|image_pad|>`` placeholders).

    Raises:
        ValueError: a video part (not supported yet), or an image part without a reference.
    """
    refs: list[Any] = []
    for index, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            kind = part.get("type", "text")
            if kind in ("video", "video_url"):
                raise ValueError(
                    f"messages[{index}]: video parts are not supported yet (images only)"
                )
            if kind == "image":
                ref = next((part[k] for k in ("image", "url", "path") if part.get(k)), None)
            elif kind == "image_url":
                ref = part.get("image_url")
                ref = ref.get("url") if isinstance(ref, dict) else ref
            else:
                continue
            if ref is None:
                raise ValueError(
                    f"messages[{index}]: an {kind!r} part without an image: {part!r}; give "
                    "'image' (a path, bytes, PIL image or data URL) or 'image_url': {'url': ...}"
                )
            refs.append(ref)
    return refs


def load_image(ref: Any) -> Any:
    """``ref`` (see the module's docstring) as an RGB ``PIL.Image.Image``.

    Raises:
        ValueError: ``ref`` is none of the accepted forms, an ``http(s)`` URL, or not an image.
        FileNotFoundError: a path that does not exist.
    """
    try:
        from PIL import Image
    except ModuleNotFoundError as exc:  # pragma: no cover - Pillow comes with transformers
        raise ImportError(
            "reading images needs Pillow: pip install 'trinity-core[vision]'"
        ) from exc

    if isinstance(ref, Image.Image):
        return ref.convert("RGB")
    if isinstance(ref, dict):
        if ref.get("bytes"):
            return load_image(bytes(ref["bytes"]))
        if ref.get("path"):
            return load_image(ref["path"])
        if ref.get("url"):
            return load_image(ref["url"])
        raise ValueError(f"an image dict needs 'bytes', 'path' or 'url'; got keys {sorted(ref)}")
    if isinstance(ref, (bytes, bytearray)):
        return _open(Image, io.BytesIO(ref), "the image bytes")
    if isinstance(ref, Path):
        ref = str(ref)
    if not isinstance(ref, str):
        raise ValueError(
            f"an image is a path, bytes, a data URL, a PIL image or a dict with 'bytes'/'path'; "
            f"got {type(ref).__name__}"
        )
    if ref.startswith("data:"):
        header, _, payload = ref.partition(",")
        if ";base64" not in header:
            raise ValueError(f"a data URL image must be base64-encoded; got {header!r}")
        return _open(Image, io.BytesIO(base64.b64decode(payload)), "the data URL's image")
    if re.match(r"https?://", ref):
        raise ValueError(
            f"image {ref!r}: URLs are not downloaded; save the image and give its path"
        )
    path = Path(ref[len("file://") :] if ref.startswith("file://") else ref).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"image {str(path)!r} does not exist")
    return _open(Image, path, str(path))


def _open(image_module: Any, source: Any, what: str) -> Any:
    try:
        image = image_module.open(source)
        image.load()
    except Exception as exc:  # PIL.UnidentifiedImageError, truncated files, ...
        raise ValueError(f"{what} is not an image Pillow can read: {exc}") from exc
    return image.convert("RGB")
