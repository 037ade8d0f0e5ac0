//! `GET /v1/info`: what the backend may want to know about the guest.

use crate::app::App;
use crate::http::{Response, json_response};
use crate::readiness::current_boot_id;
use hyper::StatusCode;
use lab_agent_proto::InfoResponse;

pub fn handle(app: &App) -> Response {
    let life = app.readiness.life();
    let uts = nix::sys::utsname::uname().ok();
    let info = InfoResponse {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        os: os_pretty_name(),
        kernel: uts
            .as_ref()
            .map(|u| u.release().to_string_lossy().into_owned()),
        hostname: uts
            .as_ref()
            .map(|u| u.nodename().to_string_lossy().into_owned()),
        uptime_secs: std::fs::read_to_string("/proc/uptime")
            .ok()
            .and_then(|s| parse_uptime(s.split_whitespace().next()?)),
        boot_id: current_boot_id(),
        agent_uptime_secs: app.started.elapsed().as_secs_f64(),
        lab_dir: Some(app.lab_dir.display().to_string()),
        disk: life.as_ref().map(|l| l.disk.clone()),
        instance: life.map(|l| l.instance),
        // As `/v1/ready` has it: with the writes over the life and the
        // lab's least size, which the setup's record holds.
        root: app.readiness.current().root,
    };
    json_response(StatusCode::OK, &info)
}

/// `/proc/uptime`'s `12345.67`, by hand: `f64::from_str` brings ~14 KiB
/// of tables and code into a binary with nothing else that needs it.
fn parse_uptime(text: &str) -> Option<f64> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let int: u64 = int.parse().ok()?;
    let frac_val = if frac.is_empty() {
        0
    } else {
        frac.parse::<u32>().ok()?
    };
    Some(int as f64 + f64::from(frac_val) / 10f64.powi(frac.len() as i32))
}

fn os_pretty_name() -> Option<String> {
    let text = std::fs::read_to_string("/etc/os-release")
        .or_else(|_| std::fs::read_to_string("/usr/lib/os-release"))
        .ok()?;
    parse_pretty_name(&text)
}

fn parse_pretty_name(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix("PRETTY_NAME=")?;
        Some(value.trim().trim_matches(['"', '\'']).to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uptime() {
        assert_eq!(parse_uptime("12345.67"), Some(12345.67));
        assert_eq!(parse_uptime("3"), Some(3.0));
        assert_eq!(parse_uptime("x.5"), None);
    }

    #[test]
    fn pretty_name() {
        let text = "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n";
        assert_eq!(
            parse_pretty_name(text).as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(parse_pretty_name("NAME=x"), None);
    }
}
