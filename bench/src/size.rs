//! Sizes: the shipped agent, its gzip -9, the base64 the user-data carries,
//! and the hello-lab Secret as `labctl secret` reports its budget.

use crate::peers::run;
use std::io;
use std::path::Path;
use std::process::Command;

#[derive(Debug, Clone)]
pub struct Sizes {
    pub binary: u64,
    pub gzip: u64,
    pub base64: u64,
    pub secret: Option<SecretSize>,
}

#[derive(Debug, Clone)]
pub struct SecretSize {
    /// `labctl secret`'s budget line, verbatim.
    pub budget_line: String,
    /// The user-data the Secret holds (what counts against 1 MiB).
    pub user_data: u64,
    /// The rendered YAML manifest.
    pub manifest: u64,
}

pub fn measure(agent: &Path, labctl: Option<&Path>, lab: &Path, work: &Path) -> io::Result<Sizes> {
    let binary = std::fs::metadata(agent)?.len();
    let gz = run(Command::new("gzip").args(["-9", "-c"]).arg(agent))?;
    let gzip = gz.stdout.len() as u64;
    let secret = match labctl {
        None => None,
        Some(labctl) => {
            let dir = work.join("secret");
            std::fs::create_dir_all(&dir)?;
            let out = run(Command::new(labctl)
                .arg("secret")
                .arg(lab)
                .args(["--name", "bench"])
                .arg("--agent")
                .arg(agent)
                .arg("--token-out")
                .arg(dir.join("token"))
                .arg("--user-data-out")
                .arg(dir.join("user-data"))
                .arg("-o")
                .arg(dir.join("secret.yaml")))?;
            let stderr = String::from_utf8_lossy(&out.stderr);
            let budget_line = stderr
                .lines()
                .find(|l| l.starts_with("budget:"))
                .unwrap_or("(labctl printed no budget line)")
                .to_owned();
            Some(SecretSize {
                budget_line,
                user_data: std::fs::metadata(dir.join("user-data"))?.len(),
                manifest: std::fs::metadata(dir.join("secret.yaml"))?.len(),
            })
        }
    };
    Ok(Sizes {
        binary,
        gzip,
        base64: gzip.div_ceil(3) * 4,
        secret,
    })
}
