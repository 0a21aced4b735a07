//! The video decoder against FFmpeg's own command line: videos made by the `ffmpeg` command
//! (installed by `make sysdeps`, which also brings the libraries the decoder loads), decoded by
//! `ffmpeg` to raw RGB frame by frame, and the same frames from [`VideoFile`] fed packet by
//! packet from the frame index (MP4, Matroska, WebM).

use std::path::{Path, PathBuf};
use std::process::Command;

use stokehold_video::{Clip, DecodedFrames, Start, Step, VideoError, VideoFile};

fn ffmpeg(args: &[&str]) {
    let out = Command::new("ffmpeg")
        .args(["-v", "error", "-y"])
        .args(args)
        .output()
        .expect("the ffmpeg command (make sysdeps installs it)");
    assert!(
        out.status.success(),
        "ffmpeg {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A test video: `seconds` of FFmpeg's test pattern with moving noise (so no two frames are
/// alike), `size`, `rate`, encoded with `codec`.
fn make(dir: &Path, name: &str, seconds: u32, size: &str, rate: &str, codec: &[&str]) -> PathBuf {
    let path = dir.join(name);
    let src = format!("testsrc2=duration={seconds}:size={size}:rate={rate}");
    let mut args = vec!["-f", "lavfi", "-i", &src];
    args.extend_from_slice(codec);
    let p = path.to_str().unwrap();
    args.push(p);
    ffmpeg(&args);
    path
}

/// Every frame, in presentation order, as `ffmpeg` decodes it to RGB24 (no frame dropped or
/// duplicated).
fn reference_frames(path: &Path, w: usize, h: usize) -> Vec<Vec<u8>> {
    let out = Command::new("ffmpeg")
        .args(["-v", "error", "-threads", "1", "-i"])
        .arg(path)
        .args([
            "-fps_mode",
            "passthrough",
            "-f",
            "rawvideo",
            "-pix_fmt",
            "rgb24",
            "-",
        ])
        .output()
        .expect("the ffmpeg command");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let n = w * h * 3;
    assert_eq!(out.stdout.len() % n, 0);
    out.stdout.chunks(n).map(<[u8]>::to_vec).collect()
}

fn max_diff(a: &[u8], b: &[u8]) -> u8 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| x.abs_diff(*y))
        .max()
        .unwrap_or(0)
}

/// The videos of the tests: (file, codec arguments, seconds, frame rate).
fn cases() -> Vec<(&'static str, Vec<&'static str>, u32, &'static str)> {
    vec![
        // H.264 with B-frames and x264's default keyframe interval (250): 12 s at 25 fps
        // makes two keyframe intervals and more
        (
            "h264-b.mp4",
            vec!["-c:v", "libx264", "-pix_fmt", "yuv420p"],
            12,
            "25",
        ),
        // a short keyframe interval with B-frames
        (
            "h264-g8.mp4",
            vec!["-c:v", "libx264", "-g", "8", "-pix_fmt", "yuv420p"],
            3,
            "25",
        ),
        // a 30000/1001 frame rate
        (
            "h264-ntsc.mp4",
            vec!["-c:v", "libx264", "-g", "30", "-pix_fmt", "yuv420p"],
            3,
            "30000/1001",
        ),
        // H.265, VP9, AV1 and MPEG-4 part 2 (extradata from hvcC, none, av1C, esds)
        (
            "hevc.mp4",
            vec![
                "-c:v",
                "libx265",
                "-x265-params",
                "keyint=20:log-level=error",
                "-tag:v",
                "hvc1",
                "-pix_fmt",
                "yuv420p",
            ],
            2,
            "25",
        ),
        (
            "vp9.mp4",
            vec![
                "-c:v",
                "libvpx-vp9",
                "-g",
                "15",
                "-deadline",
                "realtime",
                "-pix_fmt",
                "yuv420p",
            ],
            2,
            "25",
        ),
        (
            "av1.mp4",
            vec![
                "-c:v",
                "libaom-av1",
                "-g",
                "15",
                "-cpu-used",
                "8",
                "-pix_fmt",
                "yuv420p",
            ],
            2,
            "25",
        ),
        (
            "mpeg4.mp4",
            vec!["-c:v", "mpeg4", "-g", "12", "-bf", "2"],
            2,
            "25",
        ),
        // Matroska and WebM (the index from mkv.rs): H.264 with B-frames, H.265, VP9, AV1
        (
            "h264-b.mkv",
            vec!["-c:v", "libx264", "-g", "30", "-pix_fmt", "yuv420p"],
            3,
            "25",
        ),
        (
            "hevc.mkv",
            vec![
                "-c:v",
                "libx265",
                "-x265-params",
                "keyint=20:log-level=error",
                "-pix_fmt",
                "yuv420p",
            ],
            2,
            "25",
        ),
        (
            "vp9.webm",
            vec![
                "-c:v",
                "libvpx-vp9",
                "-g",
                "15",
                "-deadline",
                "realtime",
                "-pix_fmt",
                "yuv420p",
            ],
            2,
            "25",
        ),
        (
            "av1.mkv",
            vec![
                "-c:v",
                "libaom-av1",
                "-g",
                "15",
                "-cpu-used",
                "8",
                "-pix_fmt",
                "yuv420p",
            ],
            2,
            "25",
        ),
    ]
}

