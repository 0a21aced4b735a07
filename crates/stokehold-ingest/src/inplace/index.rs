//! The index of one file read in place, built once by a scan and kept: where each record is
//! (with the checksum its bytes must have), which fields it holds (and, in a tar, where each
//! member's data is), and what the file's records hold of each field (to choose the schema
//! without reading the records again).
//!
//! Kept as one object (`docs/storage.md`, "Files in place"):
//!
//! ```text
//! "SKHIDX\0\x05" | u32 header length | header (JSON: format, file name, size, version,
//! counts, names, statistics) | records × 16 B (u64 offset, u32 length, u32 checksum) |
//! (records + 1) × u32 first member | members × 12 B (u32 name, u32 offset in the record,
//! u32 length) | (records + 1) × u32 first key byte | key bytes | u32 CRC-32C of all before
//! ```
//!
//! Parsed through the format's one checked container parser (`stokehold_format::container`):
//! every count in the header is checked against the object's length before anything is
//! allocated, the JSON header against the shard meta block's limit, and every member against
//! its record.

use serde::{Deserialize, Serialize};
use stokehold_format::container::{self, Cursor};
use stokehold_format::{IndexEntry, Limits};

/// Version 2: Parquet lists of binary, strings and images, and a tar's numbered images, are
/// list fields (version 1 kept JSON text, or left them out). Version 3: a JSONL key that lists
/// image files is a list of images whose sizes the records' key bytes keep. Version 4: a JSONL
/// key that names video files is a `video` field whose frame indexes the key bytes keep.
/// Version 5: a JSONL file in object storage has the files its lines name indexed too (version 4
/// kept those keys as text). An index of an earlier version is not read: its file is scanned
/// again.
const MAGIC: &[u8; 8] = b"SKHIDX\0\x05";

/// A member's name index that marks a record the scan could not read (a bad checksum, not an
/// Example): it is kept, and reading it is an error naming it.
pub const DAMAGED: u32 = u32::MAX;

/// One member of a record: a field it holds (an index into [`IndexHeader::names`]) and, in a tar,
/// where the member's data is in the record's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// Index of the feature or extension in [`IndexHeader::names`] ([`DAMAGED`]: see there).
    pub name: u32,
    /// Offset of the data in the record's bytes.
    pub offset: u32,
    /// Bytes of data.
    pub len: u32,
}

/// What the header of a kept index says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexHeader {
    /// "tfrecord", "webdataset" or "parquet".
    pub format: String,
    /// The file's name in its location.
    pub file: String,
    /// Its size when indexed.
    pub size: u64,
    /// Its version when indexed (inode and modification time, ETag).
    pub version: Option<String>,
    /// Records.
    pub records: u64,
    /// Members of all records.
    pub members: u64,
    /// Bytes of keys.
    pub key_bytes: u64,
    /// The features or extensions the records hold.
    pub names: Vec<String>,
    /// What the records hold of each (the format's own statistics).
    pub stats: serde_json::Value,
    /// Problems met (members refused, records left out), for the notes of the dataset.
    pub notes: Vec<String>,
}

/// The index of one file.
#[derive(Debug, Clone, PartialEq)]
pub struct FileIndex {
    /// The header.
    pub header: IndexHeader,
    /// Each record's place and checksum.
    pub entries: Vec<IndexEntry>,
    /// `first_member[r]..first_member[r + 1]` are record `r`'s members.
    pub first_member: Vec<u32>,
    /// The members.
    pub members: Vec<Member>,
    /// `first_key[r]..first_key[r + 1]` are record `r`'s key bytes (a tar sample's key).
    pub first_key: Vec<u32>,
    /// The keys' bytes.
    pub keys: Vec<u8>,
}

impl FileIndex {
    /// An empty index of `file` (as `format` files are indexed).
    pub fn new(format: &str, file: &str, size: u64, version: Option<String>) -> FileIndex {
        FileIndex {
            header: IndexHeader {
                format: format.into(),
                file: file.into(),
                size,
                version,
                records: 0,
                members: 0,
                key_bytes: 0,
                names: Vec::new(),
                stats: serde_json::Value::Null,
                notes: Vec::new(),
            },
            entries: Vec::new(),
            first_member: vec![0],
            members: Vec::new(),
            first_key: vec![0],
            keys: Vec::new(),
        }
    }

    /// The index of the name `name` (added when new).
    pub fn name_id(&mut self, name: &str) -> u32 {
        match self.header.names.iter().position(|n| n == name) {
            Some(i) => i as u32,
            None => {
                self.header.names.push(name.to_string());
                (self.header.names.len() - 1) as u32
            }
        }
    }

