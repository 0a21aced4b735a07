//! A video file's frame index and a decoder fed its packets (see the crate's documentation).

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use stokehold_ingest::frames::ContainerLimits;
use stokehold_ingest::mp4::{FrameIndex, index_video_file};

use crate::VideoError;
use crate::ffi::{self, Ffmpeg};

/// Largest packet read (a single compressed frame; 8K intra frames are a few MB).
const MAX_PACKET: u32 = 1 << 30;
/// `AV_NOPTS_VALUE`.
const NOPTS: i64 = i64::MIN;

/// Why a decoded frame cannot be converted to RGB (the message of a [`VideoError::Decode`]).
#[derive(Debug, thiserror::Error)]
enum ConvertError {
    /// A frame without pixels.
    #[error("the decoder gave a {width}x{height} frame")]
    Empty { width: c_int, height: c_int },
    /// A frame of another size than the clip's earlier frames.
    #[error(
        "the frame is {width}x{height}, earlier frames of the clip {was_width}x{was_height}: a \
         change of size within a clip is not supported"
    )]
    SizeChange {
        width: c_int,
        height: c_int,
        was_width: usize,
        was_height: usize,
    },
    /// A pixel format swscale does not convert.
    #[error("swscale cannot convert pixel format {format} ({width}x{height}) to RGB")]
    PixelFormat {
        format: c_int,
        width: c_int,
        height: c_int,
    },
    /// `sws_getColorspaceDetails` failed.
    #[error("sws_getColorspaceDetails failed")]
    ColorspaceDetails,
    /// A colour matrix or range swscale does not convert.
    #[error("swscale cannot convert colour matrix {colorspace} (range {range}) to RGB")]
    ColourMatrix { colorspace: c_int, range: i64 },
    /// swscale converted fewer rows than the frame has.
    #[error("swscale converted {rows} of {height} rows")]
    Rows { rows: c_int, height: c_int },
}

/// Frames decoded for a list of timestamps: `data` is uint8 `[count, height, width, 3]` (RGB),
/// `pts_seconds[i]` the presentation time of frame `i`, `frames[i]` its index in presentation
/// order.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedFrames {
    /// RGB bytes, frame after frame, row after row.
    pub data: Vec<u8>,
    /// Number of frames.
    pub count: usize,
    /// Height in pixels.
    pub height: usize,
    /// Width in pixels.
    pub width: usize,
    /// Each frame's presentation time in seconds.
    pub pts_seconds: Vec<f64>,
    /// Each frame's index in presentation order.
    pub frames: Vec<usize>,
    /// Bytes of the packets read to decode them (from the file, or from the bytes in memory).
    pub packet_bytes: u64,
    /// Packets sent to the decoder.
    pub packets: u64,
    /// Frames the decoder gave out (the wanted ones and the reference frames decoded on the way
    /// to them: non-reference frames that no slot wants are skipped, not decoded).
    pub decoded: u64,
}

/// A video's frame index with its frames in presentation order, and the name its errors give
/// (a file's path, or a packed sample's shard, record and path): every question about times and
/// frames, answered without the video's bytes.
#[derive(Debug, Clone)]
pub struct IndexedVideo {
    name: String,
    index: FrameIndex,
    /// Decode-order indices in presentation order.
    order: Vec<usize>,
}

impl IndexedVideo {
    /// A video of `index` (at least one frame), named `name` in errors.
    pub fn new(name: impl Into<String>, index: FrameIndex) -> Result<IndexedVideo, VideoError> {
        let name = name.into();
        if index.frames.is_empty() {
            return Err(VideoError::Index {
                file: name,
                source: stokehold_ingest::mp4::Mp4Error::Unsupported(
                    "the video track has no frames".into(),
                ),
            });
        }
        let order = index.presentation_order();
        Ok(IndexedVideo { name, index, order })
    }

    /// The name errors give.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The frame index.
    pub fn index(&self) -> &FrameIndex {
        &self.index
    }

    /// Number of frames.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Never: a video without frames is refused by [`IndexedVideo::new`].
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// A time in the track's timescale in seconds, computed as torchcodec computes it
    /// (`pts * num / den` in double precision) so comparisons agree bit for bit.
    pub fn seconds(&self, ticks: i64) -> f64 {
        ticks as f64 * 1.0 / f64::from(self.index.timescale)
    }

    /// Presentation times in seconds, in presentation order.
    pub fn pts_seconds(&self) -> Vec<f64> {
        self.order
            .iter()
            .map(|&d| self.seconds(self.index.frames[d].pts))
            .collect()
    }

    /// The first frame's presentation time, in seconds.
    pub fn begin_seconds(&self) -> f64 {
        self.seconds(self.index.frames[self.order[0]].pts)
    }

