//! An encoded image's width and height from its header (JPEG frame header, PNG `IHDR`, WebP
//! `VP8 `/`VP8L`/`VP8X`), without decoding: what a list of images keeps in the meta block
//! (`docs/format.md` §4.3). Pure, allocation-free, never panics; errors name the byte.

/// Why an image's size cannot be read from its header. Each message names the byte at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ImageSizeError {
    /// Neither a JPEG's, a PNG's nor a WebP's first bytes.
    #[error("not a JPEG, PNG or WebP (starts with {:?})", .start.escape_ascii().to_string())]
    NotAnImage {
        /// The image's first bytes (up to 8).
        start: Vec<u8>,
    },
    /// A PNG whose first chunk is not a whole `IHDR`.
    #[error("a PNG without its IHDR chunk at byte 8")]
    PngWithoutIhdr,
    /// A JPEG where a marker should start.
    #[error("a JPEG without a frame header: no marker at byte {at}")]
    JpegNoMarker {
        /// Where the marker should be.
        at: usize,
    },
    /// A JPEG that ends inside a marker.
    #[error("a JPEG that ends at byte {at} inside a marker")]
    JpegEndsInMarker {
        /// Where it ends.
        at: usize,
    },
    /// A JPEG with a start of image, start of scan or other marker before its frame header.
    #[error("a JPEG with marker {code:#04x} at byte {at} before its frame header")]
    JpegMarkerBeforeFrame {
        /// The marker's code.
        code: u8,
        /// Where the marker is.
        at: usize,
    },
    /// A JPEG that ends inside a segment's length.
    #[error("a JPEG that ends at byte {at} inside a segment")]
    JpegEndsInSegment {
        /// Where it ends.
        at: usize,
    },
    /// A JPEG frame header shorter than its sizes.
    #[error("a JPEG frame header cut short at byte {at}")]
    JpegFrameCutShort {
        /// Where the frame header's length is.
        at: usize,
    },
    /// A JPEG frame header with a width or a height of 0.
    #[error("a JPEG frame header at byte {at} of size {width}x{height}")]
    JpegEmptyFrame {
        /// Where the frame header's length is.
        at: usize,
        /// Its width.
        width: u32,
        /// Its height.
        height: u32,
    },
    /// A JPEG segment length under the 2 bytes of the length itself.
    #[error("a JPEG segment length {len} at byte {at}")]
    JpegSegmentLength {
        /// The length.
        len: usize,
        /// Where it is.
        at: usize,
    },
    /// A WebP too short for the header of its first chunk.
    #[error("a WebP of {len} bytes, too short for its header")]
    WebpTooShort {
        /// The WebP's length.
        len: usize,
    },
    /// A WebP `VP8 ` frame without its start code.
    #[error("a WebP VP8 frame without its start code at byte 23")]
    WebpVp8StartCode,
    /// A WebP `VP8L` stream without its signature.
    #[error("a WebP VP8L stream without its signature at byte 20")]
    WebpVp8lSignature,
    /// A WebP whose first chunk is none of those that give a size.
    #[error("a WebP whose first chunk {:?} is not VP8, VP8L or VP8X", .chunk.escape_ascii().to_string())]
    WebpFirstChunk {
        /// The chunk's four characters.
        chunk: [u8; 4],
    },
}

/// Width and height of the JPEG, PNG or WebP image `data`, from its header.
pub fn image_size(data: &[u8]) -> Result<(u32, u32), ImageSizeError> {
    if data.starts_with(&[0xFF, 0xD8]) {
        jpeg(data)
    } else if data.starts_with(b"\x89PNG\r\n\x1a\n") {
        if data.len() < 24 || &data[12..16] != b"IHDR" {
            return Err(ImageSizeError::PngWithoutIhdr);
        }
        Ok((be32(data, 16), be32(data, 20)))
    } else if data.len() >= 12 && &data[0..4] == b"RIFF" && &data[8..12] == b"WEBP" {
        webp(data)
    } else {
        Err(ImageSizeError::NotAnImage {
            start: data[..data.len().min(8)].to_vec(),
        })
    }
}

