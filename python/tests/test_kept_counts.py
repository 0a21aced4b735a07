"""Kept token counts of packed conversations (issue #52): a second open of the same dataset with
the same template plans from the counts kept on disk, encoding nothing at open, and gives the
same rows; damaged counts are counted again; counts that no longer match the data fail loudly,
naming the conversation, instead of shifting rows."""

import json
import struct

import pytest

import stokehold
from stokehold.text import ChatTemplate

pytest.importorskip("tokenizers")

from test_inplace import crc32c  # noqa: E402
from test_sft import make_convs, models, write  # noqa: E402,F401


def rows(ds, tmpl, **kw):
    ld = stokehold.SequenceLoader(ds, seq_len=96, batch_size=2, text=tmpl, packing="whole", rank=0, world_size=1,
                                  seed=5, drop_last=False, **kw)
    return [b["input_ids"].tolist() for b in ld], ld.stats()["packing"]


def kept_file(root):
    files = list((root / "counts").glob("*.skcc"))
    assert len(files) == 1, files
    return files[0]


def test_a_second_open_plans_from_kept_counts(tmp_path, models, monkeypatch):  # noqa: F811
    monkeypatch.setenv("STOKEHOLD_INDEX_DIR", str(tmp_path / "kept"))
    ds = write(tmp_path / "ds", make_convs(40, seed=11))
    tmpl = ChatTemplate(models["chatml"])
    first, stats = rows(ds, tmpl)
    assert stats["kept"] == 40  # counted (encodings kept in memory), counts written
    path = kept_file(tmp_path / "kept")
    again, stats = rows(ds, tmpl)
    assert again == first and stats["kept"] == 0  # nothing encoded at open
    # another template: other counts, kept beside
    other, _ = rows(ds, ChatTemplate(models["chatml"], loss_on="all"))
    assert len(list((tmp_path / "kept" / "counts").glob("*.skcc"))) == 2
    # damaged: counted again, the same rows
    b = bytearray(path.read_bytes())
    b[-6] ^= 0xFF
    path.write_bytes(bytes(b))
    again, stats = rows(ds, tmpl)
    assert again == first and stats["kept"] == 40


def test_counts_that_no_longer_match_fail_naming_the_conversation(tmp_path, models, monkeypatch):  # noqa: F811
    monkeypatch.setenv("STOKEHOLD_INDEX_DIR", str(tmp_path / "kept"))
    ds = write(tmp_path / "ds", make_convs(30, seed=12))
    tmpl = ChatTemplate(models["chatml"])
    rows(ds, tmpl)
    path = kept_file(tmp_path / "kept")
    b = path.read_bytes()
    (hlen,) = struct.unpack_from("<I", b, 8)
    header = json.loads(b[12:12 + hlen])
    counts = list(struct.unpack_from(f"<{header['n']}I", b, 12 + hlen))
    counts[7] += 1  # as if conversation 7 had changed in place under the same fingerprint
    body = b[:12 + hlen] + struct.pack(f"<{len(counts)}I", *counts)
    path.write_bytes(body + struct.pack("<I", crc32c(body)))
    with pytest.raises(stokehold.StokeholdError, match="changed since it was counted"):
        rows(ds, tmpl)
