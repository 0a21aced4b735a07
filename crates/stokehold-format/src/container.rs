//! The one checked parser of stokehold's own binary containers beside the shard format: the kept
//! index of a file read in place (`.skhidx`, written by `stokehold-ingest`) and a part of the
//! decoded cache (`.skdc`, written by the engine). Both are read only through these functions,
//! with a shard's discipline: every count is checked against the bytes that are there before it
//! sizes an allocation, every region against its CRC-32C, a JSON header against
//! [`Limits::max_meta_bytes`] (as a shard's meta block), and nothing panics on any input (the
//! fuzz entry point [`crate::fuzzing::fuzz_containers`] runs them on arbitrary bytes).
//!
//! - [`Cursor`]: little-endian fields read in order, each bounded by what is left.
//! - [`sealed_body`] / [`seal`]: a container that starts with a magic and ends with the CRC-32C
//!   of everything before it (a kept index).
//! - [`PartFooter`] / [`PartEntry`]: a decoded part, pixels then an index of 32-byte entries
//!   then a 32-byte footer that locates the index (opened from its end, as a shard).
//! - [`seal_counts`] / [`parse_counts`]: kept token counts of packed conversations (`.skcc`), a
//!   sealed container of a JSON header naming what they count, then one `u32` per sample.
//! - [`seal_video_index`] / [`parse_video_index`]: the kept frame index of a video file read in
//!   place (`.skvi`), a sealed container of a JSON header naming the file (its key) and the
//!   index's fields, then the codec's extradata and one 33-byte entry per frame.

use std::ops::Range;

use crate::crc;
use crate::limits::Limits;

/// Why a container was refused (the caller names the file). A typed error: what was wrong, and
/// the counts that made it so.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ContainerError {
    /// A field or region runs past the end of the bytes.
    #[error("it ends early")]
    EndsEarly,
    /// Bytes left over after everything the container declares.
    #[error("{left} bytes follow what it declares")]
    TrailingBytes {
        /// The bytes left over.
        left: usize,
    },
    /// A table's count does not fit the bytes that are left.
    #[error("a table of {count} items of {size} bytes does not fit its {left} bytes left")]
    TableTooLarge {
        /// Items the table declares.
        count: u64,
        /// Bytes per item.
        size: usize,
        /// Bytes left after the table's start.
        left: usize,
    },
    /// A JSON header over the meta limit.
    #[error("its header of {len} bytes is over the limit of {limit} bytes")]
    HeaderTooLarge {
        /// Bytes the header declares.
        len: usize,
        /// The limit ([`Limits::max_meta_bytes`]).
        limit: u64,
    },
    /// A JSON header that does not parse into what it must be.
    #[error("its header is not valid: {0}")]
    BadHeader(#[from] serde_json::Error),
    /// Not this kind of container.
    #[error("not a stokehold {what} (bad magic)")]
    BadMagic {
        /// What was expected ("index", ...).
        what: String,
    },
    /// The container's CRC-32C does not match its bytes.
    #[error("its checksum does not match (damaged)")]
    Checksum,
    /// A part too short to hold its footer.
    #[error("{size} bytes, shorter than its footer")]
    ShorterThanFooter {
        /// The part's size.
        size: u64,
    },
    /// The footer's magic is missing.
    #[error("no part footer")]
    NoFooter,
    /// Written by another version of the decoding.
    #[error("written by prefix version {0}")]
    Version(u32),
    /// The footer's count and pixel end do not add up to the part's size.
    #[error("its footer's count {count} and pixel end {data_end} do not fit its {size} bytes")]
    FooterMismatch {
        /// Entries the footer declares.
        count: u64,
        /// Where it says the pixels end.
        data_end: u64,
        /// The part's size.
        size: u64,
    },
    /// The index is not the length its footer says.
    #[error("its index is not the length its footer says")]
    IndexLength,
    /// The index fails its CRC-32C.
    #[error("its index fails its checksum")]
    IndexChecksum,
    /// An index entry points outside the pixels.
    #[error("index entry {0} points outside the pixels")]
    EntryOutside(u64),
    /// A kept video index whose fields are not an index's.
    #[error("its video index is not valid: {0}")]
    VideoIndex(String),
}

