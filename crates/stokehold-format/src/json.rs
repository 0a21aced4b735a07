//! JSON text as the `json` field type stores it: canonical (compact; an object's keys in their
//! order; strings escaped as serde_json escapes them, non-ASCII kept as UTF-8; numbers as
//! serde_json writes them, a float as its shortest round trip), so that equal values from any
//! source (a JSONL line, a Parquet struct, Python's `json.dumps(v, separators=(",", ":"),
//! ensure_ascii=False)`) are equal bytes. Parsed in one pass by serde_json (its recursion limit
//! of 128 holds), no tree built.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// The canonical JSON text of the JSON value `text` (surrounding whitespace allowed); an error
/// (serde_json's: what, line and column) when it is not one JSON value.
pub fn canonical(text: &[u8]) -> Result<String, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(text);
    let mut out = String::with_capacity(text.len());
    Canon(&mut out).deserialize(&mut de)?;
    de.end()?;
    Ok(out)
}

/// A float as JSON writes it (`1.0`, `1e+20`: serde_json's shortest round trip; `null` when
/// not finite, as JSON has no such number).
pub fn float_text(f: f64) -> String {
    serde_json::Number::from_f64(f).map_or_else(|| "null".into(), |n| n.to_string())
}

/// A JSON string's text (quoted and escaped).
fn string_text(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// Writes the value it reads as canonical JSON text.
#[derive(Debug)]
pub struct Canon<'o>(pub &'o mut String);

impl<'de> DeserializeSeed<'de> for Canon<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(CanonVisitor(self.0))
    }
}

/// The visitor of [`Canon`]: writes what it visits, for a deserializer already inside a value.
#[derive(Debug)]
pub struct CanonVisitor<'o>(pub &'o mut String);

impl CanonVisitor<'_> {
    fn string(&mut self, s: &str) {
        self.0.push_str(&string_text(s));
    }
}

impl<'de> Visitor<'de> for CanonVisitor<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.0.push_str(if v { "true" } else { "false" });
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.0.push_str(&v.to_string());
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.0.push_str(&v.to_string());
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.0.push_str(&float_text(v));
        Ok(())
    }
    fn visit_str<E: de::Error>(mut self, v: &str) -> Result<(), E> {
        self.string(v);
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.0.push_str("null");
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.push('[');
        let mut first = true;
        loop {
            let at = self.0.len();
            if !first {
                self.0.push(',');
            }
            if seq.next_element_seed(Canon(&mut *self.0))?.is_none() {
                self.0.truncate(at);
                break;
            }
            first = false;
        }
        self.0.push(']');
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.push('{');
        let mut first = true;
        while let Some(k) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if !first {
                self.0.push(',');
            }
            first = false;
            self.0.push_str(&string_text(&k));
            self.0.push(':');
            map.next_value_seed(Canon(&mut *self.0))?;
        }
        self.0.push('}');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_text_is_compact_in_order_and_refuses_what_is_not_json() {
        assert_eq!(
            canonical(b" { \"b\" : [1, 2.0, true, null, -3] , \"a\":{\"x\":\"\\u00e9\\n\"}} ")
                .unwrap(),
            "{\"b\":[1,2.0,true,null,-3],\"a\":{\"x\":\"\u{e9}\\n\"}}"
        );
        assert_eq!(canonical(b"1e3").unwrap(), "1000.0");
        assert_eq!(canonical(b"\"s\"").unwrap(), "\"s\"");
        for bad in [&b""[..], b"{", b"[1,]", b"{\"a\":1} 2", b"nul", b"\"\xff\""] {
            assert!(canonical(bad).is_err(), "{bad:?}");
        }
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(
            canonical(deep.as_bytes()).is_err(),
            "past serde_json's recursion limit"
        );
    }

    /// A `json` field is checked and made canonical when written, and read as its text.
    #[test]
    fn a_json_field_stores_canonical_text_and_refuses_what_is_not_json() {
        use crate::{
            FieldType, FieldValue, Limits, Schema, ShardReader, ShardWriter, WriteOptions,
        };
        let schema = Schema::from_specs([("messages", "json"), ("n", "int64")]).unwrap();
        assert_eq!(schema.fields[0].ty, FieldType::Json);
        assert_eq!(schema.to_string(), "messages: json, n: int64");
        let mut w = ShardWriter::new(Vec::new(), schema, WriteOptions::default()).unwrap();
        let given = "[ {\"role\": \"user\", \"content\": \"h\\u00e9\"} ]";
        w.write(&[FieldValue::String(given.into()), FieldValue::Int64(1)])
            .unwrap();
        let e = w
            .write(&[FieldValue::String("[1,".into()), FieldValue::Int64(2)])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("messages") && e.contains("not one JSON value"),
            "{e}"
        );
        let (bytes, _) = w.finish().unwrap();
        let shard =
            ShardReader::from_source("m.skh", crate::memory_source(bytes), Limits::default())
                .unwrap();
        assert_eq!(shard.len(), 1);
        let mut buf = Vec::new();
        shard.read_record(0, &mut buf, true).unwrap();
        assert_eq!(
            shard.decode(0, &buf).unwrap()[0],
            FieldValue::String("[{\"role\":\"user\",\"content\":\"h\u{e9}\"}]".into())
        );
    }
}
