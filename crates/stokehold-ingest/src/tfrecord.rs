//! TFRecord framing: a streaming reader over any [`std::io::Read`] and a writer.
//!
//! A TFRecord file is a sequence of records, each framed as:
//!
//! | bytes | content |
//! | --- | --- |
//! | 8 | data length `n`, u64 little-endian |
//! | 4 | masked CRC32C of the 8 length bytes, u32 little-endian |
//! | `n` | data |
//! | 4 | masked CRC32C of the data, u32 little-endian |
//!
//! where `mask(crc) = ((crc >> 15) | (crc << 17)).wrapping_add(0xa282ead8)`.
//!
//! The reader treats its input as hostile: the length CRC and the caller's length cap are both
//! checked before any payload byte is read or any memory is reserved, and the payload is read
//! through [`Read::take`] so memory grows only with bytes actually present.

use std::io::{self, Read, Write};

/// The constant added by the TFRecord CRC mask.
const MASK_DELTA: u32 = 0xa282_ead8;

/// Size of a record header: the length and its CRC.
const HEADER_LEN: usize = 12;

/// Masks a CRC32C the way TFRecord (and LevelDB) store it.
pub fn mask_crc(crc: u32) -> u32 {
    // ((crc >> 15) | (crc << 17)), i.e. a 15-bit right rotation.
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// The inverse of [`mask_crc`]: the plain CRC-32C a masked one stands for.
pub fn unmask_crc(masked: u32) -> u32 {
    masked.wrapping_sub(MASK_DELTA).rotate_left(15)
}

/// The masked CRC32C of `data`, as stored in TFRecord framing.
pub fn masked_crc32c(data: &[u8]) -> u32 {
    mask_crc(crc32c::crc32c(data))
}

/// Errors from [`TfRecordReader`]. Every variant carries the byte offset of the record header
/// it refers to.
#[derive(Debug, thiserror::Error)]
pub enum TfRecordError {
    /// The CRC of the record's length field does not match, so the length cannot be trusted
    /// and the stream cannot be resynchronised.
    #[error("TFRecord at byte {offset}: length CRC mismatch (corrupt or not a TFRecord file)")]
    LengthCrc {
        /// Offset of the record header.
        offset: u64,
    },
    /// The CRC of the record's data does not match. The whole record was consumed, so reading
    /// can continue with the next record.
    #[error("TFRecord at byte {offset}: data CRC mismatch")]
    DataCrc {
        /// Offset of the record header.
        offset: u64,
        /// The data's CRC-32C as the file states it (unmasked), which the data does not match.
        stored: u32,
    },
    /// The record's length exceeds the reader's cap.
    #[error("TFRecord at byte {offset}: record length {len} exceeds the limit of {max} bytes")]
    TooLarge {
        /// Offset of the record header.
        offset: u64,
        /// The length the record claims.
        len: u64,
        /// The cap.
        max: u64,
    },
    /// The input ended inside the record (header, data or data CRC).
    #[error("TFRecord at byte {offset}: truncated record (input ends inside it)")]
    Truncated {
        /// Offset of the record header.
        offset: u64,
    },
    /// The file is gzip-compressed.
    #[error(
        "TFRecord at byte {offset}: the file is gzip-compressed; decompress it first \
         (e.g. `gunzip`), then read the result"
    )]
    Compressed {
        /// Always 0: the start of the file.
        offset: u64,
    },
    /// The underlying reader failed.
    #[error("TFRecord at byte {offset}: I/O error: {source}")]
    Io {
        /// Offset of the record header being read.
        offset: u64,
        /// The underlying error.
        source: io::Error,
    },
}

impl TfRecordError {
    /// The byte offset of the record header this error refers to.
    pub fn offset(&self) -> u64 {
        match self {
            Self::LengthCrc { offset }
            | Self::DataCrc { offset, .. }
            | Self::TooLarge { offset, .. }
            | Self::Truncated { offset }
            | Self::Compressed { offset }
            | Self::Io { offset, .. } => *offset,
        }
    }
}

/// The data length a record's header (`header`: the bytes there are of its 12, at file offset
/// `offset`) announces, its CRC checked and the length at most `max`.
pub fn record_len(header: &[u8], offset: u64, max: u64) -> Result<u64, TfRecordError> {
    let gzip = offset == 0 && header.starts_with(&[0x1f, 0x8b]);
    let Some(header) = header.get(..HEADER_LEN) else {
        return Err(if gzip {
            TfRecordError::Compressed { offset }
        } else {
            TfRecordError::Truncated { offset }
        });
    };
    let len_bytes: [u8; 8] = header[..8].try_into().expect("8-byte slice");
    let len_crc = u32::from_le_bytes(header[8..].try_into().expect("4-byte slice"));
    if masked_crc32c(&len_bytes) != len_crc {
        // A gzip file fails the length CRC (unless astronomically unlucky): report it as
        // such rather than as corruption.
        return Err(if gzip {
            TfRecordError::Compressed { offset }
        } else {
            TfRecordError::LengthCrc { offset }
        });
    }
    let len = u64::from_le_bytes(len_bytes);
    if len > max {
        return Err(TfRecordError::TooLarge { offset, len, max });
    }
    Ok(len)
}

