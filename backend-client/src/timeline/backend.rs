//! The backend's own times of a VM, before its guest can say anything:
//! the VM created (the request), its VMI scheduled onto a node, the VMI
//! running (qemu started). With them a report covers request → ready, as
//! the platform measures it, and not only the guest's boot.
//!
//! A backend adds them to each `/v1/ready` answer it logs, as a `backend`
//! object of RFC 3339 stamps (what the Kubernetes API reports: the VM's
//! `metadata.creationTimestamp`, the VMI's `status.phaseTransitionTimestamps`
//! for `Scheduled` and `Running`).

use serde::{Deserialize, Serialize};

/// `{"vm_created_at":…,"vmi_scheduled_at":…,"vmi_running_at":…}`, each an
/// RFC 3339 time (`2026-12-03T10:00:00Z`, fractions and offsets allowed)
/// or absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendTimes {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_created_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmi_scheduled_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmi_running_at: Option<String>,
}

impl BackendTimes {
    /// Whether any stamp is there.
    pub fn is_empty(&self) -> bool {
        self.vm_created_at.is_none()
            && self.vmi_scheduled_at.is_none()
            && self.vmi_running_at.is_none()
    }

    /// Each stamp that is there and not a time, by its name, for a reader
    /// to be told (the stamp is then left out of every phase).
    pub fn malformed(&self) -> Vec<&'static str> {
        [
            ("vm_created_at", &self.vm_created_at),
            ("vmi_scheduled_at", &self.vmi_scheduled_at),
            ("vmi_running_at", &self.vmi_running_at),
        ]
        .into_iter()
        .filter(|(_, v)| v.as_deref().is_some_and(|t| epoch_secs(t).is_none()))
        .map(|(name, _)| name)
        .collect()
    }
}

/// Seconds since the Unix epoch of an RFC 3339 time:
/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` (`t` or a space for `T`,
/// `z` for `Z`); `None` for anything else.
pub fn epoch_secs(text: &str) -> Option<f64> {
    let b = text.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let digits = b.get(range)?;
        digits.iter().try_fold(0i64, |n, &d| {
            d.is_ascii_digit().then(|| n * 10 + i64::from(d - b'0'))
        })
    };
    let sep = |i: usize, want: &[u8]| b.get(i).is_some_and(|c| want.contains(c));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut fraction = 0.0;
    if sep(i, b".") {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        fraction = format!("0.{}", &text[start..i]).parse().ok()?;
    }
    let offset = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && sep(i + 3, b":") => {
            let minutes = num(i + 1..i + 3)? * 60 + num(i + 4..i + 6)?;
            if *sign == b'+' { minutes } else { -minutes }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + min * 60 + sec - offset * 60;
    Some(secs as f64 + fraction)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times() {
        assert_eq!(epoch_secs("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(epoch_secs("2026-12-03T10:00:00Z"), Some(1_796_292_000.0));
        assert_eq!(
            epoch_secs("2026-12-03T10:00:00.250Z"),
            Some(1_796_292_000.25)
        );
        assert_eq!(
            epoch_secs("2026-12-03T12:00:00+02:00"),
            Some(1_796_292_000.0)
        );
        assert_eq!(
            epoch_secs("2026-12-03t09:30:00-00:30"),
            Some(1_796_292_000.0)
        );
        assert_eq!(epoch_secs("2000-02-29T00:00:00Z"), Some(951_782_400.0));
        for bad in [
            "",
            "2026-12-03",
            "2026-12-03T10:00:00",
            "2026-13-03T10:00:00Z",
            "2026-12-03T10:00:00.Z",
            "2026-12-03T10:00:00Zjunk",
            "2026-12-03T10:00:00+0200",
            "２026-12-03T10:00:00Z",
            "2026-12-03T10:0a:00Z",
        ] {
            assert_eq!(epoch_secs(bad), None, "{bad}");
        }
    }

    #[test]
    fn malformed_stamps_are_named() {
        let t = BackendTimes {
            vm_created_at: Some("yesterday".into()),
            vmi_scheduled_at: Some("2026-12-03T10:00:00Z".into()),
            vmi_running_at: None,
        };
        assert_eq!(t.malformed(), ["vm_created_at"]);
        assert!(!t.is_empty() && BackendTimes::default().is_empty());
    }
}
