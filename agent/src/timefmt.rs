//! RFC 3339 timestamps in UTC without a date crate.

use std::time::SystemTime;

/// `2026-11-29T08:56:44Z`
pub fn rfc3339(t: SystemTime) -> String {
    let (secs, _) = split(t);
    format_secs(secs)
}

/// `2026-11-29T08:56:44.123Z`
pub fn rfc3339_millis(t: SystemTime) -> String {
    let (secs, millis) = split(t);
    let mut s = format_secs(secs);
    s.pop();
    s.push_str(&format!(".{millis:03}Z"));
    s
}

fn split(t: SystemTime) -> (i64, u32) {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| (d.as_secs() as i64, d.subsec_millis()))
        .unwrap_or((0, 0))
}

fn format_secs(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn formats() {
        let at = |s| rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_795_942_604), "2026-11-29T08:56:44Z");
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_795_942_604_007);
        assert_eq!(rfc3339_millis(t), "2026-11-29T08:56:44.007Z");
    }
}
