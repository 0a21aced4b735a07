//! The MP4 frame index against FFmpeg's own demuxer: videos made by the `ffmpeg` command (the
//! real FFmpeg, installed by `make sysdeps`), and every packet's times, flags, offset and size as
//! `ffprobe -show_packets` reports them.

use std::path::Path;
use std::process::Command;

use stokehold_ingest::frames::ContainerLimits;
use stokehold_ingest::mp4::{Mp4Error, index_file};

pub(crate) fn ffmpeg(args: &[&str]) {
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

/// Runs `ffmpeg` on the lavfi source `src` with `args`, writing `out`.
pub(crate) fn lavfi(src: &str, args: &[&str], out: &Path) {
    let mut all = vec!["-f", "lavfi", "-i", src];
    all.extend_from_slice(args);
    all.push(out.to_str().unwrap());
    ffmpeg(&all);
}

/// `(pts, dts, size, pos, key)` of every video packet, in file order, as ffprobe gives them.
fn ffprobe_packets(path: &Path) -> Vec<(i64, i64, u64, u64, bool)> {
    let out = Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-select_streams",
            "v:0",
            "-show_packets",
            "-show_entries",
        ])
        .args(["packet=pts,dts,size,pos,flags", "-of", "json"])
        .arg(path)
        .output()
        .expect("the ffprobe command");
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let num = |p: &serde_json::Value, k: &str| -> i64 {
        match &p[k] {
            serde_json::Value::String(s) => s.parse().unwrap(),
            serde_json::Value::Number(n) => n.as_i64().unwrap(),
            other => panic!("{k}: {other}"),
        }
    };
    v["packets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                num(p, "pts"),
                num(p, "dts"),
                num(p, "size") as u64,
                num(p, "pos") as u64,
                p["flags"].as_str().unwrap().starts_with('K'),
            )
        })
        .collect()
}

/// `(extradata_size, CRC-32 of the extradata)` of the first video stream, as ffprobe gives them.
pub(crate) fn ffprobe_extradata(path: &Path) -> (usize, Option<String>) {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0", "-show_data_hash"])
        .args([
            "CRC32",
            "-show_entries",
            "stream=extradata_size,extradata_hash",
        ])
        .args(["-of", "json"])
        .arg(path)
        .output()
        .expect("the ffprobe command");
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &v["streams"][0];
    (
        s["extradata_size"].as_u64().unwrap_or(0) as usize,
        s["extradata_hash"].as_str().map(str::to_owned),
    )
}

#[test]
fn the_frame_index_is_ffmpegs_packet_table() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: &[(&str, &[&str])] = &[
        // H.264 with B-frames (an edit list shifts the times) and the default keyframe interval
        ("h264-b.mp4", &["-c:v", "libx264", "-pix_fmt", "yuv420p"]),
        // a short keyframe interval, no B-frames
        (
            "h264-g8.mp4",
            &[
                "-c:v", "libx264", "-g", "8", "-bf", "0", "-pix_fmt", "yuv420p",
            ],
        ),
        // moov first (faststart), another codec
        (
            "mpeg4-faststart.mp4",
            &["-c:v", "mpeg4", "-g", "12", "-movflags", "+faststart"],
        ),
        // a 30000/1001 frame rate (a timescale of its own)
        (
            "h264-ntsc.mp4",
            &["-c:v", "libx264", "-r", "30000/1001", "-pix_fmt", "yuv420p"],
        ),
    ];
    for (name, codec) in cases {
        let path = tmp.path().join(name);
        let mut args = vec![
            "-f",
            "lavfi",
            "-i",
            "testsrc=duration=3:size=160x120:rate=25",
        ];
        args.extend_from_slice(codec);
        let p = path.to_str().unwrap();
        args.push(p);
        ffmpeg(&args);
        let index = index_file(&path, &ContainerLimits::default()).unwrap();
        let want = ffprobe_packets(&path);
        assert_eq!(index.frames.len(), want.len(), "{name}");
        assert_eq!((index.width, index.height), (160, 120), "{name}");
        // the codec configuration is the extradata FFmpeg's demuxer gives its decoder
        let (size, hash) = ffprobe_extradata(&path);
        assert!(size > 0, "{name}");
        assert_eq!(index.extradata.len(), size, "{name}");
        let crc = format!("CRC32:{:08x}", crc32fast::hash(&index.extradata));
        assert_eq!(Some(crc), hash, "{name}");
        for (i, (f, w)) in index.frames.iter().zip(&want).enumerate() {
            assert_eq!(
                (f.pts, f.dts, u64::from(f.size), f.offset, f.key),
                *w,
                "{name}: frame {i}"
            );
        }
        // what a clip needs: the keyframe before any frame
        let keys = index.frames.iter().filter(|f| f.key).count();
        assert!(keys >= 1 && index.frames[0].key, "{name}");
        let last = index.frames.len() - 1;
        let k = index.keyframe_before(last).unwrap();
        assert!(
            index.frames[k].key && index.frames[k + 1..].iter().all(|f| !f.key),
            "{name}"
        );
        // presentation order is the order of pts
        let order = index.presentation_order();
        assert!(
            order
                .windows(2)
                .all(|w| index.frames[w[0]].pts < index.frames[w[1]].pts),
            "{name}"
        );
    }
}

#[test]
fn a_cut_or_foreign_file_is_named_not_indexed() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("v.mp4");
    lavfi(
        "testsrc=duration=1:size=64x48:rate=10",
        &["-c:v", "libx264"],
        &path,
    );
    let bytes = std::fs::read(&path).unwrap();
    // moov at the end (no faststart): cut it off
    let cut = tmp.path().join("cut.mp4");
    std::fs::write(&cut, &bytes[..bytes.len() - 200]).unwrap();
    let e = index_file(&cut, &ContainerLimits::default()).unwrap_err();
    assert!(
        e.to_string().contains("moov") || e.to_string().contains("size"),
        "{e}"
    );
    // audio only: no video track
    let audio = tmp.path().join("a.mp4");
    lavfi("sine=duration=1", &["-c:a", "aac"], &audio);
    let e = index_file(&audio, &ContainerLimits::default()).unwrap_err();
    assert!(
        matches!(e, Mp4Error::Unsupported(ref m) if m.contains("no video track")),
        "{e}"
    );
    // not an MP4
    let jpeg = tmp.path().join("x.mp4");
    std::fs::write(&jpeg, b"\xff\xd8\xff\xe0 not a video at all").unwrap();
    assert!(index_file(&jpeg, &ContainerLimits::default()).is_err());
    // a frame table declaring more frames than the limit is refused before it is read
    let few = ContainerLimits {
        max_frames: 3,
        ..ContainerLimits::default()
    };
    let e = index_file(&path, &few).unwrap_err();
    assert!(matches!(e, Mp4Error::TooLarge { .. }), "{e}");
}
