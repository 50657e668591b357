"""Images among a run's output files, as content blocks a model can see."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from .results import OutputFile, Result

# At most this many images go back to the model per call, each at most
# MAX_IMAGE_BYTES: a chart is tens of kilobytes, and every image costs the
# model's context (a 1000 x 1000 chart is over a thousand tokens); both
# APIs refuse images over about 5 MB.
MAX_IMAGES = 4
MAX_IMAGE_BYTES = 1 << 20

# The formats both APIs accept, by their first bytes.
_SIGNATURES: Tuple[Tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)

TOOL_FORMATS = ("anthropic", "openai")


def media_type(data: bytes) -> Optional[str]:
    """The image's media type, or None when it is none the APIs take."""
    for sig, mt in _SIGNATURES:
        if data.startswith(sig):
            return mt
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def images_of(result: Result) -> Tuple[List[Tuple[OutputFile, str]], List[OutputFile]]:
    """The returned output files that are images: those to show (the first
    MAX_IMAGES within MAX_IMAGE_BYTES each, with their media type) and those
    left out for the bounds."""
    shown: List[Tuple[OutputFile, str]] = []
    left: List[OutputFile] = []
    for f in result.files or []:
        if not f.returned or f.encoding != "base64":
            continue  # images are never valid UTF-8, so they come as base64
        mt = media_type(f.data()[:16])
        if mt is None:
            continue
        if len(shown) < MAX_IMAGES and f.size <= MAX_IMAGE_BYTES:
            shown.append((f, mt))
        else:
            left.append(f)
    return shown, left


def image_block(f: OutputFile, mt: str, tool_format: str) -> Dict[str, Any]:
    """One image as a content block: Anthropic's image block (valid in a
    tool_result's content) or OpenAI's image_url part."""
    if tool_format == "openai":
        return {"type": "image_url", "image_url": {"url": f"data:{mt};base64,{f.content}"}}
    return {"type": "image", "source": {"type": "base64", "media_type": mt, "data": f.content}}
