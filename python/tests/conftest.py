"""Settings for the whole suite."""

import os

# The decoded cache on disk stops writing when its filesystem would keep less than a floor free
# (5% of it, at most 1 GiB). CI machines are sometimes fuller than that; these tests are about
# what the caches hold and serve, so they set the floor to nothing (the floor itself is tested in
# Rust, cache::decoded_disk, and below with a floor no disk keeps).
os.environ.setdefault("STOKEHOLD_KEEP_FREE", "0")

# What stokehold keeps between runs (indexes of files read in place, token counts of packed
# conversations) goes to a directory of this run, not the user's ~/.cache: a test sees only
# what this run kept.
if "STOKEHOLD_INDEX_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    _kept = tempfile.mkdtemp(prefix="stokehold-kept-")
    os.environ["STOKEHOLD_INDEX_DIR"] = _kept
    atexit.register(shutil.rmtree, _kept, True)


def moto_s3(key, secret, bucket=None):
    """A real S3-compatible server (moto's, installed by `make setup`) on 127.0.0.1 for one test
    module: a context manager giving its endpoint URL and a boto3 client with ``key``/``secret``
    (creating ``bucket`` when given). Used as ``with moto_s3(...) as (endpoint, client): yield``."""
    import contextlib

    import boto3
    from moto.server import ThreadedMotoServer

    @contextlib.contextmanager
    def server():
        s = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        s.start()
        try:
            host, port = s.get_host_and_port()
            endpoint = f"http://{host}:{port}"
            client = boto3.client(
                "s3",
                endpoint_url=endpoint,
                aws_access_key_id=key,
                aws_secret_access_key=secret,
                region_name="us-east-1",
            )
            if bucket:
                client.create_bucket(Bucket=bucket)
            yield endpoint, client
        finally:
            s.stop()

    return server()
