//! The `video` field type's value (format.md §3, "video"): a video file's bytes as given (its
//! container, e.g. MP4), led by its **frame index**: per frame (packet) of its first video
//! track, in decode order, the presentation and decode times, the duration, whether it is a
//! keyframe and the byte range of its packet inside the container. A reader plans a clip's
//! reads and decoding from the index alone, without parsing the container again.
//!
//! ```text
//! value   := "SKV1" | container u8 (1 = MP4) | 3 zero bytes | index_len u32 | index | container bytes
//! index   := codec [4] | timescale u32 | width u16 | height u16 | extradata_len u32 | extradata
//!            | frames u32 | frame × frames
//! frame   := pts i64 | dts i64 | duration u32 | flags u8 (bit 0: keyframe) | offset u64 | size u32
//! ```
//! All little-endian; offsets count from the container's first byte. Every length is checked
//! against the bytes that hold it before anything is sized by it, and every packet must lie
//! inside the container.

/// The first four bytes of a video value.
pub const VIDEO_MAGIC: &[u8; 4] = b"SKV1";
/// Container code of an MP4 (ISO base media) file.
pub const CONTAINER_MP4: u8 = 1;
/// Bytes of one frame entry.
pub const FRAME_BYTES: usize = 33;
/// Bytes before the index.
const HEAD: usize = 12;

/// One frame (packet) of the index, in decode order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VideoFrame {
    /// Presentation time, in the timescale.
    pub pts: i64,
    /// Decode time, in the timescale.
    pub dts: i64,
    /// Duration, in the timescale.
    pub duration: u32,
    /// Decoding can start here.
    pub key: bool,
    /// The packet's first byte, from the container's start.
    pub offset: u64,
    /// The packet's size.
    pub size: u32,
}

/// A video's frame index, as kept in a `video` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VideoIndex {
    /// The container (only [`CONTAINER_MP4`] so far).
    pub container: u8,
    /// The codec's four-character code (`avc1`, `hvc1`, `vp09`, `av01`, ...).
    pub codec: [u8; 4],
    /// Ticks per second of the times (at least 1).
    pub timescale: u32,
    /// Width in pixels, as the container says.
    pub width: u16,
    /// Height in pixels.
    pub height: u16,
    /// The codec's configuration record (the decoder's extradata).
    pub extradata: Vec<u8>,
    /// The frames, in decode order (at least one).
    pub frames: Vec<VideoFrame>,
}

/// A parsed `video` value: its index and the container's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VideoValue<'a> {
    /// The frame index.
    pub index: VideoIndex,
    /// The container's bytes, as given when packed.
    pub container: &'a [u8],
}

/// A `video` value of `container`'s bytes led by `index` (which must describe them).
pub fn encode_video(index: &VideoIndex, container: &[u8]) -> Vec<u8> {
    let index_len =
        4 + 4 + 2 + 2 + 4 + index.extradata.len() + 4 + FRAME_BYTES * index.frames.len();
    let mut out = Vec::with_capacity(HEAD + index_len + container.len());
    out.extend_from_slice(VIDEO_MAGIC);
    out.extend_from_slice(&[index.container, 0, 0, 0]);
    out.extend_from_slice(&(index_len as u32).to_le_bytes());
    out.extend_from_slice(&index.codec);
    out.extend_from_slice(&index.timescale.to_le_bytes());
    out.extend_from_slice(&index.width.to_le_bytes());
    out.extend_from_slice(&index.height.to_le_bytes());
    out.extend_from_slice(&(index.extradata.len() as u32).to_le_bytes());
    out.extend_from_slice(&index.extradata);
    out.extend_from_slice(&(index.frames.len() as u32).to_le_bytes());
    for f in &index.frames {
        out.extend_from_slice(&f.pts.to_le_bytes());
        out.extend_from_slice(&f.dts.to_le_bytes());
        out.extend_from_slice(&f.duration.to_le_bytes());
        out.push(u8::from(f.key));
        out.extend_from_slice(&f.offset.to_le_bytes());
        out.extend_from_slice(&f.size.to_le_bytes());
    }
    debug_assert_eq!(out.len(), HEAD + index_len);
    out.extend_from_slice(container);
    out
}

/// Reads little-endian fields off a slice, each read checked against what is left.
struct Take<'a>(&'a [u8]);

impl<'a> Take<'a> {
    fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if n > self.0.len() {
            return Err(format!("{what} needs {n} bytes, {} are left", self.0.len()));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        Ok(self.bytes(N, what)?.try_into().expect("N bytes"))
    }
    fn u32(&mut self, what: &str) -> Result<u32, String> {
        self.array(what).map(u32::from_le_bytes)
    }
}

