//! The report: the tables of BENCHMARKS.md from what [`crate::run`]
//! measured, and the targets table with each verdict.

use crate::children::User;
use crate::stats::{Summary, ms};
use crate::{Args, PairedCost, SHELL_COMMAND, cpu_model, detect, memory, size, wrk};
use std::fmt::Write as _;
use std::time::Duration;

/// Everything one run measured; a part not run is empty or `None`.
pub struct Results {
    pub sizes: Option<size::Sizes>,
    pub rows: Vec<ExecRow>,
    pub paired_costs: Vec<PairedCost>,
    pub cgroup_skipped: Option<String>,
    /// RSS at start, after the exec rounds, and the peak (KiB).
    pub idle: Option<(u64, u64, u64)>,
    pub detections: Option<Vec<(detect::Marker, Duration)>>,
    pub floods: Vec<FloodRow>,
    pub wrk_runs: Vec<wrk::WrkRun>,
    /// (part, load average when it started, when it ended)
    pub loads: Vec<(&'static str, String, String)>,
    pub load_before: String,
    pub load_after: String,
}

pub fn render(args: &Args, user: &User, res: &Results) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## Machine\n");
    let _ = writeln!(
        out,
        "- {} CPUs, {}, Linux {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model(),
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
    );
    let _ = writeln!(
        out,
        "- load average (1/5/15 min): before `{}`, after `{}`",
        res.load_before, res.load_after
    );
    for (part, before, after) in &res.loads {
        let _ = writeln!(out, "  - {part}: `{before}` → `{after}`");
    }
    let _ = writeln!(
        out,
        "- every shell: `/bin/bash --login -c {SHELL_COMMAND}` as `{}` (home `{}`, {} entries)\n",
        user.name,
        user.home.display(),
        std::fs::read_dir(&user.home).map_or(0, |d| d.count())
    );

    if !res.rows.is_empty() {
        let floor = res.rows[0].1.median;
        let _ = writeln!(
            out,
            "## Exec round trip ({} rounds, interleaved in random order, after {} warm-up rounds)\n",
            args.rounds, args.warmup
        );
        let _ = writeln!(
            out,
            "| variant | median ms | p90 ms | ratio to floor (medians) | ratio, paired by round (median) |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|");
        for (name, s, paired) in &res.rows {
            let _ = writeln!(
                out,
                "| {name} | {} | {} | {:.3} | {paired:.3} |",
                ms(s.median),
                ms(s.p90),
                s.median.as_secs_f64() / floor.as_secs_f64()
            );
        }
        for (which, r) in &res.paired_costs {
            let _ = writeln!(out, "\n{which}, paired by round (median): {r:.3}");
        }
        if let Some(why) = &res.cgroup_skipped {
            let _ = writeln!(out, "\nNo per-exec cgroup rows: {why}.");
        }
        let _ = writeln!(out);
    }

    if let Some(d) = &res.detections {
        let _ = writeln!(
            out,
            "## Readiness detection (marker appears → long-poll `/v1/ready?wait=30` returns)\n"
        );
        let _ = writeln!(out, "| marker | n | median ms | p99 ms | max ms |");
        let _ = writeln!(out, "|---|---:|---:|---:|---:|");
        let groups: [(&str, Option<detect::Marker>); 3] = [
            (
                "`result.json` symlink",
                Some(detect::Marker::CloudInitResult),
            ),
            (
                "`setup.json` → succeeded",
                Some(detect::Marker::SetupSucceeded),
            ),
            ("both", None),
        ];
        for (label, which) in groups {
            let v: Vec<Duration> = d
                .iter()
                .filter(|(m, _)| which.is_none_or(|w| w == *m))
                .map(|(_, t)| *t)
                .collect();
            let s = Summary::of(&v);
            let _ = writeln!(
                out,
                "| {label} | {} | {} | {} | {} |",
                s.n,
                ms(s.median),
                ms(s.p99),
                ms(s.max)
            );
        }
        let _ = writeln!(out);
    }

    if !res.wrk_runs.is_empty() {
        let _ = writeln!(
            out,
            "## `GET /v1/ready` under load (agent on CPU 0, `wrk -t1 -c{}` on CPU 1, {} runs of {} s)\n",
            args.wrk_connections, args.wrk_runs, args.wrk_seconds
        );
        let _ = writeln!(out, "| run | requests/s | p50 ms | p99 ms | non-2xx |");
        let _ = writeln!(out, "|---|---:|---:|---:|---:|");
        for (i, r) in res.wrk_runs.iter().enumerate() {
            let _ = writeln!(
                out,
                "| {} | {:.0} | {} | {} | {} |",
                i + 1,
                r.requests_per_sec,
                ms(r.p50),
                ms(r.p99),
                r.non_2xx
            );
        }
        let _ = writeln!(out);
    }

    if res.idle.is_some() || !res.floods.is_empty() {
        let _ = writeln!(out, "## Memory (KiB, from /proc/PID/status)\n");
        let _ = writeln!(
            out,
            "| situation | RSS before | peak (VmHWM) | RSS after | kept output |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|");
        if let Some((start, after, hwm)) = res.idle {
            let _ = writeln!(
                out,
                "| idle: just started / after the exec rounds | {start} | {hwm} | {after} | – |"
            );
        }
        for (f, o, before, peak, after) in &res.floods {
            let cap = match f.cap {
                None => "default cap (1 MiB)".to_owned(),
                Some(c) => format!("`max_output_bytes` {} KiB", c / 1024),
            };
            let _ = writeln!(
                out,
                "| {} execs × {} MB stdout, {cap}, {:.1} s | {before} | {peak} | {after} | {} |",
                f.execs,
                f.bytes_each / 1_000_000,
                o.wall.as_secs_f64(),
                o.kept / 1024
            );
        }
        let _ = writeln!(out);
    }