    /// The end of the last frame (the latest `pts + duration`), in seconds.
    pub fn end_seconds(&self) -> f64 {
        let end = self
            .index
            .frames
            .iter()
            .map(|f| f.pts + i64::from(f.duration))
            .max()
            .unwrap_or(0);
        self.seconds(end)
    }

    /// The frame (its index in presentation order) played at `seconds`: the first frame whose
    /// next frame starts after `seconds` (the last frame runs to [`IndexedVideo::end_seconds`]),
    /// torchcodec's exact-mode rule; a time before the first frame or at or after the end is
    /// an error.
    pub fn frame_played_at(&self, seconds: f64) -> Result<usize, VideoError> {
        let (begin, end) = (self.begin_seconds(), self.end_seconds());
        // written so that NaN fails too
        if !(seconds >= begin && seconds < end) {
            return Err(VideoError::OutOfRange {
                file: self.name.clone(),
                seconds,
                begin,
                end,
            });
        }
        let next = |i: usize| {
            self.order
                .get(i + 1)
                .map_or(f64::INFINITY, |&d| self.seconds(self.index.frames[d].pts))
        };
        // lower bound: the first i with next(i) > seconds
        let (mut lo, mut hi) = (0usize, self.order.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if next(mid) <= seconds {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo.min(self.order.len() - 1))
    }

    /// The byte ranges (from the start of the video's bytes) of the packets that decoding the
    /// frames `frames` (presentation order) reads: from the keyframe each needs to the frame,
    /// merged where they touch. What a clip reads, planned from the index alone.
    pub fn packet_ranges(&self, frames: &[usize]) -> Vec<(u64, u64)> {
        let mut spans: Vec<(usize, usize)> = frames
            .iter()
            .filter_map(|&p| {
                let d = *self.order.get(p)?;
                Some((self.index.decode_start(d).unwrap_or(0), d))
            })
            .collect();
        spans.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::new();
        for (a, b) in spans {
            match merged.last_mut() {
                Some(last) if a <= last.1 + 1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        let mut out: Vec<(u64, u64)> = Vec::new();
        for (a, b) in merged {
            for f in &self.index.frames[a..=b] {
                let (lo, hi) = (f.offset, f.offset + u64::from(f.size));
                match out.last_mut() {
                    Some(last) if lo <= last.1 && hi >= last.0 => {
                        last.0 = last.0.min(lo);
                        last.1 = last.1.max(hi);
                    }
                    _ => out.push((lo, hi)),
                }
            }
        }
        out
    }
}

/// A decoder kept between videos of one codec configuration (a worker thread keeps one): it is
/// made again only when the codec, its configuration record or the thread count changes.
#[derive(Debug, Default)]
pub struct ClipDecoder {
    decoder: Option<(DecoderKey, Decoder)>,
}

type DecoderKey = ([u8; 4], Vec<u8>, u32);

impl ClipDecoder {
    /// A decoder made on first use.
    pub fn new() -> ClipDecoder {
        ClipDecoder::default()
    }

    /// The frames of `video` at these indices in presentation order, decoded from `bytes` (the
    /// video's bytes, which its index's byte ranges point into) and converted to RGB; FFmpeg's
    /// own threading `threads` (1: off).
    ///
    /// With `within` (decode-index ranges `[first, end)`: the keyframe intervals read of a video
    /// read in part), only those packets are sent to the decoder: past them it is drained as at
    /// the end of the stream, which gives the same frames (a decoder holds frames back only to
    /// reorder them). `within` must hold the packets [`IndexedVideo::packet_ranges`] names.
    pub fn frames_at(
        &mut self,
        video: &IndexedVideo,
        bytes: &[u8],
        frames: &[usize],
        threads: u32,
        within: Option<&[(usize, usize)]>,
    ) -> Result<DecodedFrames, VideoError> {
        decode(
            &mut self.decoder,
            video,
            Packets::Memory(bytes),
            frames,
            threads,
            within,
        )
    }

    /// As [`ClipDecoder::frames_at`], the packets read from `file` (the video's file, read in
    /// place: only the packets from the keyframe before the first frame to the last one).
    pub fn frames_at_file(
        &mut self,
        video: &IndexedVideo,
        file: &File,
        frames: &[usize],
        threads: u32,
    ) -> Result<DecodedFrames, VideoError> {
        decode(
            &mut self.decoder,
            video,
            Packets::File(file),
            frames,
            threads,
            None,
        )
    }
}

/// Decodes `frames` (presentation order) of `video`, its packets read from `packets`, with the
/// decoder kept in `slot` (made, or made again for another configuration).
fn decode(
    slot: &mut Option<(DecoderKey, Decoder)>,
    video: &IndexedVideo,
    packets: Packets<'_>,
    frames: &[usize],
    threads: u32,
    within: Option<&[(usize, usize)]>,
) -> Result<DecodedFrames, VideoError> {
    let (name, index, order) = (&video.name, &video.index, &video.order);
    let n = order.len();
    if let Some(&bad) = frames.iter().find(|&&i| i >= n) {
        return Err(VideoError::Unsupported {
            file: name.clone(),
            detail: format!("frame {bad} asked for: the video has {n} frames"),
        });
    }
    let ff = ffi::ffmpeg().map_err(|e| VideoError::FfmpegMissing {
        file: name.clone(),
        detail: e.to_string(),
    })?;
    let key: DecoderKey = (index.codec.0, index.extradata.clone(), threads);
    if slot.as_ref().is_none_or(|(k, _)| *k != key) {
        *slot = None;
        *slot = Some((key, Decoder::new(ff, index, threads, name)?));
    }
    let mut out = DecodedFrames {
        data: Vec::new(),
        count: frames.len(),
        height: 0,
        width: 0,
        pts_seconds: Vec::with_capacity(frames.len()),
        frames: frames.to_vec(),
        packet_bytes: 0,
        packets: 0,
        decoded: 0,
    };
    // output slots by pts; the decode-order indices wanted, ascending
    let mut slots: HashMap<i64, Vec<usize>> = HashMap::new();
    let mut wanted: Vec<usize> = Vec::with_capacity(frames.len());
    for (k, &p) in frames.iter().enumerate() {
        let d = order[p];
        let pts = index.frames[d].pts;
        out.pts_seconds.push(video.seconds(pts));
        slots.entry(pts).or_default().push(k);
        wanted.push(d);
    }
    wanted.sort_unstable();
    wanted.dedup();
    let decoder = &mut slot.as_mut().expect("just set").1;
    let mut job = Job {
        ff,
        file: packets,
        name,
        index,
        slots,
        done: HashMap::new(),
        failed: None,
        out: &mut out,
        within,
    };
    let r = job.run(decoder, &wanted);
    if r.is_err() {
        // a decoder left mid-stream by an error starts afresh next time
        *slot = None;
    }
    r?;
    Ok(out)
}

/// An MP4 file's frame index, and a decoder for its clips (created on the first decode, kept
/// for the next ones). Decodes on the caller's thread; FFmpeg's own threading is off unless
/// [`VideoFile::set_threads`] says otherwise.
#[derive(Debug)]
pub struct VideoFile {
    path: PathBuf,
    file: File,
    video: IndexedVideo,
    threads: u32,
    decoder: Option<(DecoderKey, Decoder)>,
}

impl std::ops::Deref for VideoFile {
    type Target = IndexedVideo;
    fn deref(&self) -> &IndexedVideo {
        &self.video
    }
}

impl VideoFile {
    /// Opens `path` (MP4 or Matroska/WebM) and reads its frame index (no FFmpeg needed for
    /// that).
    pub fn open(path: impl AsRef<Path>) -> Result<VideoFile, VideoError> {
        let path = path.as_ref().to_path_buf();
        let name = path.display().to_string();
        let index = index_video_file(&path, &ContainerLimits::default()).map_err(|source| {
            VideoError::Index {
                file: name.clone(),
                source,
            }
        })?;
        let file = File::open(&path).map_err(|e| VideoError::Index {
            file: name.clone(),
            source: stokehold_ingest::mp4::Mp4Error::Unsupported(e.to_string()),
        })?;
        let video = IndexedVideo::new(name, index)?;
        Ok(VideoFile {
            path,
            file,
            video,
            threads: 1,
            decoder: None,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// FFmpeg's own decoding threads (1, the default: decode on the caller's thread only; 0:
    /// FFmpeg picks). Takes effect for the next decoder created.
    pub fn set_threads(&mut self, threads: u32) {
        self.threads = threads;
    }

    /// The frames played at `seconds` (any order, repeats allowed), decoded and converted to
    /// RGB: what torchcodec's `get_frames_played_at(seconds)` returns.
    pub fn frames_played_at(&mut self, seconds: &[f64]) -> Result<DecodedFrames, VideoError> {
        let frames = seconds
            .iter()
            .map(|&s| self.video.frame_played_at(s))
            .collect::<Result<Vec<_>, _>>()?;
        self.frames_at(&frames)
    }

    /// The frames at these indices in presentation order, decoded and converted to RGB.
    pub fn frames_at(&mut self, frames: &[usize]) -> Result<DecodedFrames, VideoError> {
        decode(
            &mut self.decoder,
            &self.video,
            Packets::File(&self.file),
            frames,
            self.threads,
            None,
        )
    }
}

/// Where packets are read from: the video's file, or its bytes in memory (a packed `video`
/// value's container).
#[derive(Clone, Copy)]
enum Packets<'a> {
    File(&'a File),
    Memory(&'a [u8]),
}

impl Packets<'_> {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        match self {
            Packets::File(f) => f.read_exact_at(buf, offset),
            Packets::Memory(m) => {
                let end = offset.checked_add(buf.len() as u64);
                match end.filter(|&e| e <= m.len() as u64) {
                    Some(e) => {
                        buf.copy_from_slice(&m[offset as usize..e as usize]);
                        Ok(())
                    }
                    None => Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("the packet ends past the video's {} bytes", m.len()),
                    )),
                }
            }
        }
    }
}

/// One call's decoding: the wanted frames' output slots and the buffer they go to.
struct Job<'a> {
    ff: &'static Ffmpeg,
    file: Packets<'a>,
    name: &'a str,
    index: &'a FrameIndex,
    /// pts -> the output slots that frame fills.
    slots: HashMap<i64, Vec<usize>>,
    /// pts of wanted frames already converted.
    done: HashMap<i64, ()>,
    /// The error of a packet the decoder refused, while the frames before it are drained.
    failed: Option<VideoError>,
    out: &'a mut DecodedFrames,
    /// The packets that may be sent (decode-index ranges), None: all.
    within: Option<&'a [(usize, usize)]>,
}

impl Job<'_> {
    /// Whether packet `n` (decode order) may be sent: past the last, or outside `within`, the
    /// stream ends for this decoding.
    fn available(&self, n: usize) -> bool {
        n < self.index.frames.len()
            && self
                .within
                .is_none_or(|w| w.iter().any(|&(a, b)| a <= n && n < b))
    }