/// The result of parsing a container.
pub type ContainerResult<T> = Result<T, ContainerError>;

/// Little-endian fields read in order from a container's bytes; every read is bounded by the
/// bytes left, and every table is checked against them before it is allocated.
#[derive(Debug, Clone)]
pub struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// Read `bytes` from `pos`.
    pub fn new(bytes: &'a [u8], pos: usize) -> Cursor<'a> {
        Cursor { bytes, pos }
    }

    /// The position of the next read.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> ContainerResult<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or(ContainerError::EndsEarly)?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// The next little-endian `u32`.
    pub fn u32(&mut self) -> ContainerResult<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    /// The next little-endian `u64`.
    pub fn u64(&mut self) -> ContainerResult<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    /// A table of `count` items of `size` bytes each, decoded by `item`: the count is checked
    /// against the bytes left before anything is allocated.
    pub fn table<T>(
        &mut self,
        count: u64,
        size: usize,
        mut item: impl FnMut(&mut Cursor<'a>) -> ContainerResult<T>,
    ) -> ContainerResult<Vec<T>> {
        let fits = usize::try_from(count)
            .ok()
            .and_then(|n| n.checked_mul(size))
            .is_some_and(|bytes| bytes <= self.remaining());
        if !fits {
            return Err(ContainerError::TableTooLarge {
                count,
                size,
                left: self.remaining(),
            });
        }
        let mut v = Vec::with_capacity(count as usize);
        for _ in 0..count {
            v.push(item(self)?);
        }
        Ok(v)
    }

    /// `count` little-endian `u32`s (checked as [`Cursor::table`]).
    pub fn u32s(&mut self, count: u64) -> ContainerResult<Vec<u32>> {
        self.table(count, 4, Cursor::u32)
    }

    /// A JSON header of `len` bytes, at most `limits.max_meta_bytes` (as a shard's meta block).
    pub fn json_header<T: serde::de::DeserializeOwned>(
        &mut self,
        len: usize,
        limits: &Limits,
    ) -> ContainerResult<T> {
        if len as u64 > limits.max_meta_bytes {
            return Err(ContainerError::HeaderTooLarge {
                len,
                limit: limits.max_meta_bytes,
            });
        }
        Ok(serde_json::from_slice(self.take(len)?)?)
    }
}

/// The body of a sealed container: `bytes` (at least the magic, a `u32` and the checksum) must
/// start with `magic` and end with the CRC-32C of
/// everything before those last 4 bytes; the body is everything before the checksum (the magic
/// included, so that offsets are the object's).
pub fn sealed_body<'a>(bytes: &'a [u8], magic: &[u8; 8], what: &str) -> ContainerResult<&'a [u8]> {
    if bytes.len() < magic.len() + 8 || &bytes[..magic.len()] != magic {
        return Err(ContainerError::BadMagic { what: what.into() });
    }
    let (body, tail) = bytes.split_at(bytes.len() - 4);
    let stored = u32::from_le_bytes(tail.try_into().expect("4 bytes"));
    if crc::crc32c(body) != stored {
        return Err(ContainerError::Checksum);
    }
    Ok(body)
}

/// Seal `body` (which starts with its magic): append the CRC-32C of it.
pub fn seal(mut body: Vec<u8>) -> Vec<u8> {
    let c = crc::crc32c(&body);
    body.extend_from_slice(&c.to_le_bytes());
    body
}

/// The magic of kept token counts ([`seal_counts`]).
pub const COUNTS_MAGIC: &[u8; 8] = b"SKHCNT\0\x01";

