//! The fused image pipeline: choose the crop from the header, decode only that region at the
//! smallest DCT scale that still covers the output, resize, augment, and write the result
//! straight into the output slot.

use crate::color;
use crate::decode::{Format, decode_full, sniff};
use crate::error::{OpsError, Result};
pub use crate::geometry::Random;
use crate::geometry::{self, Crop};
use crate::jpeg::{Decoder, Pixels, PixelsRef, Scale, YccPlanes};
use crate::layout::{self, OutSpec};
use crate::resize::Resizer;
use crate::restart::RestartIndex;

/// Which part of the image, at which size.
#[derive(Debug, Clone, PartialEq)]
pub enum Geometry {
    /// torchvision's RandomResizedCrop: a random area fraction in `scale` and aspect ratio in
    /// `ratio`, resized to `width`×`height`.
    RandomResizedCrop {
        /// Output width.
        width: u32,
        /// Output height.
        height: u32,
        /// Area fraction range.
        scale: (f64, f64),
        /// Aspect ratio range.
        ratio: (f64, f64),
    },
    /// Resize the shorter side to `shorter`, then take the centre `width`×`height`.
    ResizeCenterCrop {
        /// Shorter side after resizing.
        shorter: u32,
        /// Output width.
        width: u32,
        /// Output height.
        height: u32,
    },
    /// Resize the whole image to `width`×`height` (aspect ratio not kept).
    Resize {
        /// Output width.
        width: u32,
        /// Output height.
        height: u32,
    },
}

impl Geometry {
    /// Output (width, height).
    pub fn size(&self) -> (u32, u32) {
        match *self {
            Geometry::RandomResizedCrop { width, height, .. }
            | Geometry::ResizeCenterCrop { width, height, .. }
            | Geometry::Resize { width, height } => (width, height),
        }
    }
}

/// Colour jitter strengths (torchvision's: each factor is drawn from [max(0, 1 - s), 1 + s]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Jitter {
    /// Brightness strength.
    pub brightness: f32,
    /// Contrast strength.
    pub contrast: f32,
    /// Saturation strength.
    pub saturation: f32,
}

/// The default pixel limit (width × height), checked from the header before anything is decoded
/// or transcoded: 100 megapixels. The one default of the loader's image stage and of
/// `stokehold pack` (`--max-pixels`), so that a pack never stores an image its loader refuses.
pub const DEFAULT_MAX_PIXELS: u64 = 100_000_000;

/// A whole image pipeline.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageOps {
    /// Crop and size.
    pub geometry: Geometry,
    /// Probability of a horizontal flip.
    pub flip_p: f64,
    /// Colour jitter.
    pub jitter: Option<Jitter>,
    /// One gray channel instead of RGB.
    pub gray: bool,
    /// Output layout and type.
    pub out: OutSpec,
    /// Largest image (width × height) accepted, checked from the header before decoding.
    pub max_pixels: u64,
    /// Use DCT scaling and cropped decoding (on by default; off gives the reference path: full
    /// decode, then crop and resize).
    pub fused: bool,
}

impl ImageOps {
    /// Channels of the output.
    pub fn channels(&self) -> usize {
        if self.gray { 1 } else { 3 }
    }

    /// Output shape: `[C, H, W]` or `[H, W, C]`.
    pub fn shape(&self) -> Vec<usize> {
        let (w, h) = self.geometry.size();
        let (w, h, c) = (w as usize, h as usize, self.channels());
        if self.out.chw {
            vec![c, h, w]
        } else {
            vec![h, w, c]
        }
    }

    /// Bytes of one output.
    pub fn slot_bytes(&self) -> usize {
        self.shape().iter().product::<usize>() * self.out.dtype.size()
    }
}