/// Parses and checks a `video` value: its header, its index, every packet inside the
/// container. The message says what is wrong and at which byte of the value.
pub fn parse_video(value: &[u8]) -> Result<VideoValue<'_>, String> {
    let mut t = Take(value);
    let magic = t.bytes(4, "the video header")?;
    if magic != VIDEO_MAGIC {
        return Err(format!(
            "not a stokehold video value: it starts with \"{}\", not \"SKV1\"",
            value[..value.len().min(4)].escape_ascii()
        ));
    }
    let [container, r0, r1, r2] = t.array::<4>("the video header")?;
    if container != CONTAINER_MP4 {
        return Err(format!("unknown container code {container} (1 is MP4)"));
    }
    if (r0, r1, r2) != (0, 0, 0) {
        return Err("the header's reserved bytes are not zero".into());
    }
    let index_len = t.u32("the index length")? as usize;
    let index_bytes = t.bytes(index_len, "the frame index")?;
    let body = t.0;
    let mut i = Take(index_bytes);
    let codec = i.array::<4>("the codec")?;
    let timescale = i.u32("the timescale")?;
    if timescale == 0 {
        return Err("a timescale of 0".into());
    }
    let width = u16::from_le_bytes(i.array("the width")?);
    let height = u16::from_le_bytes(i.array("the height")?);
    let extra_len = i.u32("the extradata length")? as usize;
    let extradata = i.bytes(extra_len, "the extradata")?.to_vec();
    let n = i.u32("the frame count")? as usize;
    if n == 0 {
        return Err("the index has no frames".into());
    }
    // the count is held to the bytes that hold the frames before anything is sized by it
    if i.0.len() != n * FRAME_BYTES {
        return Err(format!(
            "the index says {n} frames ({} bytes) and holds {} bytes of frames",
            n * FRAME_BYTES,
            i.0.len()
        ));
    }
    let mut frames = Vec::with_capacity(n);
    for (k, b) in i.0.chunks_exact(FRAME_BYTES).enumerate() {
        let f = VideoFrame {
            pts: i64::from_le_bytes(b[0..8].try_into().expect("8")),
            dts: i64::from_le_bytes(b[8..16].try_into().expect("8")),
            duration: u32::from_le_bytes(b[16..20].try_into().expect("4")),
            key: b[20] & 1 == 1,
            offset: u64::from_le_bytes(b[21..29].try_into().expect("8")),
            size: u32::from_le_bytes(b[29..33].try_into().expect("4")),
        };
        if b[20] & !1 != 0 {
            return Err(format!("frame {k}: unknown flags {:#x}", b[20]));
        }
        let end = f.offset.checked_add(u64::from(f.size));
        if end.is_none_or(|e| e > body.len() as u64) {
            return Err(format!(
                "frame {k}: its packet ({} bytes at byte {} of the container) lies outside the \
                 container's {} bytes",
                f.size,
                f.offset,
                body.len()
            ));
        }
        frames.push(f);
    }
    Ok(VideoValue {
        index: VideoIndex {
            container,
            codec,
            timescale,
            width,
            height,
            extradata,
            frames,
        },
        container: body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index() -> VideoIndex {
        VideoIndex {
            container: CONTAINER_MP4,
            codec: *b"avc1",
            timescale: 12800,
            width: 64,
            height: 48,
            extradata: vec![1, 2, 3],
            frames: vec![
                VideoFrame {
                    pts: 0,
                    dts: -512,
                    duration: 512,
                    key: true,
                    offset: 2,
                    size: 5,
                },
                VideoFrame {
                    pts: 1024,
                    dts: 0,
                    duration: 512,
                    key: false,
                    offset: 7,
                    size: 3,
                },
            ],
        }
    }

    #[test]
    fn a_video_value_round_trips_and_damage_is_named() {
        let body = b"..abcdefgh..";
        let v = encode_video(&index(), body);
        let p = parse_video(&v).unwrap();
        assert_eq!(p.index, index());
        assert_eq!(p.container, body);
        // every cut of the value is refused, never a panic
        for cut in 0..v.len() - body.len() + 10 {
            let _ = parse_video(&v[..cut]);
        }
        assert!(
            parse_video(&v[..v.len() - 3])
                .unwrap_err()
                .contains("outside")
        );
        let mut bad = v.clone();
        bad[0] = b'X';
        assert!(
            parse_video(&bad)
                .unwrap_err()
                .contains("not a stokehold video")
        );
        // a frame count larger than the bytes that hold it
        let mut bad = v.clone();
        let at = HEAD + 4 + 4 + 2 + 2 + 4 + 3;
        bad[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(parse_video(&bad).unwrap_err().contains("frames"));
        let mut none = index();
        none.frames.clear();
        assert!(
            parse_video(&encode_video(&none, body))
                .unwrap_err()
                .contains("no frames")
        );
    }
}