/// What kept counts count: the key of the dataset and of the encoding (template, tokenizer,
/// options), and how many samples.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CountsHeader {
    /// The dataset's and the encoding's key.
    pub key: String,
    /// Samples counted.
    pub n: u64,
}

/// Kept token counts, sealed: `magic | header length u32 | JSON header | n u32 counts | CRC-32C`.
pub fn seal_counts(key: &str, counts: &[u32]) -> Vec<u8> {
    let header = serde_json::to_vec(&CountsHeader {
        key: key.to_string(),
        n: counts.len() as u64,
    })
    .expect("a header serializes");
    let mut out = Vec::with_capacity(COUNTS_MAGIC.len() + 8 + header.len() + counts.len() * 4);
    out.extend_from_slice(COUNTS_MAGIC);
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(&header);
    for c in counts {
        out.extend_from_slice(&c.to_le_bytes());
    }
    seal(out)
}

/// Kept token counts ([`seal_counts`]): their header and counts, every length checked against
/// the bytes there and the whole against its CRC-32C.
pub fn parse_counts(bytes: &[u8]) -> ContainerResult<(CountsHeader, Vec<u32>)> {
    let body = sealed_body(bytes, COUNTS_MAGIC, "counts file")?;
    let mut r = Cursor::new(body, COUNTS_MAGIC.len());
    let hlen = r.u32()? as usize;
    let header: CountsHeader = r.json_header(hlen, &Limits::default())?;
    let counts = r.u32s(header.n)?;
    if r.remaining() != 0 {
        return Err(ContainerError::TrailingBytes {
            left: r.remaining(),
        });
    }
    Ok((header, counts))
}

/// The magic of a kept video frame index ([`seal_video_index`]).
pub const VIDEO_INDEX_MAGIC: &[u8; 8] = b"SKHVIX\0\x01";

/// What a kept video index is of, and its fields but the tables: the key of the file (its
/// path, size and modification time, as its keeper makes it) and the sizes of the extradata
/// and of the frame table that follow the header.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VideoIndexHeader {
    /// The file's key.
    pub key: String,
    /// The container ([`crate::video::CONTAINER_MP4`] or [`crate::video::CONTAINER_MATROSKA`]).
    pub container: u8,
    /// The codec's four-character code.
    pub codec: [u8; 4],
    /// Ticks per second (at least 1).
    pub timescale: u32,
    /// Width in pixels.
    pub width: u16,
    /// Height in pixels.
    pub height: u16,
    /// Bytes of the codec's extradata.
    pub extradata: u64,
    /// Frames (at least one), [`crate::video::FRAME_BYTES`] each.
    pub frames: u64,
}

/// A kept video frame index, sealed: `magic | header length u32 | JSON header | extradata |
/// frame × frames | CRC-32C`, each frame as in a `video` value (`pts i64 | dts i64 | duration
/// u32 | flags u8 (bit 0: keyframe) | offset u64 | size u32`).
pub fn seal_video_index(key: &str, index: &crate::video::VideoIndex) -> Vec<u8> {
    let header = serde_json::to_vec(&VideoIndexHeader {
        key: key.to_string(),
        container: index.container,
        codec: index.codec,
        timescale: index.timescale,
        width: index.width,
        height: index.height,
        extradata: index.extradata.len() as u64,
        frames: index.frames.len() as u64,
    })
    .expect("a header serializes");
    let mut out = Vec::with_capacity(
        VIDEO_INDEX_MAGIC.len()
            + 8
            + header.len()
            + index.extradata.len()
            + index.frames.len() * crate::video::FRAME_BYTES,
    );
    out.extend_from_slice(VIDEO_INDEX_MAGIC);
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(&index.extradata);
    for f in &index.frames {
        f.encode_into(&mut out);
    }
    seal(out)
}