/// Per-thread decoders and buffers.
#[derive(Debug, Default)]
pub struct Workspace {
    jpeg: Option<Decoder>,
    resizer: Resizer,
    decoded: Pixels,
    resized: Vec<u8>,
    /// The JPEG cut out of a restart-marked file for a crop.
    sub: Vec<u8>,
    /// Its Y, Cb and Cr planes, and their resized planes.
    ycc: YccPlanes,
    ycc_out: Vec<u8>,
}

impl Default for Pixels {
    fn default() -> Self {
        Pixels {
            width: 0,
            height: 0,
            channels: 3,
            data: Vec::new(),
        }
    }
}

impl Workspace {
    /// Fresh buffers.
    pub fn new() -> Workspace {
        Workspace::default()
    }

    fn jpeg(&mut self) -> Result<&mut Decoder> {
        if self.jpeg.is_none() {
            self.jpeg = Some(Decoder::new()?);
        }
        Ok(self.jpeg.as_mut().expect("just set"))
    }
}

/// Run the pipeline on encoded image `data`, writing `ops.slot_bytes()` bytes into `slot`.
/// Random choices are drawn in a fixed order: crop, flip, jitter factors.
pub fn run(
    ops: &ImageOps,
    data: &[u8],
    rng: &mut dyn Random,
    ws: &mut Workspace,
    slot: &mut [u8],
) -> Result<()> {
    let (out_w, out_h) = ops.geometry.size();
    if out_w == 0 || out_h == 0 {
        return Err(OpsError::Invalid(format!("output size {out_w}x{out_h}")));
    }
    let format = sniff(data)?;
    // Dimensions: from the JPEG header, or from a full decode for other formats.
    let (width, height) = if format == Format::Jpeg {
        let h = ws.jpeg()?.header(data)?;
        crate::jpeg::check_pixels(u64::from(h.width), u64::from(h.height), ops.max_pixels)?;
        (h.width, h.height)
    } else {
        let mut decoded = std::mem::take(&mut ws.decoded);
        let r = decode_full(ws.jpeg()?, data, ops.gray, ops.max_pixels, &mut decoded);
        ws.decoded = decoded;
        r?;
        (ws.decoded.width, ws.decoded.height)
    };
    let (mut crop, flip, factors) = draw(ops, width, height, rng);
    // With restart markers aligned to MCU rows, cut the rows and bands the crop needs out of the
    // entropy-coded data: the decoder then Huffman-decodes only those.
    let mut sub = std::mem::take(&mut ws.sub);
    let mut data = data;
    let mut cut = false;
    // the DCT scale of the crop (the same for a cut: only the crop's offset changes)
    let scale = Scale::smallest_covering(crop.w, crop.h, out_w, out_h);
    if format == Format::Jpeg
        && ops.fused
        && let Some(idx) = RestartIndex::parse(data)
    {
        let margin = 2.0 * 8.0 / f64::from(scale.0);
        let (rows, bands) = idx.cover(crop.x, crop.y, crop.x + crop.w, crop.y + crop.h, margin);
        if rows.len() < idx.rows() as usize || bands.len() < idx.bands() as usize {
            let (ox, oy) = (bands.start * idx.band_w(), rows.start * idx.mcu_h);
            if idx.extract(data, rows, bands, &mut sub) {
                data = &sub;
                cut = true;
                crop.x -= f64::from(ox);
                crop.y -= f64::from(oy);
            }
        }
    }
    if cut && plain_planes(ops, 3, factors) {
        // The cut is about the crop already (no cropping region needed): decode its Y, Cb and
        // Cr planes, resize each (chroma from its own resolution) and convert colour at the
        // output size, which skips chroma upsampling and converts only the output's pixels.
        let mut ycc = std::mem::take(&mut ws.ycc);
        let r = ws
            .jpeg()
            .and_then(|d| d.decode_ycc(data, scale, ops.max_pixels, &mut ycc))
            .and_then(|planar| {
                if planar {
                    finish_ycc(ops, &ycc, crop, scale, flip, ws, slot).map(|_| true)
                } else {
                    Ok(false)
                }
            });
        ws.ycc = ycc;
        match r {
            Ok(false) => {} // not 4:4:4/4:2:2/4:2:0 YCbCr: the RGB path below
            done => {
                ws.sub = sub;
                return done.map(|_| ());
            }
        }
    }
    let r = decode_crop(ops, format, data, crop, ws);
    ws.sub = sub;
    let box_in_decoded = r?;
    let decoded = std::mem::take(&mut ws.decoded);
    let r = finish(
        ops,
        decoded.view(),
        box_in_decoded,
        flip,
        factors,
        &mut ws.resizer,
        &mut ws.resized,
        slot,
    );
    ws.decoded = decoded;
    r
}

