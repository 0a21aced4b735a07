"""Opening a JSONL file in object storage whose lines name images (issue #53/#54: files read in
place from a table's own prefix): the scan reads each named image's header from the store.

A real S3-compatible server (moto's, as the tests start it) on 127.0.0.1, behind a small proxy of
this script adding `--delay-ms` to every request the client sends (what a remote store's round
trip costs); the JSONL file names `--images` JPEGs of `--from` (bench-data's ImageNet-like set by
default). Each open uses a fresh index directory (the scan runs every time); best of 3. Printed
with the same open at no added delay, the baseline of the same run: the ratio says how much of
the round trips the scan's concurrent requests hide.

    .venv/bin/python scripts/bench_named_files_remote.py --images 400 --delay-ms 20
"""

import argparse
import glob
import json
import os
import socket
import sys
import tempfile
import threading
import time
from urllib.parse import urlparse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench import BENCH_DATA, ROOT, require  # noqa: E402

require("stokehold", "moto", "boto3")


def delay_proxy(upstream, delay):
    """A TCP proxy to `upstream` on 127.0.0.1 that waits `delay` seconds before forwarding
    what a client sends (a request), answers as they come. Returns its (host, port)."""
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(256)

    def pipe(a, b, d):
        try:
            while True:
                x = a.recv(1 << 16)
                if not x:
                    break
                if d:
                    time.sleep(d)
                b.sendall(x)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def serve():
        while True:
            c, _ = ls.accept()
            u = socket.create_connection(upstream)
            for s in (c, u):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=pipe, args=(c, u, delay), daemon=True).start()
            threading.Thread(target=pipe, args=(u, c, 0), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return ls.getsockname()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=400)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--from", dest="src", default=os.path.join(BENCH_DATA, "inet", "train"))
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(ROOT, "python", "tests"))
    import logging

    from conftest import moto_s3

    import stokehold

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log

    imgs = sorted(glob.glob(os.path.join(a.src, "**", "*.jpg"), recursive=True))[: a.images]
    if len(imgs) < a.images:
        sys.exit(f"error: {a.src} holds {len(imgs)} JPEGs, fewer than --images {a.images} (`make bench-data`)")
    key, secret = "bench", "bench-secret"
    with moto_s3(key, secret, bucket="named") as (endpoint, client):
        lines = []
        for i, p in enumerate(imgs):
            client.upload_file(p, "named", f"t/imgs/{i}.jpg")
            lines.append(json.dumps({"text": f"caption {i}", "images": [f"imgs/{i}.jpg"]}))
        client.put_object(Bucket="named", Key="t/data.jsonl", Body=("\n".join(lines) + "\n").encode())
        u = urlparse(endpoint)
        took = {}
        for delay in (0.0, a.delay_ms):
            host, port = delay_proxy((u.hostname, u.port), delay / 1000)
            opts = {"key": key, "secret": secret, "region_name": "us-east-1",
                    "endpoint_url": f"http://{host}:{port}", "allow_http": "true"}
            best = float("inf")
            for _ in range(3):
                with tempfile.TemporaryDirectory() as ix:
                    t0 = time.perf_counter()
                    ds = stokehold.Dataset("s3://named/t/data.jsonl", storage_options=opts, index_dir=ix)
                    best = min(best, time.perf_counter() - t0)
                    assert ds.schema["images"].startswith("list:image"), ds.schema
            took[delay] = best
    print(f"open of a JSONL file in object storage naming {a.images} images (fresh index, best of 3):")
    print(f"  no added delay: {took[0.0]:.2f} s; {a.delay_ms:g} ms a request: {took[a.delay_ms]:.2f} s "
          f"({took[a.delay_ms] / took[0.0]:.2f}x; read one by one it would add "
          f"{2 * a.images * a.delay_ms / 1000:.1f} s: a HEAD and a GET an image)")


if __name__ == "__main__":
    main()
