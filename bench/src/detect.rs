//! Readiness detection latency: a client long-polls `/v1/ready?wait=30`,
//! the marker appears at a random moment, and we time from the marker to
//! the answer.
//!
//! Two markers, alternating: cloud-init's `result.json` symlink appearing
//! (setup already succeeded), and `setup.json` turning `succeeded` by an
//! atomic rename (cloud-init already done), as `lab-agent setup` writes it.

use crate::http::Conn;
use crate::stats::Rng;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Markers {
    ci_dir: PathBuf,
    ci_target: PathBuf,
    state_dir: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    CloudInitResult,
    SetupSucceeded,
}

impl Markers {
    pub fn create(work: &Path) -> io::Result<Markers> {
        let m = Markers {
            ci_dir: work.join("detect-cloud-init"),
            ci_target: work.join("detect-result.json"),
            state_dir: work.join("detect-state"),
        };
        std::fs::create_dir_all(&m.ci_dir)?;
        std::fs::create_dir_all(&m.state_dir)?;
        std::fs::write(&m.ci_target, r#"{"v1":{"datasource":null,"errors":[]}}"#)?;
        m.arrange(Marker::CloudInitResult)?;
        Ok(m)
    }

    pub fn cloud_init_dir(&self) -> &Path {
        &self.ci_dir
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// Everything but `marker` in place: the agent says "not yet".
    pub fn arrange(&self, marker: Marker) -> io::Result<()> {
        match marker {
            Marker::CloudInitResult => {
                self.write_setup(true)?;
                match std::fs::remove_file(self.ci_dir.join("result.json")) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
            Marker::SetupSucceeded => {
                self.write_setup(false)?;
                if std::fs::symlink_metadata(self.ci_dir.join("result.json")).is_err() {
                    std::os::unix::fs::symlink(&self.ci_target, self.ci_dir.join("result.json"))?;
                }
            }
        }
        Ok(())
    }

    /// Makes `marker` appear.
    pub fn fire(&self, marker: Marker) -> io::Result<()> {
        match marker {
            Marker::CloudInitResult => {
                std::os::unix::fs::symlink(&self.ci_target, self.ci_dir.join("result.json"))
            }
            Marker::SetupSucceeded => self.write_setup(true),
        }
    }

    /// `setup.json` as `lab-agent setup` writes it: temp file + rename.
    fn write_setup(&self, succeeded: bool) -> io::Result<()> {
        let record = if succeeded {
            r#"{"state":"succeeded","started_at":"2026-01-01T00:00:00Z","finished_at":"2026-01-01T00:00:01Z","exit_code":0,"duration_ms":1000}"#.to_owned()
        } else {
            let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?;
            format!(
                r#"{{"state":"running","started_at":"2026-01-01T00:00:00Z","pid":{},"boot_id":"{}"}}"#,
                std::process::id(),
                boot_id.trim()
            )
        };
        let tmp = self.state_dir.join(".setup.json.tmp");
        std::fs::write(&tmp, record)?;
        std::fs::rename(tmp, self.state_dir.join("setup.json"))
    }
}

/// `samples` detections, alternating markers; returns them per marker.
pub fn measure(
    markers: &Markers,
    addr: SocketAddr,
    token: &str,
    samples: usize,
    rng: &mut Rng,
) -> io::Result<Vec<(Marker, Duration)>> {
    let mut out = Vec::with_capacity(samples);
    let mut probe = Conn::connect(addr, token)?;
    for i in 0..samples {
        let marker = if i % 2 == 0 {
            Marker::CloudInitResult
        } else {
            Marker::SetupSucceeded
        };
        markers.arrange(marker)?;
        // Until the agent's short cache has expired and it says "not yet".
        let until = Instant::now() + Duration::from_secs(5);
        while probe.request("GET", "/v1/ready", None)?.status == 200 {
            if Instant::now() > until {
                return Err(io::Error::other("the agent stays ready without its marker"));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut poll = Conn::connect(addr, token)?;
        poll.send("GET", "/v1/ready?wait=30", None)?;
        // A random phase against the agent's re-check interval; at least a
        // few ms so the request is already waiting.
        std::thread::sleep(Duration::from_micros(5_000 + rng.below(80_000)));
        let t = Instant::now();
        markers.fire(marker)?;
        let resp = poll.receive()?;
        let d = t.elapsed();
        if resp.status != 200 {
            return Err(io::Error::other(format!(
                "long-poll answered {} after the marker: {}",
                resp.status,
                String::from_utf8_lossy(&resp.body)
            )));
        }
        out.push((marker, d));
    }
    Ok(out)
}
