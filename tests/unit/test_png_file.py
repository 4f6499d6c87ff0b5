"""The PNG files report figures are written as: any reader (Pillow here, and zlib's own check of each chunk) gets the
exact pixels and resolution back."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from kernelscope.report import png_file


def _read(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def _chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """Each chunk's type and data, its CRC checked independently of the writer."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    out, at = [], 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length:at + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        out.append((kind, body))
        at += 12 + length
    return out


def test_translucent_pixels_come_back_exactly_as_rgba():
    rng = np.random.default_rng(7)
    pixels = rng.integers(0, 256, size=(37, 53, 4), dtype=np.uint8)
    image = _read(png_file.png_bytes(pixels, 150))
    assert image.mode == "RGBA" and image.size == (53, 37)
    assert (np.asarray(image) == pixels).all()


def test_opaque_pixels_are_stored_as_rgb_and_come_back_exactly():
    rng = np.random.default_rng(8)
    pixels = rng.integers(0, 256, size=(20, 31, 4), dtype=np.uint8)
    pixels[..., 3] = 255
    data = png_file.png_bytes(pixels, 150)
    image = _read(data)
    assert image.mode == "RGB"
    assert (np.asarray(image) == pixels[..., :3]).all()
    kinds = [kind for kind, _ in _chunks(data)]
    assert kinds == [b"IHDR", b"pHYs", b"IDAT", b"IEND"]


def test_rgb_input_and_the_resolution_pillow_reads():
    pixels = np.zeros((4, 6, 3), dtype=np.uint8)
    pixels[1, 2] = (255, 10, 0)
    image = _read(png_file.png_bytes(pixels, 150))
    assert (np.asarray(image) == pixels).all()
    # The resolution is stored per metre, in whole dots: read back as Pillow's own file of these pixels reads.
    theirs = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(theirs, format="png", dpi=(150, 150))
    assert image.info["dpi"] == _read(theirs.getvalue()).info["dpi"] == pytest.approx((150, 150), abs=0.02)


def test_every_row_is_unfiltered():
    pixels = np.arange(5 * 7 * 3, dtype=np.uint8).reshape(5, 7, 3)
    idat = b"".join(body for kind, body in _chunks(png_file.png_bytes(pixels, 72)) if kind == b"IDAT")
    rows = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(5, 1 + 7 * 3)
    assert (rows[:, 0] == 0).all()
    assert (rows[:, 1:] == pixels.reshape(5, -1)).all()


def test_a_drawn_figure_decodes_to_its_own_buffer(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.loglog([1, 10, 100], [3, 30, 20], label="a line")
    ax.set_title("title")
    ax.legend()
    fig.canvas.draw()
    pixels = np.asarray(fig.canvas.get_renderer().buffer_rgba()).copy()
    plt.close(fig)
    path = tmp_path / "figure.png"
    png_file.write_png(path, pixels, 150)
    assert (np.asarray(Image.open(path).convert("RGBA")) == pixels).all()


@pytest.mark.parametrize("pixels", [np.zeros((2, 2, 4), dtype=np.float32), np.zeros((2, 2), dtype=np.uint8),
                                    np.zeros((2, 2, 2), dtype=np.uint8)])
def test_a_buffer_that_is_not_8_bit_rgb_or_rgba_is_refused(pixels):
    with pytest.raises(ValueError, match="8-bit RGB or RGBA"):
        png_file.png_bytes(pixels, 150)
