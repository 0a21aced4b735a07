//! WebDataset tars in place: the scan that indexes one (each sample is the byte range from its
//! first member's header to its last member's data; where each member's data lies in it; the
//! CRC-32C of the members' data, which a tar does not store; the key) and the codec that gives a
//! sample's fields from that range, with pack's types. Links and devices are refused as pack
//! refuses them, pickles left out; no member name is ever used as a path.
//!
//! A sample's key in the index is `u32 key length | key | (u32 width, u32 height)` for each of
//! its numbered images (`KEY.0.jpg`, ...; in member order; `0, 0` where the first
//! [`SIZE_HEAD`] bytes give no size), read from the images' headers by the scan, so that a list
//! of images has its sizes ([`list_tables`]) as a shard's meta block gives them.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::sync::Arc;

use stokehold_format::{
    FieldType, FieldValue, ImageCodec, IndexEntry, ListItem, RecordCodec, RecordError, Schema, crc,
};

use super::index::{FileIndex, Member};
use super::{Rows, ScanDetail, ScanError, Scanned};
use crate::sources::webdataset::{field_type, image_item, is_pickle, split_name};
use crate::tar::{EntryKind, TarLimits, TarReader};

/// The statistics a tar index keeps (what pack's first pass counts).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct TarStats {
    /// Samples holding each extension.
    pub counts: BTreeMap<String, u64>,
    /// Samples.
    pub samples: u64,
    /// Pickle members left out.
    pub pickles: u64,
    /// The fields that are lists of numbered images (`images` of `KEY.0.jpg`, `KEY.1.jpg`, ...):
    /// `counts` counts a sample once for its list, whatever its number of images.
    #[serde(default)]
    pub lists: BTreeSet<String>,
}

/// The bytes of a numbered image read for its size (its header: a JPEG's EXIF and ICC segments
/// come before its frame header).
pub(super) const SIZE_HEAD: usize = 256 << 10;

/// The sample being gathered: key, where it starts, its members (extension, data offset, size,
/// and for a numbered image its width and height, `(0, 0)` when unknown) and the CRC of their
/// data.
struct Gathering {
    key: String,
    start: u64,
    members: Vec<Gathered>,
    crc: u32,
}

/// A member of the sample being gathered: extension, data offset, size, and for a numbered
/// image its width and height (`(0, 0)` when its header gives none).
type Gathered = (String, u64, u64, Option<(u32, u32)>);

/// Index the tar read by `r` into `ix`. A damaged archive (a bad header checksum, a cut member)
/// is an error at its byte offset.
pub(super) fn scan(r: impl Read, max: u64, ix: &mut FileIndex) -> Result<(), ScanError> {
    let reader = TarReader::new(r, limits(max));
    scan_with(reader, ix, |reader, crc, mut head| {
        reader.read_data_with(|chunk| {
            *crc = crc::append(*crc, chunk);
            if let Some(h) = head.as_deref_mut() {
                let take = chunk.len().min(SIZE_HEAD.saturating_sub(h.len()));
                h.extend_from_slice(&chunk[..take]);
            }
        })
    })
}

/// [`scan`] of a tar whose bytes are all in memory (a mapped file): each member's data is
/// checksummed where it lies.
pub(super) fn scan_slice(all: &[u8], max: u64, ix: &mut FileIndex) -> Result<(), ScanError> {
    let reader = TarReader::new(all, limits(max));
    scan_with(reader, ix, |reader, crc, head| {
        reader.read_data_slice().map(|data| {
            *crc = crc::append(*crc, data);
            if let Some(h) = head {
                h.extend_from_slice(&data[..data.len().min(SIZE_HEAD)]);
            }
        })
    })
}

fn limits(max: u64) -> TarLimits {
    TarLimits {
        max_member_size: max,
        ..TarLimits::default()
    }
}

