//! The `video` field type's value (format.md §3, "video"): a video file's bytes as given (its
//! container, e.g. MP4), led by its **frame index**: per frame (packet) of its first video
//! track, in decode order, the presentation and decode times, the duration, whether it is a
//! keyframe and the byte range of its packet inside the container. A reader plans a clip's
//! reads and decoding from the index alone, without parsing the container again.
//!
//! ```text
//! value   := "SKV1" | container u8 (1 = MP4, 2 = Matroska/WebM) | flags u8 | 2 zero bytes | index_len u32 | index
//!            | container bytes
//! index   := codec [4] | timescale u32 | width u16 | height u16 | extradata_len u32 | extradata
//!            | frames u32 | frame × frames | [crc u32 × (keyframes + 2), when flags bit 0]
//! frame   := pts i64 | dts i64 | duration u32 | flags u8 (bit 0: keyframe) | offset u64 | size u32
//! ```
//! All little-endian; offsets count from the container's first byte. Every length is checked
//! against the bytes that hold it before anything is sized by it, and every packet must lie
//! inside the container.
//!
//! **Interval checksums** (index version 2, the header's flags bit 0): the container is tiled
//! by [`interval_spans`]: the lead (before the first keyframe's packet), one span per keyframe
//! interval (from its keyframe's packet to the next keyframe's, the last one to the end of the
//! last packet) and the tail; the table holds the CRC-32C of each, in that order. So a reader
//! reads only the intervals a clip decodes, checks each against its checksum, and checks the
//! rest of the record it read by combining these checksums into the record's
//! (format.md §4.2). A value whose packets do not lie in keyframe order (each interval's packets
//! between its keyframe's and the next one's) gets no table: it is read whole, as a version-1
//! index (flags 0) is.

/// The first four bytes of a video value.
pub const VIDEO_MAGIC: &[u8; 4] = b"SKV1";
/// Container code of an MP4 (ISO base media) file.
pub const CONTAINER_MP4: u8 = 1;
/// Container code of a Matroska or WebM file (the same index; the packets lie inside its
/// blocks).
pub const CONTAINER_MATROSKA: u8 = 2;
/// Bytes of one frame entry.
pub const FRAME_BYTES: usize = 33;
/// Bytes before the index.
pub const HEAD: usize = 12;
/// The header's flags: the index ends with the interval checksums.
pub const FLAG_INTERVAL_CRCS: u8 = 1;

/// One frame (packet) of the index, in decode order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VideoFrame {
    /// Presentation time, in the timescale.
    pub pts: i64,
    /// Decode time, in the timescale.
    pub dts: i64,
    /// Duration, in the timescale.
    pub duration: u32,
    /// Decoding can start here.
    pub key: bool,
    /// The packet's first byte, from the container's start.
    pub offset: u64,
    /// The packet's size.
    pub size: u32,
}

impl VideoFrame {
    /// Append the frame's [`FRAME_BYTES`] bytes (`pts i64 | dts i64 | duration u32 | flags u8
    /// (bit 0: keyframe) | offset u64 | size u32`, little-endian) to `out`: its entry in a
    /// `video` value's index and in a kept video index (`crate::container::seal_video_index`).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.pts.to_le_bytes());
        out.extend_from_slice(&self.dts.to_le_bytes());
        out.extend_from_slice(&self.duration.to_le_bytes());
        out.push(u8::from(self.key));
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
    }
}

/// A video's frame index, as kept in a `video` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VideoIndex {
    /// The container ([`CONTAINER_MP4`] or [`CONTAINER_MATROSKA`]).
    pub container: u8,
    /// The codec's four-character code (`avc1`, `hvc1`, `vp09`, `av01`, ...).
    pub codec: [u8; 4],
    /// Ticks per second of the times (at least 1).
    pub timescale: u32,
    /// Width in pixels, as the container says.
    pub width: u16,
    /// Height in pixels.
    pub height: u16,
    /// The codec's configuration record (the decoder's extradata).
    pub extradata: Vec<u8>,
    /// The frames, in decode order (at least one).
    pub frames: Vec<VideoFrame>,
}

/// A parsed `video` value: its index and the container's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VideoValue<'a> {
    /// The frame index.
    pub index: VideoIndex,
    /// The container's bytes, as given when packed.
    pub container: &'a [u8],
    /// The interval checksums (index version 2), None for a version-1 index.
    pub intervals: Option<Intervals>,
}

