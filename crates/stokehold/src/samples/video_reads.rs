//! Records whose `video` fields are read in part (issue #54): a clip needs of its video only the
//! frame index and the keyframe intervals that hold its frames, not the whole file.
//!
//! Two phases, both on the worker that fills the sample: the task's fetch reads the record's
//! first [`HEAD_READ`] bytes ([`plan_range`]); [`read_in_part`] then reads what else of the
//! record's header and fields it needs (every field but the sparse videos' containers), draws
//! each clip from its index exactly as the clip stage will ([`Transform::packet_ranges`]: a
//! pure function of seed, epoch and sample id), and reads the keyframe intervals holding the
//! packets (adjacent ones in one read). The record is rebuilt at its full length with the
//! bytes not read left zero (never looked at: the decoder reads only the packets planned), so
//! the stages that follow see a record as if read whole.
//!
//! Checks: each interval read against its CRC-32C in the index (format.md, `video`), a
//! mismatch naming the field, the interval, its file bytes; then the record's own CRC-32C,
//! combined from the CRCs of the bytes read and the index's CRCs of the intervals not read, so
//! the header, the index and the other fields are checked as a whole read checks them.
//! A video without interval checksums (an index of version 1) is read whole.

use stokehold_format::video::{FLAG_INTERVAL_CRCS, HEAD, Intervals, parse_video};
use stokehold_format::{FieldType, FormatError, ShardReader, VideoFile, crc};

use crate::rng::SampleRng;
use crate::stages::{Column, SampleCtx};

/// Bytes of a record read first: its field table and the start of its fields (a video's
/// header, the start of its frame index); what else of its header part it needs (the rest of
/// the index: 33 bytes a frame) is read after, exactly. Small, so that a short clip's reads
/// stay near the bytes of its intervals.
pub const HEAD_READ: u64 = 4 << 10;

/// Which fields of the records may be read in part: `video` fields that no column reads but
/// through a stage that [`Transform::packet_ranges`](crate::stages::Transform) plans (a clip,
/// its timestamps) or as another column's clock; a `video` field no column reads (a camera
/// left out) has only its header and index read.
#[derive(Debug, Clone, Default)]
pub struct PartialVideo {
    /// Schema indices of those fields.
    pub fields: Vec<usize>,
    /// Per column, its field's index and the clock field's (as [`super::Records`] keeps them).
    columns: Vec<(usize, Option<usize>)>,
}

impl PartialVideo {
    /// The fields of `schema` that `columns` (reading fields `field_index`, clocks
    /// `other_index`) allow to read in part; None when there is none.
    pub fn new(
        schema: &stokehold_format::Schema,
        columns: &[Column],
        field_index: &[usize],
        other_index: &[Option<usize>],
    ) -> Option<PartialVideo> {
        let fields: Vec<usize> = (0..schema.len())
            .filter(|&f| schema.fields[f].ty == FieldType::Video)
            .filter(|&f| {
                let mut read = columns
                    .iter()
                    .zip(field_index)
                    .filter(|(_, i)| **i == f)
                    .map(|(c, _)| c.transforms.first().is_some_and(|t| t.reads_packets_only()));
                // every column through a clip (none: a camera left out, only its index read)
                read.all(|ok| ok)
            })
            .collect();
        (!fields.is_empty()).then(|| PartialVideo {
            fields,
            columns: field_index
                .iter()
                .copied()
                .zip(other_index.iter().copied())
                .collect(),
        })
    }
}

/// The first range read of record `local` of `shard` read in part: its first [`HEAD_READ`]
/// bytes, `(lo, hi)` in the shard.
pub fn plan_range(shard: &ShardReader, local: u64) -> (u64, u64) {
    let e = shard.entry(local);
    (e.offset, e.offset + u64::from(e.len).min(HEAD_READ))
}

/// A record being read in part: its bytes at their places, and which were read.
struct Sparse<'a> {
    shard: &'a ShardReader,
    local: u64,
    /// The record's first byte in the shard.
    base: u64,
    buf: Vec<u8>,
    /// The ranges of `buf` read, sorted, disjoint, merged where they touch.
    got: Vec<(usize, usize)>,
    /// Bytes read.
    read: usize,
}