/// The scan, with `data` folding the current member's data into a CRC-32C (and, given a
/// buffer, keeping its first [`SIZE_HEAD`] bytes there).
fn scan_with<R: Read>(
    mut reader: TarReader<R>,
    ix: &mut FileIndex,
    mut data: impl FnMut(
        &mut TarReader<R>,
        &mut u32,
        Option<&mut Vec<u8>>,
    ) -> Result<(), crate::tar::TarError>,
) -> Result<(), ScanError> {
    let mut head = Vec::new();
    let mut stats = TarStats::default();
    let mut current: Option<Gathering> = None;
    let mut refused = 0u64;
    loop {
        let entry = match reader.next_entry() {
            Ok(Some(e)) => e,
            Ok(None) => break,
            Err(e) => return Err(e.into()),
        };
        match entry.kind {
            EntryKind::Regular => {}
            EntryKind::Directory => continue,
            k => {
                refused += 1;
                if refused <= 3 {
                    ix.header.notes.push(format!(
                        "{}: member {:?} (byte {}) is a {k:?}: refused (links and devices are \
                         never followed)",
                        ix.header.file, entry.name, entry.header_offset
                    ));
                }
                continue;
            }
        }
        let Some((key, ext)) = split_name(&entry.name) else {
            continue;
        };
        if is_pickle(ext) {
            stats.pickles += 1;
            continue;
        }
        let (key, ext) = (key.to_string(), ext.to_string());
        if current.as_ref().is_some_and(|c| c.key != key) {
            finish(current.take(), ix, &mut stats)?;
        }
        let g = current.get_or_insert_with(|| Gathering {
            key,
            start: entry.header_offset,
            members: Vec::new(),
            crc: 0,
        });
        // the data is only checksummed, never held (a numbered image's header is read for its
        // size)
        let image = image_item(&ext).is_some();
        head.clear();
        data(&mut reader, &mut g.crc, image.then_some(&mut head))?;
        let size = image.then(|| stokehold_format::image_size::image_size(&head).unwrap_or((0, 0)));
        g.members.push((ext, entry.data_offset, entry.size, size));
    }
    if let Some(at) = reader.cut_at() {
        return Err(ScanError::at(at, ScanDetail::TarCut));
    }
    finish(current, ix, &mut stats)?;
    if refused > 3 {
        ix.header.notes.push(format!(
            "{}: {refused} link or device members refused in all",
            ix.header.file
        ));
    }
    if stats.pickles > 0 {
        ix.header.notes.push(format!(
            "{}: {} pickle members (.pyd/.pickle/.pt/.pth) were left out: stokehold never \
             unpickles data",
            ix.header.file, stats.pickles
        ));
    }
    ix.header.stats = serde_json::to_value(&stats).expect("the statistics serialize");
    Ok(())
}

fn finish(g: Option<Gathering>, ix: &mut FileIndex, stats: &mut TarStats) -> Result<(), ScanError> {
    let Some(g) = g else { return Ok(()) };
    let end = g.members.last().map_or(g.start, |(_, o, n, _)| o + n);
    let len = u32::try_from(end - g.start).map_err(|_| {
        ScanError::at(
            g.start,
            ScanDetail::SampleTooLarge {
                key: g.key.clone(),
                len: end - g.start,
            },
        )
    })?;
    let exts: BTreeSet<&str> = g.members.iter().map(|(e, _, _, _)| e.as_str()).collect();
    if exts.len() < g.members.len() {
        // pack skips it too
        ix.header.notes.push(format!(
            "{}: sample {:?} (byte {}) has two members with one extension and is left out",
            ix.header.file, g.key, g.start
        ));
        return Ok(());
    }
    stats.samples += 1;
    // a sample's numbered images count once, for their list
    let fields: BTreeSet<&str> = exts
        .into_iter()
        .map(|e| match image_item(e) {
            Some((list, _)) => {
                stats.lists.insert(list.to_string());
                list
            }
            None => e,
        })
        .collect();
    for e in fields {
        *stats.counts.entry(e.to_string()).or_default() += 1;
    }
    let members: Vec<Member> = g
        .members
        .iter()
        .map(|(ext, o, n, _)| Member {
            name: ix.name_id(ext),
            offset: (o - g.start) as u32,
            len: *n as u32,
        })
        .collect();
    let entry = IndexEntry {
        offset: g.start,
        len,
        crc: g.crc,
    };
    let mut key = Vec::with_capacity(4 + g.key.len());
    key.extend_from_slice(&(g.key.len() as u32).to_le_bytes());
    key.extend_from_slice(g.key.as_bytes());
    for (w, h) in g.members.iter().filter_map(|m| m.3) {
        key.extend_from_slice(&w.to_le_bytes());
        key.extend_from_slice(&h.to_le_bytes());
    }
    ix.push(entry, &members, &key);
    Ok(())
}

