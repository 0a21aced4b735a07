"""Conversations read where they are (issue #52, item 1): JSON Lines read in place (one sample per
non-empty line, a kept index of line offsets), Parquet / Hugging Face ``list<struct<role, content>>``
columns as the canonical JSON text of each row's messages, the ``prompt`` / ``completion`` pair
form, and the ``json`` field type. A ``messages`` field is a ``json`` field whose value (a str)
is the canonical JSON text of the list of messages: ``json.loads`` gives back what the file holds
(pyarrow's ``to_pylist()``)."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stokehold

from test_cli import run  # the installed `stokehold` command


def conversation(i):
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": f"What is {i} + {i}? \u00e9\u4e2d \"quoted\"\n"},
        {"role": "assistant", "content": str(2 * i)},
    ]


@pytest.fixture
def convs(tmp_path):
    """30 conversations, CRLF line ends, a blank line, a bad line (line 13) and one without its
    conv_id (line 20)."""
    path = tmp_path / "convs.jsonl"
    lines = []
    for i in range(30):
        lines.append(json.dumps({"conv_id": i, "messages": conversation(i)}))
    lines.insert(5, "")
    lines[12] = '{"conv_id": 11, "messages": [{"role": "user", "content": "cut'
    lines[19] = json.dumps({"messages": conversation(18)})
    path.write_bytes(("\r\n".join(lines)).encode())
    return path


def test_jsonl_conversations_in_place_are_samples_and_bad_lines_are_counted(convs, tmp_path):
    ds = stokehold.Dataset(convs, index_dir=tmp_path / "ix")
    assert ds.in_place == "jsonl"
    assert ds.schema == {"conv_id": "int64", "messages": "json"}
    assert len(ds) == 30  # the blank line is not a sample
    assert json.loads(ds[0]["messages"]) == conversation(0)
    assert ds[29]["conv_id"] == 29 and json.loads(ds[29]["messages"]) == conversation(29)
    for sample, line, why in [(11, 13, "not valid JSON"), (18, 20, 'has no key "conv_id"')]:
        with pytest.raises(stokehold.CorruptDataError) as e:
            ds[sample]
        msg = str(e.value)
        assert "convs.jsonl" in msg and f"line {line}:" in msg and why in msg and f"sample {sample}" in msg, msg
    # the loader fails on a bad line by default, and skips and counts it when asked
    with pytest.raises(stokehold.CorruptDataError, match="convs.jsonl"):
        list(stokehold.Loader(ds, 4, shuffle=False, threads=1))
    loader = stokehold.Loader(ds, 5, shuffle=True, seed=3, threads=2, on_error="skip", max_skip_fraction=0.2, include_ids=True)
    ids = np.concatenate([b["id"][~b["is_padding"]] for b in loader]).tolist()
    assert sorted(ids) == sorted(set(range(30)) - {11, 18})
    assert sorted(loader.stats()["skipped"]) == [11, 18]


def test_the_jsonl_index_is_kept_and_the_cli_indexes_inspects_and_verifies(convs, tmp_path):
    ix = tmp_path / "ix"
    r = run("index", convs, "--index-dir", ix)
    assert "jsonl" in r.stdout, r.stdout
    assert any(ix.iterdir())
    r = run("inspect", convs, "--index-dir", ix)
    assert "messages" in r.stdout and "30" in r.stdout, r.stdout
    r = run("verify", convs, "--all", "--index-dir", ix, check=False)
    assert r.returncode == 1, r.stdout
    assert "line 13:" in r.stdout and "line 20:" in r.stdout, r.stdout
    # a changed file is indexed again
    convs.write_bytes(convs.read_bytes() + b"\n" + json.dumps({"conv_id": 30, "messages": []}).encode())
    ds = stokehold.Dataset(convs, index_dir=ix)
    assert len(ds) == 31 and json.loads(ds[30]["messages"]) == []


def test_prompt_completion_pairs_are_two_string_fields(tmp_path):
    path = tmp_path / "pairs.jsonl"
    pairs = [{"prompt": f"Q{i}?", "completion": f" A{i}."} for i in range(10)]
    path.write_text("".join(json.dumps(p) + "\n" for p in pairs))
    ds = stokehold.Dataset(path, index_dir=tmp_path / "ix")
    assert ds.schema == {"prompt": "string", "completion": "string"}
    assert [ds[i] for i in range(10)] == pairs


def test_compressed_jsonl_says_to_decompress(tmp_path):
    gz = tmp_path / "convs.jsonl.gz"
    gz.write_bytes(b"\x1f\x8b\x08\x00")
    with pytest.raises(stokehold.StokeholdError, match="decompress"):
        stokehold.Dataset(gz, index_dir=tmp_path / "ix")


def test_parquet_conversations_are_json_text_equal_to_pyarrow(tmp_path):
    """A Hugging Face chat dataset's ``list<struct<role, content>>`` column (and one whose content
    is a list of parts) becomes a string field of JSON text, in place and through ``pack``."""
    n = 40
    messages = [conversation(i) if i % 7 else [] for i in range(n)]
    parts = [
        [{"role": "user", "content": [{"type": "text", "text": f"look {i}"}, {"type": "image", "text": None}]}]
        for i in range(n)
    ]
    table = pa.table(
        {
            "messages": pa.array(messages, type=pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
            "parts": pa.array(parts),
            "score": pa.array([i / 4 for i in range(n)], type=pa.float32()),
        }
    )
    path = tmp_path / "chat.parquet"
    pq.write_table(table, path, row_group_size=16)
    out = tmp_path / "packed"
    run("pack", path, out)
    want = {c: table.column(c).to_pylist() for c in ("messages", "parts")}
    for ds in (stokehold.Dataset(path, index_dir=tmp_path / "ix"), stokehold.Dataset(out)):
        assert ds.schema["messages"] == "json" and ds.schema["parts"] == "json", ds.schema
        assert len(ds) == n
        for i in range(n):
            s = ds[i]
            for c in ("messages", "parts"):
                assert json.loads(s[c]) == want[c][i], (c, i)
            # compact, keys in the struct's order
            assert s["messages"] == json.dumps(want["messages"][i], separators=(",", ":"), ensure_ascii=False)


def test_a_json_field_is_checked_and_canonical_when_written_and_read_as_its_text(tmp_path):
    out = tmp_path / "ds"
    with stokehold.ShardWriter(out, {"messages": "json", "n": "int64"}) as w:
        w.write({"messages": conversation(1), "n": 1})  # a value: json.dumps writes it
        w.write({"messages": ' [ {"role" : "user", "content": "h\\u00e9"} ] ', "n": 2})  # JSON text
        with pytest.raises(stokehold.SchemaError, match="not one JSON value"):
            w.write({"messages": "[1,", "n": 3})
        with pytest.raises(stokehold.SchemaError, match="messages"):
            w.write({"messages": {1, 2}, "n": 4})  # a set: json.dumps refuses it
    ds = stokehold.Dataset(out)
    assert ds.schema == {"messages": "json", "n": "int64"}
    assert len(ds) == 2
    assert ds[0]["messages"] == json.dumps(conversation(1), separators=(",", ":"), ensure_ascii=False)
    assert ds[1]["messages"] == '[{"role":"user","content":"h\u00e9"}]'
    # in a batch, a json field is a list of str, one JSON text per sample
    (batch,) = list(stokehold.Loader(ds, 2, shuffle=False))
    assert [json.loads(t) for t in batch["messages"]] == [conversation(1), [{"role": "user", "content": "h\u00e9"}]]


def test_jsonl_in_object_storage_is_read_in_place_like_the_local_file(convs, tmp_path):
    """The streaming scan (object storage: no mapping, 8 MiB reads) indexes the lines the mapped
    scan of the local file finds: the same samples, the same bad lines named."""
    from conftest import moto_s3

    key, secret = "stokehold-test", "stokehold-test-secret"
    with moto_s3(key, secret, bucket="jsonl") as (endpoint, client):
        options = {"key": key, "secret": secret, "region_name": "us-east-1", "endpoint_url": endpoint, "allow_http": "true"}
        client.upload_file(str(convs), "jsonl", "chat/convs.jsonl")
        remote = stokehold.Dataset("s3://jsonl/chat/convs.jsonl", storage_options=options, index_dir=tmp_path / "ix")
        local = stokehold.Dataset(convs, index_dir=tmp_path / "local-ix")
        assert remote.in_place == "jsonl" and remote.schema == local.schema and len(remote) == len(local) == 30
        for i in range(30):
            if i in (11, 18):
                with pytest.raises(stokehold.CorruptDataError, match=f"line {i + 2}:"):
                    remote[i]
            else:
                assert remote[i] == local[i]