    fn seconds(&self, ticks: i64) -> f64 {
        ticks as f64 * 1.0 / f64::from(self.index.timescale)
    }

    /// Decodes the frames `wanted` (decode-order indices, ascending): for each not yet out,
    /// from the keyframe before it (unless the decoder is already past that keyframe) until
    /// it comes out.
    fn run(&mut self, dec: &mut Decoder, wanted: &[usize]) -> Result<(), VideoError> {
        // a decoder kept from an earlier call starts clean
        dec.reset(self.ff);
        let mut next: Option<usize> = None; // the next packet to send
        // the packet the decoder started from since its last reset: a frame that needs an
        // earlier start (a B-frame of an open interval, sent after a fresh start at the keyframe
        // after it, is dropped by the decoder) makes decoding start again there
        let mut started = 0usize;
        for &d in wanted {
            let pts = self.index.frames[d].pts;
            if self.done.contains_key(&pts) {
                continue;
            }
            let k = self
                .index
                .decode_start(d)
                .ok_or_else(|| VideoError::Missing {
                    file: self.name.to_owned(),
                    seconds: self.seconds(pts),
                    frame: d,
                    offset: self.index.frames[d].offset,
                })?;
            match next {
                // go on from where we are (a decoder that was drained cannot go on)
                Some(n) if started <= k && k <= n && !dec.draining => {}
                _ => {
                    // jump to the keyframe: frames still in the decoder are not wanted (every
                    // wanted frame sent earlier is already out)
                    dec.reset(self.ff);
                    self.failed = None;
                    next = Some(k);
                    started = k;
                }
            }
            let mut n = next.expect("set above");
            while !self.done.contains_key(&pts) {
                if self.available(n) && !dec.draining {
                    let sent = self.send(dec, n);
                    n += 1;
                    if let Err(e) = sent {
                        // a damaged packet: the frames already in the decoder may still be the
                        // ones wanted, so drain it; if the wanted one is not among them, this
                        // packet's error is the answer
                        dec.draining = true;
                        self.failed = Some(e);
                        // SAFETY: ctx is an open decoder; a null packet starts draining.
                        unsafe { (self.ff.avcodec_send_packet)(dec.ctx, std::ptr::null()) };
                        self.receive(dec, d)?;
                    }
                } else if !dec.draining {
                    // end of stream: let the decoder give what it holds
                    dec.draining = true;
                    // SAFETY: ctx is an open decoder; a null packet starts draining.
                    let r = unsafe { (self.ff.avcodec_send_packet)(dec.ctx, std::ptr::null()) };
                    if r < 0 && r != ffi::AVERROR_EOF {
                        return Err(self.decode_error(d, self.ff.error_string(r)));
                    }
                    self.receive(dec, d)?;
                } else if let Some(e) = self.failed.take() {
                    return Err(e);
                } else {
                    return Err(VideoError::Missing {
                        file: self.name.to_owned(),
                        seconds: self.seconds(pts),
                        frame: d,
                        offset: self.index.frames[d].offset,
                    });
                }
            }
            next = Some(n);
        }
        Ok(())
    }

