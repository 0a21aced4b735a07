//! A streaming reader of tar archives (WebDataset shards) over any [`std::io::Read`].
//!
//! The reader understands the formats WebDataset shards are written in: POSIX ustar (with the
//! `prefix` field), old GNU (`ustar  \0` magic, `L` long-name and `K` long-link entries, base-256
//! numeric fields) and POSIX pax (`x` extended headers whose `path` and `size` keys override the
//! next entry's header; `g` global headers are parsed and ignored). It never touches the file
//! system: a [`TarEntry::name`] is an opaque key, never a path to open, create or follow, so
//! names such as `../x` or `/abs` are returned exactly as stored.
//!
//! Every input is treated as hostile:
//!
//! * no buffer is sized by a field read from the archive: payloads are read through
//!   [`Read::take`] into a growing `Vec`, so memory grows only with bytes actually present;
//! * extended-header payloads are capped at [`TarLimits::max_header_ext`] and member data at
//!   [`TarLimits::max_member_size`], both checked before anything is read;
//! * every header's checksum is verified and every error carries the byte offset it refers to.
//!
//! The reader is sequential: [`TarReader::next_entry`] returns the next member's header, and
//! [`TarReader::read_data`] reads that member's data. If the data is not read, the next call to
//! `next_entry` skips it (and its padding) without buffering it.
//!
//! After any error the reader is finished: later calls to `next_entry` return `Ok(None)`.

use std::io::{self, Read};

/// Size of a tar block: headers occupy one block and data is padded to a multiple of it.
pub const BLOCK_SIZE: u64 = 512;
const BLOCK: usize = BLOCK_SIZE as usize;

/// Caps on the sizes a [`TarReader`] accepts, checked before anything is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TarLimits {
    /// Largest member data size accepted, in bytes (default 1 GiB). A member whose header (or
    /// pax `size` record) claims more is refused with [`TarError::TooLarge`].
    pub max_member_size: u64,
    /// Largest payload of a pax extended header or GNU long-name/long-link entry, in bytes
    /// (default 1 MiB). A larger one is refused with [`TarError::ExtTooLarge`].
    pub max_header_ext: u64,
}

impl Default for TarLimits {
    fn default() -> Self {
        Self {
            max_member_size: 1 << 30,
            max_header_ext: 1 << 20,
        }
    }
}

/// The kind of a tar member, from its header's type flag.
///
/// Callers skip directories and refuse links and devices; the reader itself never follows or
/// creates anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// A regular file (type flag `'0'`, NUL, or `'7'` contiguous file).
    Regular,
    /// A directory (type flag `'5'`, or an old-style NUL type flag with a name ending in `/`).
    Directory,
    /// A symbolic link (type flag `'2'`).
    Symlink,
    /// A hard link (type flag `'1'`).
    HardLink,
    /// Anything else (devices, FIFOs, GNU sparse files, vendor extensions), with its type flag.
    Other(u8),
}

impl EntryKind {
    fn from_flag(flag: u8, name: &str) -> Self {
        match flag {
            0 if name.ends_with('/') => Self::Directory,
            b'0' | 0 | b'7' => Self::Regular,
            b'1' => Self::HardLink,
            b'2' => Self::Symlink,
            b'5' => Self::Directory,
            other => Self::Other(other),
        }
    }
}

/// One member of a tar archive, as described by its header (and any extended headers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TarEntry {
    /// The member's name: from a pax `path` record, else a GNU long name, else the ustar
    /// `prefix` and `name` fields joined by `/`, else the `name` field. Nothing is stripped or
    /// normalised: this is an opaque key, never used as a file-system path.
    pub name: String,
    /// Byte offset of the member's own header block (after any extended headers).
    pub header_offset: u64,
    /// Byte offset of the member's first data byte (`header_offset + 512`).
    pub data_offset: u64,
    /// Size of the member's data in bytes (a pax `size` record overrides the header field).
    pub size: u64,
    /// The member's kind.
    pub kind: EntryKind,
}

