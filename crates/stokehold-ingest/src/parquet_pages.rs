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

    fn byte(&mut self) -> Result<u8, crate::Unusable> {
        let v = *self.b.get(self.pos).ok_or("a page header is cut short")?;
        self.pos += 1;
        Ok(v)
    }

    fn varint(&mut self) -> Result<u64, crate::Unusable> {
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

    fn zigzag(&mut self) -> Result<i64, crate::Unusable> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    fn skip_bytes(&mut self, n: u64) -> Result<(), crate::Unusable> {
        let end = (self.pos as u64)
            .checked_add(n)
            .filter(|&e| e <= self.b.len() as u64)
            .ok_or("a page header is cut short")?;
        self.pos = end as usize;
        Ok(())
    }

    /// Skip a value of compact type `t` (lists, sets and maps nest as deep as structs may).
    fn skip(&mut self, t: u8) -> Result<(), crate::Unusable> {
        if matches!(t, 9..=11) {
            self.depth += 1;
            if self.depth > 32 {
                return Err("a page header nests too deep".into());
            }
            let r = self.skip_value(t);
            self.depth -= 1;
            return r;
        }
        self.skip_value(t)
    }

    fn skip_value(&mut self, t: u8) -> Result<(), crate::Unusable> {
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
            _ => Err(crate::Unusable::from(format!(
                "a page header holds an unknown Thrift type {t}"
            ))),
        }
    }

    /// Read a struct, calling `field(self, id, type)` for each field (which reads or skips it).
    fn strukt(
        &mut self,
        mut field: impl FnMut(&mut Self, i16, u8) -> Result<(), crate::Unusable>,
    ) -> Result<(), crate::Unusable> {
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

    fn i32(&mut self, ty: u8) -> Result<i64, crate::Unusable> {
        if ty != 5 {
            return Err(crate::Unusable::from(format!(
                "a page header field of Thrift type {ty}, not i32"
            )));
        }
        self.zigzag()
    }

    pub(crate) fn page_header(&mut self) -> Result<PageHead, crate::Unusable> {
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
) -> Result<(), crate::Unusable> {
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
        return Err(crate::Unusable::from(format!(
            "a page declares {uncompressed} bytes uncompressed, more than the {max} accepted \
             (max_record_bytes)"
        )));
    }
    // a page of version 2 keeps its levels uncompressed: a few bytes more than the codec makes
    let slack = 64 << 10;
    if let Some(k) = expansion(codec)
        && uncompressed > compressed.saturating_mul(k).saturating_add(slack)
    {
        return Err(crate::Unusable::from(format!(
            "a page declares {uncompressed} bytes uncompressed from {compressed} compressed, \
             more than {codec} can make of them"
        )));
    }
    Ok(())
}

/// What is wrong with a column chunk's page headers ([`check_chunk`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ChunkError {
    /// A page header that does not parse, or that declares what its chunk cannot hold.
    #[error(transparent)]
    Page(crate::Unusable),
    /// The read callback failed.
    #[error(transparent)]
    Read(std::io::Error),
    /// The chunk ends inside a page header.
    #[error("a page header is cut short")]
    CutShort,
}

/// What is wrong with the page headers of a row group's column chunks ([`check_row_group`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RowGroupError {
    /// A column chunk that lies past the file's end.
    #[error("row group {group}: a column chunk's {len} bytes lie past the file's end")]
    PastEnd { group: usize, len: u64 },
    /// A page header of one column's chunk.
    #[error("row group {group}, column {column:?}: {source}")]
    Column {
        group: usize,
        column: String,
        source: ChunkError,
    },
}