    fn decode_error(&self, d: usize, detail: String) -> VideoError {
        let f = &self.index.frames[d];
        VideoError::Decode {
            file: self.name.to_owned(),
            frame: d,
            seconds: self.seconds(f.pts),
            offset: f.offset,
            size: f.size,
            detail,
        }
    }

    /// Reads packet `d` from the file and sends it, then takes the frames that come out.
    fn send(&mut self, dec: &mut Decoder, d: usize) -> Result<(), VideoError> {
        let f = self.index.frames[d];
        if f.size > MAX_PACKET {
            return Err(self.decode_error(d, format!("a packet over {MAX_PACKET} bytes")));
        }
        let ff = self.ff;
        // SAFETY: pkt is a packet from av_packet_alloc, blank (unref'd after each send);
        // av_new_packet allocates `size` bytes plus zeroed padding and sets data and size.
        let r = unsafe { (ff.av_new_packet)(dec.pkt, f.size as c_int) };
        if r < 0 {
            return Err(self.decode_error(d, ff.error_string(r)));
        }
        // SAFETY: AVPacket.data (offset checked in ffi.rs) of the packet just allocated.
        let data: *mut u8 = unsafe { ffi::read_at(dec.pkt, ffi::PACKET_DATA) };
        // SAFETY: av_new_packet made `data` hold f.size writable bytes.
        let buf = unsafe { std::slice::from_raw_parts_mut(data, f.size as usize) };
        if let Err(e) = self.file.read_exact_at(buf, f.offset) {
            // SAFETY: pkt is the packet allocated above.
            unsafe { (ff.av_packet_unref)(dec.pkt) };
            return Err(self.decode_error(d, format!("reading the packet: {e}")));
        }
        self.out.packet_bytes += u64::from(f.size);
        self.out.packets += 1;
        // SAFETY: pts, dts and flags of a live AVPacket (offsets in ffi.rs); the decoder gives
        // the packet's pts back on the frame it makes of it, which is how frames are matched.
        unsafe {
            ffi::write_at(dec.pkt, ffi::PACKET_PTS, f.pts);
            ffi::write_at(dec.pkt, ffi::PACKET_DTS, f.dts);
            ffi::write_at::<c_int>(
                dec.pkt,
                ffi::PACKET_FLAGS,
                if f.key { ffi::AV_PKT_FLAG_KEY } else { 0 },
            );
        }
        // a frame no clip slot wants is not decoded when no other frame refers to it (the
        // non-reference B-frames between a keyframe and a clip, and those a stride skips):
        // every reference frame is still decoded, so the wanted frames come out the same
        let wanted = self.slots.contains_key(&f.pts) && !self.done.contains_key(&f.pts);
        dec.set_discard(
            ff,
            if wanted {
                ffi::AVDISCARD_DEFAULT
            } else {
                ffi::AVDISCARD_NONREF
            },
        );
        // SAFETY: an open decoder and a filled packet; the decoder takes its own reference.
        let r = unsafe { (ff.avcodec_send_packet)(dec.ctx, dec.pkt) };
        // SAFETY: our reference to the packet's buffer is released; the packet is blank again.
        unsafe { (ff.av_packet_unref)(dec.pkt) };
        if r < 0 {
            return Err(self.decode_error(d, ff.error_string(r)));
        }
        self.receive(dec, d)
    }

