//! One feature of a serialized `tf.train.Example`, found without decoding the rest and borrowed
//! from the record's bytes: what a TFRecord read in place gives its fields from (pack decodes
//! whole Examples with prost; this reads only the feature asked for, and copies nothing but
//! numbers).
//!
//! The wire format (protobuf): `Example { Features features = 1; }`,
//! `Features { map<string, Feature> feature = 1; }` (each entry a message `{ key = 1; value = 2 }`),
//! `Feature { oneof { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3 } }`,
//! each list `repeated ... value = 1` (numbers packed or not). As protobuf reads maps and
//! repeated messages, the last entry of a key wins and repeated `features` fields merge.

/// A feature's values, borrowed where they are bytes.
#[derive(Debug, Clone, PartialEq)]
pub enum FeatureView<'a> {
    /// `bytes_list`: each value.
    Bytes(Vec<&'a [u8]>),
    /// `float_list`.
    Float(Vec<f32>),
    /// `int64_list`.
    Int(Vec<i64>),
}

/// A malformed Example: what is wrong, and the byte offset in the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError {
    /// Offset in the record's bytes.
    pub offset: usize,
    /// What is wrong.
    pub detail: String,
}

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

/// A cursor over one message's bytes; `base` is the offset of `bytes` in the record.
struct Wire<'a> {
    bytes: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Wire<'a> {
    fn new(bytes: &'a [u8], base: usize) -> Wire<'a> {
        Wire {
            bytes,
            pos: 0,
            base,
        }
    }

    fn err(&self, detail: impl Into<String>) -> WireError {
        WireError {
            offset: self.base + self.pos,
            detail: detail.into(),
        }
    }

    fn varint(&mut self) -> Result<u64, WireError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let Some(&b) = self.bytes.get(self.pos) else {
                return Err(self.err("the message ends inside a varint"));
            };
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.err("a varint longer than 10 bytes"))
    }

    /// The next field: (number, wire type), or `None` at the end.
    fn key(&mut self) -> Result<Option<(u64, u8)>, WireError> {
        if self.pos >= self.bytes.len() {
            return Ok(None);
        }
        let k = self.varint()?;
        Ok(Some((k >> 3, (k & 7) as u8)))
    }

    fn take(&mut self, n: usize) -> Result<(&'a [u8], usize), WireError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| {
                self.err(format!(
                    "a field of {n} bytes passes the end of its message ({} bytes left)",
                    self.bytes.len() - self.pos
                ))
            })?;
        let at = self.base + self.pos;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok((s, at))
    }

    /// A length-delimited field's bytes and their offset in the record.
    fn len_delimited(&mut self) -> Result<(&'a [u8], usize), WireError> {
        let n = self.varint()?;
        let n = usize::try_from(n).map_err(|_| self.err("a length past the address space"))?;
        self.take(n)
    }

    fn skip(&mut self, wire: u8) -> Result<(), WireError> {
        match wire {
            VARINT => self.varint().map(drop),
            FIXED64 => self.take(8).map(drop),
            LEN => self.len_delimited().map(drop),
            FIXED32 => self.take(4).map(drop),
            w => Err(self.err(format!(
                "wire type {w} (groups and unknown types are not read)"
            ))),
        }
    }
}

/// A `Feature` message's bytes and their offset in the record.
type FeatureBytes<'a> = (&'a [u8], usize);

/// Call `f` with the key and the `Feature` message of every entry of the Example in
/// `record`'s feature map, in the order they are stored.
fn entries<'a>(
    record: &'a [u8],
    mut f: impl FnMut(&'a [u8], FeatureBytes<'a>),
) -> Result<(), WireError> {
    let mut ex = Wire::new(record, 0);
    while let Some((num, wire)) = ex.key()? {
        if num != 1 || wire != LEN {
            ex.skip(wire)?;
            continue;
        }
        let (features, at) = ex.len_delimited()?;
        let mut fs = Wire::new(features, at);
        while let Some((num, wire)) = fs.key()? {
            if num != 1 || wire != LEN {
                fs.skip(wire)?;
                continue;
            }
            let (entry, at) = fs.len_delimited()?;
            let mut e = Wire::new(entry, at);
            let (mut key, mut value): (&[u8], Option<FeatureBytes<'a>>) = (&[], None);
            while let Some((num, wire)) = e.key()? {
                match (num, wire) {
                    (1, LEN) => key = e.len_delimited()?.0,
                    (2, LEN) => value = Some(e.len_delimited()?),
                    (_, w) => e.skip(w)?,
                }
            }
            f(key, value.unwrap_or((&[], at)));
        }
    }
    Ok(())
}

/// Every feature of the Example in `record` that has a list set, with its name (the last entry
/// of a name, as protobuf reads maps), in the order of their last entries.
pub fn features<'a>(record: &'a [u8]) -> Result<Vec<(&'a [u8], FeatureView<'a>)>, WireError> {
    let mut found: Vec<(&'a [u8], FeatureBytes<'a>)> = Vec::new();
    entries(record, |key, value| {
        found.retain(|(k, _)| *k != key);
        found.push((key, value));
    })?;
    let mut out = Vec::with_capacity(found.len());
    for (key, (feat, at)) in found {
        if let Some(list) = list_of(feat, at)? {
            out.push((key, list));
        }
    }
    Ok(out)
}

/// The list a `Feature` message holds (the last one set), if any.
fn list_of(feat: &[u8], at: usize) -> Result<Option<FeatureView<'_>>, WireError> {
    let mut f = Wire::new(feat, at);
    let mut out = None;
    while let Some((num, wire)) = f.key()? {
        if !(1..=3).contains(&num) || wire != LEN {
            f.skip(wire)?;
            continue;
        }
        let (list, at) = f.len_delimited()?;
        out = Some(read_list(num, list, at)?);
    }
    Ok(out)
}