    if let Some(s) = &res.sizes {
        let _ = writeln!(out, "## Size (`{}`)\n", args.agent.display());
        let _ = writeln!(out, "| what | bytes | KiB |");
        let _ = writeln!(out, "|---|---:|---:|");
        for (what, b) in [
            ("static, stripped binary", s.binary),
            ("gzip -9", s.gzip),
            ("base64 of that, in the user-data", s.base64),
        ] {
            let _ = writeln!(out, "| {what} | {b} | {:.1} |", b as f64 / 1024.0);
        }
        if let Some(sec) = &s.secret {
            let _ = writeln!(
                out,
                "| hello-lab user-data (the Secret's `data.userdata`, decoded) | {} | {:.1} |",
                sec.user_data,
                sec.user_data as f64 / 1024.0
            );
            let _ = writeln!(
                out,
                "| hello-lab Secret manifest (YAML, base64 of the above) | {} | {:.1} |",
                sec.manifest,
                sec.manifest as f64 / 1024.0
            );
            let _ = writeln!(out, "\n`labctl secret`: `{}`", sec.budget_line);
        }
        let _ = writeln!(out);
    }

    out.push_str(&targets(
        &res.rows,
        res.detections.as_deref(),
        &res.wrk_runs,
        res.idle,
        &res.floods,
        res.sizes.as_ref(),
    ));
    out
}

pub type FloodRow = (memory::Flood, memory::FloodOutcome, u64, u64, u64);
/// Variant, its summary, and its median ratio to the floor paired by round.
pub type ExecRow = (String, Summary, f64);

fn targets(
    rows: &[ExecRow],
    detections: Option<&[(detect::Marker, Duration)]>,
    wrk_runs: &[wrk::WrkRun],
    idle: Option<(u64, u64, u64)>,
    floods: &[FloodRow],
    sizes: Option<&size::Sizes>,
) -> String {
    let mut t = Vec::<(String, String, bool)>::new();
    if rows.len() >= 2 {
        let floor = rows[0].1.median.as_secs_f64();
        // Both ways the agent contains a command: a per-exec cgroup where
        // the guest delegates one, the session sweep elsewhere.
        let agents: Vec<&ExecRow> = rows
            .iter()
            .filter(|(n, _, _)| {
                n.starts_with("lab-agent, kept-alive")
                    || n.starts_with("lab-agent, per-exec cgroup")
            })
            .collect();
        let peers: Vec<&ExecRow> = rows
            .iter()
            .filter(|(n, _, _)| n.starts_with("OpenSSH") || n.starts_with("qemu-ga"))
            .collect();
        let best = peers.iter().min_by_key(|(_, s, _)| s.median);
        for (name, summary, paired) in agents {
            let agent = summary.median.as_secs_f64();
            t.push((
                format!("exec ≤ 1.10 × floor: {name}"),
                format!("{:.3} × (paired by round: {paired:.3} ×)", agent / floor),
                agent <= 1.10 * floor,
            ));
            if let Some(best) = best {
                t.push((
                    format!("exec faster than OpenSSH and qemu-ga: {name}"),
                    format!(
                        "{} ms vs the fastest peer ({}) {} ms",
                        ms(summary.median),
                        best.0,
                        ms(best.1.median)
                    ),
                    summary.median < best.1.median,
                ));
            }
        }
    }
    if let Some(s) = sizes {
        t.push((
            // The size target, as packaging/build-agent.sh enforces it.
            "binary < 1,000,000 bytes".into(),
            format!("{} bytes", s.binary),
            s.binary < 1_000_000,
        ));
        if let Some(sec) = &s.secret {
            t.push((
                "hello-lab Secret ≤ 700 KiB".into(),
                format!("{:.1} KiB of user-data", sec.user_data as f64 / 1024.0),
                sec.user_data <= 700 * 1024,
            ));
        }
    }
    if let Some((start, after, _)) = idle {
        let worst = start.max(after);
        t.push((
            "idle RSS ≤ 2 MiB".into(),
            format!("{worst} KiB"),
            worst <= 2048,
        ));
    }
    for (f, _, _, peak, _) in floods {
        let cap = f.cap.map_or("default 1 MiB cap".to_owned(), |c| {
            format!("{} KiB cap", c / 1024)
        });
        t.push((
            format!("RSS ≤ 8 MiB, 8 execs flooding ({cap})"),
            format!("{peak} KiB"),
            *peak <= 8 * 1024,
        ));
    }
    if !wrk_runs.is_empty() {
        let mut r: Vec<f64> = wrk_runs.iter().map(|r| r.requests_per_sec).collect();
        r.sort_by(f64::total_cmp);
        let median = r[r.len() / 2];
        t.push((
            "`/v1/ready` ≥ 30k req/s".into(),
            format!("{median:.0} req/s (median run)"),
            median >= 30_000.0,
        ));
    }
    if let Some(d) = detections {
        let v: Vec<Duration> = d.iter().map(|(_, t)| *t).collect();
        let s = Summary::of(&v);
        t.push((
            "readiness detected ≤ 100 ms".into(),
            format!("max {} ms", ms(s.max)),
            s.max <= Duration::from_millis(100),
        ));
    }
    let mut out = String::from("## Targets\n\n| target | measured | holds |\n|---|---|---|\n");
    for (name, m, ok) in t {
        let _ = writeln!(
            out,
            "| {name} | {m} | {} |",
            if ok { "yes" } else { "**no**" }
        );
    }
    out
}