    /// Takes every frame the decoder has ready, converting the wanted ones.
    fn receive(&mut self, dec: &mut Decoder, d: usize) -> Result<(), VideoError> {
        let ff = self.ff;
        loop {
            // SAFETY: an open decoder and a frame from av_frame_alloc (unref'd before reuse).
            let r = unsafe { (ff.avcodec_receive_frame)(dec.ctx, dec.frame) };
            if r == ffi::EAGAIN || r == ffi::AVERROR_EOF {
                return Ok(());
            }
            if r < 0 {
                return Err(self.decode_error(d, ff.error_string(r)));
            }
            self.out.decoded += 1;
            // SAFETY: AVFrame.pts of the frame just received (offset in ffi.rs).
            let pts: i64 = unsafe { ffi::read_at(dec.frame, ffi::FRAME_PTS) };
            let result = if pts != NOPTS && !self.done.contains_key(&pts) {
                match self.slots.get(&pts) {
                    Some(slots) => {
                        let slots = slots.clone();
                        let r = self.convert(dec, &slots);
                        self.done.insert(pts, ());
                        r
                    }
                    None => Ok(()),
                }
            } else {
                Ok(())
            };
            // SAFETY: the frame is ours until unref'd; it is not used after.
            unsafe { (ff.av_frame_unref)(dec.frame) };
            result.map_err(|e| self.decode_error(d, e.to_string()))?;
        }
    }

