//! The general decode path (PNG and WebP, or a whole JPEG): full image to packed RGB or gray.

use std::io::Cursor;

use crate::error::{OpsError, Result};
use crate::jpeg::{Decoder, Pixels, Scale, check_pixels, luma};

/// The format of encoded image bytes, from their magic bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JPEG.
    Jpeg,
    /// PNG.
    Png,
    /// WebP.
    Webp,
}

/// Tell the format from the first bytes.
pub fn sniff(data: &[u8]) -> Result<Format> {
    if data.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Ok(Format::Jpeg)
    } else if data.starts_with(b"\x89PNG\r\n\x1a\n") {
        Ok(Format::Png)
    } else if data.len() >= 12 && &data[0..4] == b"RIFF" && &data[8..12] == b"WEBP" {
        Ok(Format::Webp)
    } else {
        Err(OpsError::UnknownFormat(
            data[..data.len().min(8)].escape_ascii().to_string(),
        ))
    }
}

/// An image's width and height from its header alone (nothing is decoded or allocated for
/// pixels), for checking a pixel limit ([`check_pixels`]) before a decode or a transcode.
pub fn dimensions(data: &[u8]) -> Result<(u32, u32)> {
    match sniff(data)? {
        Format::Jpeg => Decoder::new()?.header(data).map(|h| (h.width, h.height)),
        Format::Png => png::Decoder::new(Cursor::new(data))
            .read_info()
            .map(|r| (r.info().width, r.info().height))
            .map_err(png_err),
        Format::Webp => image_webp::WebPDecoder::new(Cursor::new(data))
            .map(|d| d.dimensions())
            .map_err(|e| OpsError::Decode {
                codec: "WebP",
                message: e.to_string(),
            }),
    }
}

/// Decode a whole image to RGB (or gray when `gray`), refusing more than `max_pixels` before
/// allocating.
pub fn decode_full(
    jpeg: &mut Decoder,
    data: &[u8],
    gray: bool,
    max_pixels: u64,
    out: &mut Pixels,
) -> Result<()> {
    match sniff(data)? {
        Format::Jpeg => jpeg
            .decode(data, Scale::FULL, None, gray, max_pixels, out)
            .map(|_| ()),
        Format::Png => decode_png(data, gray, max_pixels, out),
        Format::Webp => decode_webp(data, gray, max_pixels, out),
    }
}

fn png_err(e: impl std::fmt::Display) -> OpsError {
    OpsError::Decode {
        codec: "PNG",
        message: e.to_string(),
    }
}

fn decode_png(data: &[u8], gray: bool, max_pixels: u64, out: &mut Pixels) -> Result<()> {
    let mut dec = png::Decoder::new(Cursor::new(data));
    dec.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = dec.read_info().map_err(png_err)?;
    let (w, h) = {
        let info = reader.info();
        (info.width, info.height)
    };
    check_pixels(u64::from(w), u64::from(h), max_pixels)?;
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| png_err("output size overflows"))?;
    let mut buf = vec![0u8; size];
    let frame = reader.next_frame(&mut buf).map_err(png_err)?;
    let channels = match frame.color_type {
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        png::ColorType::Indexed => {
            return Err(OpsError::Unsupported("indexed PNG after expansion".into()));
        }
    };
    pack(&buf[..frame.buffer_size()], w, h, channels, gray, out);
    Ok(())
}

fn decode_webp(data: &[u8], gray: bool, max_pixels: u64, out: &mut Pixels) -> Result<()> {
    let err = |e: image_webp::DecodingError| OpsError::Decode {
        codec: "WebP",
        message: e.to_string(),
    };
    let mut dec = image_webp::WebPDecoder::new(Cursor::new(data)).map_err(err)?;
    let (w, h) = dec.dimensions();
    check_pixels(u64::from(w), u64::from(h), max_pixels)?;
    let size = dec.output_buffer_size().ok_or_else(|| OpsError::Decode {
        codec: "WebP",
        message: "output size overflows".into(),
    })?;
    let mut buf = vec![0u8; size];
    dec.read_image(&mut buf).map_err(err)?;
    let channels = if dec.has_alpha() { 4 } else { 3 };
    pack(&buf, w, h, channels, gray, out);
    Ok(())
}

/// Gray/gray+alpha/RGB/RGBA → packed RGB or gray (alpha dropped).
fn pack(src: &[u8], w: u32, h: u32, channels: usize, gray: bool, out: &mut Pixels) {
    let n = (w * h) as usize;
    let oc = if gray { 1 } else { 3 };
    out.data.clear();
    out.data.reserve(n * oc);
    for p in src.chunks_exact(channels).take(n) {
        let (r, g, b) = if channels < 3 {
            (p[0], p[0], p[0])
        } else {
            (p[0], p[1], p[2])
        };
        if gray {
            out.data.push(luma(r, g, b));
        } else {
            out.data.extend_from_slice(&[r, g, b]);
        }
    }
    out.width = w;
    out.height = h;
    out.channels = oc as u8;
}
