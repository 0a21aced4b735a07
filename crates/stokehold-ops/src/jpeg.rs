//! JPEG decoding with libjpeg-turbo's TurboJPEG 3 API: headers without decoding, DCT-domain
//! scaling (M/8) and cropped decoding (only the needed columns are decoded, rows outside the
//! region are skipped), into RGB (or grayscale) pixels.

use std::ffi::CStr;
use std::os::raw::c_int;

use turbojpeg_sys as tj;

use crate::error::{OpsError, Result};

/// What a JPEG header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JpegHeader {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Chroma subsampling (TurboJPEG's TJSAMP value; -1 when unknown).
    pub subsamp: i32,
    /// Colour space (TurboJPEG's TJCS value).
    pub colorspace: i32,
    /// Whether it is progressive.
    pub progressive: bool,
}

impl JpegHeader {
    /// True for CMYK and YCCK images (decoded through CMYK, then converted).
    pub fn is_cmyk(&self) -> bool {
        self.colorspace == tj::TJCS_TJCS_CMYK as i32 || self.colorspace == tj::TJCS_TJCS_YCCK as i32
    }

    /// True for grayscale images.
    pub fn is_gray(&self) -> bool {
        self.colorspace == tj::TJCS_TJCS_GRAY as i32
    }

    /// Width of an iMCU (the unit a cropping region's left edge must be aligned to), unscaled.
    pub fn mcu_width(&self) -> Option<u32> {
        Some(match self.subsamp {
            s if s == tj::TJSAMP_TJSAMP_444
                || s == tj::TJSAMP_TJSAMP_GRAY
                || s == tj::TJSAMP_TJSAMP_440 =>
            {
                8
            }
            s if s == tj::TJSAMP_TJSAMP_422
                || s == tj::TJSAMP_TJSAMP_420
                || s == tj::TJSAMP_TJSAMP_441 =>
            {
                16
            }
            s if s == tj::TJSAMP_TJSAMP_411 => 32,
            _ => return None,
        })
    }
}

/// A DCT scaling factor `num / 8`, `num` in 1..=8 (libjpeg-turbo also offers up-scaling factors;
/// a loader never wants them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scale(pub u8);

impl Scale {
    /// No scaling.
    pub const FULL: Scale = Scale(8);

    /// `dim` scaled (rounded up, as libjpeg does).
    pub fn apply(self, dim: u32) -> u32 {
        (dim * u32::from(self.0)).div_ceil(8)
    }

    /// The smallest factor at which a `w`×`h` region is still at least `out_w`×`out_h`. Only
    /// 1/8, 1/4, 1/2 and 1 are used: libjpeg-turbo has SIMD inverse DCTs for those sizes, while
    /// 3/8, 5/8, 6/8 and 7/8 run a scalar DCT that is slower than the full-size SIMD one.
    pub fn smallest_covering(w: f64, h: f64, out_w: u32, out_h: u32) -> Scale {
        for num in [1u8, 2, 4, 8] {
            let s = f64::from(num) / 8.0;
            if w * s >= f64::from(out_w) && h * s >= f64::from(out_h) {
                return Scale(num);
            }
        }
        Scale::FULL
    }
}

/// Pixels as decoded: `channels` bytes per pixel, rows of `width * channels` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pixels {
    /// Width.
    pub width: u32,
    /// Height.
    pub height: u32,
    /// 1 (gray) or 3 (RGB).
    pub channels: u8,
    /// The bytes.
    pub data: Vec<u8>,
}

/// Borrowed packed pixels (a decoded image held elsewhere, such as in a decoded cache).
#[derive(Debug, Clone, Copy)]
pub struct PixelsRef<'a> {
    /// Width.
    pub width: u32,
    /// Height.
    pub height: u32,
    /// 1 (gray) or 3 (RGB).
    pub channels: u8,
    /// `width * height * channels` bytes, row-major.
    pub data: &'a [u8],
}

impl Pixels {
    /// A borrowed view.
    pub fn view(&self) -> PixelsRef<'_> {
        PixelsRef {
            width: self.width,
            height: self.height,
            channels: self.channels,
            data: &self.data,
        }
    }
}

/// A TurboJPEG decompressor. Not shared between threads (each worker keeps its own).
#[derive(Debug)]
pub struct Decoder {
    handle: tj::tjhandle,
}

