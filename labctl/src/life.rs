//! The VM's life for people: which life of the VM answered (instance id,
//! boots), where the time of this boot went (a table of phases in seconds
//! since the kernel booted) and the root disk — what `labctl wait` prints
//! once a VM is ready. Every string in it is the guest's, so escaped.

use lab_agent_client::Phase;
use lab_agent_proto::ReadyResponse;
use lab_agent_proto::lifecycle::Span;
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
    if let Some(t) = &r.timeline {
        out.push_str("booted at ");
        out.push_str(&escape(t.boot_at.as_deref().unwrap_or("(unknown)")));
        out.push_str("; seconds since boot:\n");
        row(&mut out, "phase", ["start", "end", "duration"]);
        let from_boot = |end: Option<f64>| Span {
            start_secs: end.map(|_| 0.0),
            finished_secs: end,
        };
        span_row(
            &mut out,
            Phase::AgentStart,
            &from_boot(t.agent_started_secs),
        );
        for (name, span) in t.stages() {
            let mut label = String::from("cloud-init ");
            label.push_str(name);
            span_row_labelled(&mut out, &label, span);
        }
        if let Some(setup) = &t.setup {
            span_row(&mut out, Phase::Setup, setup);
        }
        span_row(&mut out, Phase::Ready, &from_boot(t.ready_secs));
    }
    if let Some(root) = &r.root {
        out.push_str("root: ");
        out.push_str(&bytes(root.size_bytes));
        out.push_str(", ");
        out.push_str(&bytes(root.free_bytes));
        out.push_str(" free");
        if let Some(written) = root.written_bytes {
            out.push_str(", ");
            out.push_str(&bytes(written));
            out.push_str(" written since boot");
        }
        out.push('\n');
    }
    out
}

fn span_row(out: &mut String, phase: Phase, span: &Span) {
    span_row_labelled(out, phase.label(), span);
}

fn span_row_labelled(out: &mut String, label: &str, span: &Span) {
    row(
        out,
        label,
        [
            secs(span.start_secs),
            secs(span.finished_secs),
            secs(span.duration_secs()),
        ],
    );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(10_737_418_240), "10.0 GiB");
        assert_eq!(bytes(412_345_678), "393.2 MiB");
        assert_eq!(secs(Some(61.1)), "61.1");
        assert_eq!(secs(None), "-");
        assert_eq!(secs(Some(f64::NAN)), "-");
    }

    /// The SPEC's example, a stage not finished, and the guest's strings
    /// escaped.
    #[test]
    fn the_spec_example() {
        let r: ReadyResponse = serde_json::from_str(
            r#"{"state":"ready","cloud_init":{"done":true},"setup":{"state":"succeeded"},
             "instance":{"id":"0123456789abcdef0123456789abcdef","boots":2,
                         "boot_id":"b\u001b[2J","first_boot_at":"2026-12-01T09:00:00Z"},
             "timeline":{"boot_at":"2026-12-03T10:00:00Z","agent_started_secs":3.1,
               "cloud_init":{"init-local":{"start_secs":1.9,"finished_secs":2.4},
                             "init":{"start_secs":2.5},
                             "modules-final":{"start_secs":9.0,"finished_secs":71.5}},
               "setup":{"start_secs":9.8,"finished_secs":70.9},"ready_secs":71.6},
             "root":{"size_bytes":10737418240,"free_bytes":8123456789,"written_bytes":412345678}}"#,
        )
        .unwrap();
        let text = describe(&r);
        let want = "\
instance 0123456789abcdef0123456789abcdef, boot 2 (first boot 2026-12-01T09:00:00Z; boot id b\\x1b[2J)
booted at 2026-12-03T10:00:00Z; seconds since boot:
  phase                          start       end  duration
  kernel → agent start             0.0       3.1       3.1
  cloud-init init-local            1.9       2.4       0.5
  cloud-init init                  2.5         -         -
  cloud-init modules-final         9.0      71.5      62.5
  setup                            9.8      70.9      61.1
  kernel → ready                   0.0      71.6      71.6
root: 10.0 GiB, 7.6 GiB free, 393.2 MiB written since boot
";
        assert_eq!(text, want, "\n{text}");
        let old: ReadyResponse = serde_json::from_str(
            r#"{"state":"ready","cloud_init":{"done":true},"setup":{"state":"succeeded"}}"#,
        )
        .unwrap();
        assert_eq!(describe(&old), "");
    }
}