/// Errors from [`TarReader`]. Every variant carries the byte offset it refers to.
#[derive(Debug, thiserror::Error)]
pub enum TarError {
    /// The header block's checksum does not match its contents (neither the unsigned nor the
    /// signed byte sum).
    #[error(
        "tar header at byte {offset}: checksum mismatch (stored {stored:#o}, computed {computed:#o})"
    )]
    Checksum {
        /// Offset of the header block.
        offset: u64,
        /// The checksum stored in the header.
        stored: u64,
        /// The unsigned byte sum computed over the header.
        computed: u64,
    },
    /// A numeric header field is neither octal nor valid GNU base-256 (or is negative, or does
    /// not fit in 64 bits).
    #[error("tar header at byte {offset}: invalid numeric field `{field}`")]
    BadNumber {
        /// Offset of the header block.
        offset: u64,
        /// Name of the field (`size` or `checksum`).
        field: &'static str,
    },
    /// A member name (header field, GNU long name or pax `path`) is not valid UTF-8.
    #[error("tar header at byte {offset}: name is not valid UTF-8")]
    BadName {
        /// Offset of the header block that holds the name.
        offset: u64,
    },
    /// A pax extended header is malformed: a record whose length field disagrees with its
    /// content, a record without `=`, or a `size` value that is not a decimal number.
    #[error("tar header at byte {offset}: malformed pax extended header: {reason}")]
    BadPax {
        /// Offset of the pax header block.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A member's size exceeds [`TarLimits::max_member_size`].
    #[error("tar header at byte {offset}: member size {size} exceeds the limit of {max} bytes")]
    TooLarge {
        /// Offset of the member's header block.
        offset: u64,
        /// The size the archive claims.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// A pax or GNU long-name/long-link payload exceeds [`TarLimits::max_header_ext`].
    #[error(
        "tar header at byte {offset}: extended header of {size} bytes exceeds the limit of {max} bytes"
    )]
    ExtTooLarge {
        /// Offset of the extended header block.
        offset: u64,
        /// The size the archive claims.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// The input ended inside a header block, inside a member's data or padding, inside an
    /// extended header's payload, or between an extended header and the member it describes.
    #[error("tar archive truncated: input ends inside the entry whose header is at byte {offset}")]
    Truncated {
        /// Offset of the header block being read, or of the header whose payload or member was
        /// cut short.
        offset: u64,
    },
    /// [`TarReader::read_data`] was called with no current entry, or twice for one entry.
    #[error("tar reader at byte {offset}: no current entry data to read")]
    NoCurrentEntry {
        /// The reader's position.
        offset: u64,
    },
    /// The underlying reader failed.
    #[error("tar archive at byte {offset}: I/O error: {source}")]
    Io {
        /// The reader's position when the error happened.
        offset: u64,
        /// The underlying error.
        source: io::Error,
    },
}

impl TarError {
    /// The byte offset this error refers to.
    pub fn offset(&self) -> u64 {
        match self {
            Self::Checksum { offset, .. }
            | Self::BadNumber { offset, .. }
            | Self::BadName { offset }
            | Self::BadPax { offset, .. }
            | Self::TooLarge { offset, .. }
            | Self::ExtTooLarge { offset, .. }
            | Self::Truncated { offset }
            | Self::NoCurrentEntry { offset }
            | Self::Io { offset, .. } => *offset,
        }
    }
}

/// The not-yet-consumed bytes of the current member.
#[derive(Debug, Clone, Copy)]
struct Pending {
    header_offset: u64,
    /// Data bytes not yet read (all of them, or zero once `read_data` ran).
    data: u64,
    /// Padding bytes after the data, up to the next block boundary.
    pad: u64,
    /// Whether `read_data` may still be called.
    readable: bool,
}

/// Overrides collected from extended headers for the next member.
#[derive(Debug, Default)]
struct Overrides {
    /// Offset of the latest extended header, for "member missing" truncation errors.
    last_ext_offset: Option<u64>,
    gnu_long_name: Option<String>,
    pax_path: Option<String>,
    pax_size: Option<u64>,
}

/// What a tar that ends without its end-of-archive blocks is ([`TarReader::cut_at`]).
pub const CUT: &str = "the file ends here, at a member boundary, without tar's end-of-archive \
     blocks: it was cut (the members after this byte are lost); copy it again";

