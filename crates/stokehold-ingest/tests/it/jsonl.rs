//! JSON Lines read in place: one sample per non-empty line, fields inferred from the first
//! lines, lists and objects (a conversation's `messages`) json fields of canonical JSON text, bad
//! lines corrupt samples named by file, line, byte offset and sample, the index kept and
//! rebuilt when the file changes.

use std::fs;
use std::path::Path;

use stokehold_format::FieldValue;
use stokehold_ingest::inplace::{InPlaceOptions, in_place_format, index_files, open};
use stokehold_storage::{Dataset, OpenOptions};

fn in_place(index_dir: &Path) -> InPlaceOptions {
    InPlaceOptions {
        index_dir: Some(index_dir.to_path_buf()),
        ..InPlaceOptions::default()
    }
}

fn text(v: &FieldValue<'_>) -> String {
    match v {
        FieldValue::String(s) => s.to_string(),
        other => panic!("not a string: {other:?}"),
    }
}

fn opened(path: &Path, o: &InPlaceOptions) -> Dataset {
    open(&[path.to_path_buf()], OpenOptions::default(), o).unwrap()
}

/// The byte offset of the `n`th line (from 1) of `bytes`.
fn line_offset(bytes: &[u8], n: usize) -> usize {
    let mut at = 0;
    for _ in 1..n {
        at += bytes[at..].iter().position(|&b| b == b'\n').unwrap() + 1;
    }
    at
}

#[test]
fn jsonl_in_place_reads_every_line_as_a_sample_whatever_its_line_ends() {
    let tmp = tempfile::tempdir().unwrap();
    let idx = tmp.path().join("idx");
    let file = tmp.path().join("convs.jsonl");
    // a byte order mark, CRLF and LF line ends, blank lines, a last line without a newline,
    // keys in another order, an escaped string
    let body = concat!(
        "\u{feff}{\"id\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"Hi \\u00e9\"}, {\"role\": \"assistant\", \"content\": \"Hello!\\n\"}], \"score\": 0.5, \"ok\": true}\r\n",
        "\r\n",
        "   \n",
        "{\"messages\": [], \"id\": 2, \"score\": 1, \"ok\": false}\n",
        "\n",
        "{\"id\": 3, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"x\"}]}], \"score\": -2.25, \"ok\": true}"
    );
    fs::write(&file, body).unwrap();
    let ds = opened(&file, &in_place(&idx));
    assert_eq!(in_place_format(&ds), Some("jsonl"));
    assert_eq!(ds.len(), 3);
    // fields in the order the lines name them; lists and objects are json fields (canonical text)
    assert_eq!(
        ds.schema().to_string(),
        "id: int64, messages: json, score: float64, ok: int64"
    );
    let rows: Vec<Vec<FieldValue<'static>>> = (0..3).map(|i| ds.get(i).unwrap()).collect();
    assert_eq!(rows[0][0], FieldValue::Int64(1));
    assert_eq!(
        text(&rows[0][1]),
        r#"[{"role":"user","content":"Hi é"},{"role":"assistant","content":"Hello!\n"}]"#
    );
    assert_eq!(rows[0][2], FieldValue::Float64(0.5));
    assert_eq!(rows[0][3], FieldValue::Int64(1));
    assert_eq!(rows[1][0], FieldValue::Int64(2));
    assert_eq!(text(&rows[1][1]), "[]");
    assert_eq!(rows[1][2], FieldValue::Float64(1.0));
    assert_eq!(rows[1][3], FieldValue::Int64(0));
    assert_eq!(
        text(&rows[2][1]),
        r#"[{"role":"user","content":[{"type":"text","text":"x"}]}]"#
    );
    assert_eq!(rows[2][2], FieldValue::Float64(-2.25));
    // the messages' text is JSON that parses back to the line's value
    let back: serde_json::Value = serde_json::from_str(&text(&rows[0][1])).unwrap();
    assert_eq!(back[1]["content"], "Hello!\n");

    // the prompt / completion form: two string fields
    let pc = tmp.path().join("pc.jsonl");
    fs::write(
        &pc,
        "{\"prompt\": \"2+2=\", \"completion\": \"4\"}\n{\"prompt\": \"Capital of France?\", \"completion\": \"Paris\"}\n",
    )
    .unwrap();
    let ds = opened(&pc, &in_place(&idx));
    assert_eq!(
        ds.schema().to_string(),
        "prompt: string, completion: string"
    );
    assert_eq!(text(&ds.get(1).unwrap()[1]), "Paris");
}