/// A sample's key and the sizes of its numbered images (`[w, h, w, h, ...]` in member order),
/// from its key in the index; `None` when that does not parse.
fn key_and_sizes(raw: &[u8]) -> Option<(&[u8], Vec<u32>)> {
    let n = u32::from_le_bytes(raw.get(..4)?.try_into().ok()?) as usize;
    let key = raw.get(4..4usize.checked_add(n)?)?;
    let rest = &raw[4 + n..];
    if !rest.len().is_multiple_of(8) {
        return None;
    }
    let sizes = rest
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    Some((key, sizes))
}

/// Per chosen list of numbered images, each sample's count and its images' sizes in the order
/// of their numbers, from the index (what a shard's meta block keeps, for
/// `Dataset::image_sizes`). A damaged sample, or one that gives a number twice, has none; a list
/// with an image whose size is unknown gets no table (its sizes are unknown: `None`).
pub(super) fn list_tables(
    ix: &FileIndex,
    chosen: &[super::Chosen],
) -> BTreeMap<String, stokehold_format::ListTable> {
    let mut out = BTreeMap::new();
    for c in chosen.iter().filter(|c| c.ty.is_image_list()) {
        let table = (|| {
            let (mut counts, mut sizes) = (Vec::with_capacity(ix.entries.len()), Vec::new());
            for r in 0..ix.entries.len() {
                if ix.damaged(r) {
                    counts.push(0);
                    continue;
                }
                let (_, all) = key_and_sizes(ix.key_of(r))?;
                // (number, width, height) of this list's images; the sizes are in the order of
                // the sample's numbered images
                let mut k = 0usize;
                let mut items: Vec<(u32, u32, u32)> = Vec::new();
                for m in ix.members_of(r) {
                    let Some((list, n)) = ix
                        .header
                        .names
                        .get(m.name as usize)
                        .and_then(|e| image_item(e))
                    else {
                        continue;
                    };
                    let (w, h) = (*all.get(2 * k)?, *all.get(2 * k + 1)?);
                    k += 1;
                    if list == c.name {
                        items.push((n, w, h));
                    }
                }
                items.sort_by_key(|i| i.0);
                if items.windows(2).any(|w| w[0].0 == w[1].0) {
                    counts.push(0);
                    continue;
                }
                if items.iter().any(|&(_, w, h)| (w, h) == (0, 0)) {
                    return None;
                }
                counts.push(u32::try_from(items.len()).ok()?);
                sizes.extend(items.iter().flat_map(|&(_, w, h)| [w, h]));
            }
            stokehold_format::ListTable::new(counts, Some(sizes)).ok()
        })();
        if let Some(t) = table {
            out.insert(c.name.clone(), t);
        }
    }
    out
}

/// The fields of one tar's samples.
#[derive(Debug)]
pub(super) struct TarCodec {
    pub index: Arc<FileIndex>,
    pub rows: Rows,
    /// Per schema field: `None` for `__key__`, else the extension's name index in the file
    /// (`None` inside when the file has no such member at all) and whether a sample may lack it.
    pub fields: Vec<Option<(Option<u32>, String, bool)>>,
}

impl TarCodec {
    fn data<'a>(&self, row: usize, bytes: &'a [u8], m: &Member) -> Option<&'a [u8]> {
        let _ = row;
        bytes.get(m.offset as usize..(m.offset as usize).checked_add(m.len as usize)?)
    }
}

impl TarCodec {
    /// The numbered images of list `list` of sample `row` (its bytes `bytes`), in the order of
    /// their numbers; none is an empty list where the field is `optional`. An error gives the
    /// offset in the sample and says what is wrong (a number given twice, a member past the end).
    fn image_list<'a>(
        &self,
        row: usize,
        bytes: &'a [u8],
        list: &str,
        optional: bool,
    ) -> Result<FieldValue<'a>, (u32, String)> {
        let mut items: Vec<(u32, &str, &Member)> = Vec::new();
        for m in self.index.members_of(row) {
            let name = self.index.header.names.get(m.name as usize);
            if let Some((_, n)) = name.and_then(|e| image_item(e)).filter(|(l, _)| *l == list) {
                items.push((n, name.map_or("", String::as_str), m));
            }
        }
        if items.is_empty() && !optional {
            return Err((
                0,
                format!("no numbered image members of {list:?}, a required field"),
            ));
        }
        items.sort_by_key(|(n, _, _)| *n);
        if let Some(w) = items.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err((
                w[1].2.offset,
                format!(
                    "two members for image {} of {list:?}: .{} and .{}",
                    w[0].0, w[0].1, w[1].1
                ),
            ));
        }
        let mut out = Vec::with_capacity(items.len());
        for (_, ext, m) in items {
            let data = self.data(row, bytes, m).ok_or_else(|| {
                (
                    m.offset,
                    format!(
                        "member .{ext} ({} bytes) passes the end of the sample",
                        m.len
                    ),
                )
            })?;
            out.push(FieldValue::Image(Cow::Borrowed(data)));
        }
        Ok(FieldValue::List(out))
    }

    /// Whether sample `row` holds field `name` (a member of that extension, or for a list of
    /// numbered images, one of them).
    pub(super) fn holds(ix: &FileIndex, row: usize, name: &str, id: Option<u32>) -> bool {
        ix.members_of(row).iter().any(|m| {
            Some(m.name) == id
                || ix
                    .header
                    .names
                    .get(m.name as usize)
                    .and_then(|e| image_item(e))
                    .is_some_and(|(l, _)| l == name)
        })
    }
}