/// Decode the JPEG path's crop (only its region, at the smallest covering DCT scale) into
/// `ws.decoded`, and return where the crop lies in it. Other formats are decoded already.
fn decode_crop(
    ops: &ImageOps,
    format: Format,
    data: &[u8],
    crop: Crop,
    ws: &mut Workspace,
) -> Result<Crop> {
    let (out_w, out_h) = ops.geometry.size();
    let mut box_in_decoded = crop;
    if format == Format::Jpeg {
        let scale = if ops.fused {
            Scale::smallest_covering(crop.w, crop.h, out_w, out_h)
        } else {
            Scale::FULL
        };
        let s = f64::from(scale.0) / 8.0;
        let region = ops.fused.then(|| {
            let x0 = (crop.x * s).floor() as u32;
            let y0 = (crop.y * s).floor() as u32;
            let x1 = ((crop.x + crop.w) * s).ceil() as u32;
            let y1 = ((crop.y + crop.h) * s).ceil() as u32;
            (x0, y0, (x1 - x0).max(1), (y1 - y0).max(1))
        });
        let mut decoded = std::mem::take(&mut ws.decoded);
        let r = ws
            .jpeg()?
            .decode(data, scale, region, ops.gray, ops.max_pixels, &mut decoded);
        ws.decoded = decoded;
        let x_offset = r?;
        let (rx, ry) = region.map_or((0, 0), |(x, y, _, _)| (x - x_offset, y));
        box_in_decoded = Crop {
            x: crop.x * s - f64::from(rx),
            y: crop.y * s - f64::from(ry),
            w: crop.w * s,
            h: crop.h * s,
        };
    }
    Ok(box_in_decoded)
}

/// Colour jitter factors drawn for one sample (brightness, contrast, saturation).
type Factors = (Option<f32>, Option<f32>, Option<f32>);

/// Whether the output is plain u8 planes of the decoded channels: CHW, no jitter, no conversion
/// to gray (the resizer then writes the slot directly).
fn plain_planes(ops: &ImageOps, channels: usize, factors: Option<Factors>) -> bool {
    let no_jitter = factors.is_none_or(|(b, ct, sat)| b.is_none() && ct.is_none() && sat.is_none());
    no_jitter
        && !(ops.gray && channels == 3)
        && ops.out.chw
        && ops.out.dtype == layout::OutDType::U8
}

