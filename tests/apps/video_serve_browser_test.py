"""`mixprec video serve` in a real browser: headless Chromium (Debian's `chromium`) loads the page
twice a second apart; the two screenshots must show different frames in the stream's area, and
the page's frame counter must have advanced. Exits 77 (skipped) without chromium.

    python3 video_serve_browser_test.py MIXPREC_BINARY OUTPUT_DIR
"""
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import zlib

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from video_serve_test import get_json, start_server, wait_for  # noqa: E402

WIDTH, HEIGHT = 1180, 760


def chromium(browser, url, *args):
    command = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               f"--window-size={WIDTH},{HEIGHT}", "--virtual-time-budget=2500", *args, url]
    return subprocess.run(command, capture_output=True, text=True, timeout=120).stdout


def read_png(path):
    """8-bit RGB or RGBA, not interlaced (what Chromium writes) -> (width, height, rows)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0, "unexpected PNG format"
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride = zlib.decompress(idat), width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):  # undo the row filter
            a = line[x - channels] if x >= channels else 0
            b, c = previous[x], previous[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + a) & 255
            elif kind == 2:
                line[x] = (line[x] + b) & 255
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line[x] for x in range(stride) if x % channels < 3))
        previous = line
    return width, height, rows


def frame_counter(dom):
    match = re.search(r'<td id="frames">(\d+)</td>', dom)
    return int(match.group(1)) if match else -1


def main():
    binary, out_dir = sys.argv[1], sys.argv[2]
    browser = shutil.which("chromium")
    if not browser:
        print("SKIPPED: Debian's chromium is not installed (apt-get install chromium)")
        return 77
    os.makedirs(out_dir, exist_ok=True)
    server, port = start_server(binary)
    failures = []
    try:
        url = f"http://127.0.0.1:{port}/"
        if not wait_for(lambda: get_json(port, "/api/figures")[1]["frames"] >= 3, 120):
            failures.append("the server made no frames")
        shots = [os.path.join(out_dir, f"video_serve_{i}.png") for i in (1, 2)]
        counters = []
        for i, shot in enumerate(shots):
            if i:
                time.sleep(1)
            counters.append(frame_counter(chromium(browser, url, "--dump-dom")))
            chromium(browser, url, f"--screenshot={shot}")
        (w1, h1, a), (w2, h2, b) = read_png(shots[0]), read_png(shots[1])
        # The stream is the left part of the page; its pixels change between frames.
        stream_width = int(w1 * 0.4) * 3
        changed = sum(1 for y in range(min(h1, h2)) for i in range(0, stream_width, 3)
                      if a[y][i:i + 3] != b[y][i:i + 3])
        print(f"screenshots {shots[0]} and {shots[1]}: {changed} stream-area pixels differ; "
              f"frame counters {counters}")
        if changed < 2000:
            failures.append(f"the stream looks the same in both screenshots ({changed} pixels)")
        if not (0 <= counters[0] < counters[1]):
            failures.append(f"the page's frame counter did not advance: {counters}")
    finally:
        server.terminate()
        server.wait(timeout=30)
    for f in failures:
        print(f"FAILED: {f}")
    print(f"video serve browser: {2 - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