#[test]
fn frames_are_the_frames_ffmpeg_shows_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, codec, seconds, rate) in cases() {
        let path = make(tmp.path(), name, seconds, "160x120", rate, &codec);
        let reference = reference_frames(&path, 160, 120);
        let mut v = VideoFile::open(&path).unwrap();
        assert_eq!(v.len(), reference.len(), "{name}");
        let n = v.len();
        // whole video in one call, then clips that start mid-interval, cross keyframes, repeat
        // frames and come in any order
        let all: Vec<usize> = (0..n).collect();
        let picks: Vec<Vec<usize>> = vec![
            all,
            vec![n - 1],
            vec![n / 2, n / 2 + 2, n / 2 + 4],
            vec![n - 3, 1, n - 3, 0],
            (0..n).step_by(7).collect(),
        ];
        // each frame alone (a fresh start from its keyframe every time), where intervals are
        // short: MPEG-4's are open (B-frames after a keyframe shown before it, decoded from the
        // interval before), the regression of decoding from the keyframe before in decode order
        if name == "mpeg4.mp4" || name == "h264-g8.mp4" {
            for (i, want) in reference.iter().enumerate() {
                let got = v.frames_at(&[i]).unwrap();
                assert_eq!(max_diff(&got.data, want), 0, "{name}: frame {i} alone");
            }
            // and in pairs: a keyframe with the B-frame shown just before it (decoded after
            // it) is the regression of going on from a fresh start at that keyframe
            for i in 0..n - 1 {
                let got = v.frames_at(&[i, i + 1]).unwrap();
                for (slot, j) in [i, i + 1].into_iter().enumerate() {
                    let f = &got.data[slot * 160 * 120 * 3..(slot + 1) * 160 * 120 * 3];
                    assert_eq!(
                        max_diff(f, &reference[j]),
                        0,
                        "{name}: frames {i}, {}",
                        i + 1
                    );
                }
            }
        }
        for pick in picks {
            let got = v.frames_at(&pick).unwrap();
            assert_eq!((got.count, got.height, got.width), (pick.len(), 120, 160));
            let times = v.pts_seconds();
            for (slot, &i) in pick.iter().enumerate() {
                let f = &got.data[slot * 160 * 120 * 3..(slot + 1) * 160 * 120 * 3];
                assert_eq!(
                    max_diff(f, &reference[i]),
                    0,
                    "{name}: frame {i} (slot {slot} of {pick:?})"
                );
                assert_eq!(got.pts_seconds[slot], times[i], "{name}");
            }
        }
    }
}

#[test]
fn a_timestamp_means_the_frame_played_then() {
    let tmp = tempfile::tempdir().unwrap();
    let path = make(
        tmp.path(),
        "ntsc.mp4",
        2,
        "64x48",
        "30000/1001",
        &["-c:v", "libx264", "-pix_fmt", "yuv420p"],
    );
    let v = VideoFile::open(&path).unwrap();
    let times = v.pts_seconds();
    assert_eq!(times[0], v.begin_seconds());
    for (i, &t) in times.iter().enumerate() {
        // a frame's own start, just before the next frame's start
        assert_eq!(v.frame_played_at(t).unwrap(), i);
        if let Some(&next) = times.get(i + 1) {
            let before = f64::from_bits(next.to_bits() - 1);
            assert_eq!(v.frame_played_at(before).unwrap(), i);
        }
    }
    let end = v.end_seconds();
    assert_eq!(
        v.frame_played_at(f64::from_bits(end.to_bits() - 1))
            .unwrap(),
        v.len() - 1
    );
    for bad in [end, end + 1.0, -0.5, f64::NAN] {
        let e = v.frame_played_at(bad).unwrap_err();
        assert!(matches!(e, VideoError::OutOfRange { .. }), "{e}");
        assert!(e.to_string().contains("ntsc.mp4"), "{e}");
    }
}

#[test]
fn clips_sampled_by_the_rule_decode_to_their_frames() {
    let tmp = tempfile::tempdir().unwrap();
    let path = make(
        tmp.path(),
        "v.mp4",
        12,
        "160x120",
        "25",
        &["-c:v", "libx264", "-pix_fmt", "yuv420p"],
    );
    let reference = reference_frames(&path, 160, 120);
    let mut v = VideoFile::open(&path).unwrap();
    let times = v.pts_seconds();
    let clip = Clip::new(16, Step::Stride(2), Start::Random).unwrap();
    let (mut packets, mut decoded) = (0, 0);
    for sample in 0..4 {
        let ts = &clip
            .timestamps(&times, v.end_seconds(), 11, sample)
            .unwrap()[0];
        let got = v.frames_played_at(ts).unwrap();
        let first = times.iter().position(|&t| t == ts[0]).unwrap();
        for j in 0..16 {
            assert_eq!(got.frames[j], first + 2 * j);
            let f = &got.data[j * 160 * 120 * 3..(j + 1) * 160 * 120 * 3];
            assert_eq!(max_diff(f, &reference[first + 2 * j]), 0);
        }
        packets += got.packets;
        decoded += got.decoded;
    }
    // x264's non-reference B-frames that the clips do not want (before them, and between
    // their frames) are sent but not decoded: the frames above are exact all the same
    assert!(
        decoded * 10 < packets * 8,
        "{decoded} frames decoded of {packets} packets"
    );
    // a clip longer than the video
    let long = Clip::new(16, Step::Stride(40), Start::Random).unwrap();
    assert!(long.timestamps(&times, v.end_seconds(), 0, 0).is_err());
}