    /// Add a record: its entry, members and key.
    pub fn push(&mut self, entry: IndexEntry, members: &[Member], key: &[u8]) {
        self.entries.push(entry);
        self.members.extend_from_slice(members);
        self.first_member.push(self.members.len() as u32);
        self.keys.extend_from_slice(key);
        self.first_key.push(self.keys.len() as u32);
        self.header.records = self.entries.len() as u64;
        self.header.members = self.members.len() as u64;
        self.header.key_bytes = self.keys.len() as u64;
    }

    /// Add records of no members and no key (`entries`, in order): as many [`FileIndex::push`]
    /// calls, in bulk.
    pub fn push_plain(&mut self, entries: &[IndexEntry]) {
        self.entries.extend_from_slice(entries);
        let (m, k) = (self.members.len() as u32, self.keys.len() as u32);
        self.first_member
            .extend(std::iter::repeat_n(m, entries.len()));
        self.first_key.extend(std::iter::repeat_n(k, entries.len()));
        self.header.records = self.entries.len() as u64;
    }

    /// Record `r`'s members.
    pub fn members_of(&self, r: usize) -> &[Member] {
        &self.members[self.first_member[r] as usize..self.first_member[r + 1] as usize]
    }

    /// Record `r`'s key.
    pub fn key_of(&self, r: usize) -> &[u8] {
        &self.keys[self.first_key[r] as usize..self.first_key[r + 1] as usize]
    }

    /// Whether the scan could not read record `r` (see [`DAMAGED`]).
    pub fn damaged(&self, r: usize) -> bool {
        self.members_of(r).iter().any(|m| m.name == DAMAGED)
    }