/// The tail of the planar path: resize the Y, Cb and Cr planes of `ycc` (decoded at `scale`;
/// `crop` in the undecoded image's pixels) to the output size, mirrored when `flip`, then
/// convert them to RGB planes in `slot`.
fn finish_ycc(
    ops: &ImageOps,
    ycc: &YccPlanes,
    crop: Crop,
    scale: Scale,
    flip: bool,
    ws: &mut Workspace,
    slot: &mut [u8],
) -> Result<()> {
    let (out_w, out_h) = ops.geometry.size();
    let n = out_w as usize * out_h as usize;
    if slot.len() != 3 * n {
        return Err(OpsError::Invalid(format!(
            "a 3-channel {out_w}x{out_h} output into a {}-byte slot",
            slot.len()
        )));
    }
    let s = f64::from(scale.0) / 8.0;
    if ws.ycc_out.len() < 3 * n {
        ws.ycc_out.resize(3 * n, 0);
    }
    for c in 0..3 {
        // chroma samples are centred on their luma blocks: chroma coordinates are luma / factor
        let (fx, fy) = if c == 0 { (1, 1) } else { ycc.factor };
        let (fx, fy) = (f64::from(fx), f64::from(fy));
        let b = Crop {
            x: crop.x * s / fx,
            y: crop.y * s / fy,
            w: crop.w * s / fx,
            h: crop.h * s / fy,
        };
        let src = PixelsRef {
            width: ycc.width[c],
            height: ycc.height[c],
            channels: 1,
            data: ycc.plane(c),
        };
        let out = &mut ws.ycc_out[c * n..(c + 1) * n];
        ws.resizer.resize_planes(src, b, out_w, out_h, flip, out)?;
    }
    let (y, rest) = ws.ycc_out[..3 * n].split_at(n);
    let (cb, cr) = rest.split_at(n);
    color::ycc_to_rgb_planes(y, cb, cr, slot);
    Ok(())
}

/// Draw the random choices in their fixed order (crop, flip, jitter factors) for an image of
/// `width`×`height`.
fn draw(
    ops: &ImageOps,
    width: u32,
    height: u32,
    rng: &mut dyn Random,
) -> (Crop, bool, Option<Factors>) {
    let crop = match ops.geometry {
        Geometry::RandomResizedCrop { scale, ratio, .. } => {
            geometry::random_resized_crop(width, height, scale, ratio, rng)
        }
        Geometry::ResizeCenterCrop {
            shorter,
            width: w,
            height: h,
        } => geometry::resize_center_crop(width, height, shorter, w, h),
        Geometry::Resize { .. } => geometry::full(width, height),
    };
    let flip = ops.flip_p > 0.0 && rng.uniform(0.0, 1.0) < ops.flip_p;
    let factors = ops.jitter.map(|j| {
        let mut draw = |s: f32| {
            if s > 0.0 {
                Some(rng.uniform(f64::from((1.0 - s).max(0.0)), f64::from(1.0 + s)) as f32)
            } else {
                None
            }
        };
        (draw(j.brightness), draw(j.contrast), draw(j.saturation))
    });
    (crop, flip, factors)
}

/// The common tail: resize `crop` of `src` to the output size, jitter, gray, flip and write.
#[allow(clippy::too_many_arguments)]
fn finish(
    ops: &ImageOps,
    src: PixelsRef<'_>,
    crop: Crop,
    flip: bool,
    factors: Option<Factors>,
    resizer: &mut Resizer,
    resized: &mut Vec<u8>,
    slot: &mut [u8],
) -> Result<()> {
    let (out_w, out_h) = ops.geometry.size();
    let c = src.channels as usize;
    if plain_planes(ops, c, factors) {
        // the common case: the resizer writes the planes (mirrored when flipped) straight into
        // the slot (and refuses a slot of the wrong size)
        return resizer.resize_planes(src, crop, out_w, out_h, flip, slot);
    }
    // the resizer writes every byte: no need to zero the buffer again
    let need = out_w as usize * out_h as usize * c;
    if resized.len() < need {
        resized.resize(need, 0);
    }
    resized.truncate(need);
    resizer.resize(src, crop, out_w, out_h, resized)?;
    if let Some((b, ct, sat)) = factors {
        if let Some(f) = b {
            color::brightness(resized, f);
        }
        if c == 3 {
            if let Some(f) = ct {
                color::contrast(resized, f);
            }
            if let Some(f) = sat {
                color::saturation(resized, f);
            }
        }
    }
    let mut c_out = c;
    if ops.gray && c == 3 {
        let n = color::to_gray(resized);
        resized.truncate(n);
        c_out = 1;
    }
    layout::write(
        resized,
        out_w as usize,
        out_h as usize,
        c_out,
        flip,
        &ops.out,
        slot,
    )
}

