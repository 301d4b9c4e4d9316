"""What serving costs the generator, and what batching streams buys (issue #19's targets).

1. Overhead: one free-running server (--fps 0); the generator's ms/frame (median of the last 120
   frames, from /api/figures) with 0, 1 and 8 viewers reading the MJPEG stream as fast as they
   can, in interleaved rounds so a machine whose load drifts affects every case alike.
2. Batching: the same for --streams 1 and --streams 4 (no viewers, servers started in turn):
   four streams batched against four separate streams, whose frames together take four times
   one stream's ms/frame.

    MIXPREC_NUM_THREADS=1 python3 tools/measure_video_serve.py build/mixprec [--rounds 3]

Uses the test's client helpers (tests/apps/video_serve_test.py); talks to 127.0.0.1 only.
"""
import argparse
import os
import statistics
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "apps"))
from video_serve_test import MjpegReader, get_json, start_server  # noqa: E402

CHART_FRAMES = 120  # /api/figures' recent_ms holds this many


def fresh_median_ms(port, frames=CHART_FRAMES):
    """The median generator ms/frame over the next `frames` frames (at most CHART_FRAMES)."""
    start = get_json(port, "/api/figures")[1]["frames"]
    while get_json(port, "/api/figures")[1]["frames"] < start + frames:
        time.sleep(0.2)
    return statistics.median(get_json(port, "/api/figures")[1]["recent_ms"][-frames:])


def watch(port, viewers, stop):
    def read():
        reader = MjpegReader(port)
        while not stop.is_set():
            reader.next_jpeg()
        reader.close()

    # Viewers of the last round that hung up free their seats at their next frame.
    while get_json(port, "/api/figures")[1]["viewers"] != 0:
        time.sleep(0.1)
    threads = [threading.Thread(target=read) for _ in range(viewers)]
    for t in threads:
        t.start()
    return threads


def serve(binary, options):
    return start_server(binary, ["--fps", "0", "--max-viewers", "16", *options])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", default="4")
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--part", choices=["overhead", "streams", "both"], default="both")
    args = parser.parse_args()
    common = ["--steps", args.steps, "--precision", args.precision]
    if args.part != "streams":
        measure_overhead(args.binary, common, args.rounds)
    if args.part != "overhead":
        measure_batching(args.binary, common, args.rounds)


def measure_overhead(binary, common, rounds):

    server, port = serve(binary, common)
    results = {0: [], 1: [], 8: []}
    try:
        fresh_median_ms(port, 20)  # warm-up
        for _ in range(rounds):
            for viewers in results:
                stop = threading.Event()
                threads = watch(port, viewers, stop)
                results[viewers].append(fresh_median_ms(port))
                dropped = get_json(port, "/api/figures")[1]["dropped"]
                stop.set()
                for t in threads:
                    t.join()
                print(f"  {viewers} viewers: {results[viewers][-1]:.2f} ms/frame "
                      f"(dropped so far {dropped})", flush=True)
    finally:
        server.terminate()
        server.wait()
    base = statistics.median(results[0])
    print("viewers | generator ms/frame (median of rounds) | vs 0 viewers")
    for viewers, values in results.items():
        ms = statistics.median(values)
        print(f"{viewers} | {ms:.2f} | {100 * (ms / base - 1):+.1f}%")


def measure_batching(binary, common, rounds):
    batched = {1: [], 4: []}
    for _ in range(rounds):  # alternating, for the same reason as above
        for streams in batched:
            server, port = serve(binary, common + ["--streams", str(streams)])
            try:
                fresh_median_ms(port, 10)  # warm-up
                batched[streams].append(fresh_median_ms(port))
                print(f"  {streams} streams: {batched[streams][-1]:.2f} ms/frame", flush=True)
            finally:
                server.terminate()
                server.wait()
    one, four = statistics.median(batched[1]), statistics.median(batched[4])
    print(f"streams 1: {one:.2f} ms/frame -> four separate streams {1000 / one:.1f} frames/s in "
          f"total ({1000 / (4 * one):.1f} each)")
    print(f"streams 4 batched: {four:.2f} ms per frame of all four -> {4000 / four:.1f} frames/s "
          f"in total ({1000 / four:.1f} each), {4 * one / four:.2f}x four separate streams")


if __name__ == "__main__":
    main()
