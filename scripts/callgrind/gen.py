"""Inputs for the callgrind comparison (issue #51, samples): JSONL text for token datasets,
TFRecords of the sample JPEGs. Deterministic; `gen.py DIR 2` makes the second set (another
vocabulary, longer documents).

    python3 scripts/callgrind/gen.py DIR [1|2]
"""
import glob, json, os, random, struct, sys

B = sys.argv[1]
SET = int(sys.argv[2]) if len(sys.argv) > 2 else 1
rng = random.Random(51 if SET == 1 else 52)
words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(3000 if SET == 1 else 5000)]

def docs(n, seed):
    r = random.Random(seed)
    return [" ".join(r.choice(words) for _ in range((r.randint(20, 900) if SET == 1 else r.randint(40, 1600)))) for _ in range(n)]

parts = [(docs(2800, s) if SET == 1 else docs(2000, s + 10)) for s in (1, 2, 3)]
for i, p in enumerate(parts, 1):
    with open(f"{B}/text{i}.jsonl", "w") as f:
        for d in p:
            f.write(json.dumps({"text": d}) + "\n")
with open(f"{B}/text.jsonl", "w") as f:
    for p in parts:
        for d in p:
            f.write(json.dumps({"text": d}) + "\n")

# TFRecords (the writer of python/tests/test_inplace.py)
def _crc_table():
    t = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t
T = _crc_table()
def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = T[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF
def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)
def field(num, payload):
    return varint(num << 3 | 2) + varint(len(payload)) + payload
def example(features):
    entries = b""
    for name, value in features.items():
        feature = field(1, field(1, value)) if isinstance(value, bytes) else field(3, field(1, b"".join(varint(v) for v in value)))
        entries += field(1, field(1, name.encode()) + field(2, feature))
    return field(1, entries)

jpegs = [open(p, "rb").read() for p in sorted(glob.glob(f"{B}/img/**/*.jpg", recursive=True))]
os.makedirs(f"{B}/tfr", exist_ok=True)
per = (len(jpegs) + 2) // 3
for part in range(3):
    with open(f"{B}/tfr/train-{part:05d}-of-00003", "wb") as f:
        for i in range(part * per, min(len(jpegs), (part + 1) * per)):
            data = example({"image/encoded": jpegs[i], "image/class/label": [i % 3]})
            length = struct.pack("<Q", len(data))
            f.write(length + struct.pack("<I", masked(length)) + data + struct.pack("<I", masked(data)))
print("ok", len(jpegs), "jpegs")
