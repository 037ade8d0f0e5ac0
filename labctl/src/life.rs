//! The VM's life for people: which life of the VM answered (instance id,
//! boots), where the time of this boot went (a table of phases in seconds
//! since the kernel booted), the root disk and what shows it was booted
//! before this VM — what `labctl wait` prints
//! once a VM is ready. Every string in it is the guest's, so escaped.

use lab_agent_client::phases_of;
use lab_agent_proto::ReadyResponse;
use lab_agent_proto::text::escape;
use std::fmt::Write as _;

/// Width of the phase column: the longest label, `cloud-init modules-config`.
const LABEL_WIDTH: usize = 26;

/// The lines for one VM's answer; empty when the agent reports none of it
/// (an agent that predates the VM's life).
pub fn describe(r: &ReadyResponse) -> String {
    let mut out = String::new();
    if let Some(i) = &r.instance {
        let _ = writeln!(
            out,
            "instance {}, boot {} (first boot {}; boot id {})",
            escape(&i.id),
            i.boots,
            escape(&i.first_boot_at),
            escape(&i.boot_id)
        );
    }
    for e in r.disk.iter().flat_map(|d| &d.evidence) {
        let _ = writeln!(out, "booted before this VM: {}", escape(e));
    }
    if let Some(t) = &r.timeline {
        let at = escape(t.boot_at.as_deref().unwrap_or("(unknown)"));
        let _ = writeln!(out, "booted at {at}; seconds since boot:");
        row(&mut out, "phase", ["start", "end", "duration"]);
        for (phase, span) in phases_of(t) {
            let cells = [span.start_secs, span.finished_secs, span.duration_secs()];
            row(&mut out, phase.label(), cells.map(secs));
        }
    }
    if let Some(root) = &r.root {
        let (size, free) = (bytes(root.size_bytes), bytes(root.free_bytes));
        let _ = write!(out, "root: {size}, {free} free");
        if let Some(written) = root.written_bytes {
            let _ = write!(out, ", {} written since boot", bytes(written));
        }
        if let Some(all) = root.written_bytes_total {
            let _ = write!(out, " ({} in its life)", bytes(all));
        }
        if let (true, Some(min)) = (root.below_min, root.min_bytes) {
            let _ = write!(out, ", under the lab's {}", bytes(min));
        }
        out.push('\n');
    }
    out
}

/// Each VM's life under its heading (none: a VM alone), for the VMs
/// whose agent reports one: the data a wait has to report.
pub fn lives<'a>(vms: impl IntoIterator<Item = (Option<String>, &'a ReadyResponse)>) -> String {
    let mut out = String::new();
    for (heading, r) in vms {
        let text = describe(r);
        if let (false, Some(heading)) = (text.is_empty(), heading) {
            let _ = writeln!(out, "{heading}:");
        }
        out.push_str(&text);
    }
    out
}

fn row<S: AsRef<str>>(out: &mut String, label: &str, cells: [S; 3]) {
    let _ = write!(out, "  {label:<LABEL_WIDTH$}");
    for cell in cells {
        let _ = write!(out, " {:>9}", cell.as_ref());
    }
    out.push('\n');
}

/// Seconds to the tenth, or `-` for what has not happened (or cannot be
/// shown: a guest's `NaN` is not a time).
pub fn secs(s: Option<f64>) -> String {
    match s {
        Some(s) if s.is_finite() => format!("{s:.1}"),
        _ => "-".to_owned(),
    }
}

/// `10.0 GiB`: binary units, as `df -h` counts them.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}