/// A streaming tar reader over any [`Read`]; see the [module documentation](self).
#[derive(Debug)]
pub struct TarReader<R> {
    inner: R,
    limits: TarLimits,
    /// Bytes consumed from `inner` so far.
    pos: u64,
    pending: Option<Pending>,
    done: bool,
    /// The buffer [`read_data_with`](Self::read_data_with) streams through (made once).
    scratch: Vec<u8>,
    /// Where input ended at a member boundary without the end-of-archive zero blocks.
    cut: Option<u64>,
}

impl<'a> TarReader<&'a [u8]> {
    /// The current member's data, borrowed from the archive in memory (a mapped file): what
    /// [`read_data`](Self::read_data) returns, without copying it. The same errors.
    pub fn read_data_slice(&mut self) -> Result<&'a [u8], TarError> {
        let pending = match self.pending {
            Some(p) if p.readable && !self.done => p,
            _ => return Err(TarError::NoCurrentEntry { offset: self.pos }),
        };
        let n = usize::try_from(pending.data).unwrap_or(usize::MAX);
        if n > self.inner.len() {
            self.done = true;
            return Err(TarError::Truncated {
                offset: pending.header_offset,
            });
        }
        let (data, rest) = self.inner.split_at(n);
        self.inner = rest;
        self.pos += n as u64;
        self.pending = Some(Pending {
            data: 0,
            readable: false,
            ..pending
        });
        Ok(data)
    }
}

impl<R: Read> TarReader<R> {
    /// Wraps `r`, which must be positioned at the start of the archive.
    pub fn new(r: R, limits: TarLimits) -> Self {
        Self {
            inner: r,
            limits,
            pos: 0,
            pending: None,
            done: false,
            scratch: Vec::new(),
            cut: None,
        }
    }

    /// Where the archive ended without tar's end-of-archive blocks, at a member boundary after
    /// one member at least (`None`: it ended with them, or has not ended yet): a file cut
    /// there, whose later members are lost. Every tar writer ends an archive with those blocks.
    pub fn cut_at(&self) -> Option<u64> {
        self.cut
    }

    /// The number of bytes consumed from the underlying reader so far.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Returns the next member's header, skipping the current member's unread data.
    ///
    /// Returns `Ok(None)` at the end of the archive: a zero block followed by a second zero
    /// block, end of input, or a full block of anything else (which is not read further);
    /// end of input right after the first zero block; or end of input at a block boundary
    /// between members. Extended headers (`x`, `g`, `L`, `K`) are consumed here and never
    /// returned as entries.
    pub fn next_entry(&mut self) -> Result<Option<TarEntry>, TarError> {
        if self.done {
            return Ok(None);
        }
        let result = self.next_entry_inner();
        if !matches!(result, Ok(Some(_))) {
            self.done = true;
            self.pending = None;
        }
        result
    }

    /// Reads all of the current member's data (the member last returned by
    /// [`next_entry`](Self::next_entry)).
    ///
    /// Memory grows only with bytes actually present in the input, never with the size the
    /// header claims. Fails with [`TarError::Truncated`] if the input ends early, and with
    /// [`TarError::NoCurrentEntry`] if there is no current member or its data was already read.
    pub fn read_data(&mut self) -> Result<Vec<u8>, TarError> {
        let pending = match self.pending {
            Some(p) if p.readable && !self.done => p,
            _ => return Err(TarError::NoCurrentEntry { offset: self.pos }),
        };
        let mut data = Vec::new();
        let result = (&mut self.inner).take(pending.data).read_to_end(&mut data);
        // On error `data` still holds the bytes read before it.
        self.pos += data.len() as u64;
        let got = match result {
            Ok(n) => n as u64,
            Err(source) => {
                self.done = true;
                return Err(TarError::Io {
                    offset: self.pos,
                    source,
                });
            }
        };
        if got < pending.data {
            self.done = true;
            return Err(TarError::Truncated {
                offset: pending.header_offset,
            });
        }
        self.pending = Some(Pending {
            data: 0,
            readable: false,
            ..pending
        });
        Ok(data)
    }

