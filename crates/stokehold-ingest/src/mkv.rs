//! The frame index of a Matroska or WebM file (issue #54), read from its element headers without
//! decoding anything: the same [`FrameIndex`] the MP4 reader gives (`crate::mp4`), so packing,
//! clips and decoding do not care which container a video came in.
//!
//! Sans I/O: [`index_with`] walks the EBML elements through a read callback. Only headers are
//! read (12 bytes an element, a block's first 11 bytes), except `Info` and `Tracks`, read whole
//! up to [`ContainerLimits::max_mkv_header_bytes`]; a frame's bytes are never read. Every element size is
//! checked against its parent's bytes (and the file's) before anything is sized by it; every
//! error names the element and its byte offset. An unknown-size `Segment` runs to the end of the
//! file, an unknown-size `Cluster` to the next top-level element (as live muxers write them);
//! any other unknown-size element is refused.
//!
//! What the index holds for the **first video track**:
//! - the codec: `V_MPEG4/ISO/AVC` (`avc1`, CodecPrivate = avcC), `V_MPEGH/ISO/HEVC` (`hvc1`,
//!   hvcC), `V_VP9` (`vp09`), `V_AV1` (`av01`, av1C), as FFmpeg's demuxer maps them;
//! - the extradata: CodecPrivate as FFmpeg's Matroska demuxer hands it to the decoder (none for
//!   VP9: FFmpeg drops VP9's CodecPrivate, feature metadata the bitstream repeats);
//! - per block, in file (decode) order: its presentation time (`Cluster` Timestamp + the block's
//!   relative timestamp, in TimestampScale units; the timescale is 10⁹ / TimestampScale, as
//!   FFmpeg's stream time base), keyframe (SimpleBlock's flag; a BlockGroup without
//!   ReferenceBlock), duration (BlockDuration, else the track's DefaultDuration, else the gap to
//!   the next frame shown) and the byte range of the frame inside the block (after its header).
//!   Matroska stores no decode times: they are the presentation times in ascending order, each
//!   moved back by the largest reordering so that none is after its frame's presentation time.
//!
//! Refused with a clear error: laced video blocks (rare for video), tracks with ContentEncodings
//! (compression or encryption changes the bytes a decoder gets), other codecs.

use stokehold_format::video::VideoFrame;

use crate::frames::{ContainerLimits, FourCc, FrameIndex};

/// What is wrong with a Matroska/WebM file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MkvError {
    /// The bytes do not make a valid element structure, or an element's content is wrong.
    #[error("Matroska {element} element at byte {offset}: {detail}")]
    Invalid {
        /// The element's name (or its ID in hex when unknown).
        element: String,
        /// Its offset in the file.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// Something the file declares is over a limit; nothing was allocated for it.
    #[error("Matroska {element} element at byte {offset}: {detail} (over the limit)")]
    TooLarge {
        /// The element.
        element: String,
        /// Its offset.
        offset: u64,
        /// What was declared.
        detail: String,
    },
    /// A valid file this reader does not handle (no video track, laced video, another codec).
    #[error("{0}")]
    Unsupported(String),
    /// The read callback failed.
    #[error("reading at byte {offset}: {detail}")]
    Read {
        /// Where.
        offset: u64,
        /// The reader's message.
        detail: String,
    },
}

type Result<T> = std::result::Result<T, MkvError>;