impl RecordCodec for TarCodec {
    fn format(&self) -> &'static str {
        "WebDataset tar"
    }

    fn checksum(&self, record: u64, bytes: &[u8]) -> u32 {
        let row = self.rows.row(record);
        let mut c = 0;
        for m in self.index.members_of(row) {
            match self.data(row, bytes, m) {
                Some(d) => c = crc::append(c, d),
                // bytes of another length than indexed: a checksum that cannot match
                None => return !self.index.entries[row].crc,
            }
        }
        c
    }

    fn field<'a>(
        &self,
        record: u64,
        bytes: &'a [u8],
        schema: &Schema,
        i: usize,
    ) -> Result<FieldValue<'a>, RecordError> {
        let row = self.rows.row(record);
        let corrupt = |offset: u32, detail: String| RecordError::Corrupt {
            field: i,
            offset: u64::from(offset),
            detail,
        };
        let Some((id, ext, optional)) = &self.fields[i] else {
            return match key_and_sizes(self.index.key_of(row)).map(|(k, _)| std::str::from_utf8(k))
            {
                Some(Ok(k)) => Ok(FieldValue::String(Cow::Owned(k.to_string()))),
                Some(Err(_)) => Err(corrupt(0, "the sample's key is not UTF-8".into())),
                None => Err(corrupt(
                    0,
                    "the sample's key in the index does not parse".into(),
                )),
            };
        };
        if schema.fields[i].ty.is_image_list() {
            return self
                .image_list(row, bytes, ext, *optional)
                .map_err(|(at, e)| corrupt(at, e));
        }
        let member = id.and_then(|id| self.index.members_of(row).iter().find(|m| m.name == id));
        let Some(m) = member else {
            return match crate::sources::empty_value(&schema.fields[i].ty).filter(|_| *optional) {
                Some(v) => Ok(v),
                None => Err(corrupt(0, format!("no .{ext} member, a required field"))),
            };
        };
        let data = self.data(row, bytes, m).ok_or_else(|| {
            corrupt(
                m.offset,
                format!(
                    "member .{ext} ({} bytes) passes the end of the sample's {} bytes",
                    m.len,
                    bytes.len()
                ),
            )
        })?;
        Ok(match &schema.fields[i].ty {
            FieldType::Image { .. } => FieldValue::Image(Cow::Borrowed(data)),
            FieldType::Int64 => match std::str::from_utf8(data)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                Some(v) => FieldValue::Int64(v),
                None => {
                    return Err(corrupt(
                        m.offset,
                        format!("member .{ext} is not a decimal integer"),
                    ));
                }
            },
            FieldType::String => match std::str::from_utf8(data) {
                Ok(s) => FieldValue::String(Cow::Borrowed(s)),
                Err(_) => {
                    return Err(corrupt(
                        m.offset,
                        format!("member .{ext} is not UTF-8 text"),
                    ));
                }
            },
            _ => FieldValue::Bytes(Cow::Borrowed(data)),
        })
    }
}