    /// Converts the decoder's current frame to RGB into each of `slots`.
    fn convert(&mut self, dec: &mut Decoder, slots: &[usize]) -> Result<(), ConvertError> {
        let ff = self.ff;
        let frame = dec.frame;
        // SAFETY: width, height and format of a decoded frame (offsets in ffi.rs).
        let (w, h, format): (c_int, c_int, c_int) = unsafe {
            (
                ffi::read_at(frame, ffi::FRAME_WIDTH),
                ffi::read_at(frame, ffi::FRAME_HEIGHT),
                ffi::read_at(frame, ffi::FRAME_FORMAT),
            )
        };
        if w <= 0 || h <= 0 {
            return Err(ConvertError::Empty {
                width: w,
                height: h,
            });
        }
        let (wu, hu) = (w as usize, h as usize);
        if self.out.data.is_empty() {
            self.out.width = wu;
            self.out.height = hu;
            self.out.data = vec![0u8; self.out.count * hu * wu * 3];
        } else if (self.out.width, self.out.height) != (wu, hu) {
            return Err(ConvertError::SizeChange {
                width: w,
                height: h,
                was_width: self.out.width,
                was_height: self.out.height,
            });
        }
        // the colour matrix and range: the codec context's (the decoder sets them from the
        // stream's headers and copies them to every frame), read through AVOptions
        let mut colorspace = 2i64; // AVCOL_SPC_UNSPECIFIED
        let mut range = ffi::AVCOL_RANGE_UNSPECIFIED;
        // SAFETY: an open codec context; "colorspace" and "color_range" are AVCodecContext
        // options in every major (av_opt_get_int leaves the value alone on failure).
        unsafe {
            (ff.av_opt_get_int)(dec.ctx, c"colorspace".as_ptr(), 0, &mut colorspace);
            (ff.av_opt_get_int)(dec.ctx, c"color_range".as_ptr(), 0, &mut range);
        }
        let sws = dec.scaler(ff, w, h, format, colorspace as c_int, range)?;
        // SAFETY: data and linesize arrays of the decoded frame (offsets in ffi.rs).
        let (src, stride): ([*const u8; 8], [c_int; 8]) = unsafe {
            (
                ffi::read_at(frame, ffi::FRAME_DATA),
                ffi::read_at(frame, ffi::FRAME_LINESIZE),
            )
        };
        let frame_bytes = hu * wu * 3;
        let first = slots[0];
        let at = first * frame_bytes;
        // swscale converts into a scratch buffer, then the rows are copied out: its SIMD code
        // writes past the end of a row (and of the last one) when rows are not a multiple of
        // its vector width, which is why torchcodec converts with swscale only widths that are
        // multiples of 32. The rows are w*3 bytes apart for those widths (as in torchcodec's
        // output tensor), 64-byte aligned otherwise (as in a libavfilter frame), starting at a
        // 64-byte boundary, with a row and 4 KiB of slack after the last.
        let row = wu * 3;
        let pitch = if wu % 32 == 0 {
            row
        } else {
            row.div_ceil(64) * 64
        };
        let need = pitch * (hu + 1) + 4096 + 64;
        if dec.scratch.len() < need {
            dec.scratch = vec![0u8; need];
        }
        let base = dec.scratch.as_mut_ptr();
        let skip = base.align_offset(64);
        let dst_stride = [pitch as c_int, 0, 0, 0];
        let dst = [
            // SAFETY: `skip` < 64 and the scratch buffer has `need` > skip bytes.
            unsafe { base.add(skip) },
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        ];
        // SAFETY: sws was made for this frame's size and format; the source planes are the
        // decoded frame's; the destination is h rows `pitch` bytes apart inside the scratch
        // buffer, with a row and 4 KiB to spare after them for swscale's overreach.
        let rows = unsafe {
            (ff.sws_scale)(
                sws,
                src.as_ptr(),
                stride.as_ptr(),
                0,
                h,
                dst.as_ptr(),
                dst_stride.as_ptr(),
            )
        };
        if rows != h {
            return Err(ConvertError::Rows { rows, height: h });
        }
        let converted = &dec.scratch[skip..skip + pitch * hu];
        for (y, out_row) in self.out.data[at..at + frame_bytes]
            .chunks_exact_mut(row)
            .enumerate()
        {
            out_row.copy_from_slice(&converted[y * pitch..y * pitch + row]);
        }
        for &s in &slots[1..] {
            self.out
                .data
                .copy_within(at..at + frame_bytes, s * frame_bytes);
        }
        Ok(())
    }
}

/// An open libavcodec decoder, a packet, a frame, and the swscale context of the last format.
#[derive(Debug)]
struct Decoder {
    ctx: *mut c_void,
    pkt: *mut c_void,
    frame: *mut c_void,
    sws: *mut c_void,
    sws_key: (c_int, c_int, c_int, c_int, i64),
    /// Where swscale writes (see `Job::convert`).
    scratch: Vec<u8>,
    /// A null packet was sent: the decoder must be flushed before the next packet.
    draining: bool,
    /// The context's `skip_frame` now (`AVDISCARD_*`).
    discard: i64,
    ff: &'static Ffmpeg,
}