/// The deterministic prefix a decoded cache keeps: decode `data` and resize it so that its
/// shorter side is `shorter` (images already smaller keep their size), as packed RGB (or gray
/// with `gray`). JPEGs are decoded at the smallest DCT scale that still covers that size.
pub fn decode_prefix(
    data: &[u8],
    shorter: u32,
    gray: bool,
    max_pixels: u64,
    ws: &mut Workspace,
    out: &mut Pixels,
) -> Result<()> {
    if shorter == 0 {
        return Err(OpsError::Invalid("decoded cache size 0".into()));
    }
    let format = sniff(data)?;
    let mut decoded = std::mem::take(&mut ws.decoded);
    let r = if format == Format::Jpeg {
        let decoder = ws.jpeg()?;
        decoder.header(data).and_then(|h| {
            crate::jpeg::check_pixels(u64::from(h.width), u64::from(h.height), max_pixels)?;
            let (tw, th) = shorter_side(h.width, h.height, shorter);
            let scale = Scale::smallest_covering(f64::from(h.width), f64::from(h.height), tw, th);
            decoder
                .decode(data, scale, None, gray, max_pixels, &mut decoded)
                .map(|_| ())
        })
    } else {
        decode_full(ws.jpeg()?, data, gray, max_pixels, &mut decoded)
    };
    if let Err(e) = r {
        ws.decoded = decoded;
        return Err(e);
    }
    let (tw, th) = shorter_side(decoded.width, decoded.height, shorter);
    out.channels = decoded.channels;
    if (tw, th) == (decoded.width, decoded.height) {
        out.width = decoded.width;
        out.height = decoded.height;
        out.data.clear();
        out.data.extend_from_slice(&decoded.data);
    } else {
        out.width = tw;
        out.height = th;
        out.data
            .resize(tw as usize * th as usize * decoded.channels as usize, 0);
        let whole = geometry::full(decoded.width, decoded.height);
        let r = ws
            .resizer
            .resize(decoded.view(), whole, tw, th, &mut out.data);
        if let Err(e) = r {
            ws.decoded = decoded;
            return Err(e);
        }
    }
    ws.decoded = decoded;
    Ok(())
}

/// The size with the shorter side `shorter` and the aspect ratio kept, never larger than the
/// image.
fn shorter_side(w: u32, h: u32, shorter: u32) -> (u32, u32) {
    let s = w.min(h);
    if s <= shorter {
        return (w, h);
    }
    let f = f64::from(shorter) / f64::from(s);
    let scale = |x: u32| ((f64::from(x) * f).round() as u32).max(1);
    if w <= h {
        (shorter, scale(h))
    } else {
        (scale(w), shorter)
    }
}

/// Run the rest of the pipeline on already decoded pixels (the output of [`decode_prefix`],
/// from a decoded cache): the same random draws in the same order as [`run`], made against the
/// pixels' size.
pub fn run_pixels(
    ops: &ImageOps,
    src: PixelsRef<'_>,
    rng: &mut dyn Random,
    ws: &mut Workspace,
    slot: &mut [u8],
) -> Result<()> {
    let (out_w, out_h) = ops.geometry.size();
    if out_w == 0 || out_h == 0 {
        return Err(OpsError::Invalid(format!("output size {out_w}x{out_h}")));
    }
    let expected = src.width as usize * src.height as usize * src.channels as usize;
    if src.width == 0 || src.height == 0 || src.data.len() != expected {
        return Err(OpsError::Invalid(format!(
            "{}x{}x{} pixels with {} bytes",
            src.width,
            src.height,
            src.channels,
            src.data.len()
        )));
    }
    let (crop, flip, factors) = draw(ops, src.width, src.height, rng);
    finish(
        ops,
        src,
        crop,
        flip,
        factors,
        &mut ws.resizer,
        &mut ws.resized,
        slot,
    )
}