// SAFETY: a TurboJPEG handle may be used from any thread as long as it is used by one thread at a
// time, which `&mut self` on every method guarantees.
unsafe impl Send for Decoder {}

impl Decoder {
    /// A new decompressor.
    pub fn new() -> Result<Decoder> {
        // SAFETY: tj3Init has no preconditions; a null return is handled.
        let handle = unsafe { tj::tj3Init(tj::TJINIT_TJINIT_DECOMPRESS as c_int) };
        if handle.is_null() {
            return Err(OpsError::Decode {
                codec: "JPEG",
                message: "cannot create a TurboJPEG decompressor".into(),
            });
        }
        let mut d = Decoder { handle };
        // Corrupt data must be an error, not a partly grey image: stop at the first warning.
        d.set(tj::TJPARAM_TJPARAM_STOPONWARNING, 1)?;
        Ok(d)
    }

    /// Trade a little accuracy for speed: libjpeg-turbo's fast integer inverse DCT.
    ///
    /// Not its fast (merged) chroma upsampling: with a cropping region, libjpeg-turbo 3.1 skips
    /// the rows above the crop with `jpeg_skip_scanlines`, which mishandles the merged upsampler
    /// (libjpeg-turbo issue #915, fixed after 3.1): we saw "extraneous bytes before marker" and
    /// "bad Huffman code" errors on valid restart-marked files, differing from run to run.
    pub fn set_fast(&mut self, fast: bool) -> Result<()> {
        self.set(tj::TJPARAM_TJPARAM_FASTDCT, i32::from(fast))
    }

    /// The last error's message; the handle is then replaced by a fresh one, because a
    /// decompressor stopped mid-image can fail the next image too.
    fn error(&mut self) -> OpsError {
        // SAFETY: `handle` is a live TurboJPEG handle; tj3GetErrorStr returns a NUL-terminated
        // string owned by the handle, valid until the next call on it, and copied here at once.
        let msg = unsafe { CStr::from_ptr(tj::tj3GetErrorStr(self.handle)) }
            .to_string_lossy()
            .into_owned();
        if let Ok(fresh) = Decoder::new() {
            // the old handle is destroyed when `fresh`, now holding it, is dropped
            let old = std::mem::replace(self, fresh);
            drop(old);
        }
        OpsError::Decode {
            codec: "JPEG",
            message: msg,
        }
    }

    fn get(&self, param: tj::TJPARAM) -> i32 {
        // SAFETY: `handle` is live; tj3Get only reads a parameter.
        unsafe { tj::tj3Get(self.handle, param as c_int) }
    }

    fn set(&mut self, param: tj::TJPARAM, value: i32) -> Result<()> {
        // SAFETY: `handle` is live; tj3Set validates the parameter and value.
        if unsafe { tj::tj3Set(self.handle, param as c_int, value) } != 0 {
            return Err(self.error());
        }
        Ok(())
    }

    /// Read the header of `data` (no pixels are decoded).
    pub fn header(&mut self, data: &[u8]) -> Result<JpegHeader> {
        // SAFETY: `handle` is live; `data` is a valid slice of `data.len()` bytes that
        // libjpeg-turbo only reads.
        let r = unsafe { tj::tj3DecompressHeader(self.handle, data.as_ptr(), data.len() as _) };
        if r != 0 {
            return Err(self.error());
        }
        let precision = self.get(tj::TJPARAM_TJPARAM_PRECISION);
        if precision != 8 {
            return Err(OpsError::Unsupported(format!(
                "{precision}-bit JPEG (only 8-bit is decoded)"
            )));
        }
        let (w, h) = (
            self.get(tj::TJPARAM_TJPARAM_JPEGWIDTH),
            self.get(tj::TJPARAM_TJPARAM_JPEGHEIGHT),
        );
        if w <= 0 || h <= 0 {
            return Err(OpsError::Decode {
                codec: "JPEG",
                message: format!("header gives a {w}x{h} image"),
            });
        }
        Ok(JpegHeader {
            width: w as u32,
            height: h as u32,
            subsamp: self.get(tj::TJPARAM_TJPARAM_SUBSAMP),
            colorspace: self.get(tj::TJPARAM_TJPARAM_COLORSPACE),
            progressive: self.get(tj::TJPARAM_TJPARAM_PROGRESSIVE) != 0,
        })
    }

