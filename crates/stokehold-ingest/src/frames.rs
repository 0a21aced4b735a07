//! A video file's frame index, whatever its container: the types the MP4 (`mp4.rs`) and
//! Matroska/WebM (`mkv.rs`) readers both give (a module of its own, so neither reader imports
//! the other's types), and the [`ContainerLimits`] both check. A frame is the format crate's [`VideoFrame`], the entry a `video` value
//! keeps, so an index turns into a value's (and back) without a copy of each frame's fields.

use std::fmt;

use stokehold_format::video::VideoFrame;

/// Bounds on what a video container (MP4, Matroska/WebM) may declare: one type for both readers,
/// so a caller that indexes a video of either kind (`mp4::index_video_file`) gives one set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerLimits {
    /// MP4: largest `moov` box read.
    pub max_moov_bytes: u64,
    /// Matroska/WebM: largest `Info` or `Tracks` element read whole (and the EBML header).
    pub max_mkv_header_bytes: u64,
    /// Most frames in the video track.
    pub max_frames: u64,
}

impl Default for ContainerLimits {
    fn default() -> ContainerLimits {
        ContainerLimits {
            max_moov_bytes: 256 << 20,
            max_mkv_header_bytes: 16 << 20,
            max_frames: 50_000_000,
        }
    }
}

/// A four-character code.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct FourCc(pub [u8; 4]);

impl fmt::Display for FourCc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &b in &self.0 {
            let c = if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '?'
            };
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for FourCc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// The frame index of a file's first video track.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameIndex {
    /// Ticks per second of the times.
    pub timescale: u32,
    /// The codec's sample entry (`avc1`, `hvc1`, `hev1`, `vp09`, `av01`, ...).
    pub codec: FourCc,
    /// Width in pixels, as the sample entry says.
    pub width: u16,
    /// Height in pixels.
    pub height: u16,
    /// The codec's configuration record, as FFmpeg's MP4 demuxer hands it to the decoder as
    /// `extradata`: the payload of the sample entry's `avcC` (H.264), `hvcC` (H.265) or `av1C`
    /// (AV1) box, or the decoder-specific info of `esds` (MPEG-4 part 2); empty for VP9 (`vpcC`
    /// holds only colour and profile, which the VP9 bitstream repeats) and codecs without one.
    pub extradata: Vec<u8>,
    /// The frames (packets of the video track) in decode order, as a `video` value keeps them.
    pub frames: Vec<VideoFrame>,
}

impl FrameIndex {
    /// Frame indices (into `frames`) in presentation order.
    pub fn presentation_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.frames.len()).collect();
        order.sort_by_key(|&i| (self.frames[i].pts, i));
        order
    }

    /// The index (into `frames`, decode order) of the keyframe at or before frame `i` in decode
    /// order: where decoding must start to show frame `i`.
    pub fn keyframe_before(&self, i: usize) -> Option<usize> {
        (0..=i.min(self.frames.len().checked_sub(1)?))
            .rev()
            .find(|&j| self.frames[j].key)
    }

    /// Where decoding must start to show frame `i` (decode order) correctly: the last keyframe
    /// at or before it in decode order whose presentation time is not after frame `i`'s. With
    /// closed keyframe intervals this is [`FrameIndex::keyframe_before`]; with open ones (the
    /// frames right after a keyframe in decode order that are shown before it, and reference
    /// the interval before) it is the keyframe before that, as torchcodec and FFmpeg's seeking
    /// choose (the keyframe with the latest presentation time not after the frame's).
    pub fn decode_start(&self, i: usize) -> Option<usize> {
        let pts = self.frames.get(i)?.pts;
        (0..=i)
            .rev()
            .find(|&j| self.frames[j].key && self.frames[j].pts <= pts)
    }
}
