//! Parquet page headers read by a parser of our own, before the `parquet` crate decodes a page:
//! every size a page header declares is checked here first, so that no allocation is sized by
//! an unchecked length (the crate allocates a page's declared uncompressed size before it
//! decompresses it). Used by `pack` and by files read in place, at index time and when a row's
//! pages are decoded.

use parquet::basic::Compression;

/// The largest page header read (a header is tens of bytes; statistics may make it larger).
pub(crate) const MAX_PAGE_HEADER: usize = 1 << 20;

/// The largest page accepted, uncompressed, when no smaller limit is given (the largest record
/// a source may hold).
pub(crate) const MAX_PAGE_BYTES: u64 = 1 << 30;

/// What a page header says.
pub(crate) struct PageHead {
    pub compressed_size: i64,
    /// The page's size once decompressed, as declared.
    pub uncompressed_size: i64,
    /// The header's own length in bytes.
    pub len: usize,
    /// The CRC-32 of the page's body, when its writer stored one.
    pub crc: Option<u32>,
    pub kind: PageKind,
}

pub(crate) enum PageKind {
    Dictionary,
    Data { rows: u64, dictionary_coded: bool },
    Other,
}

/// Just enough of Thrift's compact protocol to read a Parquet page header (and skip what it
/// does not need); every length is checked against the bytes at hand.
pub(crate) struct Thrift<'a> {
    b: &'a [u8],
    pos: usize,
    depth: u32,
}

