"""`mixprec video serve` end to end, as a browser or a script meets it (issue #19).

Starts the server on a free loopback port, checks the page, the JSON figures and health, that the
MJPEG stream's frames change, the controls (good and malformed), bad requests (unknown paths,
oversized headers and bodies, a garbage request line), the viewer limit, many connections at once,
and a clean SIGTERM shutdown. Every socket goes to 127.0.0.1 only, and every wait is bounded.

    python3 video_serve_test.py MIXPREC_BINARY
"""
import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time

HOST = "127.0.0.1"
MAX_VIEWERS = 3
passed = failed = 0


def check(condition, what):
    global passed, failed
    if condition:
        passed += 1
    else:
        failed += 1
        print(f"FAILED: {what}", flush=True)


def request(port, method, path, body=None, headers=None, timeout=30):
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def get_json(port, path):
    status, _, body = request(port, "GET", path)
    return status, json.loads(body)


def control(port, form):
    return request(port, "POST", "/api/control", body=form,
                   headers={"Content-Type": "application/x-www-form-urlencoded"})


def raw(port, data, timeout=15):
    """Sends bytes as they are and returns the status line of the answer ('' if none)."""
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        s.sendall(data)
        answer = b""
        while b"\r\n" not in answer:
            chunk = s.recv(4096)
            if not chunk:
                break
            answer += chunk
    return answer.split(b"\r\n", 1)[0].decode(errors="replace")


