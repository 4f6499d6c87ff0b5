"""Input images of vision workloads: synthetic document pages drawn from the seed, or the user's files.

Synthetic pages are drawn with Pillow, deterministically from (seed, index): a title, paragraphs of text lines,
ruled tables and a figure box, on pages of different sizes and aspect ratios (portrait, landscape, receipt,
square, small note) so that the processor cuts them into different numbers of crops. Kernel profiles depend on
sizes, not on what the page says; the pages only need the shapes and contrasts of real documents.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont, UnidentifiedImageError

from kernelscope.errors import UserError

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}

# (kind, width, height): page shapes in the order synthetic images cycle through them. With DeepSeek-OCR-2's
# processor (768-pixel crops, 2 to 6 of them for images larger than a crop) they make 6, 2, 0, 3, 4 and 6 crops.
PAGE_SHAPES = [
    ("portrait page", 1240, 1754),
    ("slide", 1600, 800),
    ("note", 700, 520),
    ("receipt", 560, 1680),
    ("square page", 1100, 1100),
    ("wide table", 1800, 1200),
]

WORDS = ("the", "model", "reads", "each", "page", "and", "writes", "its", "text", "as", "markdown", "with",
         "tables", "headings", "kernel", "time", "decode", "prefill", "image", "encoder", "query", "token",
         "layer", "expert", "cache", "memory", "bandwidth", "report", "total", "value", "quarter", "revenue",
         "invoice", "amount", "date", "item", "price", "sum", "note", "figure", "section", "result", "method",
         "data")


@dataclass(frozen=True)
class DocImage:
    """An input image and where it came from (a file path, or 'synthetic <kind>')."""

    image: Image.Image
    source: str

    @property
    def size(self) -> tuple[int, int]:
        return self.image.size


def synthetic_documents(count: int, seed: int) -> list[DocImage]:
    """`count` document-like RGB pages, the same for the same seed."""
    pages = []
    for index in range(count):
        kind, width, height = PAGE_SHAPES[(seed + index) % len(PAGE_SHAPES)]
        rng = random.Random(seed * 7919 + index)
        # A little jitter, so that pages of one kind still differ.
        width = int(width * rng.uniform(0.95, 1.05))
        height = int(height * rng.uniform(0.95, 1.05))
        pages.append(DocImage(_draw_page(width, height, rng), f"synthetic {kind}"))
    return pages


def load_images(paths: list[Path]) -> list[DocImage]:
    """Image files, and the image files (by suffix, sorted by name) of directories. A file that is not a readable
    image is a UserError naming it."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
            if not found:
                raise UserError(f"--image {path}: the directory holds no image files "
                                f"({', '.join(sorted(IMAGE_SUFFIXES))})")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise UserError(f"--image {path}: no such file or directory")
    return [DocImage(_open(f), str(f)) for f in files]


def _open(path: Path) -> Image.Image:
    try:
        with Image.open(path) as image:
            image.load()
            return image.convert("RGB")
    except UnidentifiedImageError:
        raise UserError(f"--image {path}: not an image file Pillow can read") from None
    except Image.DecompressionBombError as exc:
        raise UserError(f"--image {path}: image too large ({exc})") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise UserError(f"--image {path}: cannot read the image ({_first_line(exc)})") from None


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError):  # Pillow without FreeType: the fixed bitmap font
        return ImageFont.load_default()


def _draw_page(width: int, height: int, rng: random.Random) -> Image.Image:
    page = Image.new("RGB", (width, height), (250, 250, 247))
    draw = ImageDraw.Draw(page)
    margin = max(16, width // 16)
    unit = max(10, min(width, height) // 60)  # text height
    y = margin
    draw.text((margin, y), _sentence(rng, 3, 6).title(), fill=(10, 10, 10), font=_font(unit * 2))
    y += unit * 4
    while y < height - margin - unit * 3:
        block = rng.random()
        if block < 0.55:
            y = _paragraph(draw, rng, margin, y, width - margin, height - margin, unit)
        elif block < 0.85:
            y = _table(draw, rng, margin, y, width - margin, height - margin, unit)
        else:
            box = min(height - margin, y + rng.randint(4, 10) * unit)
            draw.rectangle((margin, y, width - margin, box), outline=(60, 60, 60), width=2,
                           fill=(rng.randint(200, 240), rng.randint(200, 240), rng.randint(200, 240)))
            y = box + unit * 2
    return page


def _paragraph(draw: ImageDraw.ImageDraw, rng: random.Random, left: int, y: int, right: int, bottom: int,
               unit: int) -> int:
    font = _font(unit)
    for _ in range(rng.randint(2, 7)):
        if y > bottom - unit * 2:
            break
        draw.text((left, y), _line(rng, right - left, unit), fill=(20, 20, 20), font=font)
        y += int(unit * 1.6)
    return y + unit


def _table(draw: ImageDraw.ImageDraw, rng: random.Random, left: int, y: int, right: int, bottom: int,
           unit: int) -> int:
    columns, rows = rng.randint(2, 5), rng.randint(2, 6)
    row_height = int(unit * 2)
    rows = max(1, min(rows, (bottom - y) // row_height - 1))
    cell = (right - left) // columns
    font = _font(unit)
    for r in range(rows + 1):
        draw.line((left, y + r * row_height, left + cell * columns, y + r * row_height), fill=(40, 40, 40), width=1)
    for c in range(columns + 1):
        draw.line((left + c * cell, y, left + c * cell, y + rows * row_height), fill=(40, 40, 40), width=1)
    for r in range(rows):
        for c in range(columns):
            text = rng.choice(WORDS) if r == 0 else f"{rng.uniform(0, 1000):.2f}"
            draw.text((left + c * cell + unit // 2, y + r * row_height + unit // 3), text, fill=(0, 0, 0), font=font)
    return y + rows * row_height + unit * 2


def _sentence(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def _line(rng: random.Random, width: int, unit: int) -> str:
    words = max(2, int(width / (unit * 3.2)))
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(words // 2, words)))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