    /// Pass all of the current member's data to `f`, a piece at a time, without holding it
    /// (what [`read_data`](Self::read_data) returns, for a reader that only looks at it: a
    /// checksum). The same errors as `read_data`.
    pub fn read_data_with(&mut self, mut f: impl FnMut(&[u8])) -> Result<(), TarError> {
        let pending = match self.pending {
            Some(p) if p.readable && !self.done => p,
            _ => return Err(TarError::NoCurrentEntry { offset: self.pos }),
        };
        let mut left = pending.data;
        if left > 0 && self.scratch.is_empty() {
            self.scratch = vec![0u8; 64 << 10];
        }
        let scratch = &mut self.scratch;
        while left > 0 {
            let want = scratch
                .len()
                .min(usize::try_from(left).unwrap_or(usize::MAX));
            match self.inner.read(&mut scratch[..want]) {
                Ok(0) => {
                    self.done = true;
                    return Err(TarError::Truncated {
                        offset: pending.header_offset,
                    });
                }
                Ok(got) => {
                    f(&scratch[..got]);
                    left -= got as u64;
                    self.pos += got as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    self.done = true;
                    return Err(TarError::Io {
                        offset: self.pos,
                        source,
                    });
                }
            }
        }
        self.pending = Some(Pending {
            data: 0,
            readable: false,
            ..pending
        });
        Ok(())
    }

    fn next_entry_inner(&mut self) -> Result<Option<TarEntry>, TarError> {
        if let Some(p) = self.pending.take() {
            self.skip(p.data, p.header_offset)?;
            self.skip(p.pad, p.header_offset)?;
        }
        let mut ov = Overrides::default();
        loop {
            let offset = self.pos;
            let mut block = [0u8; BLOCK];
            let n = self.read_full(&mut block)?;
            if n == 0 {
                // End of input at a block boundary: the end of the archive, unless an extended
                // header announced a member that never came.
                return match ov.last_ext_offset {
                    Some(ext) => Err(TarError::Truncated { offset: ext }),
                    None => {
                        self.cut = (offset > 0).then_some(offset);
                        Ok(None)
                    }
                };
            }
            if n < BLOCK {
                return Err(TarError::Truncated { offset });
            }
            if block.iter().all(|&b| b == 0) {
                if let Some(ext) = ov.last_ext_offset {
                    return Err(TarError::Truncated { offset: ext });
                }
                // End-of-archive marker. The second zero block is optional (accept end of input
                // right after the first one), but a partial block there is a truncation.
                let second = self.pos;
                let mut block2 = [0u8; BLOCK];
                let n2 = self.read_full(&mut block2)?;
                if n2 != 0 && n2 < BLOCK {
                    return Err(TarError::Truncated { offset: second });
                }
                return Ok(None);
            }
            verify_checksum(&block, offset)?;
            let flag = block[156];
            let header_size = parse_number(&block[124..136]).ok_or(TarError::BadNumber {
                offset,
                field: "size",
            })?;
            match flag {
                b'x' | b'g' | b'L' | b'K' => {
                    if header_size > self.limits.max_header_ext {
                        return Err(TarError::ExtTooLarge {
                            offset,
                            size: header_size,
                            max: self.limits.max_header_ext,
                        });
                    }
                    let payload = self.read_payload(header_size, offset)?;
                    ov.last_ext_offset = Some(offset);
                    match flag {
                        b'x' => {
                            let pax = parse_pax(&payload, offset)?;
                            if let Some(path) = pax.path {
                                ov.pax_path = Some(path);
                            }
                            if let Some(size) = pax.size {
                                ov.pax_size = Some(size);
                            }
                        }
                        b'L' => {
                            let name = until_nul(&payload);
                            let name = std::str::from_utf8(name)
                                .map_err(|_| TarError::BadName { offset })?;
                            ov.gnu_long_name = Some(name.to_owned());
                        }
                        // 'g': global pax records are validated but ignored; 'K': the long link
                        // target is not exposed (links are refused by callers anyway).
                        b'g' => {
                            parse_pax(&payload, offset)?;
                        }
                        _ => {}
                    }
                }
                _ => {
                    let name = match (ov.pax_path.take(), ov.gnu_long_name.take()) {
                        (Some(path), _) => path,
                        (None, Some(long)) => long,
                        (None, None) => header_name(&block, offset)?,
                    };
                    let size = ov.pax_size.unwrap_or(header_size);
                    if size > self.limits.max_member_size {
                        return Err(TarError::TooLarge {
                            offset,
                            size,
                            max: self.limits.max_member_size,
                        });
                    }
                    let kind = EntryKind::from_flag(flag, &name);
                    self.pending = Some(Pending {
                        header_offset: offset,
                        data: size,
                        pad: padding(size),
                        readable: true,
                    });
                    return Ok(Some(TarEntry {
                        name,
                        header_offset: offset,
                        data_offset: offset + BLOCK_SIZE,
                        size,
                        kind,
                    }));
                }
            }
        }
    }