impl Sparse<'_> {
    /// Whether bytes `[lo, hi)` were read.
    fn covered(&self, lo: usize, hi: usize) -> bool {
        lo >= hi || self.got.iter().any(|&(a, b)| a <= lo && hi <= b)
    }

    /// Read what of bytes `[lo, hi)` was not read yet.
    fn need(&mut self, lo: usize, hi: usize) -> Result<(), FormatError> {
        let hi = hi.min(self.buf.len());
        let mut at = lo;
        let mut gaps = Vec::new();
        for &(a, b) in &self.got {
            if b <= at {
                continue;
            }
            if a >= hi {
                break;
            }
            if a > at {
                gaps.push((at, a));
            }
            at = at.max(b);
        }
        if at < hi {
            gaps.push((at, hi));
        }
        for (a, b) in gaps {
            let (lo_f, hi_f) = (self.base + a as u64, self.base + b as u64);
            self.shard
                .source()
                .read_at(lo_f, &mut self.buf[a..b])
                .map_err(|e| self.shard.range_error(lo_f, hi_f, e))?;
            self.read += b - a;
            self.got.push((a, b));
        }
        self.got.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(self.got.len());
        for &(a, b) in &self.got {
            match merged.last_mut() {
                Some(m) if a <= m.1 => m.1 = m.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        self.got = merged;
        Ok(())
    }

    fn u32_at(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.buf[at..at + 4].try_into().expect("4 bytes"))
    }

    fn corrupt(&self, offset: usize, detail: String) -> FormatError {
        FormatError::Corrupt {
            path: self.shard.path().to_path_buf(),
            what: self.shard.describe(self.local),
            offset: self.base + offset as u64,
            detail,
        }
    }
}

/// One video container read in part: its field, its value's place in the record, where its
/// container starts, its keyframe intervals, and which of them the clips read.
struct Container {
    field: usize,
    value: (usize, usize),
    start: usize,
    intervals: Intervals,
    wanted: Vec<usize>,
}

impl Container {
    /// Its parts tiling the container (lead, intervals, tail) as `(lo, hi, stored crc)` in the
    /// record.
    fn parts(&self) -> Vec<(usize, usize, u32)> {
        let (s, iv) = (self.start, &self.intervals);
        let first = iv.spans.first().map_or(0, |x| x.lo as usize);
        let last = iv.spans.last().map_or(0, |x| x.hi as usize);
        let mut parts = vec![(s, s + first, iv.lead_crc)];
        parts.extend(
            iv.spans
                .iter()
                .map(|x| (s + x.lo as usize, s + x.hi as usize, x.crc)),
        );
        parts.push((s + last, self.value.1, iv.tail_crc));
        parts
    }
}

/// What [`read_in_part`] gives: the record at its full length (bytes not read are zero) and
/// the bytes read; or `Whole`: the record is to be read whole (a video without interval
/// checksums, a clip that cannot be planned: its stage then says why).
pub enum PartRead {
    /// The record rebuilt, bytes read.
    Part(Vec<u8>, usize),
    /// Read it whole; `head` was read already.
    Whole,
}