    /// Decode `data` at `scale`, only the region `(x, y, w, h)` of the *scaled* image when given
    /// (`x` is moved left to the nearest scaled iMCU boundary as libjpeg-turbo requires, and the
    /// returned `x_offset` says by how much), as RGB (or gray when `gray`), into `out`.
    /// `max_pixels` bounds the declared size before anything is allocated.
    pub fn decode(
        &mut self,
        data: &[u8],
        scale: Scale,
        region: Option<(u32, u32, u32, u32)>,
        gray: bool,
        max_pixels: u64,
        out: &mut Pixels,
    ) -> Result<u32> {
        let hdr = self.header(data)?;
        check_pixels(u64::from(hdr.width), u64::from(hdr.height), max_pixels)?;
        // libjpeg-turbo lists its factors in lowest terms (4/8 is 1/2).
        let num = c_int::from(scale.0);
        let g = gcd(num, 8);
        let sf = tj::tjscalingfactor {
            num: num / g,
            denom: 8 / g,
        };
        // SAFETY: `handle` is live; the factor is one of M/8, M in 1..=8, which libjpeg-turbo
        // supports (it validates it anyway).
        if unsafe { tj::tj3SetScalingFactor(self.handle, sf) } != 0 {
            return Err(self.error());
        }
        let (sw, sh) = (scale.apply(hdr.width), scale.apply(hdr.height));
        let mut x_offset = 0;
        let region = match (region, hdr.mcu_width()) {
            (Some((x, y, w, h)), Some(mcu)) => {
                let mcu = scale.apply(mcu).max(1);
                let x = x.min(sw.saturating_sub(1));
                let ax = x - x % mcu;
                x_offset = x - ax;
                let w = (w + x_offset).clamp(1, sw - ax);
                let y = y.min(sh.saturating_sub(1));
                let h = h.clamp(1, sh - y);
                tj::tjregion {
                    x: ax as c_int,
                    y: y as c_int,
                    w: w as c_int,
                    h: h as c_int,
                }
            }
            (Some((x, _, _, _)), None) => {
                // No cropping possible (unknown subsampling): decode everything, offset the region.
                x_offset = x;
                tj::tjregion {
                    x: 0,
                    y: 0,
                    w: 0,
                    h: 0,
                }
            }
            (None, _) => tj::tjregion {
                x: 0,
                y: 0,
                w: 0,
                h: 0,
            },
        };
        // SAFETY: `handle` is live and a scaling factor is set; a zero region means "uncropped";
        // libjpeg-turbo validates the region against the scaled image.
        if unsafe { tj::tj3SetCroppingRegion(self.handle, region) } != 0 {
            return Err(self.error());
        }
        let (ow, oh) = if region.w == 0 {
            (sw, sh)
        } else {
            (region.w as u32, region.h as u32)
        };
        let (pf, channels) = if hdr.is_cmyk() {
            (tj::TJPF_TJPF_CMYK, 4u8)
        } else if gray {
            (tj::TJPF_TJPF_GRAY, 1u8)
        } else {
            (tj::TJPF_TJPF_RGB, 3u8)
        };
        let pitch = ow as usize * usize::from(channels);
        // The decoder writes every byte: the buffer's room is reserved, not zeroed (a large
        // image after a small one would otherwise zero again what the small one left out), and
        // its length set once the decode succeeded.
        let need = pitch * oh as usize;
        out.data.clear();
        out.data.reserve(need);
        (out.width, out.height) = (0, 0);
        // SAFETY: `out.data` has room for `pitch * oh` bytes (reserved above), the size
        // libjpeg-turbo writes for a (cropped, scaled) image of `ow`×`oh` in this pixel format
        // with this pitch; `data` is only read.
        let r = unsafe {
            tj::tj3Decompress8(
                self.handle,
                data.as_ptr(),
                data.len() as _,
                out.data.as_mut_ptr(),
                pitch as c_int,
                pf as c_int,
            )
        };
        if r != 0 {
            // warnings (e.g. a truncated file, decoded as far as possible) are errors here: a
            // loader must not feed grey-filled garbage into training
            return Err(self.error());
        }
        // SAFETY: the decode succeeded, so libjpeg-turbo wrote all `pitch * oh` bytes of the
        // room reserved above.
        unsafe { out.data.set_len(need) };
        out.width = ow;
        out.height = oh;
        out.channels = channels;
        if hdr.is_cmyk() {
            cmyk_to_rgb(out, gray);
        }
        Ok(x_offset)
    }
}