    /// Reads an extended header's payload (already checked against the cap) and its padding.
    fn read_payload(&mut self, size: u64, offset: u64) -> Result<Vec<u8>, TarError> {
        let mut payload = Vec::new();
        let result = (&mut self.inner).take(size).read_to_end(&mut payload);
        // On error `payload` still holds the bytes read before it.
        self.pos += payload.len() as u64;
        let got = result.map_err(|source| TarError::Io {
            offset: self.pos,
            source,
        })? as u64;
        if got < size {
            return Err(TarError::Truncated { offset });
        }
        self.skip(padding(size), offset)?;
        Ok(payload)
    }

    /// Skips `n` bytes without buffering them; `offset` is the header they belong to.
    fn skip(&mut self, n: u64, offset: u64) -> Result<(), TarError> {
        let mut left = n;
        let mut scratch = [0u8; 8192];
        while left > 0 {
            let want = scratch
                .len()
                .min(usize::try_from(left).unwrap_or(usize::MAX));
            match self.inner.read(&mut scratch[..want]) {
                Ok(0) => return Err(TarError::Truncated { offset }),
                Ok(got) => {
                    left -= got as u64;
                    self.pos += got as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(TarError::Io {
                        offset: self.pos,
                        source,
                    });
                }
            }
        }
        Ok(())
    }

    /// Fills `buf` unless the input ends first; returns how many bytes were read.
    fn read_full(&mut self, buf: &mut [u8]) -> Result<usize, TarError> {
        let mut filled = 0;
        while filled < buf.len() {
            match self.inner.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => {
                    filled += n;
                    self.pos += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(TarError::Io {
                        offset: self.pos,
                        source,
                    });
                }
            }
        }
        Ok(filled)
    }
}

/// Bytes of padding after `size` bytes of data, up to the next block boundary.
fn padding(size: u64) -> u64 {
    (BLOCK_SIZE - size % BLOCK_SIZE) % BLOCK_SIZE
}

/// The bytes of a NUL-terminated field (all of it if there is no NUL).
fn until_nul(field: &[u8]) -> &[u8] {
    match field.iter().position(|&b| b == 0) {
        Some(end) => &field[..end],
        None => field,
    }
}

/// The name stored in the header block itself: ustar `prefix/name`, or just `name`.
fn header_name(block: &[u8; BLOCK], offset: u64) -> Result<String, TarError> {
    let name = until_nul(&block[0..100]);
    // Only POSIX ustar ("ustar\0") has a prefix field; old GNU ("ustar  \0") keeps access and
    // change times in those bytes.
    let prefix = if &block[257..263] == b"ustar\0" {
        until_nul(&block[345..500])
    } else {
        &[]
    };
    let mut full = Vec::with_capacity(prefix.len() + 1 + name.len());
    if !prefix.is_empty() {
        full.extend_from_slice(prefix);
        full.push(b'/');
    }
    full.extend_from_slice(name);
    String::from_utf8(full).map_err(|_| TarError::BadName { offset })
}

/// Verifies the header checksum: the sum of all bytes with the checksum field read as spaces,
/// either unsigned (POSIX) or signed (some historic writers), like Python's `tarfile`.
fn verify_checksum(block: &[u8; BLOCK], offset: u64) -> Result<(), TarError> {
    let stored = parse_octal(&block[148..156]).ok_or(TarError::BadNumber {
        offset,
        field: "checksum",
    })?;
    let mut unsigned: u64 = 0;
    let mut signed: i64 = 0;
    for (i, &b) in block.iter().enumerate() {
        let b = if (148..156).contains(&i) { b' ' } else { b };
        unsigned += u64::from(b);
        signed += i64::from(b as i8);
    }
    if stored == unsigned || i64::try_from(stored).is_ok_and(|s| s == signed) {
        Ok(())
    } else {
        Err(TarError::Checksum {
            offset,
            stored,
            computed: unsigned,
        })
    }
}

