// Records what `lab-agent version` reports about the build: the target
// triple and, when built from a git checkout, the commit.
use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rustc-env=LAB_AGENT_TARGET={target}");
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=LAB_AGENT_COMMIT={commit}");
    // Rerun when the commit moves. Only paths that exist: cargo counts a
    // missing one as changed, so a checkout without `packed-refs` (a fresh
    // one) rebuilt the agent on every build.
    for p in ["HEAD", "refs/heads", "packed-refs"] {
        if let Some(path) = git(&["rev-parse", "--git-path", p]) {
            if Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
