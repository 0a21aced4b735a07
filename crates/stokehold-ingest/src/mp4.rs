//! The frame index of an MP4 (ISO base media) file, read from its `moov` box without decoding
//! anything (issue #54): for every frame of the first video track, its presentation and decode
//! times, whether it is a keyframe, and the byte range of its packet, so a clip's reads and seeks
//! are planned without opening the container again.
//!
//! Sans I/O: [`locate_moov`] walks the top-level boxes through a read callback (16 bytes a box),
//! [`parse_moov`] parses the `moov` box's bytes. Every count and size read from the file is
//! checked against the bytes that hold it and against [`ContainerLimits`] before anything is sized
//! by it; every error names the box and its byte offset in the file. Times are in the track's
//! timescale with the edit list applied as FFmpeg's demuxer applies it (a single edit that
//! starts the media at `media_time`: every time moves back by it), so presentation times are
//! those FFmpeg (and torchcodec) give. Fragmented MP4 (`moof`) is refused for now.

/// What is wrong with an MP4 file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Mp4Error {
    /// The bytes do not make a valid box structure, or a table is inconsistent.
    #[error("MP4 {box_type} box at byte {offset}: {detail}")]
    Invalid {
        /// The box (four characters, or a path such as `moov/trak/mdia`).
        box_type: String,
        /// Its offset in the file.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// Something the file declares is over a limit; nothing was allocated for it.
    #[error("MP4 {box_type} box at byte {offset}: {detail} (over the limit)")]
    TooLarge {
        /// The box.
        box_type: String,
        /// Its offset.
        offset: u64,
        /// What was declared.
        detail: String,
    },
    /// A valid file this reader does not handle (fragmented MP4, no video track, ...).
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
    /// A Matroska/WebM file's error ([`index_video_file`] reads those too).
    #[error(transparent)]
    Matroska(#[from] crate::mkv::MkvError),
}

impl Mp4Error {
    /// A valid file this reader does not handle (not damage).
    pub fn is_unsupported(&self) -> bool {
        matches!(
            self,
            Mp4Error::Unsupported(_) | Mp4Error::Matroska(crate::mkv::MkvError::Unsupported(_))
        )
    }
}

type Result<T> = std::result::Result<T, Mp4Error>;

use crate::frames::ContainerLimits;
pub use crate::frames::{FourCc, FrameIndex};
use stokehold_format::video::VideoFrame;

/// Where the `moov` box is: `(offset, size)`. `read(offset, len)` returns up to `len` bytes at
/// `offset` (fewer only at the end of the file). Only box headers are read.
pub fn locate_moov(
    file_len: u64,
    limits: &ContainerLimits,
    mut read: impl FnMut(u64, usize) -> std::io::Result<Vec<u8>>,
) -> Result<(u64, u64)> {
    let mut at = 0u64;
    let mut first = true;
    while at < file_len {
        let head = read(at, 16).map_err(|e| Mp4Error::Read {
            offset: at,
            detail: e.to_string(),
        })?;
        let (ty, size, _) = box_header(&head, at, file_len - at)?;
        if first && &ty.0 != b"ftyp" {
            return Err(Mp4Error::Unsupported(format!(
                "not an MP4 file: its first box is {ty:?}, not ftyp"
            )));
        }
        first = false;
        match &ty.0 {
            b"moov" => {
                if size > limits.max_moov_bytes {
                    return Err(Mp4Error::TooLarge {
                        box_type: "moov".into(),
                        offset: at,
                        detail: format!("{size} bytes"),
                    });
                }
                return Ok((at, size));
            }
            b"moof" => {
                return Err(Mp4Error::Unsupported(
                    "fragmented MP4 (moof boxes) is not supported yet: remux it with `ffmpeg -i IN -c copy -movflags +faststart OUT.mp4`".into(),
                ));
            }
            _ => {}
        }
        at += size;
    }
    Err(Mp4Error::Unsupported(
        "no moov box: the file is cut short, or not a complete MP4".into(),
    ))
}

/// A box header at the start of `b` (a box at `offset` with `room` bytes to the end of its
/// parent): its type, its whole size (checked to fit `room`) and its header's length.
fn box_header(b: &[u8], offset: u64, room: u64) -> Result<(FourCc, u64, usize)> {
    let bad = |detail: String| Mp4Error::Invalid {
        box_type: "box".into(),
        offset,
        detail,
    };
    if b.len() < 8 {
        return Err(bad(format!("a box header needs 8 bytes, {} left", b.len())));
    }
    let size32 = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let ty = FourCc([b[4], b[5], b[6], b[7]]);
    let (size, header) = match size32 {
        0 => (room, 8),
        1 => {
            if b.len() < 16 {
                return Err(bad(format!("{ty:?}: a 64-bit size needs 16 bytes")));
            }
            let mut s = [0u8; 8];
            s.copy_from_slice(&b[8..16]);
            (u64::from_be_bytes(s), 16)
        }
        n => (u64::from(n), 8),
    };
    if size < header as u64 || size > room {
        return Err(Mp4Error::Invalid {
            box_type: ty.to_string(),
            offset,
            detail: format!("size {size} does not fit (header {header}, {room} bytes left)"),
        });
    }
    Ok((ty, size, header))
}

/// The children of a box's payload `b` (which starts at file offset `base`): `(type, payload,
/// payload's offset)`.
fn children(b: &[u8], base: u64) -> Result<Vec<(FourCc, &[u8], u64)>> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < b.len() {
        let (ty, size, header) = box_header(&b[at..], base + at as u64, (b.len() - at) as u64)?;
        let size = size as usize; // fits: at most b.len() - at
        out.push((ty, &b[at + header..at + size], base + (at + header) as u64));
        at += size;
    }
    Ok(out)
}