const EBML: u32 = 0x1A45_DFA3;
const DOC_TYPE: u32 = 0x4282;
const SEGMENT: u32 = 0x1853_8067;
const INFO: u32 = 0x1549_A966;
const TIMESTAMP_SCALE: u32 = 0x2A_D7B1;
const TRACKS: u32 = 0x1654_AE6B;
const TRACK_ENTRY: u32 = 0xAE;
const TRACK_NUMBER: u32 = 0xD7;
const TRACK_TYPE: u32 = 0x83;
const CODEC_ID: u32 = 0x86;
const CODEC_PRIVATE: u32 = 0x63A2;
const DEFAULT_DURATION: u32 = 0x23_E383;
const VIDEO: u32 = 0xE0;
const PIXEL_WIDTH: u32 = 0xB0;
const PIXEL_HEIGHT: u32 = 0xBA;
const CONTENT_ENCODINGS: u32 = 0x6D80;
const CLUSTER: u32 = 0x1F43_B675;
const TIMESTAMP: u32 = 0xE7;
const SIMPLE_BLOCK: u32 = 0xA3;
const BLOCK_GROUP: u32 = 0xA0;
const BLOCK: u32 = 0xA1;
const BLOCK_DURATION: u32 = 0x9B;
const REFERENCE_BLOCK: u32 = 0xFB;
/// The Segment's children: where an unknown-size Cluster ends.
const TOP_LEVEL: [u32; 8] = [
    CLUSTER,
    INFO,
    TRACKS,
    0x114D_9B74,
    0x1C53_BB6B,
    0x1254_C367,
    0x1043_A770,
    0x1941_A469,
];

/// The name of element `id`, for errors.
fn name(id: u32) -> String {
    let known = match id {
        EBML => "EBML header",
        SEGMENT => "Segment",
        INFO => "Info",
        TIMESTAMP_SCALE => "TimestampScale",
        TRACKS => "Tracks",
        TRACK_ENTRY => "TrackEntry",
        TRACK_NUMBER => "TrackNumber",
        TRACK_TYPE => "TrackType",
        CODEC_ID => "CodecID",
        CODEC_PRIVATE => "CodecPrivate",
        DEFAULT_DURATION => "DefaultDuration",
        VIDEO => "Video",
        PIXEL_WIDTH => "PixelWidth",
        PIXEL_HEIGHT => "PixelHeight",
        CLUSTER => "Cluster",
        TIMESTAMP => "Timestamp",
        SIMPLE_BLOCK => "SimpleBlock",
        BLOCK_GROUP => "BlockGroup",
        BLOCK => "Block",
        BLOCK_DURATION => "BlockDuration",
        REFERENCE_BLOCK => "ReferenceBlock",
        _ => return format!("{id:#X}"),
    };
    known.into()
}

/// An element's header: its ID, where its data starts and its size (None: unknown size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    id: u32,
    at: u64,
    data: u64,
    size: Option<u64>,
}

impl Header {
    fn err(&self, detail: impl Into<String>) -> MkvError {
        MkvError::Invalid {
            element: name(self.id),
            offset: self.at,
            detail: detail.into(),
        }
    }
    /// The end of its data; an unknown size is refused (only Segment and Cluster may have one).
    fn end(&self) -> Result<u64> {
        self.size
            .map(|s| self.data + s)
            .ok_or_else(|| self.err("an unknown size (allowed only for Segment and Cluster)"))
    }
}

/// A variable-length integer at the start of `b`: `(value, length)`. `marker` keeps the length
/// marker bit (element IDs keep it, sizes and track numbers do not); `max` is the longest length.
fn vint(b: &[u8], max: u32, marker: bool) -> Option<(u64, usize)> {
    let first = *b.first()?;
    let len = first.leading_zeros() + 1;
    if first == 0 || len > max || b.len() < len as usize {
        return None;
    }
    let mut v = u64::from(if marker {
        first
    } else {
        first & (0xFFu32 >> len) as u8
    });
    for &c in &b[1..len as usize] {
        v = (v << 8) | u64::from(c);
    }
    Some((v, len as usize))
}

/// The header of the element at `at` from `head` (the bytes read there), inside a parent ending
/// at `end`: its size is held to the parent's bytes.
fn header(head: &[u8], at: u64, end: u64, parent: &str) -> Result<Header> {
    let bad = |detail: String| MkvError::Invalid {
        element: parent.into(),
        offset: at,
        detail,
    };
    let (id, il) =
        vint(head, 4, true).ok_or_else(|| bad("a child element with an invalid ID".into()))?;
    let id = id as u32;
    let (raw, sl) = vint(&head[il..], 8, false)
        .ok_or_else(|| bad(format!("child {} has an invalid size", name(id))))?;
    let data = at + (il + sl) as u64;
    let unknown = raw == (1u64 << (7 * sl)) - 1;
    let h = Header {
        id,
        at,
        data,
        size: (!unknown).then_some(raw),
    };
    if data > end || h.size.is_some_and(|s| s > end - data) {
        return Err(h.err(format!(
            "{raw} bytes of data pass the end of its parent {parent} (byte {end})"
        )));
    }
    Ok(h)
}