/// Read record `local` of `shard` (sample `id`) in part, given its first bytes `head` (the
/// fetch of [`plan_range`]); `verify`: check the intervals' and the record's CRCs.
pub fn read_in_part(
    pv: &PartialVideo,
    columns: &[Column],
    shard: &ShardReader,
    local: u64,
    (id, seed, epoch): (u64, u64, u64),
    head: &[u8],
    verify: bool,
) -> Result<PartRead, FormatError> {
    let e = shard.entry(local);
    let len = e.len as usize;
    let nf = shard.meta().schema.len();
    let mut r = Sparse {
        shard,
        local,
        base: e.offset,
        // zeroed: the pages not written are never touched (nor committed)
        buf: vec![0u8; len],
        got: vec![(0, head.len().min(len))],
        read: head.len(),
    };
    let h = head.len().min(len);
    r.buf[..h].copy_from_slice(&head[..h]);
    // the field table
    let table = 4 * nf;
    if table > len {
        return Err(r.corrupt(0, format!("{len} bytes cannot hold {nf} field ends")));
    }
    r.need(0, table)?;
    let mut places = Vec::with_capacity(nf);
    let mut prev = 0usize;
    for f in 0..nf {
        let end = r.u32_at(4 * f) as usize;
        if end < prev || table + end > len {
            return Err(r.corrupt(
                4 * f,
                format!("field {f} ends at {end}, out of order or past the record"),
            ));
        }
        places.push((table + prev, table + end));
        prev = end;
    }
    // every field's bytes but the containers of videos with interval checksums
    let mut containers: Vec<Container> = Vec::new();
    for (f, &(lo, hi)) in places.iter().enumerate() {
        if !pv.fields.contains(&f) || hi - lo < HEAD {
            r.need(lo, hi)?;
            continue;
        }
        r.need(lo, lo + HEAD)?;
        let index_len = r.u32_at(lo + 8) as usize;
        let start = lo + HEAD + index_len;
        if r.buf[lo + 5] & FLAG_INTERVAL_CRCS == 0 || start > hi {
            // a version-1 index (or a damaged length: the whole read says so)
            return Ok(PartRead::Whole);
        }
        r.need(lo, start)?;
        containers.push(Container {
            field: f,
            value: (lo, hi),
            start,
            intervals: Intervals {
                spans: Vec::new(),
                lead_crc: 0,
                tail_crc: 0,
            },
            wanted: Vec::new(),
        });
    }
    for c in &mut containers {
        let (lo, hi) = c.value;
        let v = parse_video(&r.buf[lo..hi]).map_err(|m| {
            let name = &shard.meta().schema.fields[c.field].name;
            r.corrupt(lo, format!("field {name:?}: the video value: {m}"))
        })?;
        c.start = hi - v.container.len();
        c.intervals = v
            .intervals
            .ok_or_else(|| r.corrupt(lo, "the video's flags changed under the read".into()))?;
    }
    // the clips' packets, planned from the indices as the stages will
    for (k, col) in columns.iter().enumerate() {
        let (f, other) = pv.columns[k];
        let Some(c) = containers.iter().position(|c| c.field == f) else {
            continue;
        };
        let Some(t) = col.transforms.first() else {
            continue;
        };
        let (lo, hi) = containers[c].value;
        let mut rng = SampleRng::for_sample(seed, epoch, id, k as u64);
        let mut ctx = SampleCtx {
            id,
            seed,
            epoch,
            rng: &mut rng,
            other: other.map(|o| &r.buf[places[o].0..places[o].1]),
        };
        let Ok(ranges) = t.packet_ranges(&r.buf[lo..hi], &mut ctx) else {
            // the stage says why when it runs on the whole record
            return Ok(PartRead::Whole);
        };
        let c = &mut containers[c];
        c.wanted.extend(c.intervals.covering(&ranges));
    }
    // the intervals, adjacent ones in one read, each checked
    for c in &mut containers {
        c.wanted.sort_unstable();
        c.wanted.dedup();
        for (a, b) in c.intervals.frames_of(&c.wanted) {
            // decode-index ranges of adjacent intervals: their bytes are adjacent too
            let lo = c.intervals.spans.iter().find(|s| s.first == a);
            let hi = c.intervals.spans.iter().rev().find(|s| s.end == b);
            if let (Some(lo), Some(hi)) = (lo, hi) {
                r.need(c.start + lo.lo as usize, c.start + hi.hi as usize)?;
            }
        }
        if !verify {
            continue;
        }
        for &j in &c.wanted {
            let s = c.intervals.spans[j];
            let (a, b) = (c.start + s.lo as usize, c.start + s.hi as usize);
            let computed = crc::crc32c(&r.buf[a..b]);
            if computed != s.crc {
                return Err(FormatError::Checksum {
                    path: shard.path().to_path_buf(),
                    what: format!(
                        "{}, field {:?}, keyframe interval {j} (frames {}..{} in decode order)",
                        shard.describe(local),
                        shard.meta().schema.fields[c.field].name,
                        s.first,
                        s.end
                    ),
                    start: r.base + a as u64,
                    end: r.base + b as u64,
                    stored: s.crc,
                    computed,
                });
            }
        }
    }
    if verify {
        check_record(&r, &containers, e.crc)?;
    }
    let read = r.read;
    Ok(PartRead::Part(r.buf, read))
}

