//! Resizing a crop box of packed 8-bit pixels to an output size (SIMD, through
//! fast_image_resize), bilinear with antialiasing (a convolution whose support grows with the
//! scale factor, like PIL's and torchvision's).

use fast_image_resize as fr;

use crate::error::{OpsError, Result};
use crate::geometry::Crop;
use crate::jpeg::PixelsRef;

/// A resizer with its scratch buffers; one per worker thread.
#[derive(Default)]
pub struct Resizer {
    inner: fr::Resizer,
}

impl std::fmt::Debug for Resizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resizer").finish()
    }
}

impl Resizer {
    /// A resizer.
    pub fn new() -> Resizer {
        Resizer::default()
    }

    /// Resize `crop` of `src` to `out_w`×`out_h` into `dst` (packed, same channel count as
    /// `src`, `out_w * out_h * channels` bytes).
    pub fn resize(
        &mut self,
        src: PixelsRef<'_>,
        crop: Crop,
        out_w: u32,
        out_h: u32,
        dst: &mut [u8],
    ) -> Result<()> {
        let pt = match src.channels {
            1 => fr::PixelType::U8,
            3 => fr::PixelType::U8x3,
            c => return Err(OpsError::Unsupported(format!("{c} channels"))),
        };
        let src_img = fr::images::ImageRef::new(src.width, src.height, src.data, pt)
            .map_err(|e| OpsError::Invalid(format!("source image: {e}")))?;
        let mut dst_img = fr::images::Image::from_slice_u8(out_w, out_h, dst, pt)
            .map_err(|e| OpsError::Invalid(format!("output image: {e}")))?;
        let x = crop.x.clamp(0.0, f64::from(src.width) - 1.0);
        let y = crop.y.clamp(0.0, f64::from(src.height) - 1.0);
        let w = crop.w.min(f64::from(src.width) - x).max(1.0);
        let h = crop.h.min(f64::from(src.height) - y).max(1.0);
        // Downscaling by more than 2x needs the antialiasing convolution (its support grows with
        // the factor); up to 2x, plain bilinear interpolation gives the same result for less work
        // (the fused pipeline's DCT scaling leaves at most 2x to the resizer).
        let factor = (w / f64::from(out_w)).max(h / f64::from(out_h));
        let alg = if factor > 2.0 {
            fr::ResizeAlg::Convolution(fr::FilterType::Bilinear)
        } else {
            fr::ResizeAlg::Interpolation(fr::FilterType::Bilinear)
        };
        let options = fr::ResizeOptions::new().resize_alg(alg).crop(x, y, w, h);
        self.inner
            .resize(&src_img, &mut dst_img, &options)
            .map_err(|e| OpsError::Invalid(format!("resize: {e}")))
    }
}