#[test]
fn bad_video_gets_errors_naming_the_file_and_the_frame() {
    let tmp = tempfile::tempdir().unwrap();
    let path = make(
        tmp.path(),
        "good.mp4",
        2,
        "64x48",
        "25",
        &[
            "-c:v",
            "libx264",
            "-g",
            "10",
            "-pix_fmt",
            "yuv420p",
            "-movflags",
            "+faststart",
        ],
    );
    let bytes = std::fs::read(&path).unwrap();
    // cut: the moov (first) promises packets past the end of the file
    let cut = tmp.path().join("cut.mp4");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let e = VideoFile::open(&cut).unwrap_err();
    assert!(
        matches!(e, VideoError::Index { .. }) && e.to_string().contains("cut.mp4"),
        "{e}"
    );
    assert!(e.to_string().contains("end of the file"), "{e}");
    // damaged: the packets of the second keyframe interval overwritten with noise
    let v = VideoFile::open(&path).unwrap();
    let index = v.index().clone();
    let mut damaged = bytes.clone();
    let mut x = 12345u32;
    for f in index.frames.iter().skip(10).take(10) {
        for b in &mut damaged[f.offset as usize..(f.offset + u64::from(f.size)) as usize] {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            *b = (x >> 16) as u8;
        }
    }
    let bad = tmp.path().join("damaged.mp4");
    std::fs::write(&bad, &damaged).unwrap();
    let mut v = VideoFile::open(&bad).unwrap();
    let reference = reference_frames(&path, 64, 48);
    // the first interval is intact and decodes as before
    let ok = v.frames_at(&[0, 5, 9]).unwrap();
    for (slot, i) in [0, 5, 9].into_iter().enumerate() {
        assert_eq!(
            max_diff(&ok.data[slot * 64 * 48 * 3..][..64 * 48 * 3], &reference[i]),
            0
        );
    }
    // the damaged one: an error naming the file and the frame's time and byte offset, or (if
    // FFmpeg conceals the damage) frames that differ from the intact ones; never a crash
    match v.frames_at(&[12]) {
        Err(e) => {
            let s = e.to_string();
            assert!(s.contains("damaged.mp4") && s.contains("byte"), "{s}");
            assert!(
                matches!(e, VideoError::Decode { .. } | VideoError::Missing { .. }),
                "{e}"
            );
        }
        Ok(f) => assert_ne!(f.data, reference[12], "noise decoded as the picture"),
    }
    // and the file still decodes where it is intact, after the error
    let again = v.frames_at(&[25]).unwrap();
    assert_eq!(max_diff(&again.data, &reference[25]), 0);
    // no video track
    let audio = tmp.path().join("audio.mp4");
    ffmpeg(&[
        "-f",
        "lavfi",
        "-i",
        "sine=duration=1",
        "-c:a",
        "aac",
        audio.to_str().unwrap(),
    ]);
    let e = VideoFile::open(&audio).unwrap_err();
    assert!(
        e.to_string().contains("no video track") && e.to_string().contains("audio.mp4"),
        "{e}"
    );
    // a frame past the end
    let mut v = VideoFile::open(&path).unwrap();
    let e = v.frames_at(&[50]).unwrap_err();
    assert!(
        e.to_string().contains("50 frames") && e.to_string().contains("good.mp4"),
        "{e}"
    );
    let e = v.frames_played_at(&[0.0, 2.5]).unwrap_err();
    assert!(e.to_string().contains("2.5 s"), "{e}");
}

#[test]
fn ffmpegs_own_threads_give_the_same_frames() {
    let tmp = tempfile::tempdir().unwrap();
    let path = make(
        tmp.path(),
        "t.mp4",
        2,
        "160x120",
        "25",
        &["-c:v", "libx264", "-pix_fmt", "yuv420p"],
    );
    let mut v = VideoFile::open(&path).unwrap();
    let pick = [3usize, 20, 21, 40];
    let one = v.frames_at(&pick).unwrap();
    v.set_threads(4);
    let four = v.frames_at(&pick).unwrap();
    // the same frames; FFmpeg's frame threads take a few packets more before giving frames out
    assert!(four.packet_bytes >= one.packet_bytes && one.packet_bytes > 0);
    let same = |f: DecodedFrames| DecodedFrames {
        packet_bytes: 0,
        packets: 0,
        decoded: 0,
        ..f
    };
    assert_eq!(same(one), same(four));
}