impl<'a> Thrift<'a> {
    /// A reader of the header at the start of `b`.
    pub(crate) fn new(b: &'a [u8]) -> Thrift<'a> {
        Thrift {
            b,
            pos: 0,
            depth: 0,
        }
    }

    fn byte(&mut self) -> Result<u8, String> {
        let v = *self.b.get(self.pos).ok_or("a page header is cut short")?;
        self.pos += 1;
        Ok(v)
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("a page header has an over-long integer".into())
    }

    fn zigzag(&mut self) -> Result<i64, String> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    fn skip_bytes(&mut self, n: u64) -> Result<(), String> {
        let end = (self.pos as u64)
            .checked_add(n)
            .filter(|&e| e <= self.b.len() as u64)
            .ok_or("a page header is cut short")?;
        self.pos = end as usize;
        Ok(())
    }

    /// Skip a value of compact type `t`.
    fn skip(&mut self, t: u8) -> Result<(), String> {
        match t {
            1 | 2 => Ok(()),
            3 => self.skip_bytes(1),
            4..=6 => self.varint().map(|_| ()),
            7 => self.skip_bytes(8),
            8 => {
                let n = self.varint()?;
                self.skip_bytes(n)
            }
            9 | 10 => {
                let h = self.byte()?;
                let n = match h >> 4 {
                    15 => self.varint()?,
                    n => u64::from(n),
                };
                let et = h & 0x0f;
                for _ in 0..n {
                    if et == 1 || et == 2 {
                        self.skip_bytes(1)?;
                    } else {
                        self.skip(et)?;
                    }
                }
                Ok(())
            }
            11 => {
                let n = self.varint()?;
                if n > 0 {
                    let kv = self.byte()?;
                    for _ in 0..n {
                        self.skip(kv >> 4)?;
                        self.skip(kv & 0x0f)?;
                    }
                }
                Ok(())
            }
            12 => self.strukt(|t, _, ty| t.skip(ty)),
            _ => Err(format!("a page header holds an unknown Thrift type {t}")),
        }
    }

    /// Read a struct, calling `field(self, id, type)` for each field (which reads or skips it).
    fn strukt(
        &mut self,
        mut field: impl FnMut(&mut Self, i16, u8) -> Result<(), String>,
    ) -> Result<(), String> {
        self.depth += 1;
        if self.depth > 32 {
            return Err("a page header nests too deep".into());
        }
        let mut last = 0i16;
        loop {
            let h = self.byte()?;
            if h == 0 {
                break;
            }
            let ty = h & 0x0f;
            let id = match h >> 4 {
                0 => i16::try_from(self.zigzag()?).map_err(|_| "a bad field id")?,
                d => last.checked_add(i16::from(d)).ok_or("a bad field id")?,
            };
            last = id;
            field(self, id, ty)?;
        }
        self.depth -= 1;
        Ok(())
    }

    fn i32(&mut self, ty: u8) -> Result<i64, String> {
        if ty != 5 {
            return Err(format!("a page header field of Thrift type {ty}, not i32"));
        }
        self.zigzag()
    }

    pub(crate) fn page_header(&mut self) -> Result<PageHead, String> {
        let (mut kind, mut size, mut uncompressed, mut crc) = (None, None, None, None);
        let (mut rows, mut encoding) = (None, None);
        self.strukt(|t, id, ty| {
            match id {
                1 => kind = Some(t.i32(ty)?),
                2 => uncompressed = Some(t.i32(ty)?),
                3 => size = Some(t.i32(ty)?),
                4 => crc = Some(t.i32(ty)? as u32),
                // DataPageHeader: num_values (the rows of a column without repetition), encoding
                5 => t.strukt(|t, id, ty| match id {
                    1 => t.i32(ty).map(|v| rows = Some(v)),
                    2 => t.i32(ty).map(|v| encoding = Some(v)),
                    _ => t.skip(ty),
                })?,
                // DataPageHeaderV2: num_rows, encoding
                8 => t.strukt(|t, id, ty| match id {
                    3 => t.i32(ty).map(|v| rows = Some(v)),
                    4 => t.i32(ty).map(|v| encoding = Some(v)),
                    _ => t.skip(ty),
                })?,
                _ => t.skip(ty)?,
            }
            Ok(())
        })?;
        let compressed_size = size.ok_or("a page header without its size")?;
        let uncompressed_size =
            uncompressed.ok_or("a page header without its uncompressed size")?;
        let kind = match kind.ok_or("a page header without its type")? {
            0 | 3 => PageKind::Data {
                rows: rows
                    .and_then(|r| u64::try_from(r).ok())
                    .ok_or("a data page header without its rows")?,
                // PLAIN_DICTIONARY (2), RLE_DICTIONARY (8)
                dictionary_coded: matches!(encoding, Some(2 | 8)),
            },
            2 => PageKind::Dictionary,
            _ => PageKind::Other,
        };
        Ok(PageHead {
            compressed_size,
            uncompressed_size,
            len: self.pos,
            crc,
            kind,
        })
    }
}

/// The most a codec's output can be per byte of its input (`None`: no useful bound, only the
/// absolute limit holds): snappy copies at most 64 bytes per 3-byte element, LZ4 255 per
/// byte of a length run, DEFLATE 258 per two bits of a stored distance code (1032 per byte).
fn expansion(c: Compression) -> Option<u64> {
    match c {
        Compression::UNCOMPRESSED => Some(1),
        Compression::SNAPPY => Some(22),
        Compression::LZ4 | Compression::LZ4_RAW => Some(256),
        Compression::GZIP(_) => Some(1032),
        Compression::ZSTD(_) | Compression::BROTLI(_) | Compression::LZO => None,
    }
}

/// Check what a page header declares before anything is sized by it: its compressed size fits
/// the `room` bytes left in its column chunk, and its uncompressed size is at most `max` and at
/// most what `codec` can make of the compressed bytes.
pub(crate) fn check_page(
    head: &PageHead,
    codec: Compression,
    room: u64,
    max: u64,
) -> Result<(), String> {
    let compressed = u64::try_from(head.compressed_size)
        .ok()
        .filter(|&c| c <= room)
        .ok_or_else(|| {
            format!(
                "a page of {} bytes does not fit its column chunk ({room} bytes left)",
                head.compressed_size
            )
        })?;
    let uncompressed = u64::try_from(head.uncompressed_size).map_err(|_| {
        format!(
            "a page declares {} bytes uncompressed",
            head.uncompressed_size
        )
    })?;
    if uncompressed > max {
        return Err(format!(
            "a page declares {uncompressed} bytes uncompressed, more than the {max} accepted \
             (max_record_bytes)"
        ));
    }
    // a page of version 2 keeps its levels uncompressed: a few bytes more than the codec makes
    let slack = 64 << 10;
    if let Some(k) = expansion(codec)
        && uncompressed > compressed.saturating_mul(k).saturating_add(slack)
    {
        return Err(format!(
            "a page declares {uncompressed} bytes uncompressed from {compressed} compressed, \
             more than {codec} can make of them"
        ));
    }
    Ok(())
}

/// Walk the page headers of the column chunk at `start..end` of a file, checking each
/// ([`check_page`]) without reading the pages' bodies: `read(offset, len)` reads at most `len`
/// bytes at `offset` (fewer at the chunk's end). Reads are windows of up to 64 KiB, so a chunk
/// of small pages takes one or a few. Errors give the byte offset of the page.
pub(crate) fn check_chunk(
    mut read: impl FnMut(u64, usize) -> Result<Vec<u8>, String>,
    (start, end): (u64, u64),
    codec: Compression,
    max: u64,
) -> Result<(), (u64, String)> {
    const WINDOW: usize = 64 << 10;
    let (mut buf, mut buf_at) = (Vec::new(), start);
    let mut pos = start;
    while pos < end {
        let head = loop {
            let avail: &[u8] = match pos.checked_sub(buf_at) {
                Some(lo) if lo <= buf.len() as u64 => &buf[lo as usize..],
                _ => &[],
            };
            let complete = pos + avail.len() as u64 >= end || avail.len() >= MAX_PAGE_HEADER;
            match Thrift::new(avail).page_header() {
                Ok(h) => break h,
                Err(e) if complete => return Err((pos, e)),
                Err(_) => {
                    let len = ((end - pos).min(MAX_PAGE_HEADER as u64) as usize)
                        .min((avail.len() * 2).max(WINDOW));
                    let bytes = read(pos, len).map_err(|e| (pos, e))?;
                    if bytes.len() <= avail.len() {
                        return Err((pos, "a page header is cut short".into()));
                    }
                    (buf, buf_at) = (bytes, pos);
                }
            }
        };
        let body = pos + head.len as u64;
        check_page(&head, codec, end.saturating_sub(body), max).map_err(|e| (pos, e))?;
        pos = body + head.compressed_size as u64;
    }
    Ok(())
}