    /// The kept form.
    pub fn to_bytes(&self) -> Vec<u8> {
        let header = serde_json::to_vec(&self.header).expect("the header serializes");
        let mut out = Vec::with_capacity(
            16 + header.len() + self.entries.len() * 24 + self.members.len() * 12 + self.keys.len(),
        );
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        out.extend_from_slice(&header);
        for e in &self.entries {
            out.extend_from_slice(&e.offset.to_le_bytes());
            out.extend_from_slice(&e.len.to_le_bytes());
            out.extend_from_slice(&e.crc.to_le_bytes());
        }
        for v in &self.first_member {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for m in &self.members {
            out.extend_from_slice(&m.name.to_le_bytes());
            out.extend_from_slice(&m.offset.to_le_bytes());
            out.extend_from_slice(&m.len.to_le_bytes());
        }
        for v in &self.first_key {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.keys);
        container::seal(out)
    }

    /// Parse a kept index, checking its checksum, its counts against its length (before any
    /// allocation) and every member against its record.
    pub fn parse(bytes: &[u8]) -> Result<FileIndex, crate::Unusable> {
        let body = container::sealed_body(bytes, MAGIC, "index")?;
        let mut r = Cursor::new(body, MAGIC.len());
        let hlen = r.u32()? as usize;
        let header: IndexHeader = r.json_header(hlen, &Limits::default())?;
        let (records, members, key_bytes) = (header.records, header.members, header.key_bytes);
        let need = records
            .checked_mul(16 + 4 + 4)
            .and_then(|v| v.checked_add(8))
            .and_then(|v| v.checked_add(members.checked_mul(12)?))
            .and_then(|v| v.checked_add(key_bytes));
        if need != Some(r.remaining() as u64) {
            return Err(format!(
                "its header counts ({records} records, {members} members, {key_bytes} key bytes) \
                 do not match its {} bytes",
                body.len()
            )
            .into());
        }
        let entries = r.table(records, 16, |r| {
            Ok(IndexEntry {
                offset: r.u64()?,
                len: r.u32()?,
                crc: r.u32()?,
            })
        })?;
        let first_member = r.u32s(records + 1)?;
        let ms = r.table(members, 12, |r| {
            Ok(Member {
                name: r.u32()?,
                offset: r.u32()?,
                len: r.u32()?,
            })
        })?;
        let first_key = r.u32s(records + 1)?;
        let keys = r.take(key_bytes as usize)?.to_vec();
        let monotone = |v: &[u32], end: u64| {
            v.first() == Some(&0)
                && v.windows(2).all(|w| w[0] <= w[1])
                && v.last().map(|&l| u64::from(l)) == Some(end)
        };
        if !monotone(&first_member, members) || !monotone(&first_key, key_bytes) {
            return Err("its member or key tables are not in order".into());
        }
        let names = header.names.len() as u32;
        for (i, e) in entries.iter().enumerate() {
            if e.offset
                .checked_add(u64::from(e.len))
                .is_none_or(|end| end > header.size)
            {
                return Err(crate::Unusable::from(format!(
                    "record {i} lies past the file's end"
                )));
            }
            for m in &ms[first_member[i] as usize..first_member[i + 1] as usize] {
                let inside = u64::from(m.offset) + u64::from(m.len) <= u64::from(e.len);
                if !(m.name == DAMAGED || (m.name < names && inside)) {
                    return Err(crate::Unusable::from(format!(
                        "a member of record {i} is outside it"
                    )));
                }
            }
        }
        Ok(FileIndex {
            header,
            entries,
            first_member,
            members: ms,
            first_key,
            keys,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_pushed_in_bulk_are_those_pushed_one_by_one() {
        let plain: Vec<IndexEntry> = (0..5u32)
            .map(|i| IndexEntry {
                offset: u64::from(i) * 100 + 2000,
                len: 90 + i,
                crc: i * 31,
            })
            .collect();
        // after a record with members and a key, so the bulk ones point past them
        let (mut one, mut bulk) = (sample(), sample());
        for e in &plain {
            one.push(*e, &[], b"");
        }
        bulk.push_plain(&plain[..2]);
        bulk.push_plain(&[]);
        bulk.push_plain(&plain[2..]);
        assert_eq!(bulk.to_bytes(), one.to_bytes());
        assert_eq!(bulk.members_of(bulk.entries.len() - 1), &[] as &[Member]);
        assert_eq!(
            FileIndex::parse(&bulk.to_bytes()).unwrap().entries,
            one.entries
        );
    }

    fn sample() -> FileIndex {
        let mut ix = FileIndex::new("webdataset", "a.tar", 4096, Some("v1".into()));
        let jpg = ix.name_id("jpg");
        let cls = ix.name_id("cls");
        ix.push(
            IndexEntry {
                offset: 0,
                len: 2000,
                crc: 7,
            },
            &[
                Member {
                    name: jpg,
                    offset: 512,
                    len: 900,
                },
                Member {
                    name: cls,
                    offset: 1536,
                    len: 1,
                },
            ],
            b"000001",
        );
        ix.push(
            IndexEntry {
                offset: 2048,
                len: 1000,
                crc: 9,
            },
            &[Member {
                name: DAMAGED,
                offset: 0,
                len: 0,
            }],
            b"000002",
        );
        ix
    }

    #[test]
    fn round_trips_and_answers() {
        let ix = sample();
        let back = FileIndex::parse(&ix.to_bytes()).unwrap();
        assert_eq!(back, ix);
        assert_eq!(back.members_of(0).len(), 2);
        assert_eq!(back.key_of(1), b"000002");
        assert!(!back.damaged(0) && back.damaged(1));
    }

    #[test]
    fn every_damage_is_refused_not_trusted() {
        let bytes = sample().to_bytes();
        for n in 0..bytes.len() {
            assert!(FileIndex::parse(&bytes[..n]).is_err(), "a cut at {n}");
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x10;
            assert!(FileIndex::parse(&b).is_err(), "a flip at {i}");
        }
        // consistent checksum, hostile count: refused before allocating
        let mut ix = sample();
        ix.header.records = u64::MAX / 2;
        assert!(FileIndex::parse(&ix.to_bytes()).is_err());
        // a member outside its record
        let mut ix = sample();
        ix.members[0].len = 5000;
        assert!(FileIndex::parse(&ix.to_bytes()).is_err());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Mutated and cut kept indexes never panic their parser (the format's checked container
        /// parser), and one it accepts round-trips.
        #[test]
        fn mutated_kept_indexes_never_panic(
            edits in proptest::collection::vec((proptest::prelude::any::<proptest::sample::Index>(), proptest::prelude::any::<u8>()), 1..8),
            cut in proptest::prelude::any::<proptest::sample::Index>(),
        ) {
            let mut b = sample().to_bytes();
            for (at, v) in edits {
                let i = at.index(b.len());
                b[i] = v;
            }
            let keep = cut.index(b.len() + 1);
            crate::fuzzing::fuzz_file_index(&b);
            crate::fuzzing::fuzz_file_index(&b[..keep]);
            // sealed again, so that the checks past the checksum see the mutations
            let body = b[..b.len() - 4].to_vec();
            crate::fuzzing::fuzz_file_index(&stokehold_format::container::seal(body));
        }
    }
}
