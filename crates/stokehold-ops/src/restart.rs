//! Decoding only the entropy-coded data a crop needs, through restart markers.
//!
//! A baseline JPEG must be Huffman-decoded from its first MCU to its last, even when only a crop
//! of it is wanted: that is the floor of every decoder (about half the decode time on
//! ImageNet-sized photographs). Restart markers cut the entropy-coded data into intervals that
//! each start afresh (DC predictors reset, byte-aligned). When the intervals are aligned to MCU
//! rows — the restart interval divides the number of MCUs per row, so every row is a whole
//! number of intervals, "bands" — the intervals covering a rectangle of rows × bands form a
//! smaller, valid JPEG of their own: same tables, a frame header with the smaller size, the
//! intervals in order with their restart markers renumbered. Decoding that is exact (the same
//! coefficients), and costs only the rectangle's share of the Huffman work.
//!
//! `stokehold pack` adds such markers losslessly by default ([`crate::jpeg::with_restarts`]);
//! [`RestartIndex::parse`] recognises a file that has them and [`RestartIndex::extract`] builds
//! the sub-image. Files without markers, progressive or arithmetic-coded files, multi-scan files
//! and anything unexpected are simply not indexable ([`RestartIndex::parse`] returns `None`) and
//! take the normal path.

use std::ops::Range;

/// Where the parts of a restart-marked baseline JPEG are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartIndex {
    /// Bytes up to the first entropy-coded byte (all tables, the frame and scan headers).
    header_end: usize,
    /// Offset of the frame header's height field (the width follows it).
    sof_size_at: usize,
    /// Image size.
    width: u32,
    height: u32,
    /// MCU size in pixels.
    pub mcu_w: u32,
    /// MCU height in pixels.
    pub mcu_h: u32,
    /// MCUs per row and rows of MCUs.
    mcux: u32,
    mcuy: u32,
    /// MCUs per restart interval.
    interval: u32,
    /// Byte ranges of the intervals' entropy-coded data (markers excluded), in order.
    spans: Vec<(u32, u32)>,
}

fn be16(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from(*d.get(at)?) << 8 | u32::from(*d.get(at + 1)?))
}

impl RestartIndex {
    /// Index `data`, or `None` when it is not a single-scan baseline (or extended sequential)
    /// Huffman JPEG whose restart intervals are aligned to MCU rows.
    pub fn parse(data: &[u8]) -> Option<RestartIndex> {
        if data.get(..2)? != [0xFF, 0xD8] {
            return None;
        }
        let mut at = 2usize;
        let mut frame: Option<(usize, u32, u32, u32, u32, u8)> = None; // size_at, w, h, mcu_w, mcu_h, comps
        let mut interval = 0u32;
        loop {
            // markers may be preceded by fill bytes
            if *data.get(at)? != 0xFF {
                return None;
            }
            while *data.get(at)? == 0xFF {
                at += 1;
            }
            let m = *data.get(at)?;
            at += 1;
            let len = be16(data, at)? as usize;
            if len < 2 || at.checked_add(len)? > data.len() {
                return None;
            }
            let seg = &data[at + 2..at + len];
            match m {
                0xC0 | 0xC1 => {
                    if frame.is_some() || seg.len() < 6 || seg[0] != 8 {
                        return None;
                    }
                    let h = be16(seg, 1)?;
                    let w = be16(seg, 3)?;
                    let n = seg[5];
                    if w == 0 || h == 0 || !(n == 1 || n == 3) || seg.len() != 6 + 3 * n as usize {
                        return None;
                    }
                    let (mut hmax, mut vmax) = (1u32, 1u32);
                    for c in 0..n as usize {
                        let hv = seg[6 + 3 * c + 1];
                        let (hs, vs) = (u32::from(hv >> 4), u32::from(hv & 15));
                        if !(1..=4).contains(&hs) || !(1..=4).contains(&vs) {
                            return None;
                        }
                        hmax = hmax.max(hs);
                        vmax = vmax.max(vs);
                    }
                    if n == 1 && (hmax, vmax) != (1, 1) {
                        return None; // a lone component's MCU is one block whatever its factors
                    }
                    frame = Some((at + 3, w, h, 8 * hmax, 8 * vmax, n));
                }
                0xC2 | 0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF => return None,
                0xDD => interval = be16(seg, 0)?,
                0xDA => {
                    let (size_at, w, h, mcu_w, mcu_h, n) = frame?;
                    if seg.first().copied()? != n || interval == 0 {
                        return None;
                    }
                    let header_end = at + len;
                    let mcux = w.div_ceil(mcu_w);
                    let mcuy = h.div_ceil(mcu_h);
                    if mcux % interval != 0 {
                        return None;
                    }
                    let spans = scan_intervals(data, header_end)?;
                    let expected =
                        (u64::from(mcux) * u64::from(mcuy)).div_ceil(u64::from(interval));
                    if spans.len() as u64 != expected {
                        return None;
                    }
                    return Some(RestartIndex {
                        header_end,
                        sof_size_at: size_at,
                        width: w,
                        height: h,
                        mcu_w,
                        mcu_h,
                        mcux,
                        mcuy,
                        interval,
                        spans,
                    });
                }
                0xD0..=0xD9 | 0x01 => return None, // no length: not expected before the scan
                _ => {}
            }
            at += len;
        }
    }