/// How a video's container is tiled for partial reads, with each part's CRC-32C.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intervals {
    /// Per keyframe interval (decode order), its byte span `[lo, hi)` in the container and the
    /// decode indices of its frames `[first, end)`.
    pub spans: Vec<IntervalSpan>,
    /// CRC-32C of the lead `[0, spans[0].lo)`.
    pub lead_crc: u32,
    /// CRC-32C of the tail `[spans.last().hi, container length)`.
    pub tail_crc: u32,
}

impl Intervals {
    /// The keyframe intervals holding any byte of `ranges` (container offsets `[lo, hi)`), by
    /// index, ascending: what a reader of those packets reads and checks.
    pub fn covering(&self, ranges: &[(u64, u64)]) -> Vec<usize> {
        let mut out: Vec<usize> = Vec::new();
        for &(lo, hi) in ranges {
            // the first span ending after lo, then every span starting before hi
            let from = self.spans.partition_point(|s| s.hi <= lo);
            for (j, s) in self.spans.iter().enumerate().skip(from) {
                if s.lo >= hi {
                    break;
                }
                out.push(j);
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The decode-index ranges `[first, end)` of intervals `which` (ascending), adjacent ones
    /// joined: the packets a reader of those intervals has.
    pub fn frames_of(&self, which: &[usize]) -> Vec<(usize, usize)> {
        let mut out: Vec<(usize, usize)> = Vec::new();
        for s in which.iter().filter_map(|&j| self.spans.get(j)) {
            match out.last_mut() {
                Some(last) if last.1 == s.first => last.1 = s.end,
                _ => out.push((s.first, s.end)),
            }
        }
        out
    }
}

/// One keyframe interval of [`Intervals`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntervalSpan {
    /// First byte (its keyframe's packet), from the container's start.
    pub lo: u64,
    /// One past its last byte.
    pub hi: u64,
    /// Decode index of its keyframe.
    pub first: usize,
    /// One past the decode index of its last frame.
    pub end: usize,
    /// CRC-32C of bytes `[lo, hi)`.
    pub crc: u32,
}

/// The keyframe intervals tiling a container of `len` bytes, CRCs left 0: per keyframe (decode
/// order) `[its packet's offset, the next keyframe's packet's offset)`, the last one up to the
/// end of the last packet. None when the packets are not laid out so (the first frame is not a
/// keyframe, keyframes' packets not in increasing order, a packet outside its interval's span):
/// such a video has no interval checksums and is read whole.
pub fn interval_spans(frames: &[VideoFrame], len: u64) -> Option<Vec<IntervalSpan>> {
    if !frames.first()?.key {
        return None;
    }
    let keys: Vec<usize> = (0..frames.len()).filter(|&d| frames[d].key).collect();
    let last_end = frames
        .iter()
        .map(|f| f.offset.checked_add(u64::from(f.size)))
        .try_fold(0u64, |m, e| e.map(|e| m.max(e)))?;
    if last_end > len {
        return None;
    }
    let mut spans = Vec::with_capacity(keys.len());
    for (j, &first) in keys.iter().enumerate() {
        let end = keys.get(j + 1).copied().unwrap_or(frames.len());
        let lo = frames[first].offset;
        let hi = keys.get(j + 1).map_or(last_end, |&n| frames[n].offset);
        if hi <= lo {
            return None;
        }
        let inside = frames[first..end]
            .iter()
            .all(|f| f.offset >= lo && f.offset + u64::from(f.size) <= hi);
        if !inside {
            return None;
        }
        spans.push(IntervalSpan {
            lo,
            hi,
            first,
            end,
            crc: 0,
        });
    }
    Some(spans)
}

/// A `video` value of `container`'s bytes led by `index` (which must describe them), with the
/// interval checksums when its packets allow them ([`interval_spans`]).
pub fn encode_video(index: &VideoIndex, container: &[u8]) -> Vec<u8> {
    encode(index, container, true)
}

/// A `video` value with a version-1 index (no interval checksums: read whole), as values
/// packed before them are.
pub fn encode_video_v1(index: &VideoIndex, container: &[u8]) -> Vec<u8> {
    encode(index, container, false)
}

fn encode(index: &VideoIndex, container: &[u8], checksums: bool) -> Vec<u8> {
    let spans = checksums
        .then(|| interval_spans(&index.frames, container.len() as u64))
        .flatten();
    let table = spans.as_ref().map_or(0, |s| 4 * (s.len() + 2));
    let index_len =
        4 + 4 + 2 + 2 + 4 + index.extradata.len() + 4 + FRAME_BYTES * index.frames.len() + table;
    let mut out = Vec::with_capacity(HEAD + index_len + container.len());
    out.extend_from_slice(VIDEO_MAGIC);
    let flags = if spans.is_some() {
        FLAG_INTERVAL_CRCS
    } else {
        0
    };
    out.extend_from_slice(&[index.container, flags, 0, 0]);
    out.extend_from_slice(&(index_len as u32).to_le_bytes());
    out.extend_from_slice(&index.codec);
    out.extend_from_slice(&index.timescale.to_le_bytes());
    out.extend_from_slice(&index.width.to_le_bytes());
    out.extend_from_slice(&index.height.to_le_bytes());
    out.extend_from_slice(&(index.extradata.len() as u32).to_le_bytes());
    out.extend_from_slice(&index.extradata);
    out.extend_from_slice(&(index.frames.len() as u32).to_le_bytes());
    for f in &index.frames {
        f.encode_into(&mut out);
    }
    if let Some(spans) = &spans {
        let lead = &container[..spans[0].lo as usize];
        out.extend_from_slice(&crate::crc::crc32c(lead).to_le_bytes());
        for s in spans {
            let crc = crate::crc::crc32c(&container[s.lo as usize..s.hi as usize]);
            out.extend_from_slice(&crc.to_le_bytes());
        }
        let tail = &container[spans[spans.len() - 1].hi as usize..];
        out.extend_from_slice(&crate::crc::crc32c(tail).to_le_bytes());
    }
    debug_assert_eq!(out.len(), HEAD + index_len);
    out.extend_from_slice(container);
    out
}

/// What is wrong with a `video` value ([`parse_video`], [`check_intervals`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VideoValueError {
    /// A part of the value goes past its end (or past the index's end).
    #[error("{what} needs {need} bytes, {left} are left")]
    Short {
        /// The part ("the frame index", "the extradata", ...).
        what: &'static str,
        /// Its bytes.
        need: usize,
        /// The bytes left.
        left: usize,
    },
    /// Not [`VIDEO_MAGIC`].
    #[error("not a stokehold video value: it starts with \"{}\", not \"SKV1\"", .found.escape_ascii())]
    Magic {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// A container code other than [`CONTAINER_MP4`] and [`CONTAINER_MATROSKA`].
    #[error("unknown container code {0} (1 is MP4, 2 Matroska/WebM)")]
    Container(u8),
    /// Header flags other than [`FLAG_INTERVAL_CRCS`].
    #[error("unknown header flags {0:#x}")]
    Flags(u8),
    /// Reserved header bytes that are not zero.
    #[error("the header's reserved bytes are not zero")]
    Reserved,
    /// A timescale of 0.
    #[error("a timescale of 0")]
    ZeroTimescale,
    /// An index without frames.
    #[error("the index has no frames")]
    NoFrames,
    /// A frame count the index's bytes do not hold.
    #[error("the index says {frames} frames ({need} bytes) and holds {held} bytes of frames")]
    FrameCount {
        /// The count.
        frames: usize,
        /// The bytes of that many frames.
        need: usize,
        /// The bytes of frames there are.
        held: usize,
    },
    /// A frame's unknown flags.
    #[error("frame {frame}: unknown flags {flags:#x}")]
    FrameFlags {
        /// The frame (decode order).
        frame: usize,
        /// Its flags byte.
        flags: u8,
    },
    /// A frame's packet outside the container.
    #[error(
        "frame {frame}: its packet ({size} bytes at byte {offset} of the container) lies outside \
         the container's {len} bytes"
    )]
    PacketOutside {
        /// The frame (decode order).
        frame: usize,
        /// Its packet's size.
        size: u32,
        /// Its packet's offset in the container.
        offset: u64,
        /// The container's bytes.
        len: usize,
    },
    /// Interval checksums for packets not laid out in keyframe intervals.
    #[error(
        "the index has interval checksums but its packets are not laid out in keyframe intervals"
    )]
    NotIntervals,
    /// A table of interval checksums of another size than its intervals take.
    #[error(
        "the index's interval checksums take {bytes} bytes, its {intervals} keyframe intervals \
         need {need}"
    )]
    IntervalTable {
        /// The table's bytes.
        bytes: usize,
        /// The keyframe intervals.
        intervals: usize,
        /// The bytes they take (with the lead's and the tail's).
        need: usize,
    },
    /// A part of the container whose checksum in the index is not its bytes'.
    #[error(
        "{part} (bytes {lo}..{hi} of the container): its checksum in the index is {stored:#010x}, \
         its bytes' {computed:#010x}"
    )]
    Checksum {
        /// The part.
        part: IntervalPart,
        /// Its first byte.
        lo: usize,
        /// One past its last byte.
        hi: usize,
        /// The checksum in the index.
        stored: u32,
        /// The checksum of its bytes.
        computed: u32,
    },
}