/// A kept video frame index ([`seal_video_index`]): the file's key and the index, every length
/// checked against the bytes there, the whole against its CRC-32C, and the fields as a `video`
/// value's are (a known container, a timescale, at least one frame, no unknown frame flags, no
/// packet whose end overflows). Whether the packets lie inside the file is the caller's to
/// check: it knows the file's size.
pub fn parse_video_index(bytes: &[u8]) -> ContainerResult<(String, crate::video::VideoIndex)> {
    use crate::video::{CONTAINER_MATROSKA, CONTAINER_MP4, FRAME_BYTES, VideoFrame, VideoIndex};
    let body = sealed_body(bytes, VIDEO_INDEX_MAGIC, "video index")?;
    let mut r = Cursor::new(body, VIDEO_INDEX_MAGIC.len());
    let hlen = r.u32()? as usize;
    let h: VideoIndexHeader = r.json_header(hlen, &Limits::default())?;
    let bad = |m: String| Err(ContainerError::VideoIndex(m));
    if h.container != CONTAINER_MP4 && h.container != CONTAINER_MATROSKA {
        return bad(format!("unknown container code {}", h.container));
    }
    if h.timescale == 0 {
        return bad("a timescale of 0".into());
    }
    if h.frames == 0 {
        return bad("no frames".into());
    }
    let extra_len = usize::try_from(h.extradata).map_err(|_| ContainerError::EndsEarly)?;
    let extradata = r.take(extra_len)?.to_vec();
    let mut k = 0u64;
    let frames = r.table(h.frames, FRAME_BYTES, |c| {
        let (pts, dts, duration) = (c.u64()? as i64, c.u64()? as i64, c.u32()?);
        let flags = c.take(1)?[0];
        let (offset, size) = (c.u64()?, c.u32()?);
        if flags & !1 != 0 {
            return Err(ContainerError::VideoIndex(format!(
                "frame {k}: unknown flags {flags:#x}"
            )));
        }
        if offset.checked_add(u64::from(size)).is_none() {
            return Err(ContainerError::VideoIndex(format!(
                "frame {k}: its packet's end overflows"
            )));
        }
        k += 1;
        Ok(VideoFrame {
            pts,
            dts,
            duration,
            key: flags & 1 == 1,
            offset,
            size,
        })
    })?;
    if r.remaining() != 0 {
        return Err(ContainerError::TrailingBytes {
            left: r.remaining(),
        });
    }
    let index = VideoIndex {
        container: h.container,
        codec: h.codec,
        timescale: h.timescale,
        width: h.width,
        height: h.height,
        extradata,
        frames,
    };
    Ok((h.key, index))
}

/// The footer of a decoded part: `magic (8) | version u32 | index CRC-32C u32 | count u64 |
/// pixel end u64`, the last [`PartFooter::LEN`] bytes of the part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartFooter {
    /// The version of the decoding that made the pixels.
    pub version: u32,
    /// CRC-32C of the index.
    pub index_crc: u32,
    /// Images in the part.
    pub count: u64,
    /// One past the last byte of pixels: the index starts there.
    pub data_end: u64,
}

impl PartFooter {
    /// Bytes of a footer.
    pub const LEN: u64 = 32;

    /// Parse the footer of a part of `size` bytes, written with `magic` by decoding `version`:
    /// the index it locates must fill the part exactly between the pixels and the footer.
    pub fn parse(
        footer: &[u8],
        size: u64,
        magic: &[u8; 8],
        version: u32,
    ) -> ContainerResult<PartFooter> {
        if size < Self::LEN || footer.len() as u64 != Self::LEN {
            return Err(ContainerError::ShorterThanFooter { size });
        }
        if &footer[0..8] != magic {
            return Err(ContainerError::NoFooter);
        }
        let mut c = Cursor::new(footer, 8);
        let f = PartFooter {
            version: c.u32()?,
            index_crc: c.u32()?,
            count: c.u64()?,
            data_end: c.u64()?,
        };
        if f.version != version {
            return Err(ContainerError::Version(f.version));
        }
        let fits = f.count.checked_mul(PartEntry::LEN).is_some_and(|l| {
            f.data_end
                .checked_add(l)
                .and_then(|e| e.checked_add(Self::LEN))
                == Some(size)
        });
        if !fits {
            return Err(ContainerError::FooterMismatch {
                count: f.count,
                data_end: f.data_end,
                size,
            });
        }
        Ok(f)
    }