/// A `video` value whose container is a file of its own (a JSONL table of videos read in place:
/// [`VideoFile`]), read in part for column `col` of sample `ctx`: its head (kept at the scan),
/// then only the keyframe intervals holding the packets the column's clip decodes (each checked
/// against its CRC-32C in the index); the value at its full length, the bytes not read zero, and
/// the bytes read. With `index_only` (a clip's clock), only the head. A video without interval
/// checksums, or a clip that cannot be planned (its stage then says why), is read whole. Errors
/// name the line, key and file (`vf.what`).
pub fn read_file_in_part(
    col: &Column,
    vf: &VideoFile,
    ctx: &mut SampleCtx<'_>,
    index_only: bool,
) -> Result<(Vec<u8>, usize), String> {
    let at = |why: String| format!("{}: {why}", vf.what);
    let h = vf.head.len();
    let size = usize::try_from(vf.size).map_err(|_| at("too large for this machine".into()))?;
    // zeroed: the pages not written are never touched (nor committed)
    let mut buf = vec![0u8; h + size];
    buf[..h].copy_from_slice(&vf.head);
    if index_only {
        return Ok((buf, 0));
    }
    // the table's folder: a local disk (pread) or an object store (ranged GETs pinned to the
    // version its first HEAD saw)
    let len = vf.files.size(&vf.name).map_err(|e| at(e.to_string()))?;
    if len != vf.size {
        return Err(at(VideoFile::changed(len, vf.size)));
    }
    let read_at = |buf: &mut [u8], lo: usize, hi: usize| {
        vf.files
            .read_at(&vf.name, lo as u64, &mut buf[h + lo..h + hi])
            .map_err(|e| at(format!("bytes {lo}..{hi}: {e}")))
    };
    let planned = parse_video(&buf).ok().and_then(|v| {
        let intervals = v.intervals?;
        let ranges = col.transforms.first()?.packet_ranges(&buf, ctx).ok()?;
        Some((intervals, ranges))
    });
    let Some((intervals, ranges)) = planned else {
        read_at(&mut buf, 0, size)?;
        return Ok((buf, size));
    };
    // the container starts right after the head: file offset = container offset
    let mut wanted = intervals.covering(&ranges);
    wanted.sort_unstable();
    wanted.dedup();
    let mut read = 0usize;
    for (a, b) in intervals.frames_of(&wanted) {
        // decode-index ranges of adjacent intervals: their bytes are adjacent too
        let lo = intervals.spans.iter().find(|s| s.first == a);
        let hi = intervals.spans.iter().rev().find(|s| s.end == b);
        if let (Some(lo), Some(hi)) = (lo, hi) {
            let (lo, hi) = (lo.lo as usize, (hi.hi as usize).min(size));
            if lo < hi {
                read_at(&mut buf, lo, hi)?;
                read += hi - lo;
            }
        }
    }
    for &j in &wanted {
        let s = intervals.spans[j];
        let (a, b) = (h + s.lo as usize, (h + s.hi as usize).min(buf.len()));
        let computed = crc::crc32c(&buf[a..b]);
        if computed != s.crc {
            return Err(at(format!(
                "keyframe interval {j} (frames {}..{} in decode order, bytes {}..{} of the \
                 file): CRC-32C {computed:08x}, {:08x} when indexed (the file changed or is \
                 damaged: `stokehold index --rebuild`)",
                s.first, s.end, s.lo, s.hi, s.crc
            )));
        }
    }
    Ok((buf, read))
}

