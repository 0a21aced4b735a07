//! `stokehold bench --overhead`: what stage timing costs.

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use stokehold::LoaderConfig;

use super::{BenchArgs, Pipeline};
use crate::units;

/// User plus system CPU seconds of this process so far.
fn cpu_seconds() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// Throughput with stage timing on and off, `rounds` runs each, alternating.
pub(super) fn overhead(
    a: &BenchArgs,
    pl: &Pipeline,
    rounds: u32,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let base = pl.config();
    let mut on = Vec::new();
    let mut off = Vec::new();
    // CPU seconds per sample of the whole process: unlike wall-clock throughput, barely moved by
    // other processes competing for the cores
    let mut cpu_on = Vec::new();
    let mut cpu_off = Vec::new();
    for r in 0..rounds {
        // alternate which goes first, so drift in the machine's load cancels out
        let order = if r % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for profile in order {
            let cfg = LoaderConfig {
                profile,
                trace_capacity: 0,
                ..base.clone()
            };
            let mut l = pl.loader(cfg)?;
            let c0 = cpu_seconds();
            let t0 = Instant::now();
            let mut n = 0u64;
            for _ in 0..a.epochs {
                for b in l.iter()? {
                    n += b?.len() as u64;
                }
            }
            let rate = n as f64 / t0.elapsed().as_secs_f64();
            drop(l); // joins the run started ahead, if any
            let cpu = (cpu_seconds() - c0) / n.max(1) as f64;
            if profile { &mut on } else { &mut off }.push(rate);
            if profile { &mut cpu_on } else { &mut cpu_off }.push(cpu);
        }
    }
    let ratios: Vec<String> = on
        .iter()
        .zip(&off)
        .map(|(x, y)| format!("{:.3}", x / y))
        .collect();
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (m_on, m_off) = (median(&mut on), median(&mut off));
    let (c_on, c_off) = (median(&mut cpu_on), median(&mut cpu_off));
    writeln!(
        out,
        "profiling   on {} samples/s, off {} samples/s (median of {rounds} runs each, alternating, {} epochs a run): stage timing costs {:.1}%",
        units::count(m_on as u64),
        units::count(m_off as u64),
        a.epochs,
        100.0 * (1.0 - m_on / m_off)
    )?;
    writeln!(
        out,
        "cpu         on {:.3} us, off {:.3} us of CPU time per sample (median): stage timing costs {:.1}% of CPU time",
        c_on * 1e6,
        c_off * 1e6,
        100.0 * (c_on / c_off - 1.0)
    )?;
    writeln!(
        out,
        "rounds      on/off throughput ratio of each round: {}",
        ratios.join(" ")
    )?;
    Ok(ExitCode::SUCCESS)
}