/// A part of a container that interval checksums cover ([`interval_spans`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntervalPart {
    /// Before the first keyframe's packet.
    Lead,
    /// Keyframe interval `j`.
    Interval(usize),
    /// After the last packet.
    Tail,
}

impl std::fmt::Display for IntervalPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IntervalPart::Lead => f.write_str("the lead"),
            IntervalPart::Interval(j) => write!(f, "keyframe interval {j}"),
            IntervalPart::Tail => f.write_str("the tail"),
        }
    }
}

/// Reads little-endian fields off a slice, each read checked against what is left.
struct Take<'a>(&'a [u8]);

impl<'a> Take<'a> {
    fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], VideoValueError> {
        if n > self.0.len() {
            return Err(VideoValueError::Short {
                what,
                need: n,
                left: self.0.len(),
            });
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], VideoValueError> {
        Ok(self.bytes(N, what)?.try_into().expect("N bytes"))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, VideoValueError> {
        self.array(what).map(u32::from_le_bytes)
    }
}

/// Parses and checks a `video` value: its header, its index, every packet inside the
/// container. The message says what is wrong and at which byte of the value.
pub fn parse_video(value: &[u8]) -> Result<VideoValue<'_>, VideoValueError> {
    let mut t = Take(value);
    let magic = t.array::<4>("the video header")?;
    if &magic != VIDEO_MAGIC {
        return Err(VideoValueError::Magic { found: magic });
    }
    let [container, flags, r1, r2] = t.array::<4>("the video header")?;
    if container != CONTAINER_MP4 && container != CONTAINER_MATROSKA {
        return Err(VideoValueError::Container(container));
    }
    if flags & !FLAG_INTERVAL_CRCS != 0 {
        return Err(VideoValueError::Flags(flags));
    }
    if (r1, r2) != (0, 0) {
        return Err(VideoValueError::Reserved);
    }
    let index_len = t.u32("the index length")? as usize;
    let index_bytes = t.bytes(index_len, "the frame index")?;
    let body = t.0;
    let mut i = Take(index_bytes);
    let codec = i.array::<4>("the codec")?;
    let timescale = i.u32("the timescale")?;
    if timescale == 0 {
        return Err(VideoValueError::ZeroTimescale);
    }
    let width = u16::from_le_bytes(i.array("the width")?);
    let height = u16::from_le_bytes(i.array("the height")?);
    let extra_len = i.u32("the extradata length")? as usize;
    let extradata = i.bytes(extra_len, "the extradata")?.to_vec();
    let n = i.u32("the frame count")? as usize;
    if n == 0 {
        return Err(VideoValueError::NoFrames);
    }
    // the count is held to the bytes that hold the frames before anything is sized by it
    let with_table = flags & FLAG_INTERVAL_CRCS != 0;
    let frame_bytes = n.saturating_mul(FRAME_BYTES);
    if i.0.len() < frame_bytes || (!with_table && i.0.len() != frame_bytes) {
        return Err(VideoValueError::FrameCount {
            frames: n,
            need: frame_bytes,
            held: i.0.len(),
        });
    }
    let (frame_table, crc_table) = i.0.split_at(frame_bytes);
    let mut frames = Vec::with_capacity(n);
    for (k, b) in frame_table.chunks_exact(FRAME_BYTES).enumerate() {
        let f = VideoFrame {
            pts: i64::from_le_bytes(b[0..8].try_into().expect("8")),
            dts: i64::from_le_bytes(b[8..16].try_into().expect("8")),
            duration: u32::from_le_bytes(b[16..20].try_into().expect("4")),
            key: b[20] & 1 == 1,
            offset: u64::from_le_bytes(b[21..29].try_into().expect("8")),
            size: u32::from_le_bytes(b[29..33].try_into().expect("4")),
        };
        if b[20] & !1 != 0 {
            return Err(VideoValueError::FrameFlags {
                frame: k,
                flags: b[20],
            });
        }
        let end = f.offset.checked_add(u64::from(f.size));
        if end.is_none_or(|e| e > body.len() as u64) {
            return Err(VideoValueError::PacketOutside {
                frame: k,
                size: f.size,
                offset: f.offset,
                len: body.len(),
            });
        }
        frames.push(f);
    }
    let intervals = match with_table {
        false => None,
        true => Some(interval_table(&frames, body.len() as u64, crc_table)?),
    };
    Ok(VideoValue {
        index: VideoIndex {
            container,
            codec,
            timescale,
            width,
            height,
            extradata,
            frames,
        },
        container: body,
        intervals,
    })
}

