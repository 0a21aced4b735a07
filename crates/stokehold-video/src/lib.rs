//! Video for stokehold (issue #54): frame-exact clips decoded from an MP4's frame index.
//!
//! - [`VideoFile`]: an MP4 file's frame index (`stokehold_ingest::mp4`) and a decoder fed the
//!   packets of that index straight from their byte ranges (no demuxer): a clip decodes from the
//!   keyframe before its first frame to its last frame, and only the frames it keeps are
//!   converted to RGB.
//! - Which frame a timestamp means is torchcodec's rule (`VideoDecoder(path)
//!   .get_frames_played_at(seconds)` in its default exact mode): the frame whose presentation
//!   interval `[pts, next frame's pts)` holds it ([`IndexedVideo::frame_played_at`], which a
//!   [`VideoFile`] derefs to).
//! - [`Clip`]: the sampling rule, a pure function of (seed, sample id) to timestamps.
//! - The decoder is FFmpeg's libavcodec, loaded at run time (see `ffi.rs` and docs/video.md):
//!   nothing here links FFmpeg, and decoding without it is an error saying how to install it.

mod clip;
mod decode;
mod ffi;

pub use clip::{Clip, ClipError, Start, Step};
pub use decode::{ClipDecoder, DecodedFrames, IndexedVideo, VideoFile};

use stokehold_ingest::mp4::Mp4Error;

/// What went wrong reading or decoding a video. Every variant names the file; those about a
/// frame name its time in seconds, its index and its packet's byte offset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VideoError {
    /// FFmpeg's libraries are not installed (the message says how to install them).
    #[error("{file}: {detail}")]
    FfmpegMissing {
        /// The video that was to be decoded.
        file: String,
        /// What was tried and how to install FFmpeg.
        detail: String,
    },
    /// The file could not be opened or its frame index read (cut before its `moov`, not an
    /// MP4, no video track, a bad table).
    #[error("{file}: {source}")]
    Index {
        /// The file.
        file: String,
        /// Why.
        #[source]
        source: Mp4Error,
    },
    /// The video's codec is not one this reader decodes, or the FFmpeg found has no decoder
    /// for it.
    #[error("{file}: {detail}")]
    Unsupported {
        /// The file.
        file: String,
        /// What is not supported.
        detail: String,
    },
    /// A timestamp outside the video's frames.
    #[error(
        "{file}: no frame is played at {seconds} s: the video's frames run from {begin} s to {end} s"
    )]
    OutOfRange {
        /// The file.
        file: String,
        /// The timestamp asked for.
        seconds: f64,
        /// The first frame's presentation time.
        begin: f64,
        /// The end of the last frame.
        end: f64,
    },
    /// The decoder refused a packet, or a packet could not be read.
    #[error(
        "{file}: frame {frame} (decode order; {seconds} s), packet of {size} bytes at byte {offset}: {detail}"
    )]
    Decode {
        /// The file.
        file: String,
        /// The frame's index in decode order.
        frame: usize,
        /// Its presentation time.
        seconds: f64,
        /// Its packet's byte offset in the file.
        offset: u64,
        /// Its packet's size.
        size: u32,
        /// FFmpeg's or the reader's message.
        detail: String,
    },
    /// The stream ended without giving a wanted frame: the stream is cut or damaged.
    #[error(
        "{file}: the frame at {seconds} s (frame {frame} in decode order, packet at byte {offset}) did not come out of the decoder: the stream is cut or damaged"
    )]
    Missing {
        /// The file.
        file: String,
        /// The frame's presentation time.
        seconds: f64,
        /// Its index in decode order.
        frame: usize,
        /// Its packet's byte offset.
        offset: u64,
    },
    /// A clip that does not fit the video.
    #[error("{file}: {source}")]
    Clip {
        /// The file.
        file: String,
        /// Why.
        #[source]
        source: ClipError,
    },
}