    /// The byte range of the index (checked by [`PartFooter::parse`] against the part's size).
    pub fn index_range(&self) -> Range<u64> {
        self.data_end..self.data_end + self.count * PartEntry::LEN
    }

    /// Parse the index the footer locates: its checksum, then each entry inside the pixels.
    pub fn parse_index(&self, index: &[u8]) -> ContainerResult<Vec<PartEntry>> {
        if index.len() as u64 != self.count * PartEntry::LEN {
            return Err(ContainerError::IndexLength);
        }
        if crc::crc32c(index) != self.index_crc {
            return Err(ContainerError::IndexChecksum);
        }
        let mut c = Cursor::new(index, 0);
        let mut i = 0u64;
        c.table(self.count, PartEntry::LEN as usize, |c| {
            let e = PartEntry::decode(c.take(PartEntry::LEN as usize)?, self.data_end)
                .ok_or(ContainerError::EntryOutside(i));
            i += 1;
            e
        })
    }
}

/// One image of a decoded part: `id u64 | offset u64 | width u32 | height u32 | channels u32 |
/// CRC-32C of the pixels u32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartEntry {
    /// The sample id.
    pub id: u64,
    /// Where its pixels start in the part.
    pub offset: u64,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// 1 or 3.
    pub channels: u8,
    /// CRC-32C of the pixels.
    pub crc: u32,
}

impl PartEntry {
    /// Bytes of an entry.
    pub const LEN: u64 = 32;

    /// Bytes of its pixels.
    pub fn pixels(&self) -> u64 {
        u64::from(self.width) * u64::from(self.height) * u64::from(self.channels)
    }

    /// The entry's bytes.
    pub fn encode(&self) -> [u8; Self::LEN as usize] {
        let mut b = [0u8; Self::LEN as usize];
        b[0..8].copy_from_slice(&self.id.to_le_bytes());
        b[8..16].copy_from_slice(&self.offset.to_le_bytes());
        b[16..20].copy_from_slice(&self.width.to_le_bytes());
        b[20..24].copy_from_slice(&self.height.to_le_bytes());
        b[24..28].copy_from_slice(&u32::from(self.channels).to_le_bytes());
        b[28..32].copy_from_slice(&self.crc.to_le_bytes());
        b
    }