#[test]
fn bad_lines_are_corrupt_samples_named_by_file_line_and_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let idx = tmp.path().join("idx");
    let file = tmp.path().join("rows.jsonl");
    // the types come from the first 1000 lines; the bad ones come after them
    let mut body = String::new();
    for i in 0..1000 {
        body.push_str(&format!("{{\"text\": \"row {i}\", \"label\": {i}}}\n"));
    }
    body.push('\n'); // line 1001: blank
    body.push_str("{\"text\": \"cut\", \"label\": \n"); // line 1002: not JSON (sample 1000)
    body.push_str("{\"text\": \"no label\"}\n"); // line 1003: lacks label
    body.push_str("[1, 2]\n"); // line 1004: not an object
    body.push_str("{\"text\": \"wrong\", \"label\": \"seven\"}\n"); // line 1005
    body.push_str("{\"text\": \"last\", \"label\": 99}\n"); // line 1006 (sample 1004)
    fs::write(&file, &body).unwrap();
    let bytes = body.as_bytes();
    let ds = opened(&file, &in_place(&idx));
    assert_eq!(ds.len(), 1005, "every non-empty line is a sample");
    assert_eq!(ds.schema().to_string(), "text: string, label: int64");
    assert_eq!(ds.get(1004).unwrap()[1], FieldValue::Int64(99));
    for (sample, line, what) in [
        (1000, 1002, "not valid JSON"),
        (1001, 1003, "has no key \"label\""),
        (1002, 1004, "not a JSON object"),
        (1003, 1005, "does not fit its field type int64"),
    ] {
        let e = ds.get(sample).unwrap_err().to_string();
        assert!(e.contains("rows.jsonl"), "{e}");
        assert!(e.contains(&format!("line {line}:")), "{e}");
        assert!(e.contains(what), "{e}");
        assert!(e.contains(&format!("record {sample}")), "{e}");
        assert!(
            e.contains(&format!("offset {}", line_offset(bytes, line)))
                || e.contains(&format!("byte {}", line_offset(bytes, line))),
            "{e}"
        );
    }
}

#[test]
fn a_line_over_the_limit_is_refused_without_being_read() {
    let tmp = tempfile::tempdir().unwrap();
    let idx = tmp.path().join("idx");
    let file = tmp.path().join("big.jsonl");
    let huge = format!("{{\"text\": \"{}\"}}", "x".repeat(10_000));
    fs::write(
        &file,
        format!("{{\"text\": \"a\"}}\n{huge}\n{{\"text\": \"b\"}}\n{huge}"),
    )
    .unwrap();
    let o = InPlaceOptions {
        max_record_bytes: 1000,
        ..in_place(&idx)
    };
    let ds = opened(&file, &o);
    assert_eq!(ds.len(), 4);
    assert_eq!(text(&ds.get(2).unwrap()[0]), "b");
    for (i, line) in [(1, 2), (3, 4)] {
        let e = ds.get(i).unwrap_err().to_string();
        assert!(
            e.contains(&format!("line {line}:")) && e.contains("limit of 1000 bytes"),
            "{e}"
        );
    }
    // `stokehold index` counts them as damaged records (the streaming scan of object storage
    // finds the same: `inplace/jsonl.rs` `every_scan_finds_the_same_lines`)
    let r = index_files(std::slice::from_ref(&file), &OpenOptions::default(), &o).unwrap();
    assert_eq!((r.records, r.damaged), (4, 2));
}

#[test]
fn the_jsonl_index_is_kept_reused_and_rebuilt_when_the_file_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let idx = tmp.path().join("idx");
    let dir = tmp.path().join("data");
    fs::create_dir(&dir).unwrap();
    let write = |name: &str, n: usize| {
        let body: String = (0..n)
            .map(|i| format!("{{\"prompt\": \"p{i}\", \"completion\": \"c{i}\"}}\n"))
            .collect();
        fs::write(dir.join(name), body).unwrap();
    };
    write("a.jsonl", 5);
    write("b.ndjson", 3);
    let r = index_files(
        std::slice::from_ref(&dir),
        &OpenOptions::default(),
        &in_place(&idx),
    )
    .unwrap();
    assert_eq!(
        (r.format, r.files, r.scanned, r.records),
        ("jsonl", 2, 2, 8)
    );
    let r = index_files(
        std::slice::from_ref(&dir),
        &OpenOptions::default(),
        &in_place(&idx),
    )
    .unwrap();
    assert_eq!((r.scanned, r.records), (0, 8), "kept indexes are reused");
    std::thread::sleep(std::time::Duration::from_millis(20));
    write("b.ndjson", 4);
    let r = index_files(
        std::slice::from_ref(&dir),
        &OpenOptions::default(),
        &in_place(&idx),
    )
    .unwrap();
    assert_eq!(
        (r.scanned, r.records),
        (1, 9),
        "a changed file is scanned again"
    );
    let ds = opened(&dir, &in_place(&idx));
    assert_eq!(ds.len(), 9);
    assert_eq!(text(&ds.get(8).unwrap()[1]), "c3");
    // a glob opens the same
    let ds = opened(&dir.join("*.jsonl"), &in_place(&idx));
    assert_eq!(ds.len(), 5);
}