/// The record's CRC-32C from the bytes read and, for the parts of its containers not read, the
/// CRCs their index keeps: equal to the one in the shard's index, or the record is damaged.
fn check_record(r: &Sparse<'_>, containers: &[Container], stored: u32) -> Result<(), FormatError> {
    let mut crc = 0u32;
    let mut at = 0usize;
    let add = |crc: &mut u32, part: u32, n: usize| *crc = crc::combine(*crc, part, n as u64);
    for c in containers {
        for (a, b, part) in c.parts() {
            if at < a {
                add(&mut crc, crc::crc32c(&r.buf[at..a]), a - at);
            }
            let part = if r.covered(a, b) {
                crc::crc32c(&r.buf[a..b])
            } else {
                part
            };
            add(&mut crc, part, b - a);
            at = b;
        }
    }
    let len = r.buf.len();
    if at < len {
        add(&mut crc, crc::crc32c(&r.buf[at..]), len - at);
    }
    if crc != stored {
        let e = r.shard.entry(r.local);
        return Err(FormatError::Checksum {
            path: r.shard.path().to_path_buf(),
            what: format!(
                "{} (read in part: its header, fields and index)",
                r.shard.describe(r.local)
            ),
            start: e.offset,
            end: e.end(),
            stored,
            computed: crc,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use stokehold_format::video::{
        CONTAINER_MP4, VideoFrame, VideoIndex, encode_video, encode_video_v1,
    };
    use stokehold_format::{
        Field, FieldValue, Limits, Schema, ShardWriter, WriteOptions, memory_source,
    };

    use super::*;
    use crate::stages::spec::TransformSpec;

    /// 40 frames (a keyframe every 8) of 2000-byte packets after a 50-byte lead: its index,
    /// its container.
    fn video() -> (VideoIndex, Vec<u8>) {
        let frames = (0..40)
            .map(|i| VideoFrame {
                pts: i,
                dts: i,
                duration: 1,
                key: i % 8 == 0,
                offset: 50 + 2000 * i as u64,
                size: 2000,
            })
            .collect();
        // 25 fps in a timescale of 25, 320x240
        let index = VideoIndex {
            frames,
            extradata: vec![0x01, 0x64, 0x00, 0x1e],
            timescale: 25,
            width: 320,
            height: 240,
            codec: *b"avc1",
            container: CONTAINER_MP4,
        };
        let container = (0..50 + 80_000 + 30).map(|i| (i * 7 % 251) as u8).collect();
        (index, container)
    }

    /// A shard in memory of one record (label, video, path), its bytes and the record's offset.
    fn shard(value: &[u8], damage: Option<usize>) -> (ShardReader, Vec<u8>) {
        let schema = Schema::new(vec![
            Field::new("label", FieldType::Int64),
            Field::new("video", FieldType::Video),
            Field::new("path", FieldType::String),
        ])
        .unwrap();
        let mut w = ShardWriter::new(Vec::new(), schema, WriteOptions::default()).unwrap();
        w.write(&[
            FieldValue::Int64(3),
            FieldValue::Bytes(value.into()),
            FieldValue::String("cats/a.mp4".into()),
        ])
        .unwrap();
        let (mut bytes, _) = w.finish().unwrap();
        let clean =
            ShardReader::from_source("s.skh", memory_source(bytes.clone()), Limits::default())
                .unwrap();
        let mut record = Vec::new();
        clean.read_record(0, &mut record, true).unwrap();
        // damage after the index was read and checked: a byte `at` of the record
        let base = clean.entry(0).offset as usize;
        let reader = match damage {
            None => clean,
            Some(at) => {
                bytes[base + at] ^= 0x55;
                // a record's bytes are not checked at open: the damaged copy opens
                ShardReader::from_source("s.skh", memory_source(bytes), Limits::default()).unwrap()
            }
        };
        (reader, record)
    }

    /// The columns of a uniform 4-frame clip of field "video" (the middle: frames 18 to 21,
    /// keyframe interval 2) and the fields they read.
    fn clip() -> (PartialVideo, Vec<Column>) {
        let specs: Vec<TransformSpec> = serde_json::from_value(serde_json::json!([
            {"name": "clip", "params": {"frames": 4, "start": "uniform"}}
        ]))
        .unwrap();
        let (t, output) = crate::stages::video::plan("video", &specs)
            .unwrap()
            .unwrap();
        let col = Column {
            name: "video".into(),
            field: "video".into(),
            transforms: vec![t],
            output,
        };
        let (ix, container) = video();
        let schema = shard(&encode_video(&ix, &container), None)
            .0
            .meta()
            .schema
            .clone();
        let cols = vec![col];
        let pv = PartialVideo::new(&schema, &cols, &[1], &[None]).unwrap();
        (pv, cols)
    }

    fn read(
        reader: &ShardReader,
        pv: &PartialVideo,
        cols: &[Column],
    ) -> Result<PartRead, FormatError> {
        let (lo, hi) = plan_range(reader, 0);
        let mut head = vec![0u8; (hi - lo) as usize];
        reader.source().read_at(lo, &mut head).unwrap();
        read_in_part(pv, cols, reader, 0, (0, 1, 0), &head, true)
    }

    #[test]
    fn a_clip_reads_its_interval_and_the_record_checks_through_the_combined_crc() {
        let (pv, cols) = clip();
        let (ix, container) = video();
        let value = encode_video(&ix, &container);
        let (reader, record) = shard(&value, None);
        let PartRead::Part(buf, n) = read(&reader, &pv, &cols).unwrap() else {
            panic!("read whole")
        };
        assert_eq!(buf.len(), record.len());
        // the header part, one interval of 8 packets (16000 bytes) and the path: not the rest
        let index_end = 4 * 3 + 8 + (value.len() - container.len());
        assert!(n <= index_end + 16_000 + 10 + 4096, "{n}");
        assert!(n < record.len() / 3, "{n} of {}", record.len());
        let start = record.len() - 10 - container.len();
        let interval = start + 50 + 16 * 2000..start + 50 + 24 * 2000;
        assert_eq!(buf[..index_end], record[..index_end]);
        assert_eq!(buf[interval.clone()], record[interval.clone()]);
        assert_eq!(buf[record.len() - 10..], record[record.len() - 10..]);
        // past the first read, the intervals before the clip's were not read
        let first_read = HEAD_READ as usize;
        assert!(first_read < interval.start);
        assert!(buf[first_read..interval.start].iter().all(|&b| b == 0));

        // a damaged byte in an interval not read: not seen
        let (reader, _) = shard(&value, Some(start + 50 + 3 * 2000));
        assert!(matches!(read(&reader, &pv, &cols), Ok(PartRead::Part(..))));
        // in the interval read: its checksum, named
        let (reader, _) = shard(&value, Some(interval.start + 7));
        let e = read(&reader, &pv, &cols).err().unwrap().to_string();
        assert!(e.contains("keyframe interval 2 (frames 16..24"), "{e}");
        // in the index (the last frame's time; the stored CRC of interval 0, not read), in the
        // path: the record's checksum, combined from the parts read and the CRCs of the
        // intervals not read
        let table = 4 * (5 + 2);
        for at in [
            index_end - table - 33,
            index_end - table + 5,
            record.len() - 3,
        ] {
            let (reader, _) = shard(&value, Some(at));
            match read(&reader, &pv, &cols) {
                Err(FormatError::Checksum { what, .. }) => {
                    assert!(what.contains("read in part"), "{what}")
                }
                Err(e) => panic!("damage at {at}: {e}"),
                Ok(_) => panic!("damage at {at} not seen"),
            }
        }
        // in the field table: an error, whichever check sees it first
        let (reader, _) = shard(&value, Some(2));
        assert!(read(&reader, &pv, &cols).is_err());
        // an index of version 1: read whole
        let (reader, _) = shard(&encode_video_v1(&ix, &container), None);
        assert!(matches!(read(&reader, &pv, &cols), Ok(PartRead::Whole)));
    }
}