/// Check the page headers of the column chunks of `roots` in row group `g` of a file of `size`
/// bytes (every leaf of those roots but `except`) with [`check_chunk`], `read(offset, len)`
/// reading the file. Errors give the page's byte offset and name the row group and column.
pub(crate) fn check_row_group(
    md: &parquet::file::metadata::ParquetMetaData,
    (g, roots, except): (usize, &[usize], Option<usize>),
    size: u64,
    mut read: impl FnMut(u64, usize) -> std::io::Result<Vec<u8>>,
    max: u64,
) -> Result<(), (u64, RowGroupError)> {
    let descr = md.file_metadata().schema_descr();
    let rg = md.row_group(g);
    for leaf in (0..descr.num_columns())
        .filter(|&l| roots.contains(&descr.get_column_root_idx(l)) && Some(l) != except)
    {
        let chunk = rg.column(leaf);
        let (start, len) = chunk.byte_range();
        let end = start
            .checked_add(len)
            .filter(|&e| e <= size)
            .ok_or((start, RowGroupError::PastEnd { group: g, len }))?;
        let read = |at: u64, n: usize| read(at, n.min((end - at) as usize));
        check_chunk(read, (start, end), chunk.compression(), max).map_err(|(at, source)| {
            let column = descr.column(leaf).path().string();
            let e = RowGroupError::Column {
                group: g,
                column,
                source,
            };
            (at, e)
        })?;
    }
    Ok(())
}