    /// Width of a band (the pixels of one restart interval's columns).
    pub fn band_w(&self) -> u32 {
        self.interval * self.mcu_w
    }

    /// Bands per row.
    pub fn bands(&self) -> u32 {
        self.mcux / self.interval
    }

    /// Rows of MCUs.
    pub fn rows(&self) -> u32 {
        self.mcuy
    }

    /// The rows and bands covering `x0..x1` × `y0..y1` (pixels) with a margin of `margin`
    /// pixels on every side. Chroma upsampling reads one chroma sample beyond each pixel (two
    /// pixels with 2× subsampling, at the decoded scale), so a margin of `2 / scale` pixels makes
    /// the cut-out decode the crop exactly as the whole image would.
    pub fn cover(
        &self,
        x0: f64,
        y0: f64,
        x1: f64,
        y1: f64,
        margin: f64,
    ) -> (Range<u32>, Range<u32>) {
        let (mh, bw) = (f64::from(self.mcu_h), f64::from(self.band_w()));
        let r0 = ((y0 - margin).max(0.0) / mh).floor() as u32;
        let r1 = (((y1 + margin) / mh).ceil() as u32).min(self.mcuy);
        let b0 = ((x0 - margin).max(0.0) / bw).floor() as u32;
        let b1 = (((x1 + margin) / bw).ceil() as u32).min(self.bands());
        (r0.min(r1)..r1, b0.min(b1)..b1)
    }

    /// Write into `out` the JPEG of `rows` × `bands` (their pixel offset in the whole image is
    /// `(bands.start * band_w, rows.start * mcu_h)`), followed by [`CUT_TAIL`] zero bytes after
    /// its EOI marker. `data` must be the bytes that were indexed.
    pub fn extract(
        &self,
        data: &[u8],
        rows: Range<u32>,
        bands: Range<u32>,
        out: &mut Vec<u8>,
    ) -> bool {
        if rows.is_empty() || bands.is_empty() || rows.end > self.mcuy || bands.end > self.bands() {
            return false;
        }
        let x0 = bands.start * self.band_w();
        let y0 = rows.start * self.mcu_h;
        let w = (bands.end * self.band_w()).min(self.width) - x0;
        let h = (rows.end * self.mcu_h).min(self.height) - y0;
        out.clear();
        out.extend_from_slice(&data[..self.header_end]);
        out[self.sof_size_at..self.sof_size_at + 2].copy_from_slice(&(h as u16).to_be_bytes());
        out[self.sof_size_at + 2..self.sof_size_at + 4].copy_from_slice(&(w as u16).to_be_bytes());
        let per_row = self.bands();
        let mut n = 0u32;
        for r in rows {
            for b in bands.clone() {
                if n > 0 {
                    out.extend_from_slice(&[0xFF, 0xD0 + (((n - 1) % 8) as u8)]);
                }
                let (s, e) = self.spans[(r * per_row + b) as usize];
                out.extend_from_slice(&data[s as usize..e as usize]);
                n += 1;
            }
        }
        out.extend_from_slice(&[0xFF, 0xD9]);
        out.resize(out.len() + CUT_TAIL, 0);
        true
    }
}

/// Zero bytes [`RestartIndex::extract`] puts after a cut JPEG's EOI marker. Decoders stop at EOI
/// and never read them; they are there because libjpeg-turbo's fast Huffman decoder runs only
/// while at least 512 bytes per block of an MCU (at most 10 blocks) are left in its input, and
/// hands the MCUs of a file's last few KiB to its slower decoder otherwise: about 14% of a cut's
/// MCUs, as a random crop's cut holds only tens of KiB. (The fast decoder never reads past a
/// marker, so the extra room changes nothing else.)
pub const CUT_TAIL: usize = 512 * 10;

/// The byte ranges of the restart intervals of the scan starting at `start`, checking that the
/// markers count 0, 1, ..., 7, 0, ... and that the scan ends with EOI.
fn scan_intervals(data: &[u8], start: usize) -> Option<Vec<(u32, u32)>> {
    let mut spans = Vec::new();
    let mut begin = start;
    let mut i = start;
    let mut expect = 0u8;
    u32::try_from(data.len()).ok()?;
    loop {
        let ff = i + memchr_ff(&data[i..])?;
        let m = *data.get(ff + 1)?;
        match m {
            0x00 => i = ff + 2,
            0xFF => i = ff + 1, // fill byte
            0xD0..=0xD7 => {
                if m - 0xD0 != expect {
                    return None;
                }
                expect = (expect + 1) % 8;
                spans.push((begin as u32, ff as u32));
                begin = ff + 2;
                i = begin;
            }
            0xD9 => {
                spans.push((begin as u32, ff as u32));
                return Some(spans);
            }
            _ => return None, // another scan or a stray marker
        }
    }
}

fn memchr_ff(d: &[u8]) -> Option<usize> {
    memchr::memchr(0xFF, d)
}