/// The Y, Cb and Cr planes of a decoded JPEG, chroma at its coded resolution (no upsampling, no
/// colour conversion). Plane `c` is `width[c]`×`height[c]` bytes, row-major.
#[derive(Debug, Default)]
pub struct YccPlanes {
    /// Plane widths (libjpeg-turbo's plane widths: the luma width rounded up to the subsampling
    /// factor, and its share for chroma).
    pub width: [u32; 3],
    /// Plane heights.
    pub height: [u32; 3],
    /// Plane bytes: at least width × height each (the buffers are kept at the largest size
    /// decoded, so that a smaller image after a larger one zeroes nothing); see
    /// [`YccPlanes::plane`].
    data: [Vec<u8>; 3],
    /// The scaled image size (what the luma plane holds before its padding).
    pub image: (u32, u32),
    /// Chroma subsampling: (horizontal, vertical) factor, 1 or 2.
    pub factor: (u32, u32),
}

impl YccPlanes {
    /// Plane `c` (0: Y, 1: Cb, 2: Cr) of the last image decoded: width × height bytes.
    pub fn plane(&self, c: usize) -> &[u8] {
        &self.data[c][..self.width[c] as usize * self.height[c] as usize]
    }
}

impl Decoder {
    /// Decode `data` at `scale` into its Y, Cb and Cr planes ([`YccPlanes`]), skipping chroma
    /// upsampling and colour conversion. Only YCbCr JPEGs with 4:4:4, 4:2:2 or 4:2:0 chroma take
    /// this path: for any other image it returns `Ok(false)` and decodes nothing.
    pub fn decode_ycc(
        &mut self,
        data: &[u8],
        scale: Scale,
        max_pixels: u64,
        out: &mut YccPlanes,
    ) -> Result<bool> {
        let hdr = self.header(data)?;
        check_pixels(u64::from(hdr.width), u64::from(hdr.height), max_pixels)?;
        let factor = match hdr.subsamp {
            s if s == tj::TJSAMP_TJSAMP_444 => (1, 1),
            s if s == tj::TJSAMP_TJSAMP_422 => (2, 1),
            s if s == tj::TJSAMP_TJSAMP_420 => (2, 2),
            _ => return Ok(false),
        };
        if hdr.colorspace != tj::TJCS_TJCS_YCbCr as i32 {
            return Ok(false);
        }
        let num = c_int::from(scale.0);
        let g = gcd(num, 8);
        let sf = tj::tjscalingfactor {
            num: num / g,
            denom: 8 / g,
        };
        let none = tj::tjregion {
            x: 0,
            y: 0,
            w: 0,
            h: 0,
        };
        // SAFETY: `handle` is live; the factor is one of M/8 (validated by libjpeg-turbo too).
        if unsafe { tj::tj3SetScalingFactor(self.handle, sf) } != 0 {
            return Err(self.error());
        }
        // SAFETY: `handle` is live; an empty region means "uncropped" (YUV decoding cannot crop).
        if unsafe { tj::tj3SetCroppingRegion(self.handle, none) } != 0 {
            return Err(self.error());
        }
        let (sw, sh) = (scale.apply(hdr.width), scale.apply(hdr.height));
        let mut planes: [*mut u8; 3] = [std::ptr::null_mut(); 3];
        let mut strides: [c_int; 3] = [0; 3];
        for c in 0..3 {
            // SAFETY: pure functions of their arguments.
            let (pw, ph) = unsafe {
                (
                    tj::tj3YUVPlaneWidth(c as c_int, sw as c_int, hdr.subsamp),
                    tj::tj3YUVPlaneHeight(c as c_int, sh as c_int, hdr.subsamp),
                )
            };
            if pw <= 0 || ph <= 0 {
                return Err(self.error());
            }
            let need = pw as usize * ph as usize;
            if out.data[c].len() < need {
                out.data[c].resize(need, 0);
            }
            out.width[c] = pw as u32;
            out.height[c] = ph as u32;
            planes[c] = out.data[c].as_mut_ptr();
            strides[c] = pw;
        }
        // SAFETY: each plane holds at least `stride × plane height` bytes, the sizes
        // libjpeg-turbo's own tj3YUVPlaneWidth/Height give for this scaled size and subsampling,
        // which is what it writes; `data` is only read.
        let r = unsafe {
            tj::tj3DecompressToYUVPlanes8(
                self.handle,
                data.as_ptr(),
                data.len() as _,
                planes.as_mut_ptr(),
                strides.as_mut_ptr(),
            )
        };
        if r != 0 {
            return Err(self.error());
        }
        out.image = (sw, sh);
        out.factor = factor;
        Ok(true)
    }
}