/// Walk the page headers of the column chunk at `start..end` of a file, checking each
/// ([`check_page`]) without reading the pages' bodies: `read(offset, len)` reads at most `len`
/// bytes at `offset` (fewer at the chunk's end). Reads are windows of up to 64 KiB, so a chunk
/// of small pages takes one or a few. Errors give the byte offset of the page.
pub(crate) fn check_chunk(
    mut read: impl FnMut(u64, usize) -> std::io::Result<Vec<u8>>,
    (start, end): (u64, u64),
    codec: Compression,
    max: u64,
) -> Result<(), (u64, ChunkError)> {
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
                Err(e) if complete => return Err((pos, ChunkError::Page(e))),
                Err(_) => {
                    let len = ((end - pos).min(MAX_PAGE_HEADER as u64) as usize)
                        .min((avail.len() * 2).max(WINDOW));
                    let bytes = read(pos, len).map_err(|e| (pos, ChunkError::Read(e)))?;
                    if bytes.len() <= avail.len() {
                        return Err((pos, ChunkError::CutShort));
                    }
                    (buf, buf_at) = (bytes, pos);
                }
            }
        };
        let body = pos + head.len as u64;
        check_page(&head, codec, end.saturating_sub(body), max)
            .map_err(|e| (pos, ChunkError::Page(e)))?;
        pos = body + head.compressed_size as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page header: type 0 (a data page), the sizes, then a data page header of `rows`
    /// values, PLAIN; `extra` is spliced in before the stop byte (a field of id 9 and its value).
    fn header(uncompressed: i32, compressed: i32, extra: &[u8]) -> Vec<u8> {
        let zz = |v: i32| {
            let mut z = ((v << 1) ^ (v >> 31)) as u32;
            let mut out = Vec::new();
            loop {
                let b = (z & 0x7f) as u8;
                z >>= 7;
                if z == 0 {
                    out.push(b);
                    return out;
                }
                out.push(b | 0x80);
            }
        };
        let mut h = vec![0x15];
        h.extend(zz(0));
        h.push(0x15);
        h.extend(zz(uncompressed));
        h.push(0x15);
        h.extend(zz(compressed));
        // field 5 (delta 2): the data page header struct, num_values 3, encoding 0
        h.push(0x2c);
        h.push(0x15);
        h.extend(zz(3));
        h.push(0x15);
        h.extend(zz(0));
        h.push(0x00);
        h.extend_from_slice(extra);
        h.push(0x00);
        h
    }

    #[test]
    fn a_page_header_is_read_with_its_sizes() {
        let h = header(1000, 400, &[]);
        let head = Thrift::new(&h).page_header().unwrap();
        assert_eq!(
            (
                head.uncompressed_size,
                head.compressed_size,
                head.len,
                head.crc
            ),
            (1000, 400, h.len(), None)
        );
        assert!(matches!(head.kind, PageKind::Data { rows: 3, .. }));
    }

    #[test]
    fn declared_sizes_are_held_to_the_chunk_the_limit_and_the_codec() {
        let head = |u, c| Thrift::new(&header(u, c, &[])).page_header().unwrap();
        let gzip = Compression::GZIP(Default::default());
        assert!(check_page(&head(1000, 400,), Compression::SNAPPY, 400, 1 << 30).is_ok());
        // more than the chunk holds
        let e = check_page(&head(1000, 400), Compression::SNAPPY, 399, 1 << 30).unwrap_err();
        assert!(e.contains("does not fit"), "{e}");
        // more than the limit
        let e = check_page(
            &head(i32::MAX, 400),
            Compression::ZSTD(Default::default()),
            400,
            1 << 30,
        )
        .unwrap_err();
        assert!(e.contains("declares 2147483647 bytes uncompressed"), "{e}");
        // more than the codec makes of the bytes (slack of 64 KiB aside)
        let big = 22 * 4000 + (64 << 10) + 1;
        let e = check_page(&head(big, 4000), Compression::SNAPPY, 4000, 1 << 30).unwrap_err();
        assert!(e.contains("SNAPPY"), "{e}");
        assert!(check_page(&head(big - 1, 4000), Compression::SNAPPY, 4000, 1 << 30).is_ok());
        assert!(check_page(&head(big, 4000), gzip, 4000, 1 << 30).is_ok());
        let e = check_page(&head(-1, 4000), gzip, 4000, 1 << 30).unwrap_err();
        assert!(e.contains("-1"), "{e}");
    }

    #[test]
    fn nesting_is_bounded_and_never_overflows_the_stack() {
        // field 9 (delta 4 from field 5): a list of lists of lists ... 100,000 deep
        let mut extra = vec![0x49];
        extra.extend(std::iter::repeat_n(0x19, 100_000));
        let h = header(10, 10, &extra);
        let e = Thrift::new(&h).page_header().err().unwrap();
        assert!(e.contains("nests too deep"), "{e}");
    }

    #[test]
    fn a_chunk_is_walked_header_by_header_in_windows() {
        // three pages of 100 bytes, each behind its header; one declares too much
        let mut file = vec![0u8; 7];
        let start = file.len() as u64;
        for u in [100, 100, 100] {
            file.extend(header(u, 100, &[]));
            file.extend([0xaa; 100]);
        }
        let end = file.len() as u64;
        let mut reads = 0;
        let read = |at: u64, n: usize| {
            reads += 1;
            Ok(file[at as usize..(at as usize + n).min(file.len())].to_vec())
        };
        check_chunk(read, (start, end), Compression::UNCOMPRESSED, 1 << 30).unwrap();
        assert_eq!(reads, 1, "one window holds the chunk");
        let mut bad = file[..start as usize].to_vec();
        bad.extend(header(100, 100, &[]));
        bad.extend([0xaa; 100]);
        let at = bad.len() as u64;
        bad.extend(header(100_000, 100, &[]));
        bad.extend([0xaa; 100]);
        let read = |a: u64, n: usize| Ok(bad[a as usize..(a as usize + n).min(bad.len())].to_vec());
        let (offset, e) = check_chunk(
            read,
            (start, bad.len() as u64),
            Compression::UNCOMPRESSED,
            1 << 30,
        )
        .unwrap_err();
        assert_eq!(offset, at);
        assert!(e.to_string().contains("UNCOMPRESSED"), "{e}");
        // cut inside a header
        let cut = &bad[..at as usize + 3];
        let read = |a: u64, n: usize| Ok(cut[a as usize..(a as usize + n).min(cut.len())].to_vec());
        let (offset, _) = check_chunk(
            read,
            (start, cut.len() as u64),
            Compression::UNCOMPRESSED,
            1 << 30,
        )
        .unwrap_err();
        assert_eq!(offset, at);
    }
}
