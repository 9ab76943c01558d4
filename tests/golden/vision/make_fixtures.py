#!/usr/bin/env python3
"""Golden fixtures for lpo's image input and DeepSeek-OCR-2 preprocessing, made with Pillow and HF
transformers' DeepseekOcr2ImageProcessorPil (the processor's Pillow backend: the one that runs without
torchvision).

Writes, under tests/golden/vision/:
  images/<name>.png|jpg   small images of every decoding case (gray, gray+alpha, palette, tRNS, 16-bit,
                          interlaced, EXIF orientations 1..8, progressive / grayscale JPEG) and the refused or
                          broken ones (16-bit gray, CMYK, truncated, garbage)
  expect/<name>.rgb       what Pillow gives for each readable image: Image.open, ImageOps.exif_transpose, then
                          the processor's RGB conversion (alpha composited onto white), raw RGB bytes
  expect/<name>_<w>x<h>.rgb   Pillow's bicubic resize of <name> to w x h (up and down, one axis or both)
  pages/<page>.png|jpg    rendered document pages (text, rules, a photo-like gradient)
  views/<page>_global.png, views/<page>_tile<i>.png
                          the processor's pixel_values / pixel_values_local of each page as the uint8 levels
                          they come from: v such that pixel == (float32(v / 255) - 0.5) / 0.5; the script
                          checks that this reconstruction equals HF's float32 values exactly before writing
  grids.json              [w, h, min_patches, max_patches, cols, rows]: get_optimal_tiled_canvas over sizes
  manifest.json           per image: size, orientation, expected status; per page: tile grid, view sizes,
                          token counts (the processor's replace_image_token), expanded prompt length

Usage: /work/venv-moe/bin/python tests/golden/vision/make_fixtures.py
"""
import io
import json
import os
import types

import numpy as np
from PIL import Image, ImageDraw, ImageFont, ImageOps

from transformers.image_utils import IMAGENET_STANDARD_MEAN, IMAGENET_STANDARD_STD
from transformers.models.deepseek_ocr2.image_processing_pil_deepseek_ocr2 import DeepseekOcr2ImageProcessorPil
from transformers.models.deepseek_ocr2.processing_deepseek_ocr2 import DeepseekOcr2Processor

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(20260)


def out(*parts):
    p = os.path.join(HERE, *parts)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    return p


def hf_rgb(path):
    """What the processor sees for a file: open, EXIF transpose (load_image), RGB conversion (alpha onto white)."""
    from transformers.image_transforms import convert_to_rgb
    im = Image.open(path)
    im = ImageOps.exif_transpose(im)
    return np.asarray(convert_to_rgb(im, return_numpy=True), dtype=np.uint8)


def exif_bytes(orientation):
    e = Image.Exif()
    e[0x0112] = orientation
    return e.tobytes()


