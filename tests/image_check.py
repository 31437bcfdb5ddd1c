#!/usr/bin/env python3
"""Writes Pillow's resize_with_pad results for many source sizes (smaller, larger, non-square, odd, 1-pixel,
already 224) into a safetensors file for build/tests/test_image. The reference is openpi_client's
image_tools.resize_with_pad (Pillow BILINEAR), restated. Seeded. Usage: image_check.py OUT.safetensors"""
import json, struct, sys

import numpy as np
from PIL import Image

def resize_with_pad(img, height, width):
    cur_width, cur_height = img.size
    if cur_width == width and cur_height == height:
        return img
    ratio = max(cur_width / width, cur_height / height)
    rh, rw = int(cur_height / ratio), int(cur_width / ratio)
    resized = img.resize((rw, rh), resample=Image.BILINEAR)
    canvas = Image.new(resized.mode, (width, height), 0)
    canvas.paste(resized, (max(0, int((width - rw) / 2)), max(0, int((height - rh) / 2))))
    return canvas

rng = np.random.RandomState(7)
sizes = [(224, 224), (480, 640), (640, 480), (256, 256), (96, 96), (1, 1), (2, 300), (300, 2), (223, 225), (225, 223),
         (720, 1280), (1080, 1920), (100, 50), (50, 100), (333, 777), (13, 17), (224, 448), (448, 224), (227, 227)]
sizes += [(int(rng.randint(4, 900)), int(rng.randint(4, 900))) for _ in range(45)]
tensors = {}
for k, (h, w) in enumerate(sizes):
    if k % 3 == 0:   # smooth content as well as noise
        yy, xx = np.mgrid[0:h, 0:w]
        src = np.stack([(xx * 255 // max(w - 1, 1)), (yy * 255 // max(h - 1, 1)), ((xx + yy) % 256)], -1).astype(np.uint8)
    else:
        src = rng.randint(0, 256, size=(h, w, 3)).astype(np.uint8)
    want = np.asarray(resize_with_pad(Image.fromarray(src), 224, 224))
    tensors["src.%d" % k], tensors["want.%d" % k] = src, want
header, blobs, off = {}, [], 0
for name, a in tensors.items():
    b = np.ascontiguousarray(a).tobytes()
    header[name] = {"dtype": "U8", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
print("image_check: wrote %d images (Pillow %s)" % (len(sizes), Image.__version__))
