//! `stokehold bench --sweep`: throughput over threads × prefetch, its SVG chart, and the
//! comparison of the autotuned loader with the best setting (`--autotune`).

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use stokehold::{Loader, LoaderConfig};

use super::{BenchArgs, Pipeline};
use crate::units;

/// Throughput over thread counts × prefetch depths (`--sweep-seconds` each, after its first batch).
pub(super) fn sweep(a: &BenchArgs, pl: &Pipeline, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let base = pl.config();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads: Vec<usize> = (1..=cores * 2).collect();
    let prefetch = [1usize, 2, 4, 8];
    let seconds = a.sweep_seconds.max(0.001);
    writeln!(
        out,
        "sweep       {}: samples/s by threads (rows) and prefetch (columns), batches of {}, {seconds} s each after the first batch",
        a.dataset
            .as_deref()
            .unwrap_or(std::path::Path::new(""))
            .display(),
        base.batch_size
    )?;
    write!(out, "{:>8}", "threads")?;
    for p in prefetch {
        write!(out, "{:>12}", format!("prefetch {p}"))?;
    }
    writeln!(out)?;
    let mut grid = Vec::new();
    let mut best = (0.0f64, 0usize, 0usize);
    // the best with at most one thread per core: the autotuner's CPU budget
    let mut best_in_budget = (0.0f64, 0usize, 0usize);
    for &t in &threads {
        write!(out, "{t:>8}")?;
        let mut row = Vec::new();
        for &p in &prefetch {
            let cfg = LoaderConfig {
                threads: t,
                prefetch: p,
                autotune: false,
                prefetch_auto: false,
                prepare_next_epoch: true,
                ..base.clone()
            };
            let mut l = pl.loader(cfg)?;
            let rate = steady_rate(&mut l, seconds)?;
            if rate > best.0 {
                best = (rate, t, p);
            }
            if t <= cores && rate > best_in_budget.0 {
                best_in_budget = (rate, t, p);
            }
            write!(out, "{:>12}", units::count(rate as u64))?;
            row.push(rate);
        }
        writeln!(out)?;
        grid.push(row);
    }
    writeln!(
        out,
        "best        {} samples/s with {} threads and prefetch {}",
        units::count(best.0 as u64),
        best.1,
        best.2
    )?;
    if best.1 > cores {
        writeln!(
            out,
            "in budget   {} samples/s with {} threads and prefetch {} (at most one thread per core: {cores})",
            units::count(best_in_budget.0 as u64),
            best_in_budget.1,
            best_in_budget.2
        )?;
    }
    if let Some(path) = &a.plot {
        std::fs::write(path, svg(&threads, &prefetch, &grid))
            .with_context(|| format!("writing {}", path.display()))?;
        writeln!(out, "plot        {}", path.display())?;
    }
    if base.autotune {
        autotune_check(a, pl, best, out)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Samples/s from the first batch until `seconds` later (as many epochs as that takes).
fn steady_rate(l: &mut Loader, seconds: f64) -> anyhow::Result<f64> {
    let mut t0 = None;
    let mut n = 0u64;
    loop {
        let mut any = false;
        for b in l.iter()? {
            let len = b?.len() as u64;
            any = true;
            match t0 {
                None => t0 = Some(Instant::now()),
                Some(t) => {
                    n += len;
                    if t.elapsed().as_secs_f64() >= seconds {
                        return Ok(n as f64 / t.elapsed().as_secs_f64());
                    }
                }
            }
        }
        anyhow::ensure!(any, "the dataset has no batches");
    }
}

/// The figures of one timed run from a cold start.
struct Window {
    /// Samples/s from `SETTLE` seconds to the end.
    rate: f64,
    /// (seconds since start, samples so far) after each batch.
    marks: Vec<(f64, u64)>,
    stats: stokehold::Stats,
}

/// Seconds after a cold start from which throughput is compared.
const SETTLE: f64 = 5.0;

/// Run a new loader with `cfg` for `duration` seconds (as many epochs as that takes).
fn timed_run(pl: &Pipeline, cfg: LoaderConfig, duration: f64) -> anyhow::Result<Window> {
    let mut l = pl.loader(cfg)?;
    let t0 = Instant::now();
    let mut marks: Vec<(f64, u64)> = Vec::new();
    let mut n = 0u64;
    'run: loop {
        let mut any = false;
        for b in l.iter()? {
            n += b?.len() as u64;
            any = true;
            let t = t0.elapsed().as_secs_f64();
            marks.push((t, n));
            if t >= duration {
                break 'run;
            }
        }
        anyhow::ensure!(any, "the dataset has no batches");
    }
    let (t5, n5) = mark_at(&marks, SETTLE);
    let (tend, nend) = *marks.last().context("no batches")?;
    Ok(Window {
        rate: (nend - n5) as f64 / (tend - t5).max(1e-9),
        marks,
        stats: l.stats(),
    })
}

/// The last mark before `t` (or the start).
fn mark_at(marks: &[(f64, u64)], t: f64) -> (f64, u64) {
    let i = marks.partition_point(|m| m.0 < t);
    if i == 0 { (0.0, 0) } else { marks[i - 1] }
}

/// Compare the autotuned loader with the sweep's best fixed setting, both from a cold start for
/// `--duration` seconds, measured after 5 s, in alternating runs (`--rounds`), so that both see
/// the same machine load.
fn autotune_check(
    a: &BenchArgs,
    pl: &Pipeline,
    best: (f64, usize, usize),
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let base = pl.config();
    let duration = a.duration.max(SETTLE + 0.5);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let fixed_cfg = LoaderConfig {
        threads: best.1,
        prefetch: best.2,
        autotune: false,
        prefetch_auto: false,
        prepare_next_epoch: true,
        ..base.clone()
    };
    let auto_cfg = LoaderConfig {
        autotune: true,
        prefetch_auto: true,
        prepare_next_epoch: true,
        ..base.clone()
    };
    let mut ratios = Vec::new();
    for round in 0..a.rounds.max(1) {
        let (fixed, auto) = if round % 2 == 0 {
            let f = timed_run(pl, fixed_cfg.clone(), duration)?;
            (f, timed_run(pl, auto_cfg.clone(), duration)?)
        } else {
            let t = timed_run(pl, auto_cfg.clone(), duration)?;
            (timed_run(pl, fixed_cfg.clone(), duration)?, t)
        };
        // the first time the autotuned run's trailing 1-second window reaches 90% of the fixed
        let reached = auto.marks.iter().find_map(|&(t, k)| {
            if t < 1.0 {
                return None;
            }
            let (t1, k1) = mark_at(&auto.marks, t - 1.0);
            ((k - k1) as f64 / (t - t1).max(1e-9) >= 0.9 * fixed.rate).then_some(t)
        });
        let ratio = auto.rate / fixed.rate.max(1e-9);
        ratios.push(ratio);
        writeln!(
            out,
            "autotune    round {}: best fixed ({} threads{}, prefetch {}) {} samples/s, autotuned {} samples/s ({SETTLE:.0}-{duration:.0} s after a cold start) = {ratio:.2}; {}; ended with {} of {} threads working, prefetch {}",
            round + 1,
            best.1,
            if best.1 > cores {
                " (over the CPU budget)"
            } else {
                ""
            },
            best.2,
            units::count(fixed.rate as u64),
            units::count(auto.rate as u64),
            match reached {
                Some(t) => format!("90% reached after {t:.1} s"),
                None => "90% never reached over a 1 s window".into(),
            },
            auto.stats.active_threads,
            auto.stats.threads,
            auto.stats.prefetch
        )?;
    }
    ratios.sort_by(f64::total_cmp);
    writeln!(
        out,
        "autotuned   {:.2} of the best fixed setting (median of {} alternating rounds)",
        ratios[ratios.len() / 2],
        ratios.len()
    )?;
    Ok(())
}

/// A line chart: samples/s against threads, one line per prefetch depth.
fn svg(threads: &[usize], prefetch: &[usize], grid: &[Vec<f64>]) -> String {
    let (w, h, m) = (640.0, 400.0, 60.0);
    let max = grid.iter().flatten().copied().fold(1.0f64, f64::max) * 1.1;
    let x = |t: usize| m + (t as f64 - 1.0) / ((threads.len().max(2) - 1) as f64) * (w - 2.0 * m);
    let y = |v: f64| h - m - v / max * (h - 2.0 * m);
    let colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"];
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    s += &format!(
        "<line x1=\"{m}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n",
        h - m,
        w - m,
        h - m
    );
    s += &format!(
        "<line x1=\"{m}\" y1=\"{m}\" x2=\"{m}\" y2=\"{}\" stroke=\"black\"/>\n",
        h - m
    );
    for &t in threads {
        s += &format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{t}</text>\n",
            x(t),
            h - m + 18.0
        );
    }
    for k in 0..=4 {
        let v = max * f64::from(k) / 4.0;
        s += &format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
            m - 6.0,
            y(v) + 4.0,
            units::count(v as u64)
        );
    }
    s += &format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">threads</text>\n",
        w / 2.0,
        h - 15.0
    );
    s += &format!("<text x=\"{m}\" y=\"{}\">samples/s</text>\n", m - 20.0);
    for (j, p) in prefetch.iter().enumerate() {
        let pts: Vec<String> = threads
            .iter()
            .enumerate()
            .map(|(i, &t)| format!("{:.1},{:.1}", x(t), y(grid[i][j])))
            .collect();
        let c = colours[j % colours.len()];
        s += &format!(
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>\n",
            pts.join(" ")
        );
        s += &format!(
            "<text x=\"{}\" y=\"{}\" fill=\"{c}\">prefetch {p}</text>\n",
            w - m - 80.0,
            m + 16.0 * j as f64
        );
    }
    s + "</svg>\n"
}