fn be16(b: &[u8], at: usize) -> u32 {
    u32::from(u16::from_be_bytes([b[at], b[at + 1]]))
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le24(b: &[u8], at: usize) -> u32 {
    u32::from(b[at]) | u32::from(b[at + 1]) << 8 | u32::from(b[at + 2]) << 16
}

fn jpeg(data: &[u8]) -> Result<(u32, u32), ImageSizeError> {
    let mut i = 2usize;
    loop {
        if data.get(i) != Some(&0xFF) {
            return Err(ImageSizeError::JpegNoMarker { at: i });
        }
        while data.get(i) == Some(&0xFF) {
            i += 1;
        }
        let Some(&code) = data.get(i) else {
            return Err(ImageSizeError::JpegEndsInMarker { at: i });
        };
        i += 1;
        match code {
            0x01 | 0xD0..=0xD7 => continue,
            0xD8..=0xDA => {
                return Err(ImageSizeError::JpegMarkerBeforeFrame { code, at: i - 2 });
            }
            _ => {}
        }
        if i + 2 > data.len() {
            return Err(ImageSizeError::JpegEndsInSegment { at: i });
        }
        let len = be16(data, i) as usize;
        let sof = matches!(code, 0xC0..=0xCF) && !matches!(code, 0xC4 | 0xC8 | 0xCC);
        if sof {
            if len < 7 || i + 7 > data.len() {
                return Err(ImageSizeError::JpegFrameCutShort { at: i });
            }
            let (h, w) = (be16(data, i + 3), be16(data, i + 5));
            if w == 0 || h == 0 {
                return Err(ImageSizeError::JpegEmptyFrame {
                    at: i,
                    width: w,
                    height: h,
                });
            }
            return Ok((w, h));
        }
        if len < 2 {
            return Err(ImageSizeError::JpegSegmentLength { len, at: i });
        }
        i += len;
    }
}

fn webp(data: &[u8]) -> Result<(u32, u32), ImageSizeError> {
    if data.len() < 30 {
        return Err(ImageSizeError::WebpTooShort { len: data.len() });
    }
    match &data[12..16] {
        b"VP8 " => {
            if data[23..26] != [0x9D, 0x01, 0x2A] {
                return Err(ImageSizeError::WebpVp8StartCode);
            }
            let w = u32::from(u16::from_le_bytes([data[26], data[27]]) & 0x3FFF);
            let h = u32::from(u16::from_le_bytes([data[28], data[29]]) & 0x3FFF);
            Ok((w, h))
        }
        b"VP8L" => {
            if data[20] != 0x2F {
                return Err(ImageSizeError::WebpVp8lSignature);
            }
            let bits = u32::from_le_bytes([data[21], data[22], data[23], data[24]]);
            Ok(((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1))
        }
        b"VP8X" => Ok((le24(data, 24) + 1, le24(data, 27) + 1)),
        _ => Err(ImageSizeError::WebpFirstChunk {
            chunk: [data[12], data[13], data[14], data[15]],
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_of_each_header_and_errors_for_bad_ones() {
        // JPEG: SOI, an APP0 of 16 bytes, SOF0 of 40x30
        let mut j = vec![0xFF, 0xD8, 0xFF, 0xE0, 0, 16];
        j.extend_from_slice(&[0; 14]);
        // (cut after the size: what comes after it is not read)
        j.extend_from_slice(&[0xFF, 0xC0, 0, 11, 8, 0, 30, 0, 40]);
        assert_eq!(image_size(&j), Ok((40, 30)));
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        png.extend_from_slice(&7u32.to_be_bytes());
        png.extend_from_slice(&5u32.to_be_bytes());
        assert_eq!(image_size(&png), Ok((7, 5)));
        let mut x = b"RIFF\0\0\0\0WEBPVP8X\0\0\0\0\0\0\0\0".to_vec();
        x.extend_from_slice(&[99, 0, 0, 49, 0, 0]);
        assert_eq!(image_size(&x), Ok((100, 50)));
        // every prefix of each is an error, never a panic
        for img in [&j, &png, &x] {
            for n in 0..img.len() {
                assert!(image_size(&img[..n]).is_err(), "{n}");
            }
        }
        assert!(
            image_size(b"GIF89a....")
                .unwrap_err()
                .to_string()
                .contains("not a JPEG")
        );
        // a segment length that points past the end
        assert!(image_size(&[0xFF, 0xD8, 0xFF, 0xE0, 0xFF, 0xFF, 0]).is_err());
    }

    #[test]
    fn messages_name_the_bytes_at_fault() {
        let msg = |b: &[u8]| image_size(b).unwrap_err().to_string();
        assert_eq!(
            msg(b"GIF89a\x00\x01\x02"),
            r#"not a JPEG, PNG or WebP (starts with "GIF89a\\x00\\x01")"#
        );
        assert_eq!(
            msg(&[0xFF, 0xD8, 0xFF, 0xDA]),
            "a JPEG with marker 0xda at byte 2 before its frame header"
        );
        assert_eq!(
            msg(&[0xFF, 0xD8, 0xFF, 0xC0, 0, 11, 8, 0, 0, 0, 5]),
            "a JPEG frame header at byte 4 of size 5x0"
        );
        let mut w = b"RIFF\0\0\0\0WEBPABC\x01".to_vec();
        w.resize(30, 0);
        assert_eq!(
            msg(&w),
            r#"a WebP whose first chunk "ABC\\x01" is not VP8, VP8L or VP8X"#
        );
    }
}