    /// Decode an entry of a part whose pixels end at `data_end`; `None` when it does not
    /// describe pixels inside that range (or `b` is not one entry).
    pub fn decode(b: &[u8], data_end: u64) -> Option<PartEntry> {
        if b.len() as u64 != Self::LEN {
            return None;
        }
        let mut c = Cursor::new(b, 0);
        let id = c.u64().ok()?;
        let offset = c.u64().ok()?;
        let width = c.u32().ok()?;
        let height = c.u32().ok()?;
        let channels = u8::try_from(c.u32().ok()?)
            .ok()
            .filter(|c| *c == 1 || *c == 3)?;
        let crc = c.u32().ok()?;
        let e = PartEntry {
            id,
            offset,
            width,
            height,
            channels,
            crc,
        };
        let fits = width > 0
            && height > 0
            && offset
                .checked_add(e.pixels())
                .is_some_and(|end| end <= data_end);
        fits.then_some(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAGIC: &[u8; 8] = b"TESTPART";

    fn part(entries: &[PartEntry], data_end: u64, version: u32) -> Vec<u8> {
        let mut out = vec![0u8; data_end as usize];
        let mut index = Vec::new();
        for e in entries {
            index.extend_from_slice(&e.encode());
        }
        out.extend_from_slice(&index);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(&crc::crc32c(&index).to_le_bytes());
        out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        out.extend_from_slice(&data_end.to_le_bytes());
        out
    }

    fn open(bytes: &[u8], version: u32) -> ContainerResult<Vec<PartEntry>> {
        let size = bytes.len() as u64;
        let footer = &bytes[bytes.len().saturating_sub(32)..];
        let f = PartFooter::parse(footer, size, MAGIC, version)?;
        let r = f.index_range();
        f.parse_index(&bytes[r.start as usize..r.end as usize])
    }

    #[test]
    fn a_part_round_trips_and_every_damage_is_refused() {
        let e = PartEntry {
            id: 9,
            offset: 4,
            width: 2,
            height: 3,
            channels: 3,
            crc: 77,
        };
        let good = part(&[e], 40, 1);
        assert_eq!(open(&good, 1).unwrap(), vec![e]);
        assert!(
            open(&good, 2)
                .unwrap_err()
                .to_string()
                .contains("prefix version 1")
        );
        // an entry past the pixels
        let far = PartEntry { offset: 30, ..e };
        assert!(
            open(&part(&[far], 40, 1), 1)
                .unwrap_err()
                .to_string()
                .contains("outside")
        );
        // a flipped index byte
        let mut bad = good.clone();
        bad[41] ^= 1;
        assert!(open(&bad, 1).unwrap_err().to_string().contains("checksum"));
        // a count that does not fit
        let mut big = good.clone();
        let n = big.len();
        big[n - 16..n - 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(
            open(&big, 1)
                .unwrap_err()
                .to_string()
                .contains("do not fit")
        );
        assert!(open(&good[..10], 1).is_err());
    }

    #[test]
    fn a_table_larger_than_what_is_left_is_refused_before_allocating() {
        let bytes = [0u8; 16];
        let mut c = Cursor::new(&bytes, 0);
        assert!(c.u32s(5).is_err());
        assert_eq!(c.u32s(4).unwrap(), vec![0; 4]);
        let mut c = Cursor::new(&bytes, 0);
        assert!(c.table(u64::MAX, 12, |c| c.u32()).is_err());
    }

    #[test]
    fn a_sealed_container_checks_its_magic_and_checksum() {
        let mut body = MAGIC.to_vec();
        body.extend_from_slice(b"hello");
        let sealed = seal(body.clone());
        assert_eq!(sealed_body(&sealed, MAGIC, "thing").unwrap(), &body[..]);
        let mut bad = sealed.clone();
        bad[9] ^= 1;
        assert!(
            sealed_body(&bad, MAGIC, "thing")
                .unwrap_err()
                .to_string()
                .contains("damaged")
        );
        assert!(
            sealed_body(b"NOTMAGIC....", MAGIC, "thing")
                .unwrap_err()
                .to_string()
                .contains("bad magic")
        );
    }

    #[test]
    fn kept_counts_round_trip_and_refuse_damage() {
        let b = seal_counts("ds/chat:abc", &[3, 0, u32::MAX, 7]);
        let (h, counts) = parse_counts(&b).unwrap();
        assert_eq!((h.key.as_str(), h.n), ("ds/chat:abc", 4));
        assert_eq!(counts, [3, 0, u32::MAX, 7]);
        let mut bad = b.clone();
        let last = bad.len() - 6;
        bad[last] ^= 1;
        assert!(matches!(parse_counts(&bad), Err(ContainerError::Checksum)));
        assert!(parse_counts(&b[..b.len() - 1]).is_err());
        // a header that declares more counts than are there: refused before allocating
        let mut body = COUNTS_MAGIC.to_vec();
        let header = br#"{"key":"k","n":1000000000000}"#;
        body.extend_from_slice(&(header.len() as u32).to_le_bytes());
        body.extend_from_slice(header);
        body.extend_from_slice(&[0; 8]);
        assert!(matches!(
            parse_counts(&seal(body)),
            Err(ContainerError::TableTooLarge { .. })
        ));
    }

    fn video_index() -> crate::video::VideoIndex {
        use crate::video::{CONTAINER_MP4, VideoFrame, VideoIndex};
        let frame = |pts: i64, key, offset, size| VideoFrame {
            pts,
            dts: pts.wrapping_sub(512),
            duration: 512,
            key,
            offset,
            size,
        };
        VideoIndex {
            container: CONTAINER_MP4,
            codec: *b"avc1",
            timescale: 12800,
            width: 64,
            height: 48,
            extradata: vec![1, 2, 3, 0xff],
            frames: vec![
                frame(0, true, 48, 700),
                frame(1024, false, 748, 30),
                frame(512, false, 778, u32::MAX),
                frame(i64::MIN, true, u64::MAX - u64::from(u32::MAX), u32::MAX),
            ],
        }
    }

    #[test]
    fn a_kept_video_index_round_trips() {
        let ix = video_index();
        let b = seal_video_index("120 17 /data/ep|0.mp4", &ix);
        assert_eq!(&b[..8], VIDEO_INDEX_MAGIC);
        let (key, got) = parse_video_index(&b).unwrap();
        assert_eq!((key.as_str(), got), ("120 17 /data/ep|0.mp4", ix.clone()));
        // Matroska and an empty extradata too
        let mkv = crate::video::VideoIndex {
            container: crate::video::CONTAINER_MATROSKA,
            extradata: Vec::new(),
            ..ix
        };
        assert_eq!(
            parse_video_index(&seal_video_index("", &mkv)).unwrap(),
            (String::new(), mkv)
        );
    }

    #[test]
    fn every_cut_and_every_flipped_byte_of_a_kept_video_index_is_refused() {
        let b = seal_video_index("k", &video_index());
        for cut in 0..b.len() {
            assert!(parse_video_index(&b[..cut]).is_err(), "cut at {cut}");
        }
        for at in 0..b.len() {
            for bit in [0x01, 0x80] {
                let mut bad = b.clone();
                bad[at] ^= bit;
                assert!(parse_video_index(&bad).is_err(), "byte {at} ^ {bit:#x}");
            }
        }
        // another container's bytes
        assert!(matches!(
            parse_video_index(&seal_counts("k", &[1, 2])),
            Err(ContainerError::BadMagic { .. })
        ));
    }

    /// A kept video index of `header` (as JSON) and `rest`, sealed: what a foreign writer could
    /// leave with a valid checksum.
    fn forged_video_index(header: &str, rest: &[u8]) -> Vec<u8> {
        let mut body = VIDEO_INDEX_MAGIC.to_vec();
        body.extend_from_slice(&(header.len() as u32).to_le_bytes());
        body.extend_from_slice(header.as_bytes());
        body.extend_from_slice(rest);
        seal(body)
    }

    #[test]
    fn a_sealed_video_index_with_bad_fields_is_refused_before_allocating() {
        let h = |container: u8, timescale: u32, extradata: u64, frames: u64| {
            format!(
                r#"{{"key":"k","container":{container},"codec":[97,118,99,49],"timescale":{timescale},"width":2,"height":2,"extradata":{extradata},"frames":{frames}}}"#
            )
        };
        let mut frame = Vec::new();
        frame.extend_from_slice(&0i64.to_le_bytes());
        frame.extend_from_slice(&0i64.to_le_bytes());
        frame.extend_from_slice(&1u32.to_le_bytes());
        frame.push(1);
        frame.extend_from_slice(&0u64.to_le_bytes());
        frame.extend_from_slice(&4u32.to_le_bytes());
        assert!(parse_video_index(&forged_video_index(&h(1, 1, 0, 1), &frame)).is_ok());
        let err = |b: Vec<u8>| parse_video_index(&b).unwrap_err().to_string();
        assert!(err(forged_video_index(&h(3, 1, 0, 1), &frame)).contains("container code 3"));
        assert!(err(forged_video_index(&h(1, 0, 0, 1), &frame)).contains("timescale"));
        assert!(err(forged_video_index(&h(1, 1, 0, 0), &[])).contains("no frames"));
        // counts that the bytes do not hold: refused before anything is sized by them
        assert!(matches!(
            parse_video_index(&forged_video_index(&h(1, 1, 0, u64::MAX), &frame)),
            Err(ContainerError::TableTooLarge { .. })
        ));
        assert!(matches!(
            parse_video_index(&forged_video_index(&h(1, 1, u64::MAX, 1), &frame)),
            Err(ContainerError::EndsEarly)
        ));
        assert!(matches!(
            parse_video_index(&forged_video_index(
                &h(1, 1, 0, 1),
                &[frame.clone(), vec![0]].concat()
            )),
            Err(ContainerError::TrailingBytes { left: 1 })
        ));
        // unknown frame flags, a packet whose end overflows
        let mut flags = frame.clone();
        flags[20] = 2;
        assert!(err(forged_video_index(&h(1, 1, 0, 1), &flags)).contains("unknown flags"));
        let mut far = frame.clone();
        far[21..29].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(err(forged_video_index(&h(1, 1, 0, 1), &far)).contains("overflows"));
        // unknown header fields
        let extra = h(1, 1, 0, 1).replace("}", r#","more":1}"#);
        assert!(matches!(
            parse_video_index(&forged_video_index(&extra, &frame)),
            Err(ContainerError::BadHeader(_))
        ));
    }

    /// `b` with `edits` applied, whole and cut at `cut`, through the containers' fuzz entry.
    fn fuzz_mutated(
        mut b: Vec<u8>,
        edits: &[(proptest::sample::Index, u8)],
        cut: proptest::sample::Index,
    ) {
        for (at, v) in edits {
            let i = at.index(b.len());
            b[i] = *v;
        }
        let keep = cut.index(b.len() + 1);
        crate::fuzzing::fuzz_containers(&b);
        crate::fuzzing::fuzz_containers(&b[..keep]);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Mutated and cut kept counts never panic the parser.
        #[test]
        fn mutated_counts_never_panic(
            edits in proptest::collection::vec((proptest::prelude::any::<proptest::sample::Index>(), proptest::prelude::any::<u8>()), 1..8),
            cut in proptest::prelude::any::<proptest::sample::Index>(),
        ) {
            fuzz_mutated(seal_counts("key", &[1, 2, 3, 4, 5]), &edits, cut);
        }

        /// Mutated and cut kept video indexes never panic the parser.
        #[test]
        fn mutated_video_indexes_never_panic(
            edits in proptest::collection::vec((proptest::prelude::any::<proptest::sample::Index>(), proptest::prelude::any::<u8>()), 1..8),
            cut in proptest::prelude::any::<proptest::sample::Index>(),
        ) {
            fuzz_mutated(seal_video_index("key", &video_index()), &edits, cut);
        }

        /// Mutated and cut parts never panic the parser (`fuzz_containers` asserts what an
        /// accepted part promises).
        #[test]
        fn mutated_parts_never_panic(
            edits in proptest::collection::vec((proptest::prelude::any::<proptest::sample::Index>(), proptest::prelude::any::<u8>()), 1..8),
            cut in proptest::prelude::any::<proptest::sample::Index>(),
        ) {
            let e = |id, offset| PartEntry { id, offset, width: 2, height: 2, channels: 1, crc: 5 };
            fuzz_mutated(part(&[e(1, 0), e(2, 4), e(3, 8)], 12, 1), &edits, cut);
        }
    }
}