/// A cursor over a box's payload that names the box and offset in its errors.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
    name: &'static str,
    base: u64,
}

impl<'a> Reader<'a> {
    fn new(b: &'a [u8], name: &'static str, base: u64) -> Reader<'a> {
        Reader {
            b,
            at: 0,
            name,
            base,
        }
    }

    fn err(&self, detail: impl Into<String>) -> Mp4Error {
        Mp4Error::Invalid {
            box_type: self.name.into(),
            offset: self.base + self.at as u64,
            detail: detail.into(),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.b.len() - self.at < n {
            return Err(self.err(format!(
                "needs {n} more bytes, {} left",
                self.b.len() - self.at
            )));
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16> {
        let s = self.take(2)?;
        Ok(u16::from_be_bytes([s[0], s[1]]))
    }

    fn u32(&mut self) -> Result<u32> {
        let s = self.take(4)?;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn u64(&mut self) -> Result<u64> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_be_bytes(a))
    }

    /// A full box's version and flags.
    fn version(&mut self) -> Result<u8> {
        let v = self.u8()?;
        self.take(3)?;
        Ok(v)
    }

    /// A table's entry count, checked against the bytes left (`entry` bytes each) and `max`.
    fn count(&mut self, entry: usize, max: u64) -> Result<usize> {
        let n = u64::from(self.u32()?);
        if n > max {
            return Err(Mp4Error::TooLarge {
                box_type: self.name.into(),
                offset: self.base + self.at as u64 - 4,
                detail: format!("{n} entries"),
            });
        }
        let left = (self.b.len() - self.at) as u64;
        if n * entry as u64 > left {
            return Err(self.err(format!(
                "{n} entries of {entry} bytes declared, {left} bytes hold them"
            )));
        }
        Ok(n as usize)
    }
}

/// A track's boxes of interest, found under `trak`.
#[derive(Default)]
struct Track<'a> {
    handler: Option<FourCc>,
    mdhd: Option<(&'a [u8], u64)>,
    elst: Option<(&'a [u8], u64)>,
    stbl: Vec<(FourCc, &'a [u8], u64)>,
}

fn track<'a>(trak: &'a [u8], base: u64) -> Result<Track<'a>> {
    let mut t = Track::default();
    for (ty, b, off) in children(trak, base)? {
        match &ty.0 {
            b"edts" => {
                for (ty, b, off) in children(b, off)? {
                    if &ty.0 == b"elst" {
                        t.elst = Some((b, off));
                    }
                }
            }
            b"mdia" => {
                for (ty, b, off) in children(b, off)? {
                    match &ty.0 {
                        b"mdhd" => t.mdhd = Some((b, off)),
                        b"hdlr" => {
                            let mut r = Reader::new(b, "hdlr", off);
                            r.version()?;
                            r.u32()?; // pre_defined
                            let h = r.take(4)?;
                            t.handler = Some(FourCc([h[0], h[1], h[2], h[3]]));
                        }
                        b"minf" => {
                            for (ty, b, off) in children(b, off)? {
                                if &ty.0 == b"stbl" {
                                    t.stbl = children(b, off)?;
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(t)
}

/// The frame index of the first video track of a `moov` box whose bytes (its whole box, header
/// included) are `moov`, read at file offset `offset`; `file_len` bounds the packets' ranges.
pub fn parse_moov(
    moov: &[u8],
    offset: u64,
    file_len: u64,
    limits: &ContainerLimits,
) -> Result<FrameIndex> {
    let (ty, size, header) = box_header(moov, offset, moov.len() as u64)?;
    if &ty.0 != b"moov" || size != moov.len() as u64 {
        return Err(Mp4Error::Invalid {
            box_type: ty.to_string(),
            offset,
            detail: format!("expected the whole moov box, {} bytes", moov.len()),
        });
    }
    let body = &moov[header..];
    let base = offset + header as u64;
    for (ty, b, off) in children(body, base)? {
        if &ty.0 == b"mvex" {
            return Err(Mp4Error::Unsupported(
                "fragmented MP4 (mvex) is not supported yet: remux it with `ffmpeg -i IN -c copy OUT.mp4`".into(),
            ));
        }
        if &ty.0 != b"trak" {
            continue;
        }
        let t = track(b, off)?;
        if t.handler.map(|h| h.0) != Some(*b"vide") {
            continue;
        }
        return video_track(&t, file_len, limits);
    }
    Err(Mp4Error::Unsupported("the file has no video track".into()))
}

fn video_track(t: &Track<'_>, file_len: u64, limits: &ContainerLimits) -> Result<FrameIndex> {
    let find = |name: &[u8; 4]| {
        t.stbl
            .iter()
            .find(|(ty, _, _)| &ty.0 == name)
            .map(|&(_, b, o)| (b, o))
    };
    let missing = |what: &str| Mp4Error::Invalid {
        box_type: "stbl".into(),
        offset: t.stbl.first().map_or(0, |c| c.2),
        detail: format!("the video track has no {what} box"),
    };
    // timescale
    let (mdhd, mo) = t.mdhd.ok_or_else(|| missing("mdhd"))?;
    let mut r = Reader::new(mdhd, "mdhd", mo);
    let v = r.version()?;
    if v == 1 {
        r.take(16)?;
    } else {
        r.take(8)?;
    }
    let timescale = r.u32()?;
    if timescale == 0 {
        return Err(r.err("a timescale of 0"));
    }
    // codec and size from the first sample entry
    let (stsd, so) = find(b"stsd").ok_or_else(|| missing("stsd"))?;
    let mut r = Reader::new(stsd, "stsd", so);
    r.version()?;
    if r.u32()? == 0 {
        return Err(r.err("no sample entry"));
    }
    let entry = r.take(r.b.len() - r.at)?;
    let (codec, _, _) = box_header(entry, so + 8, entry.len() as u64)?;
    let mut e = Reader::new(entry, "stsd entry", so + 8);
    e.take(8 + 6 + 2 + 16)?; // header, reserved, data reference index, pre-defined/reserved
    let width = e.u16()?;
    let height = e.u16()?;
    // the rest of a VisualSampleEntry: resolutions, reserved, frame count, compressor name,
    // depth, pre-defined (50 bytes), then its child boxes
    e.take(4 + 4 + 4 + 2 + 32 + 2 + 2)?;
    let extradata = codec_config(&entry[e.at..], so + 8 + e.at as u64)?;
    // sizes
    let (stsz, zo) = find(b"stsz").ok_or_else(|| missing("stsz"))?;
    let mut r = Reader::new(stsz, "stsz", zo);
    r.version()?;
    let fixed = r.u32()?;
    let n = {
        let n = u64::from(r.u32()?);
        if n > limits.max_frames {
            return Err(Mp4Error::TooLarge {
                box_type: "stsz".into(),
                offset: zo + 8,
                detail: format!("{n} frames"),
            });
        }
        n as usize
    };
    let sizes: Vec<u32> = if fixed != 0 {
        vec![fixed; n]
    } else {
        if (n as u64) * 4 > (r.b.len() - r.at) as u64 {
            return Err(r.err(format!(
                "{n} sizes declared, {} bytes hold them",
                r.b.len() - r.at
            )));
        }
        (0..n).map(|_| r.u32()).collect::<Result<_>>()?
    };
    // decode times
    let (stts, to) = find(b"stts").ok_or_else(|| missing("stts"))?;
    let mut r = Reader::new(stts, "stts", to);
    r.version()?;
    let k = r.count(8, limits.max_frames)?;
    let mut durations = Vec::with_capacity(n);
    for _ in 0..k {
        let count = r.u32()? as usize;
        let delta = r.u32()?;
        if durations.len() + count > n {
            return Err(r.err(format!("times for more than the {n} frames of stsz")));
        }
        durations.extend(std::iter::repeat_n(delta, count));
    }
    if durations.len() != n {
        return Err(r.err(format!("times for {} of {n} frames", durations.len())));
    }
    // composition offsets
    let mut offsets = vec![0i64; n];
    if let Some((ctts, co)) = find(b"ctts") {
        let mut r = Reader::new(ctts, "ctts", co);
        let v = r.version()?;
        let k = r.count(8, limits.max_frames)?;
        let mut i = 0usize;
        for _ in 0..k {
            let count = r.u32()? as usize;
            let raw = r.u32()?;
            let off = if v == 0 {
                i64::from(raw)
            } else {
                i64::from(raw as i32)
            };
            if i + count > n {
                return Err(r.err(format!("offsets for more than the {n} frames")));
            }
            offsets[i..i + count].fill(off);
            i += count;
        }
    }
    // keyframes
    let mut key = vec![true; n];
    if let Some((stss, ko)) = find(b"stss") {
        let mut r = Reader::new(stss, "stss", ko);
        r.version()?;
        let k = r.count(4, limits.max_frames)?;
        key.fill(false);
        for _ in 0..k {
            let s = r.u32()? as usize;
            if s == 0 || s > n {
                return Err(r.err(format!("sync sample {s} of {n} frames")));
            }
            key[s - 1] = true;
        }
    }
    // chunks
    let chunk_offsets: Vec<u64> = if let Some((stco, oo)) = find(b"stco") {
        let mut r = Reader::new(stco, "stco", oo);
        r.version()?;
        let k = r.count(4, limits.max_frames)?;
        (0..k)
            .map(|_| r.u32().map(u64::from))
            .collect::<Result<_>>()?
    } else if let Some((co64, oo)) = find(b"co64") {
        let mut r = Reader::new(co64, "co64", oo);
        r.version()?;
        let k = r.count(8, limits.max_frames)?;
        (0..k).map(|_| r.u64()).collect::<Result<_>>()?
    } else {
        return Err(missing("stco or co64"));
    };
    let (stsc, co) = find(b"stsc").ok_or_else(|| missing("stsc"))?;
    let mut r = Reader::new(stsc, "stsc", co);
    r.version()?;
    let k = r.count(12, limits.max_frames)?;
    let mut runs = Vec::with_capacity(k);
    for _ in 0..k {
        let first = r.u32()?;
        let per = r.u32()?;
        r.u32()?; // sample description index
        if first == 0 || runs.last().is_some_and(|&(f, _)| first <= f) {
            return Err(r.err(format!("chunk runs out of order at chunk {first}")));
        }
        runs.push((first, per));
    }
    // the packets' byte ranges: chunk by chunk, each chunk's samples back to back
    let mut ranges = Vec::with_capacity(n);
    let mut sample = 0usize;
    for (ri, &(first, per)) in runs.iter().enumerate() {
        let last = runs
            .get(ri + 1)
            .map_or(chunk_offsets.len() as u64, |&(f, _)| u64::from(f) - 1);
        for chunk in u64::from(first)..=last {
            let Some(&start) = chunk_offsets.get((chunk - 1) as usize) else {
                return Err(r.err(format!("chunk {chunk} of {} chunks", chunk_offsets.len())));
            };
            let mut at = start;
            for _ in 0..per {
                if sample >= n {
                    break;
                }
                let size = sizes[sample];
                let end = at.checked_add(u64::from(size)).filter(|&e| e <= file_len);
                let Some(end) = end else {
                    return Err(Mp4Error::Invalid {
                        box_type: "stco".into(),
                        offset: co,
                        detail: format!(
                            "frame {sample}'s {size} bytes at {at} pass the end of the file ({file_len} bytes)"
                        ),
                    });
                };
                ranges.push((at, size));
                at = end;
                sample += 1;
            }
        }
    }
    if ranges.len() != n {
        return Err(r.err(format!("chunks hold {} of {n} frames", ranges.len())));
    }
    // the edit list: one edit starting the media at `media_time` moves every time back by it
    let mut shift = 0i64;
    if let Some((elst, eo)) = t.elst {
        let mut r = Reader::new(elst, "elst", eo);
        let v = r.version()?;
        let k = r.count(if v == 1 { 20 } else { 12 }, 1 << 20)?;
        let mut media_times = Vec::new();
        for _ in 0..k {
            let media_time = if v == 1 {
                r.u64()?; // segment duration
                r.u64()? as i64
            } else {
                r.u32()?;
                i64::from(r.u32()? as i32)
            };
            r.u32()?; // rate
            if media_time >= 0 {
                media_times.push(media_time);
            }
        }
        match media_times.as_slice() {
            [] => {}
            [m] => shift = *m,
            _ => {
                return Err(Mp4Error::Unsupported(format!(
                    "an edit list of {} edits is not supported yet (one is)",
                    media_times.len()
                )));
            }
        }
    }
    let mut frames = Vec::with_capacity(n);
    let mut dts = 0i64;
    for i in 0..n {
        frames.push(VideoFrame {
            pts: dts + offsets[i] - shift,
            dts: dts - shift,
            duration: durations[i],
            key: key[i],
            offset: ranges[i].0,
            size: ranges[i].1,
        });
        dts += i64::from(durations[i]);
    }
    Ok(FrameIndex {
        timescale,
        codec,
        width,
        height,
        extradata,
        frames,
    })
}

/// The extradata FFmpeg's MP4 demuxer gives the decoder, from a visual sample entry's child
/// boxes `b` (at file offset `base`): see [`FrameIndex::extradata`].
fn codec_config(b: &[u8], base: u64) -> Result<Vec<u8>> {
    for (ty, payload, off) in children(b, base)? {
        match &ty.0 {
            b"avcC" | b"hvcC" | b"av1C" => {
                if payload.is_empty() {
                    return Err(Mp4Error::Invalid {
                        box_type: ty.to_string(),
                        offset: off,
                        detail: "an empty codec configuration".into(),
                    });
                }
                return Ok(payload.to_vec());
            }
            b"esds" => return esds_config(payload, off),
            _ => {}
        }
    }
    Ok(Vec::new())
}

/// The DecoderSpecificInfo (tag 5) inside an `esds` box's ES_Descriptor (ISO 14496-1 7.2.6):
/// ES_Descriptor (3) > DecoderConfigDescriptor (4) > DecoderSpecificInfo (5).
fn esds_config(b: &[u8], base: u64) -> Result<Vec<u8>> {
    let mut r = Reader::new(b, "esds", base);
    r.version()?;
    // a descriptor's tag and its length (1 to 4 bytes of 7 bits each)
    let descriptor = |r: &mut Reader<'_>| -> Result<(u8, usize)> {
        let tag = r.u8()?;
        let mut len = 0usize;
        for _ in 0..4 {
            let c = r.u8()?;
            len = (len << 7) | usize::from(c & 0x7f);
            if c & 0x80 == 0 {
                break;
            }
        }
        if len > r.b.len() - r.at {
            return Err(r.err(format!(
                "descriptor {tag} of {len} bytes, {} left",
                r.b.len() - r.at
            )));
        }
        Ok((tag, len))
    };
    let (tag, _) = descriptor(&mut r)?;
    if tag != 3 {
        return Err(r.err(format!("an ES_Descriptor (tag 3) expected, tag {tag}")));
    }
    r.take(2)?; // ES_ID
    let flags = r.u8()?;
    if flags & 0x80 != 0 {
        r.take(2)?; // dependsOn_ES_ID
    }
    if flags & 0x40 != 0 {
        let n = r.u8()?;
        r.take(usize::from(n))?; // URL
    }
    if flags & 0x20 != 0 {
        r.take(2)?; // OCR_ES_Id
    }
    let (tag, _) = descriptor(&mut r)?;
    if tag != 4 {
        return Ok(Vec::new());
    }
    r.take(13)?; // object type, stream type, buffer size, max and average bit rates
    if r.at == r.b.len() {
        return Ok(Vec::new());
    }
    let (tag, len) = descriptor(&mut r)?;
    if tag != 5 {
        return Ok(Vec::new());
    }
    Ok(r.take(len)?.to_vec())
}

/// The frame index of an MP4 file whose bytes are `bytes` (a file packed into a `video` field).
pub fn index_bytes(bytes: &[u8], limits: &ContainerLimits) -> Result<FrameIndex> {
    let len = bytes.len() as u64;
    let read = |offset: u64, n: usize| -> std::io::Result<Vec<u8>> {
        let lo = usize::try_from(offset)
            .map_err(std::io::Error::other)?
            .min(bytes.len());
        Ok(bytes[lo..lo.saturating_add(n).min(bytes.len())].to_vec())
    };
    let (at, size) = locate_moov(len, limits, read)?;
    // size <= max_moov_bytes and fits the bytes (checked by locate_moov)
    let moov = &bytes[at as usize..(at + size) as usize];
    parse_moov(moov, at, len, limits)
}

impl FrameIndex {
    /// The index as a `video` value keeps it (format.md, the `video` field type).
    pub fn to_video_index(&self) -> stokehold_format::video::VideoIndex {
        use stokehold_format::video::{CONTAINER_MP4, VideoIndex};
        VideoIndex {
            container: CONTAINER_MP4,
            codec: self.codec.0,
            timescale: self.timescale,
            width: self.width,
            height: self.height,
            extradata: self.extradata.clone(),
            frames: self.frames.clone(),
        }
    }

    /// The index a `video` value keeps, as this reader's.
    pub fn from_video_index(v: stokehold_format::video::VideoIndex) -> FrameIndex {
        FrameIndex {
            timescale: v.timescale,
            codec: FourCc(v.codec),
            width: v.width,
            height: v.height,
            extradata: v.extradata,
            frames: v.frames,
        }
    }
}

/// A `video` field's value for an MP4 file's bytes: its frame index, then the bytes as they
/// are (format.md). A file that is not an MP4 this reader indexes (cut before its `moov`, no
/// video track, fragmented) is refused with why; so is one without frames.
pub fn video_value(bytes: &[u8], limits: &ContainerLimits) -> Result<Vec<u8>> {
    let index = index_bytes(bytes, limits)?;
    if index.frames.is_empty() {
        return Err(Mp4Error::Unsupported(
            "the video track has no frames".into(),
        ));
    }
    Ok(stokehold_format::video::encode_video(
        &index.to_video_index(),
        bytes,
    ))
}

/// The frame index of a video file on local disk, MP4 or Matroska/WebM (told apart by their
/// first bytes, not their names).
pub fn index_video_file(path: &std::path::Path, limits: &ContainerLimits) -> Result<FrameIndex> {
    use std::io::Read;
    let mut magic = [0u8; 4];
    let n = std::fs::File::open(path)
        .and_then(|f| f.take(4).read(&mut magic))
        .map_err(|e| Mp4Error::Unsupported(format!("{}: {e}", path.display())))?;
    if crate::mkv::is_matroska(&magic[..n]) {
        return Ok(crate::mkv::index_file(path, limits)?);
    }
    index_file(path, limits)
}

/// The frame index of an MP4 file on local disk.
pub fn index_file(path: &std::path::Path, limits: &ContainerLimits) -> Result<FrameIndex> {
    use std::io::{Read, Seek, SeekFrom};
    let name = path.display().to_string();
    let io = |e: std::io::Error| Mp4Error::Unsupported(format!("{name}: {e}"));
    let mut f = std::fs::File::open(path).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    let mut read = |offset: u64, n: usize| -> std::io::Result<Vec<u8>> {
        f.seek(SeekFrom::Start(offset))?;
        let mut buf = Vec::with_capacity(n);
        (&mut f).take(n as u64).read_to_end(&mut buf)?;
        Ok(buf)
    };
    let (at, size) = locate_moov(len, limits, &mut read)?;
    // size <= max_moov_bytes and fits the file (checked by locate_moov)
    let moov = read(at, size as usize).map_err(|e| Mp4Error::Read {
        offset: at,
        detail: e.to_string(),
    })?;
    parse_moov(&moov, at, len, limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bx(ty: &[u8; 4], payload: &[u8]) -> Vec<u8> {
        let mut v = ((payload.len() + 8) as u32).to_be_bytes().to_vec();
        v.extend_from_slice(ty);
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn box_headers_are_checked_against_their_parent() {
        assert!(box_header(&[0, 0, 0, 4, b'f', b'r', b'e', b'e'], 0, 100).is_err()); // < header
        assert!(box_header(&[0, 0, 1, 0, b'f', b'r', b'e', b'e'], 0, 100).is_err()); // > room
        assert!(box_header(&[0, 0, 0, 1, b'f', b'r', b'e', b'e'], 0, 100).is_err()); // no 64-bit size
        let (ty, size, h) = box_header(&[0, 0, 0, 0, b'm', b'd', b'a', b't'], 0, 77).unwrap();
        assert_eq!((ty.0, size, h), (*b"mdat", 77, 8));
    }

    #[test]
    fn files_that_are_not_whole_mp4s_are_named() {
        let ftyp = bx(b"ftyp", b"isom\0\0\0\0");
        let mut file = ftyp.clone();
        file.extend(bx(b"mdat", &[0; 16]));
        let read = |f: &Vec<u8>| {
            let f = f.clone();
            move |o: u64, n: usize| Ok(f[o as usize..(o as usize + n).min(f.len())].to_vec())
        };
        let e =
            locate_moov(file.len() as u64, &ContainerLimits::default(), read(&file)).unwrap_err();
        assert!(e.to_string().contains("no moov"), "{e}");
        let mut frag = ftyp.clone();
        frag.extend(bx(b"moof", &[0; 8]));
        let e =
            locate_moov(frag.len() as u64, &ContainerLimits::default(), read(&frag)).unwrap_err();
        assert!(e.to_string().contains("fragmented"), "{e}");
        let other = bx(b"free", &[0; 8]);
        let e = locate_moov(
            other.len() as u64,
            &ContainerLimits::default(),
            read(&other),
        )
        .unwrap_err();
        assert!(e.to_string().contains("not an MP4"), "{e}");
        // a huge moov is refused before it is read
        let mut big = ftyp;
        big.extend(bx(b"moov", &[0; 64]));
        let tiny = ContainerLimits {
            max_moov_bytes: 16,
            ..ContainerLimits::default()
        };
        let e = locate_moov(big.len() as u64, &tiny, read(&big)).unwrap_err();
        assert!(matches!(e, Mp4Error::TooLarge { .. }), "{e}");
    }

    #[test]
    fn a_table_declaring_more_entries_than_its_bytes_is_refused() {
        let mut r = Reader::new(&[0, 0, 0, 200, 1, 2, 3, 4], "stss", 1000);
        let e = r.count(4, 1 << 20).unwrap_err();
        assert!(
            e.to_string().contains("200 entries") && e.to_string().contains("stss"),
            "{e}"
        );
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff], "stsz", 0);
        assert!(matches!(r.count(4, 1000), Err(Mp4Error::TooLarge { .. })));
    }
}
