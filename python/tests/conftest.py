"""Settings for the whole suite."""

import os

# The decoded cache on disk stops writing when its filesystem would keep less than a floor free
# (5% of it, at most 1 GiB). CI machines are sometimes fuller than that; these tests are about
# what the caches hold and serve, so they set the floor to nothing (the floor itself is tested in
# Rust, cache::decoded_disk, and below with a floor no disk keeps).
os.environ.setdefault("STOKEHOLD_KEEP_FREE", "0")