/// An unsigned integer element's value (0 to 8 bytes, big-endian).
fn uint(h: &Header, b: &[u8]) -> Result<u64> {
    if b.len() > 8 {
        return Err(h.err(format!("an integer of {} bytes", b.len())));
    }
    Ok(b.iter().fold(0u64, |v, &c| (v << 8) | u64::from(c)))
}

/// The children of an element whose data `b` starts at file offset `base`: `(header, data)`.
fn children<'a>(b: &'a [u8], base: u64, parent: &str) -> Result<Vec<(Header, &'a [u8])>> {
    let mut out = Vec::new();
    let mut at = 0usize;
    let end = base + b.len() as u64;
    while at < b.len() {
        let h = header(&b[at..], base + at as u64, end, parent)?;
        let lo = (h.data - base) as usize;
        let hi = (h.end()? - base) as usize;
        out.push((h, &b[lo..hi]));
        at = hi;
    }
    Ok(out)
}

/// The first video track's entry, parsed from the `Tracks` element's data.
#[derive(Debug, Default)]
struct Track {
    number: u64,
    codec: Option<(FourCc, Vec<u8>)>,
    width: u16,
    height: u16,
    default_duration_ns: Option<u64>,
}

fn first_video_track(b: &[u8], base: u64) -> Result<Option<Track>> {
    for (entry, data) in children(b, base, "Tracks")? {
        if entry.id != TRACK_ENTRY {
            continue;
        }
        let mut t = Track::default();
        let (mut kind, mut codec_id, mut private, mut encoded) = (0u64, None, Vec::new(), false);
        for (h, v) in children(data, entry.data, "TrackEntry")? {
            match h.id {
                TRACK_NUMBER => t.number = uint(&h, v)?,
                TRACK_TYPE => kind = uint(&h, v)?,
                CODEC_ID => {
                    // strings may be padded with zero bytes
                    let id = String::from_utf8_lossy(v).trim_end_matches('\0').to_owned();
                    codec_id = Some((h, id));
                }
                CODEC_PRIVATE => private = v.to_vec(),
                DEFAULT_DURATION => t.default_duration_ns = Some(uint(&h, v)?),
                CONTENT_ENCODINGS => encoded = true,
                VIDEO => {
                    for (p, v) in children(v, h.data, "Video")? {
                        let px = |p: &Header| {
                            uint(p, v).and_then(|n| {
                                u16::try_from(n).map_err(|_| p.err(format!("{n} pixels")))
                            })
                        };
                        match p.id {
                            PIXEL_WIDTH => t.width = px(&p)?,
                            PIXEL_HEIGHT => t.height = px(&p)?,
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        if kind != 1 {
            continue;
        }
        if encoded {
            return Err(MkvError::Unsupported(format!(
                "the video track at byte {} has ContentEncodings (compression or encryption): \
                 not supported",
                entry.at
            )));
        }
        if t.number == 0 {
            return Err(entry.err("a video track without a TrackNumber"));
        }
        let Some((ch, id)) = codec_id else {
            return Err(entry.err("a video track without a CodecID"));
        };
        let (fourcc, needs_private) = match id.as_str() {
            "V_MPEG4/ISO/AVC" => (*b"avc1", true),
            "V_MPEGH/ISO/HEVC" => (*b"hvc1", true),
            "V_AV1" => (*b"av01", false),
            // FFmpeg's demuxer drops VP9's CodecPrivate: the bitstream repeats what it says
            "V_VP9" => {
                private.clear();
                (*b"vp09", false)
            }
            other => {
                return Err(MkvError::Unsupported(format!(
                    "video codec {other:?} is not supported (H.264, H.265, VP9 and AV1 are)"
                )));
            }
        };
        if needs_private && private.is_empty() {
            return Err(ch.err(format!("{id} without a CodecPrivate (its configuration)")));
        }
        t.codec = Some((FourCc(fourcc), private));
        return Ok(Some(t));
    }
    Ok(None)
}

/// Reads through the callback, naming the offset on failure and refusing short reads of what
/// must be there.
struct Src<R> {
    read: R,
    len: u64,
}

impl<R: FnMut(u64, usize) -> std::io::Result<Vec<u8>>> Src<R> {
    fn at(&mut self, offset: u64, n: usize) -> Result<Vec<u8>> {
        (self.read)(offset, n).map_err(|e| MkvError::Read {
            offset,
            detail: e.to_string(),
        })
    }
    fn header(&mut self, at: u64, end: u64, parent: &str) -> Result<Header> {
        let n = (end - at).min(12) as usize;
        let head = self.at(at, n)?;
        header(&head, at, end, parent)
    }
    /// An element's whole data, up to `max` bytes.
    fn data(&mut self, h: &Header, max: u64) -> Result<Vec<u8>> {
        let size = h.end()? - h.data;
        if size > max {
            return Err(MkvError::TooLarge {
                element: name(h.id),
                offset: h.at,
                detail: format!("{size} bytes"),
            });
        }
        let b = self.at(h.data, size as usize)?;
        if b.len() as u64 != size {
            return Err(h.err(format!("{size} bytes declared, {} read", b.len())));
        }
        Ok(b)
    }
}

/// What the walk of the clusters collects.
struct Walk {
    track: Track,
    /// TimestampScale units to index ticks.
    factor: i64,
    frames: Vec<VideoFrame>,
    /// Per frame: its BlockGroup gave its duration (BlockDuration).
    timed: Vec<bool>,
    max_frames: u64,
}

impl Walk {
    /// A block of the video track: `(timestamp, header length, key per its flags)` after the
    /// checks; `b` is the block's first bytes, `h` its element.
    fn block(&self, h: &Header, b: &[u8]) -> Result<Option<(i16, u64, u8)>> {
        let (track, tl) = vint(b, 8, false).ok_or_else(|| h.err("an invalid track number"))?;
        if track != self.track.number {
            return Ok(None);
        }
        let size = h.end()? - h.data;
        let hl = tl as u64 + 3;
        if b.len() < tl + 3 || size < hl {
            return Err(h.err(format!("a block of {size} bytes, shorter than its header")));
        }
        let tc = i16::from_be_bytes([b[tl], b[tl + 1]]);
        let flags = b[tl + 2];
        if flags & 0x06 != 0 {
            return Err(MkvError::Unsupported(format!(
                "Matroska {} element at byte {}: laced video blocks are not supported (remux \
                 with `ffmpeg -i IN -c copy OUT.mkv`)",
                name(h.id),
                h.at
            )));
        }
        Ok(Some((tc, hl, flags)))
    }

    fn push(&mut self, h: &Header, cluster: Option<i64>, block: (i16, u64, bool)) -> Result<()> {
        let (tc, hl, key) = block;
        let Some(cluster) = cluster else {
            return Err(h.err("a block before its Cluster's Timestamp"));
        };
        if self.frames.len() as u64 >= self.max_frames {
            return Err(MkvError::TooLarge {
                element: name(h.id),
                offset: h.at,
                detail: format!("more than {} frames", self.max_frames),
            });
        }
        let pts = cluster
            .checked_add(i64::from(tc))
            .and_then(|t| t.checked_mul(self.factor))
            .ok_or_else(|| h.err("a timestamp out of range"))?;
        let size = h.end()? - h.data - hl;
        let size = u32::try_from(size).map_err(|_| h.err(format!("a frame of {size} bytes")))?;
        self.frames.push(VideoFrame {
            pts,
            dts: pts,
            duration: 0,
            key,
            offset: h.data + hl,
            size,
        });
        self.timed.push(false);
        Ok(())
    }
}

/// The frame index of the Matroska/WebM file of `file_len` bytes that `read(offset, len)` reads
/// (up to `len` bytes at `offset`, fewer only at the end of the file).
pub fn index_with(
    file_len: u64,
    limits: &ContainerLimits,
    read: impl FnMut(u64, usize) -> std::io::Result<Vec<u8>>,
) -> Result<FrameIndex> {
    let mut src = Src {
        read,
        len: file_len,
    };
    let head = src.at(0, 4)?;
    if head != [0x1A, 0x45, 0xDF, 0xA3] {
        return Err(MkvError::Unsupported(
            "not a Matroska/WebM file: it does not start with an EBML header".into(),
        ));
    }
    let ebml = src.header(0, file_len, "file")?;
    let doc = src.data(&ebml, limits.max_mkv_header_bytes)?;
    for (h, v) in children(&doc, ebml.data, "EBML header")? {
        if h.id == DOC_TYPE && v != b"matroska" && v != b"webm" {
            return Err(MkvError::Unsupported(format!(
                "an EBML file of DocType {:?}, not Matroska or WebM",
                String::from_utf8_lossy(v)
            )));
        }
    }
    // the Segment (after any Void or other top-level elements)
    let mut at = ebml.end()?;
    let segment = loop {
        if at >= src.len {
            return Err(MkvError::Unsupported(
                "a Matroska file without a Segment".into(),
            ));
        }
        let h = src.header(at, src.len, "file")?;
        if h.id == SEGMENT {
            break h;
        }
        at = h.end()?;
    };
    let seg_end = segment.size.map_or(src.len, |s| segment.data + s);
    let mut scale = 1_000_000u64;
    let mut walk: Option<Walk> = None;
    let mut at = segment.data;
    while at < seg_end {
        let h = src.header(at, seg_end, "Segment")?;
        match h.id {
            INFO => {
                if walk.as_ref().is_some_and(|w| !w.frames.is_empty()) {
                    return Err(h.err("an Info element after the first Cluster"));
                }
                let b = src.data(&h, limits.max_mkv_header_bytes)?;
                for (c, v) in children(&b, h.data, "Info")? {
                    if c.id == TIMESTAMP_SCALE {
                        scale = uint(&c, v)?;
                        if scale == 0 || scale > 1_000_000_000 {
                            return Err(c.err(format!("a TimestampScale of {scale} ns")));
                        }
                    }
                }
            }
            TRACKS if walk.is_none() => {
                let b = src.data(&h, limits.max_mkv_header_bytes)?;
                let track = first_video_track(&b, h.data)?.ok_or_else(|| {
                    MkvError::Unsupported("the Matroska file has no video track".into())
                })?;
                // ticks of 10^9 / gcd(scale, 10^9) a second: TimestampScale units times
                // factor (set at each Cluster, from the Info before it)
                walk = Some(Walk {
                    track,
                    factor: 1,
                    frames: Vec::new(),
                    timed: Vec::new(),
                    max_frames: limits.max_frames,
                });
            }
            CLUSTER => {
                let Some(w) = walk.as_mut() else {
                    return Err(h.err("a Cluster before the Tracks element"));
                };
                w.factor = (scale / gcd(scale, 1_000_000_000)) as i64;
                at = cluster(&mut src, w, &h, seg_end)?;
                continue;
            }
            _ => {}
        }
        at = h.end()?;
    }
    let Some(mut w) = walk else {
        return Err(MkvError::Unsupported(
            "the Matroska file has no Tracks element".into(),
        ));
    };
    let g = gcd(scale, 1_000_000_000);
    let timescale = (1_000_000_000 / g) as u32;
    finish_times(&mut w, g);
    let (codec, extradata) = w.track.codec.take().expect("a video track has its codec");
    Ok(FrameIndex {
        timescale,
        codec,
        width: w.track.width,
        height: w.track.height,
        extradata,
        frames: w.frames,
    })
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Walks the Cluster `c`; returns where the Segment's next child starts (for an unknown-size
/// Cluster, the first top-level element after it).
fn cluster<R: FnMut(u64, usize) -> std::io::Result<Vec<u8>>>(
    src: &mut Src<R>,
    w: &mut Walk,
    c: &Header,
    seg_end: u64,
) -> Result<u64> {
    let end = c.size.map_or(seg_end, |s| c.data + s);
    let mut time: Option<i64> = None;
    let mut at = c.data;
    while at < end {
        let h = src.header(at, end, "Cluster")?;
        if c.size.is_none() && TOP_LEVEL.contains(&h.id) {
            return Ok(at);
        }
        match h.id {
            TIMESTAMP => {
                let b = src.data(&h, 8)?;
                let t = uint(&h, &b)?;
                time = Some(i64::try_from(t).map_err(|_| h.err(format!("a timestamp of {t}")))?);
            }
            SIMPLE_BLOCK => {
                let b = src.at(h.data, (h.end()? - h.data).min(11) as usize)?;
                if let Some((tc, hl, flags)) = w.block(&h, &b)? {
                    w.push(&h, time, (tc, hl, flags & 0x80 != 0))?;
                }
            }
            BLOCK_GROUP => block_group(src, w, &h, time)?,
            _ => {}
        }
        at = h.end()?;
    }
    Ok(end)
}

/// A BlockGroup: its Block (header only), whether it has a ReferenceBlock, its BlockDuration.
fn block_group<R: FnMut(u64, usize) -> std::io::Result<Vec<u8>>>(
    src: &mut Src<R>,
    w: &mut Walk,
    g: &Header,
    time: Option<i64>,
) -> Result<()> {
    let end = g.end()?;
    let (mut block, mut referenced, mut duration) = (None, false, None);
    let mut at = g.data;
    while at < end {
        let h = src.header(at, end, "BlockGroup")?;
        match h.id {
            BLOCK => {
                let b = src.at(h.data, (h.end()? - h.data).min(11) as usize)?;
                block = w.block(&h, &b)?.map(|x| (h, x));
            }
            REFERENCE_BLOCK => referenced = true,
            BLOCK_DURATION => {
                let b = src.data(&h, 8)?;
                duration = Some((h, uint(&h, &b)?));
            }
            _ => {}
        }
        at = h.end()?;
    }
    if let Some((h, (tc, hl, _))) = block {
        w.push(&h, time, (tc, hl, !referenced))?;
        if let Some((dh, d)) = duration {
            let ticks = i64::try_from(d)
                .ok()
                .and_then(|d| d.checked_mul(w.factor))
                .and_then(|d| u32::try_from(d).ok())
                .ok_or_else(|| dh.err(format!("a duration of {d}")))?;
            let last = w.frames.len() - 1;
            w.frames[last].duration = ticks;
            w.timed[last] = true;
        }
    }
    Ok(())
}

/// Durations and decode times once every frame is known: a frame without a BlockDuration gets
/// the track's DefaultDuration (nanoseconds, in ticks of `tick_ns`), else the gap to the next
/// frame shown (the last one, the gap before it); decode times are the presentation times
/// sorted, moved back by the largest reordering.
fn finish_times(w: &mut Walk, tick_ns: u64) {
    let n = w.frames.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| (w.frames[i].pts, i));
    for k in 0..n {
        let i = order[k];
        if w.timed[i] {
            continue;
        }
        let d = match (w.track.default_duration_ns, order.get(k + 1)) {
            (Some(ns), _) => i64::try_from((ns + tick_ns / 2) / tick_ns).unwrap_or(i64::MAX),
            (None, Some(&next)) => w.frames[next].pts - w.frames[i].pts,
            (None, None) => k
                .checked_sub(1)
                .map_or(0, |p| w.frames[i].pts - w.frames[order[p]].pts),
        };
        w.frames[i].duration = u32::try_from(d.max(0)).unwrap_or(u32::MAX);
    }
    let sorted: Vec<i64> = order.iter().map(|&i| w.frames[i].pts).collect();
    let delay = (0..n)
        .map(|i| sorted[i] - w.frames[i].pts)
        .max()
        .unwrap_or(0)
        .max(0);
    for (f, s) in w.frames.iter_mut().zip(sorted) {
        f.dts = s - delay;
    }
}

/// The frame index of a Matroska/WebM file whose bytes are `bytes`.
pub fn index_bytes(bytes: &[u8], limits: &ContainerLimits) -> Result<FrameIndex> {
    index_with(bytes.len() as u64, limits, |offset, n| {
        let lo = usize::try_from(offset)
            .map_err(std::io::Error::other)?
            .min(bytes.len());
        Ok(bytes[lo..lo.saturating_add(n).min(bytes.len())].to_vec())
    })
}

/// The frame index of a Matroska/WebM file on local disk (only element and block headers are
/// read, with positioned reads).
pub fn index_file(path: &std::path::Path, limits: &ContainerLimits) -> Result<FrameIndex> {
    use std::os::unix::fs::FileExt;
    let name = path.display().to_string();
    let io = |e: std::io::Error| MkvError::Unsupported(format!("{name}: {e}"));
    let f = std::fs::File::open(path).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    index_with(len, limits, |offset, n| {
        let n = n.min(len.saturating_sub(offset) as usize);
        let mut buf = vec![0; n];
        f.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    })
}

/// Whether `bytes` start as a Matroska/WebM (EBML) file does.
pub fn is_matroska(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0x1A, 0x45, 0xDF, 0xA3])
}

/// A `video` field's value for a Matroska/WebM file's bytes: its frame index (container code
/// [`stokehold_format::video::CONTAINER_MATROSKA`]), then the bytes as they are. A file this
/// reader cannot index is refused with why; so is one without frames.
pub fn video_value(bytes: &[u8], limits: &ContainerLimits) -> Result<Vec<u8>> {
    let index = index_bytes(bytes, limits)?;
    if index.frames.is_empty() {
        return Err(MkvError::Unsupported(
            "the video track has no frames".into(),
        ));
    }
    let mut v = index.to_video_index();
    v.container = stokehold_format::video::CONTAINER_MATROSKA;
    Ok(stokehold_format::video::encode_video(&v, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An element: ID bytes, a 1-byte size (or 8-byte unknown size), data.
    fn el(id: &[u8], data: &[u8]) -> Vec<u8> {
        assert!(data.len() < 127);
        let mut v = id.to_vec();
        v.push(0x80 | data.len() as u8);
        v.extend_from_slice(data);
        v
    }

    fn cat(parts: &[Vec<u8>]) -> Vec<u8> {
        parts.concat()
    }

    /// A small file: H.264 track 1 at 1 ms a tick; a cluster at 1000 with a keyframe
    /// SimpleBlock at +0, a BlockGroup (ReferenceBlock, BlockDuration 40) at +80, a non-key
    /// SimpleBlock at +40; the Segment of unknown size, the Cluster too when `cluster_unknown`.
    fn file(block_flags: u8, cluster_unknown: bool) -> Vec<u8> {
        let ebml = el(&[0x1A, 0x45, 0xDF, 0xA3], &el(&[0x42, 0x82], b"webm"));
        let info = el(
            &[0x15, 0x49, 0xA9, 0x66],
            &el(&[0x2A, 0xD7, 0xB1], &[0x0F, 0x42, 0x40]),
        );
        let video = el(&[0xE0], &cat(&[el(&[0xB0], &[0x40]), el(&[0xBA], &[0x30])]));
        let entry = el(
            &[0xAE],
            &cat(&[
                el(&[0xD7], &[1]),
                el(&[0x83], &[1]),
                el(&[0x86], b"V_MPEG4/ISO/AVC"),
                el(&[0x63, 0xA2], &[1, 0x64, 0, 0x1e]),
                video,
            ]),
        );
        let audio = el(&[0xAE], &cat(&[el(&[0xD7], &[2]), el(&[0x83], &[2])]));
        let tracks = el(&[0x16, 0x54, 0xAE, 0x6B], &cat(&[audio, entry]));
        let sb = |tc: i16, flags: u8, data: &[u8]| {
            let mut b = vec![0x81];
            b.extend_from_slice(&tc.to_be_bytes());
            b.push(flags);
            b.extend_from_slice(data);
            el(&[0xA3], &b)
        };
        let mut block = vec![0x81, 0, 80, block_flags];
        block.extend_from_slice(b"BBB");
        let group = el(
            &[0xA0],
            &cat(&[
                el(&[0xA1], &block),
                el(&[0xFB], &[0xD8]),
                el(&[0x9B], &[40]),
            ]),
        );
        let other_track = el(&[0xA3], &[0x82, 0, 0, 0x80, 9, 9]);
        let body = cat(&[
            el(&[0xE7], &[0x03, 0xE8]),
            sb(0, 0x80, b"KEYKEY"),
            other_track,
            group,
            sb(40, 0, b"PP"),
        ]);
        let cluster = if cluster_unknown {
            let mut c = vec![
                0x1F, 0x43, 0xB6, 0x75, 0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            ];
            c.extend(body);
            c
        } else {
            el(&[0x1F, 0x43, 0xB6, 0x75], &body)
        };
        let cues = el(&[0x1C, 0x53, 0xBB, 0x6B], &[]);
        let seg_body = cat(&[info, tracks, cluster, cues]);
        let mut seg = vec![
            0x18, 0x53, 0x80, 0x67, 0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
        ];
        seg.extend(seg_body);
        cat(&[ebml, seg])
    }

    #[test]
    fn blocks_become_frames_with_times_keys_and_byte_ranges() {
        for unknown in [false, true] {
            let f = file(0, unknown);
            let ix = index_bytes(&f, &ContainerLimits::default()).unwrap();
            assert_eq!(ix.codec, FourCc(*b"avc1"));
            assert_eq!((ix.timescale, ix.width, ix.height), (1000, 64, 48));
            assert_eq!(ix.extradata, [1, 0x64, 0, 0x1e]);
            let got: Vec<_> = ix
                .frames
                .iter()
                .map(|f| (f.pts, f.key, f.duration))
                .collect();
            // durations: the gap to the next frame shown, the BlockDuration, the last gap
            assert_eq!(
                got,
                [(1000, true, 40), (1080, false, 40), (1040, false, 40)]
            );
            // decode times: sorted presentation times moved back by the reordering (40)
            let dts: Vec<_> = ix.frames.iter().map(|f| f.dts).collect();
            assert_eq!(dts, [960, 1000, 1040]);
            assert!(ix.frames.iter().all(|fr| fr.dts <= fr.pts));
            let bytes: Vec<&[u8]> = ix
                .frames
                .iter()
                .map(|fr| &f[fr.offset as usize..(fr.offset + u64::from(fr.size)) as usize])
                .collect();
            assert_eq!(bytes, [&b"KEYKEY"[..], b"BBB", b"PP"]);
        }
    }

    #[test]
    fn laced_blocks_and_cut_or_damaged_files_are_refused_by_name_never_a_panic() {
        let e = index_bytes(&file(0x02, false), &ContainerLimits::default()).unwrap_err();
        assert!(e.to_string().contains("laced"), "{e}");
        let f = file(0, false);
        for cut in 0..f.len() {
            let _ = index_bytes(&f[..cut], &ContainerLimits::default());
        }
        // a size larger than the parent: named with the element and its offset
        let mut bad = f.clone();
        let at = f
            .windows(4)
            .position(|w| w == [0x1F, 0x43, 0xB6, 0x75])
            .unwrap();
        bad[at + 4] = 0xFE;
        let e = index_bytes(&bad, &ContainerLimits::default()).unwrap_err();
        assert!(
            e.to_string().contains("Cluster") && e.to_string().contains(&format!("byte {at}")),
            "{e}"
        );
        // every single-byte change is an error or an index whose packets lie in the file
        for i in 0..f.len() {
            for v in [0x00, 0x01, 0x7F, 0x80, 0xFF] {
                let mut b = f.clone();
                b[i] = v;
                crate::fuzzing::fuzz_mkv(&b);
            }
        }
        let tiny = ContainerLimits {
            max_mkv_header_bytes: 8,
            ..ContainerLimits::default()
        };
        assert!(matches!(
            index_bytes(&f, &tiny),
            Err(MkvError::TooLarge { .. })
        ));
        let one = ContainerLimits {
            max_frames: 1,
            ..ContainerLimits::default()
        };
        assert!(matches!(
            index_bytes(&f, &one),
            Err(MkvError::TooLarge { .. })
        ));
        let e = index_bytes(b"\0\0\0\x20ftypisom", &ContainerLimits::default()).unwrap_err();
        assert!(e.to_string().contains("not a Matroska"), "{e}");
    }
}