def picture(w, h, channels=3):
    """Smooth gradients, edges and noise: every interpolation tap matters."""
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)), ((x ^ y) * 37) % 256], -1)
    a = (a + rng.integers(0, 40, a.shape)).clip(0, 255)
    a[h // 3:h // 2, :] = 250
    a[:, w // 4] = 5
    a = a.astype(np.uint8)
    if channels == 4:
        alpha = ((x * 7 + y * 13) % 256).astype(np.uint8)
        alpha[0, :] = 0
        alpha[1, :] = 255
        a = np.concatenate([a, alpha[..., None]], -1)
    return a


def images():
    """Small images of every decoding case -> (name, file name, expected status)."""
    cases = []
    W, H = 37, 23
    rgb = picture(W, H)
    rgba = picture(W, H, 4)
    gray = rgb[..., 0]

    def save(name, ext, img, status="ok", **kw):
        p = out("images", f"{name}.{ext}")
        img.save(p, **kw)
        cases.append((name, f"{name}.{ext}", status))

    save("rgb", "png", Image.fromarray(rgb))
    save("rgba", "png", Image.fromarray(rgba, "RGBA"))
    save("gray", "png", Image.fromarray(gray, "L"))
    save("gray_alpha", "png", Image.fromarray(np.stack([gray, rgba[..., 3]], -1), "LA"))
    save("gray_1bit", "png", Image.fromarray(gray > 128).convert("1"))
    pal = Image.fromarray(rgb).quantize(colors=37)
    save("palette", "png", pal)
    pal_t = pal.copy()
    save("palette_trns", "png", pal_t, transparency=bytes([0, 128] + [255] * 35))
    gray_t = Image.fromarray(gray, "L")
    save("gray_trns", "png", gray_t, transparency=int(gray[5, 5]))
    # 16-bit RGB / RGBA: written by hand-assembled arrays through Pillow's raw PNG writer is not possible;
    # numpy -> PNG via a minimal encoder of our own (zlib + chunks) for the 16-bit cases
    rgb16 = (rgb.astype(np.uint16) * 257 + rng.integers(0, 256, rgb.shape)).astype(">u2")
    write_png16(out("images", "rgb16.png"), rgb16, 2)
    cases.append(("rgb16", "rgb16.png", "ok"))
    rgba16 = (rgba.astype(np.uint16) * 257 + rng.integers(0, 256, rgba.shape)).astype(">u2")
    write_png16(out("images", "rgba16.png"), rgba16, 6)
    cases.append(("rgba16", "rgba16.png", "ok"))
    write_png16(out("images", "gray16.png"), (gray.astype(np.uint16) * 257).astype(">u2")[..., None], 0)
    cases.append(("gray16", "gray16.png", "unsupported"))
    write_png16(out("images", "interlaced.png"), rgb[..., :3], 2, depth=8, interlace=True)
    cases.append(("interlaced", "interlaced.png", "ok"))
    for o in range(1, 9):
        save(f"exif{o}", "jpg", Image.fromarray(rgb), quality=92, exif=exif_bytes(o))
    save("exif6_png", "png", Image.fromarray(rgb), exif=exif_bytes(6))
    save("jpeg420", "jpg", Image.fromarray(picture(64, 40)), quality=85)
    save("jpeg444", "jpg", Image.fromarray(picture(33, 17)), quality=95, subsampling=0)
    save("jpeg_gray", "jpg", Image.fromarray(gray, "L"), quality=90)
    save("jpeg_progressive", "jpg", Image.fromarray(picture(50, 30)), quality=80, progressive=True)
    save("cmyk", "jpg", Image.fromarray(rgb).convert("CMYK"), status="unsupported", quality=90)
    # broken files
    full = open(out("images", "jpeg420.jpg"), "rb").read()
    open(out("images", "truncated.jpg"), "wb").write(full[:len(full) * 2 // 3])
    cases.append(("truncated_jpg", "truncated.jpg", "format"))
    full = open(out("images", "rgb.png"), "rb").read()
    open(out("images", "truncated.png"), "wb").write(full[:len(full) // 2])
    cases.append(("truncated_png", "truncated.png", "format"))
    bad = bytearray(full)
    bad[40:60] = bytes(20)  # inside IDAT: a CRC and zlib error
    open(out("images", "corrupt.png"), "wb").write(bytes(bad))
    cases.append(("corrupt_png", "corrupt.png", "format"))
    open(out("images", "garbage.bin"), "wb").write(bytes(rng.integers(0, 256, 300, dtype=np.uint8)))
    cases.append(("garbage", "garbage.bin", "unsupported"))
    return cases


def write_png16(path, a, color_type, depth=16, interlace=False):
    """A PNG from an array (big-endian samples), any depth; Adam7 when interlace (Pillow writes neither)."""
    import struct
    import zlib
    h, w = a.shape[:2]
    a = a.reshape(h, w, -1)

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)

    def scan(sub):
        return b"".join(b"\x00" + sub[y].tobytes() for y in range(sub.shape[0]))

    if interlace:
        passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
        raw = b"".join(scan(a[y0::dy, x0::dx]) for x0, y0, dx, dy in passes if a[y0::dy, x0::dx].size)
    else:
        raw = scan(a)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, 1 if interlace else 0)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
    open(path, "wb").write(data)


def render_page(w, h, lines, seed):
    r = np.random.default_rng(seed)
    im = Image.new("RGB", (w, h), (250, 249, 245))
    d = ImageDraw.Draw(im)
    font = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 22)
    bold = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSerif-Bold.ttf", 34)
    d.text((60, 40), "Quarterly Report 2026", font=bold, fill=(20, 20, 60))
    d.line((60, 90, w - 60, 90), fill=(40, 40, 40), width=3)
    y = 110
    for i in range(lines):
        words = " ".join("".join(chr(97 + int(c)) for c in r.integers(0, 26, r.integers(2, 9)))
                         for _ in range(r.integers(5, 11)))
        d.text((60, y), words, font=font, fill=(10, 10, 10))
        y += 34
        if y > h - 200:
            break
    gy, gx = np.mgrid[0:120, 0:200]
    grad = np.stack([gx, gy * 2, (gx + gy) % 255], -1).astype(np.uint8)
    im.paste(Image.fromarray(grad), (w - 280, h - 170))
    return im


def main():
    manifest = {"images": [], "resizes": [], "pages": []}
    for name, fname, status in images():
        entry = {"name": name, "file": fname, "status": status}
        if status == "ok":
            a = hf_rgb(out("images", fname))
            open(out("expect", f"{name}.rgb"), "wb").write(a.tobytes())
            entry.update(width=a.shape[1], height=a.shape[0],
                         orientation=int(Image.open(out("images", fname)).getexif().get(0x0112, 1)))
        manifest["images"].append(entry)
    # Pillow's bicubic resize of decoded images (RGB), several directions and factors
    for name, sizes in [("rgb", [(37, 60), (80, 23), (11, 7), (100, 51), (5, 3), (36, 22), (1, 1), (36, 5), (35, 6), (70, 4)]),
                        ("jpeg420", [(200, 130), (17, 40), (64, 41), (60, 10)]), ("rgba", [(20, 50)])]:
        src = Image.fromarray(hf_rgb(out("images", [e for e in manifest["images"] if e["name"] == name][0]["file"])))
        for w, h in sizes:
            r = np.asarray(src.resize((w, h), Image.BICUBIC), dtype=np.uint8)
            open(out("expect", f"{name}_{w}x{h}.rgb"), "wb").write(r.tobytes())
            manifest["resizes"].append({"name": name, "width": w, "height": h})
    # pages through the processor
    proc = DeepseekOcr2ImageProcessorPil()
    fake = types.SimpleNamespace(patch_size=16, downsample_ratio=4, image_processor=proc)
    pages = [("page_portrait", "png", render_page(1000, 1300, 40, 1)),
             ("page_landscape", "jpg", render_page(1600, 900, 30, 2)),
             ("page_small", "png", render_page(700, 420, 6, 3)),
             ("page_wide", "png", render_page(2000, 500, 8, 4))]
    for name, ext, im in pages:
        path = out("pages", f"{name}.{ext}")
        im.save(path, **({"quality": 90} if ext == "jpg" else {}))
        pil = Image.open(path)
        pil = ImageOps.exif_transpose(pil)
        feats = proc(images=[pil], return_tensors="np")
        n_local = int(feats["num_local_patches"][0])
        views = [("global", feats["pixel_values"][0])]
        if n_local:
            views += [(f"tile{i}", feats["pixel_values_local"][i]) for i in range(n_local)]
        for vname, v in views:
            v = np.asarray(v, dtype=np.float32)
            assert v.shape[0] == 3
            levels = np.rint((v * np.float32(IMAGENET_STANDARD_STD[0]) + np.float32(IMAGENET_STANDARD_MEAN[0]))
                             * 255).clip(0, 255).astype(np.uint8)
            back = ((levels.astype(np.float64) * (1 / 255)).astype(np.float32) - np.float32(0.5)) / np.float32(0.5)
            assert np.array_equal(back, v), f"{name} {vname}: pixel values are not (v/255 - 0.5)/0.5 of bytes"
            Image.fromarray(levels.transpose(1, 2, 0)).save(out("views", f"{name}_{vname}.png"), optimize=True)
        tokens = len(DeepseekOcr2Processor.replace_image_token(
            types.SimpleNamespace(**vars(fake), image_token="<image>"), feats, 0)) // len("<image>")
        cols, rows = (0, 0)
        if n_local:
            from transformers.models.deepseek_ocr2.image_processing_pil_deepseek_ocr2 import get_optimal_tiled_canvas
            cols, rows = get_optimal_tiled_canvas((pil.height, pil.width), (768, 768), 2, 6)
        manifest["pages"].append({"name": name, "file": f"{name}.{ext}", "width": pil.width, "height": pil.height,
                                  "n_local": n_local, "cols": cols, "rows": rows,
                                  "global_size": int(feats["pixel_values"][0].shape[-1]),
                                  "n_image_tokens": tokens})
    # tile grids over many sizes (no pixels): the aspect-ratio rule and its ties
    from transformers.models.deepseek_ocr2.image_processing_pil_deepseek_ocr2 import get_optimal_tiled_canvas
    grids = []
    for w in range(100, 4001, 73):
        for h in range(100, 4001, 97):
            for mn, mx in [(2, 6), (1, 9)]:
                grids.append([w, h, mn, mx, *get_optimal_tiled_canvas((h, w), (768, 768), mn, mx)])
    with open(out("grids.json"), "w") as f:  # [w, h, min, max, cols, rows] per line
        f.write("[\n" + ",\n".join(json.dumps(g) for g in grids) + "\n]\n")
    with open(out("manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