#[test]
fn compressed_jsonl_is_refused_with_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("convs.jsonl.gz");
    fs::write(&file, b"\x1f\x8b\x08\x00 not really").unwrap();
    let e = open(
        &[file],
        OpenOptions::default(),
        &in_place(&tmp.path().join("idx")),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("convs.jsonl.gz") && e.contains("decompress"),
        "{e}"
    );
}

#[test]
fn pack_of_jsonl_gives_the_samples_read_in_place() {
    use stokehold_ingest::{NoProgress, PackOptions, pack};
    let tmp = tempfile::tempdir().unwrap();
    let idx = tmp.path().join("idx");
    let file = tmp.path().join("chat.jsonl");
    let mut body = String::from("\u{feff}");
    for i in 0..40 {
        let msgs = serde_json::json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": format!("question {i} \u{e9}\t\"q\"")},
            {"role": "assistant", "content": [{"type": "text", "text": format!("answer {i}")}]},
        ]);
        // `source` is missing from some lines: an optional string, empty there
        let source = if i % 3 == 0 {
            String::new()
        } else {
            format!(", \"source\": \"s{i}\"")
        };
        body.push_str(&format!(
            "{{\"messages\": {msgs}, \"turns\": {}, \"quality\": {}{source}}}\r\n",
            i % 4,
            i as f64 / 8.0
        ));
        if i % 10 == 0 {
            body.push('\n');
        }
    }
    body.push_str("{\"messages\": not json}\n"); // skipped by pack, corrupt in place
    body.push_str("{\"messages\": [], \"turns\": 0, \"quality\": 1.5}"); // no newline
    fs::write(&file, &body).unwrap();

    let o = PackOptions {
        threads: 2,
        max_skip_fraction: 1.0,
        ..PackOptions::default()
    };
    let out = tmp.path().join("packed");
    pack(std::slice::from_ref(&file), &out, None, &o, &NoProgress).unwrap();
    let packed = Dataset::open(&out).unwrap();
    let ds = opened(&file, &in_place(&idx));
    assert_eq!(packed.schema(), ds.schema());
    assert_eq!(
        ds.schema().to_string(),
        "messages: json, turns: int64, quality: float64, source: string"
    );
    assert_eq!((ds.len(), packed.len()), (42, 41));
    let mut read: Vec<Vec<FieldValue<'static>>> = Vec::new();
    for i in 0..ds.len() {
        match ds.get(i) {
            Ok(s) => read.push(s),
            Err(e) => assert!(i == 40 && e.to_string().contains("line 45:"), "{e}"),
        }
    }
    let packs: Vec<Vec<FieldValue<'static>>> =
        (0..packed.len()).map(|i| packed.get(i).unwrap()).collect();
    assert_eq!(read, packs);
    assert_eq!(text(&read[0][3]), "");
    assert_eq!(text(&read[1][3]), "s1");

    // --fields / fields= choose the keys alike, in the order given
    use stokehold_ingest::FieldChoice;
    let chosen = FieldChoice::parse_list("source?,messages").unwrap();
    let o = PackOptions {
        fields: Some(chosen.clone()),
        ..o
    };
    let out = tmp.path().join("some");
    pack(std::slice::from_ref(&file), &out, None, &o, &NoProgress).unwrap();
    let packed = Dataset::open(&out).unwrap();
    let ds = opened(
        &file,
        &InPlaceOptions {
            fields: Some(chosen),
            ..in_place(&idx)
        },
    );
    assert_eq!(ds.schema().to_string(), "source: string, messages: json");
    assert_eq!(packed.schema(), ds.schema());
    assert_eq!(packed.get(1).unwrap(), ds.get(1).unwrap());
}