/// A streaming TFRecord reader.
///
/// After [`TfRecordError::DataCrc`] the reader is positioned at the next record and
/// [`next_record`](Self::next_record) can be called again. After any other error the stream
/// cannot be trusted and the reader is finished: later calls return `Ok(None)`.
#[derive(Debug)]
pub struct TfRecordReader<R: Read> {
    inner: R,
    max_record_len: u64,
    /// Bytes consumed from `inner` so far.
    pos: u64,
    done: bool,
}

impl<R: Read> TfRecordReader<R> {
    /// Wraps `r`, which must be positioned at the start of a record. Records longer than
    /// `max_record_len` bytes are refused with [`TfRecordError::TooLarge`].
    pub fn new(r: R, max_record_len: u64) -> Self {
        Self {
            inner: r,
            max_record_len,
            pos: 0,
            done: false,
        }
    }

    /// The number of bytes consumed from the underlying reader so far.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Reads the next record's data into `buf` (which is cleared first) and returns the byte
    /// offset of the record's header, or `Ok(None)` at a clean end of input (exactly at a
    /// record boundary).
    ///
    /// On error `buf`'s contents are unspecified. See the type's documentation for which errors
    /// reading can continue after.
    pub fn next_record(&mut self, buf: &mut Vec<u8>) -> Result<Option<u64>, TfRecordError> {
        if self.done {
            return Ok(None);
        }
        let result = self.next_record_inner(buf);
        match result {
            Ok(Some(_)) | Err(TfRecordError::DataCrc { .. }) => {}
            _ => self.done = true,
        }
        result
    }

    fn next_record_inner(&mut self, buf: &mut Vec<u8>) -> Result<Option<u64>, TfRecordError> {
        let offset = self.pos;
        let mut header = [0u8; HEADER_LEN];
        let n = self.read_full(&mut header, offset)?;
        if n == 0 {
            return Ok(None);
        }
        let len = record_len(&header[..n], offset, self.max_record_len)?;
        buf.clear();
        let got = (&mut self.inner)
            .take(len)
            .read_to_end(buf)
            .map_err(|source| TfRecordError::Io { offset, source })? as u64;
        self.pos += got;
        if got < len {
            return Err(TfRecordError::Truncated { offset });
        }
        let mut crc = [0u8; 4];
        if self.read_full(&mut crc, offset)? < crc.len() {
            return Err(TfRecordError::Truncated { offset });
        }
        let stored = u32::from_le_bytes(crc);
        if masked_crc32c(buf) != stored {
            return Err(TfRecordError::DataCrc {
                offset,
                stored: unmask_crc(stored),
            });
        }
        Ok(Some(offset))
    }

    /// Fills `out` unless the input ends first; returns how many bytes were read.
    fn read_full(&mut self, out: &mut [u8], offset: u64) -> Result<usize, TfRecordError> {
        let mut filled = 0;
        while filled < out.len() {
            match self.inner.read(&mut out[filled..]) {
                Ok(0) => break,
                Ok(n) => {
                    filled += n;
                    self.pos += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => return Err(TfRecordError::Io { offset, source }),
            }
        }
        Ok(filled)
    }
}

/// Writes one TFRecord-framed record holding `data`.
pub fn write_record(w: &mut impl Write, data: &[u8]) -> io::Result<()> {
    let len = (data.len() as u64).to_le_bytes();
    w.write_all(&len)?;
    w.write_all(&masked_crc32c(&len).to_le_bytes())?;
    w.write_all(data)?;
    w.write_all(&masked_crc32c(data).to_le_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_matches_reference_values() {
        // Reference values computed independently (bitwise CRC32C, Castagnoli polynomial).
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(masked_crc32c(b"123456789"), 0xc78a_b0e5);
        assert_eq!(masked_crc32c(&[0u8; 8]), 0x0798_0329);
        assert_eq!(masked_crc32c(&5u64.to_le_bytes()), 0x3e04_b2ea);
        assert_eq!(mask_crc(0), MASK_DELTA);
        for crc in [0, 1, 0xe306_9283, u32::MAX] {
            assert_eq!(unmask_crc(mask_crc(crc)), crc);
        }
    }

    #[test]
    fn empty_record_layout() {
        let mut out = Vec::new();
        write_record(&mut out, b"").unwrap();
        assert_eq!(out.len(), 16);
        assert_eq!(&out[..8], &[0u8; 8]);
        assert_eq!(out[8..12], 0x0798_0329u32.to_le_bytes());
        assert_eq!(out[12..], MASK_DELTA.to_le_bytes());

        let mut hello = Vec::new();
        write_record(&mut hello, b"hello").unwrap();
        assert_eq!(hello[..8], 5u64.to_le_bytes());
        assert_eq!(hello[8..12], 0x3e04_b2eau32.to_le_bytes());
        assert_eq!(&hello[12..17], b"hello");
        assert_eq!(hello[17..], 0x191c_1fbbu32.to_le_bytes());
    }
}