/// The feature `name` of the Example in `record`, or `None` when it has none (or a feature with
/// no list set).
pub fn feature<'a>(record: &'a [u8], name: &str) -> Result<Option<FeatureView<'a>>, WireError> {
    let mut found: Option<FeatureBytes<'a>> = None;
    entries(record, |key, value| {
        if key == name.as_bytes() {
            found = Some(value);
        }
    })?;
    let Some((feat, at)) = found else {
        return Ok(None);
    };
    list_of(feat, at)
}

fn read_list(kind: u64, list: &[u8], at: usize) -> Result<FeatureView<'_>, WireError> {
    let mut l = Wire::new(list, at);
    match kind {
        1 => {
            let mut v = Vec::new();
            while let Some((num, wire)) = l.key()? {
                if num == 1 && wire == LEN {
                    v.push(l.len_delimited()?.0);
                } else {
                    l.skip(wire)?;
                }
            }
            Ok(FeatureView::Bytes(v))
        }
        2 => {
            let mut v = Vec::new();
            while let Some((num, wire)) = l.key()? {
                match (num, wire) {
                    (1, LEN) => {
                        let (packed, at) = l.len_delimited()?;
                        if !packed.len().is_multiple_of(4) {
                            return Err(WireError {
                                offset: at,
                                detail: format!(
                                    "a packed float list of {} bytes (not a multiple of 4)",
                                    packed.len()
                                ),
                            });
                        }
                        v.extend(
                            packed
                                .chunks_exact(4)
                                .map(|c| f32::from_le_bytes(c.try_into().expect("chunks of 4"))),
                        );
                    }
                    (1, FIXED32) => {
                        let (b, _) = l.take(4)?;
                        v.push(f32::from_le_bytes(b.try_into().expect("4 bytes")));
                    }
                    (_, w) => l.skip(w)?,
                }
            }
            Ok(FeatureView::Float(v))
        }
        _ => {
            let mut v = Vec::new();
            while let Some((num, wire)) = l.key()? {
                match (num, wire) {
                    (1, LEN) => {
                        let (packed, at) = l.len_delimited()?;
                        let mut p = Wire::new(packed, at);
                        while p.pos < packed.len() {
                            v.push(p.varint()? as i64);
                        }
                    }
                    (1, VARINT) => v.push(l.varint()? as i64),
                    (_, w) => l.skip(w)?,
                }
            }
            Ok(FeatureView::Int(v))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::example::{Example, Feature, encode_example};

    fn example() -> Example {
        Example::from_features([
            ("image", Feature::bytes([b"\xff\xd8jpeg".to_vec()])),
            ("label", Feature::int64s(vec![-3])),
            ("box", Feature::floats(vec![0.5, 1.25])),
            ("ids", Feature::int64s(vec![1, 300, -1])),
        ])
    }

    #[test]
    fn finds_each_feature_as_prost_wrote_it() {
        let bytes = encode_example(&example());
        assert_eq!(
            feature(&bytes, "image").unwrap(),
            Some(FeatureView::Bytes(vec![b"\xff\xd8jpeg".as_slice()]))
        );
        assert_eq!(
            feature(&bytes, "label").unwrap(),
            Some(FeatureView::Int(vec![-3]))
        );
        assert_eq!(
            feature(&bytes, "box").unwrap(),
            Some(FeatureView::Float(vec![0.5, 1.25]))
        );
        assert_eq!(
            feature(&bytes, "ids").unwrap(),
            Some(FeatureView::Int(vec![1, 300, -1]))
        );
        assert_eq!(feature(&bytes, "nope").unwrap(), None);
        // the image borrows from the record
        let Some(FeatureView::Bytes(v)) = feature(&bytes, "image").unwrap() else {
            panic!()
        };
        let start = bytes.as_ptr() as usize;
        assert!(
            (v[0].as_ptr() as usize) >= start && (v[0].as_ptr() as usize) < start + bytes.len()
        );
    }

    #[test]
    fn unpacked_numbers_and_the_last_entry_win() {
        // features { feature { key "x" value { int64_list { value: 7 (unpacked) } } } }
        // then a second entry for "x" with a float, which wins
        let entry = |value: &[u8]| {
            let mut e = vec![0x0a, 1, b'x', 0x12, value.len() as u8];
            e.extend_from_slice(value);
            let mut f = vec![0x0a, e.len() as u8];
            f.extend(e);
            f
        };
        let int_list = [0x1a, 2, 0x08, 7]; // int64_list { value: 7 }
        let float_list = [0x12, 5, 0x0d, 0, 0, 0x80, 0x3f]; // float_list { value: 1.0 } unpacked
        let mut features = entry(&int_list);
        let mut ex = vec![0x0a, features.len() as u8];
        ex.append(&mut features);
        assert_eq!(feature(&ex, "x").unwrap(), Some(FeatureView::Int(vec![7])));
        let mut second = entry(&float_list);
        ex.extend([0x0a, second.len() as u8]);
        ex.append(&mut second);
        assert_eq!(
            feature(&ex, "x").unwrap(),
            Some(FeatureView::Float(vec![1.0]))
        );
    }

    #[test]
    fn every_cut_of_a_record_is_an_error_or_a_prefix_never_a_panic() {
        let bytes = encode_example(&example());
        for n in 0..bytes.len() {
            let _ = feature(&bytes[..n], "image");
            let _ = feature(&bytes[..n], "ids");
        }
        let mut bad = bytes.clone();
        bad[1] = 0xff; // the features' length passes the end
        assert!(feature(&bad, "image").is_err());
        assert!(
            feature(&[0x0b], "x").is_err(),
            "wire type 3 (group) is refused"
        );
    }
}