/// Parses a numeric header field: GNU base-256 if the high bit of the first byte is set,
/// otherwise octal. Negative and overflowing values are refused.
fn parse_number(field: &[u8]) -> Option<u64> {
    match field.first() {
        Some(&first) if first & 0x80 != 0 => {
            // Base-256: the remaining 7 bits of the first byte and all following bytes form a
            // big-endian two's-complement number; bit 6 of the first byte is its sign.
            if first & 0x40 != 0 {
                return None;
            }
            let mut value = u64::from(first & 0x7f);
            for &b in &field[1..] {
                if value >> 56 != 0 {
                    return None;
                }
                value = (value << 8) | u64::from(b);
            }
            Some(value)
        }
        _ => parse_octal(field),
    }
}

/// Parses an octal field the way `tarfile` does: up to the first NUL, surrounding whitespace
/// trimmed, empty meaning zero.
fn parse_octal(field: &[u8]) -> Option<u64> {
    let digits = until_nul(field).trim_ascii();
    let mut value: u64 = 0;
    for &d in digits {
        if !(b'0'..=b'7').contains(&d) {
            return None;
        }
        value = value.checked_mul(8)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(value)
}

/// The pax keys this reader acts on.
#[derive(Debug, Default, PartialEq, Eq)]
struct PaxRecords {
    path: Option<String>,
    size: Option<u64>,
}

/// Parses pax extended-header records (`"<len> <key>=<value>\n"`, where `<len>` counts the
/// whole record including itself and the newline). Trailing NUL bytes are tolerated.
fn parse_pax(payload: &[u8], offset: u64) -> Result<PaxRecords, TarError> {
    let bad = |reason: String| TarError::BadPax { offset, reason };
    let mut out = PaxRecords::default();
    let mut pos = 0usize;
    while pos < payload.len() {
        let rest = &payload[pos..];
        if rest.iter().all(|&b| b == 0) {
            break;
        }
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 || rest.get(digits) != Some(&b' ') {
            return Err(bad(format!(
                "record at payload byte {pos} does not start with `<length> `"
            )));
        }
        let len: usize = std::str::from_utf8(&rest[..digits])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad(format!("record length at payload byte {pos} overflows")))?;
        if len <= digits + 1 || len > rest.len() || rest[len - 1] != b'\n' {
            return Err(bad(format!(
                "record at payload byte {pos} has length field {len}, which disagrees with its \
                 content ({} bytes remain)",
                rest.len()
            )));
        }
        let body = &rest[digits + 1..len - 1];
        let eq = body
            .iter()
            .position(|&b| b == b'=')
            .ok_or_else(|| bad(format!("record at payload byte {pos} has no `=`")))?;
        let (key, value) = (&body[..eq], &body[eq + 1..]);
        match key {
            b"path" => {
                let path = std::str::from_utf8(value).map_err(|_| TarError::BadName { offset })?;
                out.path = Some(path.to_owned());
            }
            b"size" => {
                let size = std::str::from_utf8(value)
                    .ok()
                    .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or_else(|| {
                        bad(format!(
                            "size value {:?} is not a decimal number",
                            String::from_utf8_lossy(value)
                        ))
                    })?;
                out.size = Some(size);
            }
            _ => {}
        }
        pos += len;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_streamed_in_pieces_is_the_data_read_whole() {
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let mut b = ::tar::Builder::new(Vec::new());
        for (name, data) in [("a.bin", &big[..]), ("b.txt", &b"hello"[..])] {
            let mut h = ::tar::Header::new_ustar();
            h.set_size(data.len() as u64);
            h.set_cksum();
            b.append_data(&mut h, name, data).unwrap();
        }
        let archive = b.into_inner().unwrap();
        let mut whole = TarReader::new(&archive[..], TarLimits::default());
        let mut pieces = TarReader::new(&archive[..], TarLimits::default());
        let mut sliced = TarReader::new(&archive[..], TarLimits::default());
        while let Some(e) = whole.next_entry().unwrap() {
            assert_eq!(pieces.next_entry().unwrap().unwrap().name, e.name);
            let mut got = Vec::new();
            let mut calls = 0;
            pieces
                .read_data_with(|c| {
                    calls += 1;
                    got.extend_from_slice(c)
                })
                .unwrap();
            let expected = whole.read_data().unwrap();
            assert_eq!(got, expected);
            assert_eq!(sliced.next_entry().unwrap().unwrap().name, e.name);
            assert_eq!(sliced.read_data_slice().unwrap(), &expected[..]);
            assert!(calls >= (got.len() >> 16), "{calls} pieces");
            // read once only
            assert!(matches!(
                pieces.read_data_with(|_| {}),
                Err(TarError::NoCurrentEntry { .. })
            ));
        }
        assert!(pieces.next_entry().unwrap().is_none());
        // cut inside the big member: truncated, naming its header
        let mut cut = TarReader::new(&archive[..100_000], TarLimits::default());
        cut.next_entry().unwrap().unwrap();
        assert!(matches!(
            cut.read_data_with(|_| {}),
            Err(TarError::Truncated { offset: 0 })
        ));
        let mut cut = TarReader::new(&archive[..100_000], TarLimits::default());
        cut.next_entry().unwrap().unwrap();
        assert!(matches!(
            cut.read_data_slice(),
            Err(TarError::Truncated { offset: 0 })
        ));
    }

    #[test]
    fn octal_fields() {
        assert_eq!(parse_octal(b"0000644\0"), Some(0o644));
        assert_eq!(parse_octal(b"  17 \0\0\0"), Some(0o17));
        assert_eq!(parse_octal(b"\0\0\0\0"), Some(0));
        assert_eq!(parse_octal(b"00000000012\0"), Some(10));
        assert_eq!(parse_octal(b"0008\0"), None);
        assert_eq!(parse_octal(b"12 34\0"), None);
        // 22 octal digits overflow 64 bits.
        assert_eq!(parse_octal(b"7777777777777777777777"), None);
    }

    #[test]
    fn base256_fields() {
        let mut f = [0u8; 12];
        f[0] = 0x80;
        f[11] = 5;
        f[10] = 1;
        assert_eq!(parse_number(&f), Some(261));
        f[0] = 0xff; // negative
        assert_eq!(parse_number(&f), None);
        let mut big = [0xffu8; 12];
        big[0] = 0x80; // 88 bits of ones: overflow
        assert_eq!(parse_number(&big), None);
        let mut max = [0u8; 12];
        max[0] = 0x80;
        max[4..].fill(0xff);
        assert_eq!(parse_number(&max), Some(u64::MAX));
    }

    #[test]
    fn pax_records() {
        let p = parse_pax(b"12 path=a/b\n11 size=42\n19 mtime=1234.5678\n", 7).unwrap();
        assert_eq!(p.path.as_deref(), Some("a/b"));
        assert_eq!(p.size, Some(42));
        // Trailing NULs are tolerated.
        assert_eq!(parse_pax(b"11 size=42\n\0\0\0", 0).unwrap().size, Some(42));
        // Length field too long, too short, zero, missing.
        for bad in [
            &b"13 path=a/b\n"[..],
            b"11 path=a/b\n",
            b"0 path=a/b\n",
            b"path=a/b\n",
            b"9 noequa\n",
        ] {
            match parse_pax(bad, 1536) {
                Err(TarError::BadPax { offset: 1536, .. }) => {}
                other => panic!("{:?}: {other:?}", String::from_utf8_lossy(bad)),
            }
        }
        assert!(matches!(
            parse_pax(b"12 size=4x2\n", 512),
            Err(TarError::BadPax { offset: 512, .. })
        ));
        assert!(matches!(
            parse_pax(b"8 size=\n", 512),
            Err(TarError::BadPax { offset: 512, .. })
        ));
        assert!(matches!(
            parse_pax(b"11 path=\xff\xfe\n", 512),
            Err(TarError::BadName { offset: 512 })
        ));
    }

    #[test]
    fn padding_to_blocks() {
        assert_eq!(padding(0), 0);
        assert_eq!(padding(1), 511);
        assert_eq!(padding(512), 0);
        assert_eq!(padding(513), 511);
    }

    #[test]
    fn error_message_names_offset_and_sums() {
        let e = TarError::Checksum {
            offset: 1536,
            stored: 0o1234,
            computed: 0o4321,
        };
        assert_eq!(
            e.to_string(),
            "tar header at byte 1536: checksum mismatch (stored 0o1234, computed 0o4321)"
        );
        assert_eq!(e.offset(), 1536);
    }
}