// SAFETY: the decoder's FFmpeg objects are used by one thread at a time (every use takes
// `&mut self`), and FFmpeg's contexts may move between threads.
unsafe impl Send for Decoder {}

impl Decoder {
    fn new(
        ff: &'static Ffmpeg,
        index: &FrameIndex,
        threads: u32,
        name: &str,
    ) -> Result<Decoder, VideoError> {
        let unsupported = |detail: String| VideoError::Unsupported {
            file: name.to_owned(),
            detail,
        };
        let codec_name: &std::ffi::CStr = match &index.codec.0 {
            b"avc1" | b"avc3" => c"h264",
            b"hvc1" | b"hev1" => c"hevc",
            b"vp09" => c"vp9",
            b"av01" => c"av1",
            b"mp4v" => c"mpeg4",
            _ => {
                return Err(unsupported(format!(
                    "codec {} is not supported (H.264, H.265, VP9, AV1 and MPEG-4 part 2 are)",
                    index.codec
                )));
            }
        };
        // SAFETY: a NUL-terminated name; the descriptor returned is static.
        let desc = unsafe { (ff.avcodec_descriptor_get_by_name)(codec_name.as_ptr()) };
        if desc.is_null() {
            return Err(unsupported(format!(
                "{} knows no codec {codec_name:?}",
                ff.describe
            )));
        }
        // SAFETY: AVCodecDescriptor.id is its first field (an int enum) in every major.
        let id: c_int = unsafe { ffi::read_at(desc, 0) };
        // SAFETY: any codec id; null when this FFmpeg has no decoder for it.
        let codec = unsafe { (ff.avcodec_find_decoder)(id) };
        if codec.is_null() {
            return Err(unsupported(format!(
                "{} has no decoder for {codec_name:?} (codec {}): install an FFmpeg built with one",
                ff.describe, index.codec
            )));
        }
        let mut dec = Decoder {
            ctx: std::ptr::null_mut(),
            pkt: std::ptr::null_mut(),
            frame: std::ptr::null_mut(),
            sws: std::ptr::null_mut(),
            sws_key: (0, 0, 0, 0, 0),
            scratch: Vec::new(),
            draining: false,
            discard: ffi::AVDISCARD_DEFAULT,
            ff,
        };
        let fail = |what: &str, r: c_int| {
            unsupported(format!(
                "{} {what}: {}",
                ff.describe,
                if r < 0 {
                    ff.error_string(r)
                } else {
                    "out of memory".into()
                }
            ))
        };
        // SAFETY: allocation functions; results checked for null. `dec` frees what was made
        // if a later step fails.
        unsafe {
            dec.ctx = (ff.avcodec_alloc_context3)(codec);
            dec.pkt = (ff.av_packet_alloc)();
            dec.frame = (ff.av_frame_alloc)();
        }
        if dec.ctx.is_null() || dec.pkt.is_null() || dec.frame.is_null() {
            return Err(fail("allocating a decoder", 0));
        }
        if index.extradata.len() > (i32::MAX as usize) - ffi::PADDING {
            return Err(unsupported("a codec configuration over 2 GiB".into()));
        }
        // SAFETY: codec parameters from avcodec_parameters_alloc; only the layout-stable prefix
        // is written (ffi.rs): the media type, the codec id and the extradata, av_mallocz'd with
        // the padding FFmpeg requires (avcodec_parameters_free frees it).
        let r = unsafe {
            let mut par = (ff.avcodec_parameters_alloc)();
            if par.is_null() {
                return Err(fail("allocating codec parameters", 0));
            }
            ffi::write_at::<c_int>(par, ffi::PAR_CODEC_TYPE, ffi::AVMEDIA_TYPE_VIDEO);
            ffi::write_at::<c_int>(par, ffi::PAR_CODEC_ID, id);
            if !index.extradata.is_empty() {
                let n = index.extradata.len();
                let extra = (ff.av_mallocz)(n + ffi::PADDING).cast::<u8>();
                if extra.is_null() {
                    (ff.avcodec_parameters_free)(&mut par);
                    return Err(fail("allocating extradata", 0));
                }
                std::ptr::copy_nonoverlapping(index.extradata.as_ptr(), extra, n);
                ffi::write_at(par, ffi::PAR_EXTRADATA, extra);
                ffi::write_at::<c_int>(par, ffi::PAR_EXTRADATA_SIZE, n as c_int);
            }
            let r = (ff.avcodec_parameters_to_context)(dec.ctx, par);
            (ff.avcodec_parameters_free)(&mut par);
            r
        };
        if r < 0 {
            return Err(fail("setting the codec parameters", r));
        }
        // SAFETY: an allocated, not yet opened context; "threads" is an AVCodecContext option.
        let r = unsafe { (ff.av_opt_set_int)(dec.ctx, c"threads".as_ptr(), i64::from(threads), 0) };
        if r < 0 {
            return Err(fail("setting threads", r));
        }
        // SAFETY: the context was allocated for this codec; no options dictionary.
        let r = unsafe { (ff.avcodec_open2)(dec.ctx, codec, std::ptr::null_mut()) };
        if r < 0 {
            return Err(fail("opening the decoder", r));
        }
        Ok(dec)
    }