impl Drop for Decoder {
    fn drop(&mut self) {
        // SAFETY: `handle` came from tj3Init and is destroyed once.
        unsafe { tj::tj3Destroy(self.handle) }
    }
}

fn gcd(a: c_int, b: c_int) -> c_int {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Refuse images over the pixel limit.
pub fn check_pixels(width: u64, height: u64, max_pixels: u64) -> Result<()> {
    if width.saturating_mul(height) > max_pixels {
        return Err(OpsError::TooLarge {
            width,
            height,
            max_pixels,
        });
    }
    Ok(())
}

/// Adobe CMYK/YCCK JPEGs decode to inverted CMYK; R = C·K/255 and so on.
fn cmyk_to_rgb(p: &mut Pixels, gray: bool) {
    let n = (p.width * p.height) as usize;
    let out_ch = if gray { 1 } else { 3 };
    for i in 0..n {
        let (c, m, y, k) = (
            p.data[4 * i] as u32,
            p.data[4 * i + 1] as u32,
            p.data[4 * i + 2] as u32,
            p.data[4 * i + 3] as u32,
        );
        let (r, g, b) = (
            (c * k / 255) as u8,
            (m * k / 255) as u8,
            (y * k / 255) as u8,
        );
        if gray {
            p.data[i] = luma(r, g, b);
        } else {
            p.data[3 * i] = r;
            p.data[3 * i + 1] = g;
            p.data[3 * i + 2] = b;
        }
    }
    p.data.truncate(n * out_ch);
    p.channels = out_ch as u8;
}

/// ITU-R 601 luma, as PIL's `convert("L")`.
#[inline]
pub fn luma(r: u8, g: u8, b: u8) -> u8 {
    ((u32::from(r) * 19595 + u32::from(g) * 38470 + u32::from(b) * 7471 + 32768) >> 16) as u8
}

// SAFETY (of the declaration): this is libjpeg-turbo's own prototype, `int
// jsimd_can_idct_islow(void)`, from the statically linked library.
unsafe extern "C" {
    /// libjpeg-turbo's internal probe: non-zero when the SIMD inverse DCT is in use.
    fn jsimd_can_idct_islow() -> c_int;
}

/// Whether libjpeg-turbo's SIMD code is in use in this build on this CPU.
pub fn simd_in_use() -> bool {
    // SAFETY: a side-effect-free query of the statically linked library's CPU detection.
    unsafe { jsimd_can_idct_islow() != 0 }
}

// SAFETY (of the declaration): `int stokehold_jdhuff_fast_restarts` is defined by our patch to
// the vendored libjpeg-turbo (vendor/turbojpeg-sys/STOKEHOLD.md) and only ever read and written
// with relaxed atomic operations on both sides; `AtomicI32` has the layout of a C `int`.
unsafe extern "C" {
    static stokehold_jdhuff_fast_restarts: std::sync::atomic::AtomicI32;
}

/// Whether libjpeg-turbo decodes Huffman data with stokehold's patches (`true`, the default;
/// vendor/turbojpeg-sys/STOKEHOLD.md): the fast decoder inside restart intervals, the last MCU of
/// an interval included, and up to two codes with their value bits in one table lookup; or as
/// unpatched libjpeg-turbo does (`false`): the slow decoder only wherever a file has restart
/// markers, one lookup for the code and another read for the value bits elsewhere.
/// Process-wide; for differential tests, fuzzing and benchmarks of the patch, which must give
/// identical results either way.
#[doc(hidden)]
pub fn set_patched_huffman_decoding(on: bool) {
    use std::sync::atomic::Ordering;
    // SAFETY: the static exists for the program's lifetime and is only accessed atomically.
    unsafe { stokehold_jdhuff_fast_restarts.store(i32::from(on), Ordering::Relaxed) }
}

/// See [`set_patched_huffman_decoding`].
#[doc(hidden)]
pub fn patched_huffman_decoding() -> bool {
    use std::sync::atomic::Ordering;
    // SAFETY: as in `set_patched_huffman_decoding`.
    unsafe { stokehold_jdhuff_fast_restarts.load(Ordering::Relaxed) != 0 }
}

/// A TurboJPEG handle of one kind, destroyed on drop.
struct Handle(tj::tjhandle);

impl Handle {
    fn new(kind: tj::TJINIT) -> Result<Handle> {
        // SAFETY: tj3Init has no preconditions; a null return is handled.
        let h = unsafe { tj::tj3Init(kind as c_int) };
        if h.is_null() {
            return Err(OpsError::Decode {
                codec: "JPEG",
                message: "cannot create a TurboJPEG handle".into(),
            });
        }
        Ok(Handle(h))
    }

    fn error(&self) -> OpsError {
        // SAFETY: the handle is live; the message is copied at once.
        let msg = unsafe { CStr::from_ptr(tj::tj3GetErrorStr(self.0)) }
            .to_string_lossy()
            .into_owned();
        OpsError::Decode {
            codec: "JPEG",
            message: msg,
        }
    }

    fn set(&self, param: tj::TJPARAM, value: i32) -> Result<()> {
        // SAFETY: the handle is live; tj3Set validates its arguments.
        if unsafe { tj::tj3Set(self.0, param as c_int, value) } != 0 {
            return Err(self.error());
        }
        Ok(())
    }

    /// Take ownership of a buffer TurboJPEG allocated, copying it into a Vec and freeing it.
    fn take(buf: *mut u8, size: usize) -> Vec<u8> {
        // SAFETY: `buf` was allocated by libjpeg-turbo (tj3Alloc) and holds `size` initialised
        // bytes, written by the successful call that returned it; it is freed exactly once here.
        unsafe {
            let v = std::slice::from_raw_parts(buf, size).to_vec();
            tj::tj3Free(buf.cast());
            v
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle came from tj3Init and is destroyed once.
        unsafe { tj::tj3Destroy(self.0) }
    }
}

/// Losslessly rewrite a (progressive) JPEG as baseline with optimised Huffman tables: the same
/// DCT coefficients, so the same pixels, but about 3× faster to decode and croppable.
pub fn to_baseline(data: &[u8]) -> Result<Vec<u8>> {
    transform(data, 0)
}

pub use crate::rst_insert::restart_interval;

/// Losslessly rewrite a JPEG as baseline with restart markers aligned to MCU rows (every
/// [`restart_interval`] MCUs): the same coefficients and pixels, about 4% larger, and a crop
/// then needs only its share of the Huffman decoding ([`crate::restart::RestartIndex`]).
///
/// A baseline file gets its markers in one pass over its entropy-coded bits, its tables kept
/// ([`crate::rst_insert::insert_restarts`], about 10× faster); anything else (progressive files,
/// files with other restart intervals, ...) goes through libjpeg-turbo's transcoder, which also
/// optimises the Huffman tables.
pub fn with_restarts(data: &[u8]) -> Result<Vec<u8>> {
    match crate::rst_insert::insert_restarts(data) {
        Some(out) => Ok(out),
        None => with_restarts_transcoded(data),
    }
}

/// [`with_restarts`] through libjpeg-turbo's transcoder whatever the file (the slower general
/// path: every coefficient decoded, Huffman tables optimised in a second pass).
pub fn with_restarts_transcoded(data: &[u8]) -> Result<Vec<u8>> {
    let hdr = Decoder::new()?.header(data)?;
    let mcu_w = hdr.mcu_width().ok_or_else(|| {
        OpsError::Unsupported(format!(
            "restart markers for chroma subsampling {}",
            hdr.subsamp
        ))
    })?;
    let k = restart_interval(hdr.width.div_ceil(mcu_w));
    transform(data, k)
}

/// A lossless transcode to baseline with optimised Huffman tables, with restart markers every
/// `restart_blocks` MCUs (0: none).
fn transform(data: &[u8], restart_blocks: u32) -> Result<Vec<u8>> {
    let h = Handle::new(tj::TJINIT_TJINIT_TRANSFORM)?;
    h.set(tj::TJPARAM_TJPARAM_STOPONWARNING, 1)?;
    if restart_blocks > 0 {
        h.set(
            tj::TJPARAM_TJPARAM_RESTARTBLOCKS,
            i32::try_from(restart_blocks).unwrap_or(i32::MAX),
        )?;
    }
    // SAFETY: tjtransform is a plain C struct for which all-zero is valid (no region, op NONE,
    // no options, null data, no custom filter).
    let mut xf: tj::tjtransform = unsafe { std::mem::zeroed() };
    xf.op = tj::TJXOP_TJXOP_NONE as c_int;
    xf.options = tj::TJXOPT_OPTIMIZE as c_int;
    let mut dst: *mut u8 = std::ptr::null_mut();
    let mut size: tj::size_t = 0;
    // SAFETY: the handle is live; `data` is read only; TurboJPEG allocates `dst` (we pass null)
    // and reports its size; `xf` is a valid transform for one output.
    let r = unsafe {
        tj::tj3Transform(
            h.0,
            data.as_ptr(),
            data.len() as _,
            1,
            &mut dst,
            &mut size,
            &xf,
        )
    };
    if r != 0 {
        if !dst.is_null() {
            Handle::take(dst, 0);
        }
        return Err(h.error());
    }
    Ok(Handle::take(dst, size as usize))
}

/// Encode packed pixels as a baseline JPEG (4:2:0 for colour) at `quality`.
pub fn encode(px: &Pixels, quality: u8) -> Result<Vec<u8>> {
    let h = Handle::new(tj::TJINIT_TJINIT_COMPRESS)?;
    h.set(
        tj::TJPARAM_TJPARAM_QUALITY,
        i32::from(quality.clamp(1, 100)),
    )?;
    let (pf, samp) = match px.channels {
        1 => (tj::TJPF_TJPF_GRAY, tj::TJSAMP_TJSAMP_GRAY),
        3 => (tj::TJPF_TJPF_RGB, tj::TJSAMP_TJSAMP_420),
        c => return Err(OpsError::Unsupported(format!("encoding {c} channels"))),
    };
    h.set(tj::TJPARAM_TJPARAM_SUBSAMP, samp)?;
    let pitch = px.width as usize * usize::from(px.channels);
    if px.data.len() != pitch * px.height as usize {
        return Err(OpsError::Invalid(
            "pixel buffer does not match its size".into(),
        ));
    }
    let mut dst: *mut u8 = std::ptr::null_mut();
    let mut size: tj::size_t = 0;
    // SAFETY: the handle is live; the source buffer holds `pitch * height` bytes (checked above);
    // TurboJPEG allocates the output and reports its size.
    let r = unsafe {
        tj::tj3Compress8(
            h.0,
            px.data.as_ptr(),
            px.width as c_int,
            pitch as c_int,
            px.height as c_int,
            pf as c_int,
            &mut dst,
            &mut size,
        )
    };
    if r != 0 {
        if !dst.is_null() {
            Handle::take(dst, 0);
        }
        return Err(h.error());
    }
    Ok(Handle::take(dst, size as usize))
}

#[cfg(test)]
mod restart_tests {
    use super::restart_interval;

    #[test]
    fn restart_intervals_divide_the_row_into_bands() {
        assert_eq!(
            restart_interval(32),
            2,
            "500 px at 4:2:0: 16 bands of 32 px"
        );
        assert_eq!(restart_interval(24), 2);
        assert_eq!(restart_interval(63), 3);
        assert_eq!(restart_interval(64), 4);
        assert_eq!(restart_interval(94), 2);
        assert_eq!(restart_interval(47), 47, "a prime: one interval per row");
        assert_eq!(restart_interval(1), 1);
        assert_eq!(restart_interval(5), 5);
        for m in 1..500 {
            assert_eq!(m % restart_interval(m), 0, "{m}");
        }
    }
}