/// The schema's fields of tars (after `__key__`), from their indexes' statistics, as pack
/// chooses them.
pub(super) fn choose(
    files: &[Scanned],
    fields: Option<&[crate::sources::FieldChoice]>,
    notes: &mut Vec<String>,
    source: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<super::Chosen>, super::ChooseError> {
    let mut all = TarStats::default();
    for f in files {
        let s: TarStats = serde_json::from_value(f.index.header.stats.clone()).map_err(|e| {
            super::ChooseError::Index(format!(
                "{}: its index's statistics are not valid: {e}",
                f.place
            ))
        })?;
        all.samples += s.samples;
        all.pickles += s.pickles;
        all.lists.extend(s.lists);
        for (e, n) in s.counts {
            *all.counts.entry(e).or_default() += n;
        }
    }
    if all.counts.is_empty() {
        return Err(super::ChooseError::Input(format!(
            "no KEY.EXT members in {} tar files",
            files.len()
        )));
    }
    let chosen = crate::sources::choose_fields(
        &all.counts,
        all.samples,
        fields,
        |ext| {
            all.lists.contains(ext)
                || matches!(field_type(ext), FieldType::String | FieldType::Bytes)
        },
        |ext| format!("member .{ext}"),
        notes,
        source,
    )?;
    Ok(super::Chosen::typed(chosen, |name| {
        if all.lists.contains(name) {
            FieldType::List {
                item: ListItem::Image {
                    codec: ImageCodec::Auto,
                },
            }
        } else {
            field_type(name)
        }
    }))
}

#[cfg(test)]
mod scan_tests {
    use super::*;

    /// The scan of a mapped tar and the streaming scan index it alike (members, checksums,
    /// keys, refused links, pickles left out), and refuse a cut one at the same byte.
    #[test]
    fn the_mapped_scan_is_the_streaming_scan() {
        let mut b = ::tar::Builder::new(Vec::new());
        let mut add = |name: &str, data: &[u8]| {
            let mut h = ::tar::Header::new_ustar();
            h.set_size(data.len() as u64);
            h.set_cksum();
            b.append_data(&mut h, name, data).unwrap();
        };
        let big: Vec<u8> = (0..150_000u32).map(|i| (i % 253) as u8).collect();
        add("s1.jpg", &big);
        add("s1.cls", b"3");
        add("s1.pyd", b"not unpickled");
        add("s2.jpg", b"\xff\xd8 small");
        add("s2.txt", b"caption");
        // a numbered image: its size, from its header, in the sample's key
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        png.extend_from_slice(&3u32.to_be_bytes());
        png.extend_from_slice(&5u32.to_be_bytes());
        add("s2.0.png", &png);
        let mut link = ::tar::Header::new_ustar();
        link.set_entry_type(::tar::EntryType::Symlink);
        link.set_size(0);
        b.append_link(&mut link, "s3.jpg", "/etc/passwd").unwrap();
        let archive = b.into_inner().unwrap();
        let index = |a: &[u8], slice: bool| {
            let mut ix = FileIndex::new("webdataset", "t.tar", a.len() as u64, None);
            let r = if slice {
                scan_slice(a, 1 << 30, &mut ix)
            } else {
                scan(a, 1 << 30, &mut ix)
            };
            r.map(|()| ix)
        };
        let (m, s) = (
            index(&archive, true).unwrap(),
            index(&archive, false).unwrap(),
        );
        assert_eq!(m, s);
        assert_eq!(m.entries.len(), 2);
        assert_eq!(key_and_sizes(m.key_of(1)), Some((&b"s2"[..], vec![3, 5])));
        assert!(m.header.notes.iter().any(|n| n.contains("refused")));
        let cut = &archive[..100_000];
        assert_eq!(
            index(cut, true).unwrap_err(),
            index(cut, false).unwrap_err()
        );
    }

    /// A tar cut at a member boundary (no end-of-archive blocks) is refused at that byte, in
    /// the words it had when the scanners returned an (offset, text) pair: the opener's
    /// `FormatError::Corrupt` reads as before.
    #[test]
    fn a_tar_cut_at_a_member_boundary_is_refused_in_the_same_words() {
        let mut b = ::tar::Builder::new(Vec::new());
        let mut h = ::tar::Header::new_ustar();
        h.set_size(3);
        h.set_cksum();
        b.append_data(&mut h, "s1.cls", &b"abc"[..]).unwrap();
        let mut archive = b.into_inner().unwrap();
        let end = 512 + 512; // the header, then the data padded to a block
        archive.truncate(end);
        for slice in [true, false] {
            let mut ix = FileIndex::new("webdataset", "t.tar", end as u64, None);
            let e = if slice {
                scan_slice(&archive, 1 << 30, &mut ix)
            } else {
                scan(&archive[..], 1 << 30, &mut ix)
            }
            .unwrap_err();
            assert_eq!(e.offset, end as u64);
            assert_eq!(
                e.to_string(),
                "the file ends here, at a member boundary, without tar's end-of-archive blocks: \
                 it was cut (the members after this byte are lost); copy it again"
            );
        }
    }
}