    /// Sets which frames the decoder skips from the next packet on (`skip_frame`, an
    /// `AVDISCARD_*` level). Decoding runs on the caller's thread or FFmpeg's frame threads,
    /// which copy the level from the context with each packet.
    fn set_discard(&mut self, ff: &Ffmpeg, level: i64) {
        if self.discard == level {
            return;
        }
        // SAFETY: an open codec context; "skip_frame" is an AVCodecContext option in every
        // major, read by the decoders at each packet.
        let r = unsafe { (ff.av_opt_set_int)(self.ctx, c"skip_frame".as_ptr(), level, 0) };
        if r >= 0 {
            self.discard = level;
        }
    }

    /// Back to the state after opening: nothing buffered, not draining.
    fn reset(&mut self, ff: &Ffmpeg) {
        // SAFETY: an open decoder; flushing drops buffered frames and ends draining.
        unsafe { (ff.avcodec_flush_buffers)(self.ctx) };
        self.draining = false;
    }

    /// The swscale context converting this frame format to RGB24 at the same size, as
    /// torchcodec makes it (no flags, the stream's matrix and range on both sides).
    fn scaler(
        &mut self,
        ff: &Ffmpeg,
        w: c_int,
        h: c_int,
        format: c_int,
        colorspace: c_int,
        range: i64,
    ) -> Result<*mut c_void, ConvertError> {
        let key = (w, h, format, colorspace, range);
        if !self.sws.is_null() && self.sws_key == key {
            return Ok(self.sws);
        }
        if !self.sws.is_null() {
            // SAFETY: a context from sws_getContext, not used after.
            unsafe { (ff.sws_free_context)(self.sws) };
            self.sws = std::ptr::null_mut();
        }
        // SAFETY: sizes and formats of a decoded frame; no filters, no parameters.
        let sws = unsafe {
            (ff.sws_get_context)(
                w,
                h,
                format,
                w,
                h,
                ffi::AV_PIX_FMT_RGB24,
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null(),
            )
        };
        if sws.is_null() {
            return Err(ConvertError::PixelFormat {
                format,
                width: w,
                height: h,
            });
        }
        self.sws = sws;
        self.sws_key = key;
        let mut inv_table: *mut c_int = std::ptr::null_mut();
        let mut table: *mut c_int = std::ptr::null_mut();
        let (mut src_range, mut dst_range, mut brightness, mut contrast, mut saturation) =
            (0, 0, 0, 0, 0);
        // SAFETY: a live context and pointers to locals for each output.
        let r = unsafe {
            (ff.sws_get_colorspace_details)(
                sws,
                &mut inv_table,
                &mut src_range,
                &mut table,
                &mut dst_range,
                &mut brightness,
                &mut contrast,
                &mut saturation,
            )
        };
        if r < 0 {
            return Err(ConvertError::ColorspaceDetails);
        }
        if range != ffi::AVCOL_RANGE_UNSPECIFIED {
            src_range = c_int::from(range == ffi::AVCOL_RANGE_JPEG);
        }
        // SAFETY: sws_getCoefficients returns a static table for any value (the default for
        // unknown ones).
        let coefficients = unsafe { (ff.sws_get_coefficients)(colorspace) };
        // SAFETY: a live context; the tables are static.
        let r = unsafe {
            (ff.sws_set_colorspace_details)(
                sws,
                coefficients,
                src_range,
                coefficients,
                dst_range,
                brightness,
                contrast,
                saturation,
            )
        };
        if r < 0 {
            return Err(ConvertError::ColourMatrix { colorspace, range });
        }
        Ok(sws)
    }
}

impl Drop for Decoder {
    fn drop(&mut self) {
        let ff = self.ff;
        // SAFETY: each pointer is null or owned by this decoder, freed once here (the free
        // functions take null and set the pointer to null).
        unsafe {
            if !self.sws.is_null() {
                (ff.sws_free_context)(self.sws);
            }
            (ff.av_frame_free)(&mut self.frame);
            (ff.av_packet_free)(&mut self.pkt);
            (ff.avcodec_free_context)(&mut self.ctx);
        }
    }
}
