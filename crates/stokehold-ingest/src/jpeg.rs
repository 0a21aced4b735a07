//! A JPEG header reader: dimensions, components and coding process, from the markers before the
//! first scan. It reads no entropy-coded data, allocates nothing and never panics; the packer uses
//! it to reject files that are not JPEGs in all but name and to count progressive files.

/// What the frame header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JpegInfo {
    /// Width in pixels.
    pub width: u16,
    /// Height in pixels.
    pub height: u16,
    /// Colour components (1 grayscale, 3 YCbCr/RGB, 4 CMYK/YCCK).
    pub components: u8,
    /// Progressive coding (SOF2/6/10/14): decodes about 3× slower than baseline.
    pub progressive: bool,
}

/// Read the frame header of a JPEG. The error says what is wrong and at which byte.
pub fn parse_header(data: &[u8]) -> Result<JpegInfo, crate::Unusable> {
    if !data.starts_with(&[0xFF, 0xD8]) {
        return Err("does not start with the JPEG SOI marker FF D8".into());
    }
    let mut i = 2usize;
    loop {
        // Markers are 0xFF (possibly repeated as fill) followed by a non-zero, non-0xFF code.
        if i >= data.len() {
            return Err(crate::Unusable::from(format!(
                "ends at byte {i} before any frame header"
            )));
        }
        if data[i] != 0xFF {
            return Err(crate::Unusable::from(format!(
                "expected a marker at byte {i}, found {:#04x}",
                data[i]
            )));
        }
        while i < data.len() && data[i] == 0xFF {
            i += 1;
        }
        let Some(&code) = data.get(i) else {
            return Err(crate::Unusable::from(format!(
                "ends at byte {i} inside a marker"
            )));
        };
        let marker_at = i - 1;
        i += 1;
        match code {
            0x01 | 0xD0..=0xD7 => continue, // standalone markers
            0xD8 => {
                return Err(crate::Unusable::from(format!(
                    "second SOI marker at byte {marker_at}"
                )));
            }
            0xD9 => {
                return Err(crate::Unusable::from(format!(
                    "EOI at byte {marker_at} before any frame header"
                )));
            }
            0xDA => {
                return Err(crate::Unusable::from(format!(
                    "scan at byte {marker_at} before any frame header"
                )));
            }
            0x00 => {
                return Err(crate::Unusable::from(format!(
                    "stuffed zero at byte {marker_at} outside a scan"
                )));
            }
            _ => {}
        }
        let Some(len) = data
            .get(i..i + 2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
        else {
            return Err(crate::Unusable::from(format!(
                "ends at byte {i} inside the length of marker {code:#04x}"
            )));
        };
        if len < 2 || i + len > data.len() {
            return Err(crate::Unusable::from(format!(
                "marker {code:#04x} at byte {marker_at} has length {len}, past the end ({} bytes)",
                data.len()
            )));
        }
        let is_sof = matches!(code, 0xC0..=0xCF) && !matches!(code, 0xC4 | 0xC8 | 0xCC);
        if is_sof {
            let seg = &data[i + 2..i + len];
            if seg.len() < 6 {
                return Err(crate::Unusable::from(format!(
                    "frame header at byte {marker_at} is {} bytes, too short",
                    seg.len()
                )));
            }
            let height = u16::from_be_bytes([seg[1], seg[2]]);
            let width = u16::from_be_bytes([seg[3], seg[4]]);
            let components = seg[5];
            if width == 0 || height == 0 || !matches!(components, 1 | 3 | 4) {
                return Err(crate::Unusable::from(format!(
                    "frame header at byte {marker_at}: {width}x{height} with {components} components is not supported"
                )));
            }
            return Ok(JpegInfo {
                width,
                height,
                components,
                progressive: matches!(code, 0xC2 | 0xC6 | 0xCA | 0xCE),
            });
        }
        i += len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(w: u16, h: u16, progressive: bool) -> Vec<u8> {
        let pixels: Vec<u8> = (0..usize::from(w) * usize::from(h) * 3)
            .map(|k| (k % 251) as u8)
            .collect();
        let mut out = Vec::new();
        let mut enc = jpeg_encoder::Encoder::new(&mut out, 85);
        enc.set_progressive(progressive);
        enc.encode(&pixels, w, h, jpeg_encoder::ColorType::Rgb)
            .unwrap();
        out
    }

    #[test]
    fn reads_dimensions_and_coding() {
        let info = parse_header(&encode(37, 21, false)).unwrap();
        assert_eq!(
            (info.width, info.height, info.components, info.progressive),
            (37, 21, 3, false)
        );
        assert!(parse_header(&encode(8, 8, true)).unwrap().progressive);
    }

    #[test]
    fn truncation_and_garbage_are_errors_not_panics() {
        let good = encode(16, 16, false);
        assert_eq!(parse_header(&good).unwrap().width, 16);
        // The frame header is complete at `sof_end`: every shorter prefix fails cleanly, every
        // longer one succeeds.
        let sof = good.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
        let sof_end = sof + 2 + usize::from(u16::from_be_bytes([good[sof + 2], good[sof + 3]]));
        for len in 0..good.len() {
            assert_eq!(
                parse_header(&good[..len]).is_ok(),
                len >= sof_end,
                "prefix of {len} bytes"
            );
        }
        assert!(parse_header(b"GIF89a").is_err());
        assert!(parse_header(&[0xFF, 0xD8, 0xFF, 0xC0, 0xFF, 0xFF]).is_err());
    }
}