class MjpegReader:
    """Reads the parts of a multipart/x-mixed-replace stream from a raw socket."""

    def __init__(self, port, stream=0):
        self.sock = socket.create_connection((HOST, port), timeout=20)
        self.sock.sendall(f"GET /stream/{stream} HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
        self.buffer = b""
        head = self._read_until(b"\r\n\r\n")
        self.status_line = head.split(b"\r\n", 1)[0].decode()
        self.headers = head.decode(errors="replace").lower()

    def _read_until(self, marker):
        while marker not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("stream ended")
            self.buffer += chunk
        head, self.buffer = self.buffer.split(marker, 1)
        return head

    def _read_exactly(self, n):
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("stream ended")
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def next_jpeg(self):
        headers = self._read_until(b"\r\n\r\n").decode(errors="replace")
        length = int(re.search(r"Content-Length: (\d+)", headers, re.I).group(1))
        return self._read_exactly(length)

    def close(self):
        self.sock.close()


TEST_OPTIONS = ["--steps", "2", "--precision", "bf16", "--max-viewers", str(MAX_VIEWERS),
                "--fps", "25"]


def start_server(binary, options=TEST_OPTIONS):
    """Starts `mixprec video serve` on a free loopback port; returns (process, port)."""
    server = subprocess.Popen(
        [binary, "video", "serve", "--bind", HOST, "--port", "0", *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = server.stdout.readline()  # model loading can take a while on a busy machine
    match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
    if not match:
        server.kill()
        sys.exit(f"the server did not start: {line!r} {server.stderr.read()!r}")
    return server, int(match.group(1))


def wait_for(predicate, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_page_figures_and_stream(port):
    status, headers, body = request(port, "GET", "/")
    page = body.decode()
    check(status == 200 and headers.get("Content-Type", "").startswith("text/html"), "page is HTML")
    check("image-rendering: pixelated" in page and "/api/figures" in page, "page has the stream view")
    check(not re.search(r"(src|href)=\"https?:", page), "page fetches nothing from elsewhere")

    status, health = get_json(port, "/api/health")
    check(status == 200 and health["status"] == "ok", f"health ok: {health}")

    check(wait_for(lambda: get_json(port, "/api/figures")[1]["frames"] >= 3, 120), "frames are made")
    status, figures = get_json(port, "/api/figures")
    check(status == 200, "figures answer 200")
    for key in ("fps", "ms_per_frame", "frames", "late", "dropped", "viewers", "precision",
                "kernel_level", "steps", "paused", "recent_ms"):
        check(key in figures, f"figures have {key}")
    check(figures["ms_per_frame"]["p50"] > 0 and figures["precision"] == "bf16", f"figures: {figures}")
    # The shipped model predicts each frame in one forward: the page says so instead of "N steps".
    check(figures.get("direct") is True, f"figures say the shipped model is direct: {figures}")
    later = figures["frames"]
    check(wait_for(lambda: get_json(port, "/api/figures")[1]["frames"] > later, 30), "frames advance")

    viewer = MjpegReader(port)
    check(viewer.status_line.endswith("200 OK"), f"stream answers 200: {viewer.status_line}")
    check("multipart/x-mixed-replace" in viewer.headers, "stream is MJPEG")
    frames = [viewer.next_jpeg() for _ in range(4)]
    viewer.close()
    check(all(f.startswith(b"\xff\xd8") and f.endswith(b"\xff\xd9") for f in frames), "parts are JPEGs")
    check(len(set(frames)) >= 2, "the stream's frames change over time")

    status, headers, body = request(port, "GET", "/frame/0.jpg")
    check(status == 200 and body.startswith(b"\xff\xd8"), "newest frame as JPEG")


def test_controls(port):
    status, _, body = control(port, "steps=1&context_noise=0.05")
    check(status == 202, f"valid control accepted: {status} {body}")
    check(wait_for(lambda: get_json(port, "/api/figures")[1]["steps"] == 1, 30), "steps applied")
    status, _, _ = control(port, "precision=fp32")
    check(status == 202, "precision change accepted")
    check(wait_for(lambda: get_json(port, "/api/figures")[1]["precision"] == "fp32", 60),
          "precision applied (the model reloaded)")
    frames = get_json(port, "/api/figures")[1]["frames"]
    check(wait_for(lambda: get_json(port, "/api/figures")[1]["frames"] > frames + 2, 60),
          "the stream carries on in the new precision")
    status, _, _ = control(port, "action=restart&start_video=3&seed=9")
    check(status == 202, "restart accepted")
    check(wait_for(lambda: get_json(port, "/api/figures")[1]["start_video"] == 3, 30),
          "restart applied")

    status, _, _ = control(port, "action=pause")
    check(status == 202 and wait_for(lambda: get_json(port, "/api/figures")[1]["paused"], 30),
          "pause applied")
    time.sleep(0.3)  # a frame in progress when the pause came may still finish
    frames = get_json(port, "/api/figures")[1]["frames"]
    time.sleep(0.5)
    check(get_json(port, "/api/figures")[1]["frames"] == frames, "no frames while paused")
    control(port, "action=resume")
    check(wait_for(lambda: get_json(port, "/api/figures")[1]["frames"] > frames, 30), "resumed")

    for form, expected in [("steps=0", "steps must be"), ("steps=abc", "steps must be"),
                           ("steps=2.5", "steps must be"), ("steps=51", "steps must be"),
                           ("precision=fp8", "precision must be"),
                           ("context_noise=nan", "context_noise must be"),
                           ("context_noise=0.6", "context_noise must be"),
                           ("context_noise=-0.1", "context_noise must be"),
                           ("seed=-1", "seed must be"), ("seed=1&seed=2", "more than once"),
                           ("start_video=99999999999999999999", "start_video must be"),
                           ("action=explode", "action must be"),
                           ("frobnicate=1", "unknown control"), ("", "no control given")]:
        status, _, body = control(port, form)
        check(status == 400 and expected in json.loads(body)["error"],
              f"control {form!r} -> 400 '{expected}', got {status} {body}")
    status, headers, _ = request(port, "GET", "/api/control")
    check(status == 405 and headers.get("Allow") == "POST", "GET /api/control -> 405")


def test_bad_requests(port):
    status, _, body = request(port, "GET", "/no/such/page")
    check(status == 404 and b"no such page" in body, f"unknown path -> 404: {status} {body}")
    status, _, _ = request(port, "GET", "/stream/7")
    check(status == 404, "missing stream -> 404")
    status, _, _ = request(port, "GET", "/stream/99999999999999")
    check(status == 404, "huge stream number -> 404")
    status, _, _ = request(port, "POST", "/api/control", body="steps=1&" + "x" * 10000,
                           headers={"Content-Type": "application/x-www-form-urlencoded"})
    check(status == 413, f"oversized body -> 413, got {status}")
    line = raw(port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 10000 + b"\r\n\r\n")
    check(" 400 " in line, f"oversized header -> 400: {line}")
    headers = b"".join(b"X-H%d: v\r\n" % i for i in range(100))
    line = raw(port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + b"\r\n")
    check(" 431 " in line, f"too many headers -> 431: {line}")
    line = raw(port, b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    check(" 414 " in line, f"request line too long -> 414: {line}")
    status, _, body = request(port, "GET", "/api/figures", headers={"Host": "evil.example"})
    check(status == 421, f"a non-loopback Host (DNS rebinding) -> 421: {status} {body}")
    status, _, body = request(port, "POST", "/api/control", body="steps=1",
                              headers={"Origin": "http://evil.example",
                                       "Content-Type": "application/x-www-form-urlencoded"})
    check(status == 403, f"a control posted from another origin -> 403: {status} {body}")
    status, _, _ = request(port, "POST", "/api/control", body="steps=2",
                           headers={"Origin": f"http://{HOST}:{port}",
                                    "Content-Type": "application/x-www-form-urlencoded"})
    check(status == 202, f"a control posted from the page's own origin -> 202: {status}")
    line = raw(port, b"THIS IS NOT HTTP\r\n\r\n")
    check(" 400 " in line, f"garbage request line -> 400: {line}")


def test_viewer_limit(port):
    viewers = [MjpegReader(port) for _ in range(MAX_VIEWERS)]
    check(all(v.status_line.endswith("200 OK") for v in viewers), "viewers up to the limit get in")
    status, _, body = request(port, "GET", "/stream/0")
    check(status == 503 and b"too many viewers" in body, f"one more viewer -> 503: {status} {body}")
    check(get_json(port, "/api/figures")[1]["viewers"] == MAX_VIEWERS, "figures count the viewers")
    for v in viewers:
        v.next_jpeg()
        v.close()
    # A viewer that left is noticed at its next frame (the stream writes at least every second).
    check(wait_for(lambda: get_json(port, "/api/figures")[1]["viewers"] == 0, 30), "seats come back")
    viewer = MjpegReader(port)
    check(viewer.status_line.endswith("200 OK"), "a seat is free again")
    viewer.close()


def test_many_connections(port):
    # Idle connections tie up workers until the read timeout; requests still get answered.
    idle = [socket.create_connection((HOST, port), timeout=10) for _ in range(40)]
    results = []

    def one():
        try:
            results.append(request(port, "GET", "/api/health", timeout=40)[0])
        except OSError as e:
            results.append(str(e))

    start = time.time()
    threads = [threading.Thread(target=one) for _ in range(60)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    elapsed = time.time() - start
    for s in idle:
        s.close()
    answered = [r for r in results if r in (200, 503)]
    check(len(answered) == 60, f"60 concurrent requests all answered (200 or 503): {results}")
    check(elapsed < 45, f"and within bounded time: {elapsed:.1f} s")
    check(get_json(port, "/api/health")[0] == 200, "healthy after the flood")


def main():
    binary = sys.argv[1]
    server, port = start_server(binary)
    try:
        for test in (test_page_figures_and_stream, test_controls, test_bad_requests,
                     test_viewer_limit, test_many_connections):
            start = time.time()
            test(port)
            print(f"{test.__name__}: {time.time() - start:.1f} s", flush=True)
        viewer = MjpegReader(port)  # a viewer still watching must not hold up the shutdown
        start = time.time()
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=30)
        viewer.close()
        check(server.returncode == 0, f"exit 0 on SIGTERM, got {server.returncode}: {err}")
        check("stopped by SIGTERM" in out, f"says it stopped: {out}")
        check(time.time() - start < 15, f"shutdown in bounded time: {time.time() - start:.1f} s")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    print(f"video serve: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