/// Checks a parsed value's interval checksums against its container's bytes (what a writer
/// does: a value whose table does not match its bytes would fail every clip reading it).
pub fn check_intervals(v: &VideoValue<'_>) -> Result<(), VideoValueError> {
    let Some(iv) = &v.intervals else {
        return Ok(());
    };
    let c = v.container;
    let lead = iv.spans.first().map_or(0, |s| s.lo as usize);
    let tail = iv.spans.last().map_or(0, |s| s.hi as usize);
    let parts = std::iter::once((0, lead, iv.lead_crc, IntervalPart::Lead))
        .chain(iv.spans.iter().enumerate().map(|(j, s)| {
            (
                s.lo as usize,
                s.hi as usize,
                s.crc,
                IntervalPart::Interval(j),
            )
        }))
        .chain(std::iter::once((
            tail,
            c.len(),
            iv.tail_crc,
            IntervalPart::Tail,
        )));
    for (lo, hi, stored, part) in parts {
        let computed = crate::crc::crc32c(&c[lo..hi]);
        if computed != stored {
            return Err(VideoValueError::Checksum {
                part,
                lo,
                hi,
                stored,
                computed,
            });
        }
    }
    Ok(())
}

/// The interval checksums `table` of a version-2 index over `frames`, checked: the packets
/// must tile as [`interval_spans`] says and the table must hold one CRC per part.
fn interval_table(
    frames: &[VideoFrame],
    len: u64,
    table: &[u8],
) -> Result<Intervals, VideoValueError> {
    let mut spans = interval_spans(frames, len).ok_or(VideoValueError::NotIntervals)?;
    if table.len() != 4 * (spans.len() + 2) {
        return Err(VideoValueError::IntervalTable {
            bytes: table.len(),
            intervals: spans.len(),
            need: 4 * (spans.len() + 2),
        });
    }
    let crc = |k: usize| u32::from_le_bytes(table[4 * k..4 * k + 4].try_into().expect("4"));
    for (j, s) in spans.iter_mut().enumerate() {
        s.crc = crc(j + 1);
    }
    Ok(Intervals {
        lead_crc: crc(0),
        tail_crc: crc(spans.len() + 1),
        spans,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index() -> VideoIndex {
        VideoIndex {
            container: CONTAINER_MP4,
            codec: *b"avc1",
            timescale: 12800,
            width: 64,
            height: 48,
            extradata: vec![1, 2, 3],
            frames: vec![
                VideoFrame {
                    pts: 0,
                    dts: -512,
                    duration: 512,
                    key: true,
                    offset: 2,
                    size: 5,
                },
                VideoFrame {
                    pts: 1024,
                    dts: 0,
                    duration: 512,
                    key: false,
                    offset: 7,
                    size: 3,
                },
            ],
        }
    }

    #[test]
    fn a_video_value_round_trips_and_damage_is_named() {
        let body = b"..abcdefgh..";
        let v = encode_video(&index(), body);
        let p = parse_video(&v).unwrap();
        assert_eq!(p.index, index());
        assert_eq!(p.container, body);
        // every cut of the value is refused, never a panic
        for cut in 0..v.len() - body.len() + 10 {
            let _ = parse_video(&v[..cut]);
        }
        assert!(
            parse_video(&v[..v.len() - 3])
                .unwrap_err()
                .to_string()
                .contains("outside")
        );
        let mut bad = v.clone();
        bad[0] = b'X';
        assert!(
            parse_video(&bad)
                .unwrap_err()
                .to_string()
                .contains("not a stokehold video")
        );
        // a frame count larger than the bytes that hold it
        let mut bad = v.clone();
        let at = HEAD + 4 + 4 + 2 + 2 + 4 + 3;
        bad[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(
            parse_video(&bad)
                .unwrap_err()
                .to_string()
                .contains("frames")
        );
        let mut none = index();
        none.frames.clear();
        assert!(
            parse_video(&encode_video(&none, body))
                .unwrap_err()
                .to_string()
                .contains("no frames")
        );
    }

    #[test]
    fn a_matroska_value_round_trips_and_unknown_containers_are_refused() {
        let body = b"..abcdefgh..";
        let mut ix = index();
        ix.container = CONTAINER_MATROSKA;
        let v = encode_video(&ix, body);
        assert_eq!(v[4], 2);
        assert_eq!(parse_video(&v).unwrap().index, ix);
        let mut bad = v.clone();
        bad[4] = 3;
        let e = parse_video(&bad).unwrap_err().to_string();
        assert!(e.contains("unknown container code 3"), "{e}");
    }

    #[test]
    fn interval_checksums_tile_the_container_and_an_old_index_reads_without_them() {
        let body = b"..abcdefgh..";
        let v = encode_video(&index(), body);
        let p = parse_video(&v).unwrap();
        let iv = p.intervals.expect("a version-2 index");
        // one keyframe interval: the lead "..", the interval "abcdefgh", the tail ".."
        assert_eq!(iv.spans.len(), 1);
        let s = iv.spans[0];
        assert_eq!((s.lo, s.hi, s.first, s.end), (2, 10, 0, 2));
        assert_eq!(s.crc, crate::crc::crc32c(b"abcdefgh"));
        assert_eq!(iv.lead_crc, crate::crc::crc32c(b".."));
        assert_eq!(iv.tail_crc, crate::crc::crc32c(b".."));
        // a version-1 index (no table) still reads, without checksums
        let old = encode_video_v1(&index(), body);
        assert_eq!(old.len() + 12, v.len());
        let p = parse_video(&old).unwrap();
        assert_eq!((p.index, p.intervals), (index(), None));
        // a writer checks the table against the bytes
        assert!(check_intervals(&parse_video(&v).unwrap()).is_ok());
        let mut bad = v.clone();
        let n = bad.len();
        bad[n - 6] ^= 1; // inside the interval "abcdefgh"
        let e = check_intervals(&parse_video(&bad).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("keyframe interval 0"), "{e}");
        // a table of the wrong size, unknown flags
        let mut bad = v.clone();
        bad[8..12].copy_from_slice(&((v.len() - HEAD - body.len() - 4) as u32).to_le_bytes());
        assert!(parse_video(&bad).is_err());
        let mut bad = v.clone();
        bad[5] = 0x80;
        assert!(parse_video(&bad).unwrap_err().to_string().contains("flags"));
        // packets out of keyframe order: no table, read whole
        let mut ix = index();
        ix.frames[0].offset = 6;
        ix.frames[0].size = 1;
        ix.frames[1].offset = 2;
        assert!(interval_spans(&ix.frames, body.len() as u64).is_none());
        assert!(
            parse_video(&encode_video(&ix, body))
                .unwrap()
                .intervals
                .is_none()
        );
    }

    #[test]
    fn the_intervals_covering_byte_ranges_and_their_frames() {
        let span = |lo, hi, first, end| IntervalSpan {
            lo,
            hi,
            first,
            end,
            crc: 0,
        };
        let iv = Intervals {
            spans: vec![span(10, 20, 0, 4), span(20, 35, 4, 8), span(35, 50, 8, 12)],
            lead_crc: 0,
            tail_crc: 0,
        };
        assert_eq!(iv.covering(&[(12, 15)]), vec![0]);
        assert_eq!(iv.covering(&[(19, 21)]), vec![0, 1]);
        assert_eq!(iv.covering(&[(40, 41), (10, 11)]), vec![0, 2]);
        assert_eq!(iv.covering(&[(20, 20)]), Vec::<usize>::new());
        assert_eq!(iv.covering(&[(0, 10), (50, 60)]), Vec::<usize>::new());
        assert_eq!(iv.frames_of(&[0, 2]), vec![(0, 4), (8, 12)]);
        assert_eq!(iv.frames_of(&[1, 2]), vec![(4, 12)]);
    }
}
