//! The aarch64 agent — the one `packaging/build-agent.sh --arch arm64`
//! ships — through a subset of this suite: auth, exec through a login
//! shell, readiness, setup recording. The same test functions as the other
//! modules, rerun with [`with_foreign_agent`]: every agent they start is
//! `qemu-aarch64 lab-agent …` (Debian's user-mode qemu, which
//! `tests/qemu-user.sh` puts in the lab-agent cache, run explicitly: this
//! host registers no binfmt handler). The commands the agent starts are the
//! host's own x86_64 programs: qemu-user execs them natively.
//!
//! What qemu-user does not show: how the agent behaves on an arm64 kernel
//! (cgroups, page size, signals are the host kernel's, and qemu 7.2
//! emulates `vfork` by `fork` and has no `clone3`, so spawn takes its
//! fallback path). That is the job of a real arm64 guest.
//!
//! Cost: the build is `tests/install-deps.sh`'s (a no-op check here when
//! it is fresh); each exec pays ~0.5 s of emulated fork.

use crate::support::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

const HINT: &str = "run tests/install-deps.sh (or tests/qemu-user.sh alone)";

/// The aarch64 agent and the qemu-user that runs it. Both are what
/// `tests/install-deps.sh` installs (CI runs it): without them the tests
/// fail with the hint. On an aarch64 host these tests are ignored (the rest
/// of the suite runs the aarch64 agent there), and fail if run anyway.
fn arm64() -> &'static Foreign {
    static ARM64: OnceLock<Foreign> = OnceLock::new();
    ARM64.get_or_init(|| {
        assert_ne!(
            std::env::consts::ARCH,
            "aarch64",
            "this host is aarch64: the suite itself runs that agent, not through qemu-user"
        );
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let out = Command::new("bash")
            .arg(root.join("packaging/build-agent.sh"))
            .args(["--arch", "arm64"])
            .stdin(Stdio::null())
            .output()
            .expect("failed to run packaging/build-agent.sh");
        assert!(
            out.status.success(),
            "packaging/build-agent.sh --arch arm64 failed ({HINT}: it adds the rustup target \
             aarch64-unknown-linux-musl):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let agent = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let out = Command::new("bash")
            .arg(root.join("tests/qemu-user.sh"))
            .arg("--cached")
            .output()
            .expect("failed to run tests/qemu-user.sh");
        assert!(
            out.status.success(),
            "no qemu-aarch64 in the lab-agent cache: {HINT}"
        );
        let runner = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        Foreign { runner, agent }
    })
}

/// It is the aarch64 agent that runs, and only through qemu: the host
/// cannot exec it by itself (no binfmt handler hides the emulation).
#[test]
#[cfg_attr(
    target_arch = "aarch64",
    ignore = "this host is aarch64: the suite itself runs that agent"
)]
fn the_aarch64_agent_runs_only_through_qemu_user() {
    let arm64 = arm64();
    let err = Command::new(&arm64.agent)
        .arg("version")
        .output()
        .expect_err(
            "the host ran the aarch64 agent by itself: is a binfmt_misc handler registered?",
        );
    assert_eq!(err.raw_os_error(), Some(nix::libc::ENOEXEC), "{err}");
    let out = with_foreign(arm64, || agent_command().arg("version").output().unwrap());
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("target: aarch64-unknown-linux-musl"),
        "{text}"
    );
}

fn with_foreign<T>(foreign: &Foreign, f: impl FnOnce() -> T) -> T {
    let mut result = None;
    let mut f = Some(f);
    with_foreign_agent(foreign, &mut || result = Some((f.take().unwrap())()));
    result.unwrap()
}

/// Reruns each named test of this suite with the aarch64 agent.
macro_rules! on_arm64 {
    ($($module:ident :: $test:ident),* $(,)?) => {$(
        #[test]
        #[cfg_attr(
            target_arch = "aarch64",
            ignore = "this host is aarch64: the suite itself runs that agent"
        )]
        fn $test() {
            with_foreign_agent(arm64(), &mut crate::$module::$test);
        }
    )*};
}

on_arm64! {
    auth::every_path_and_method_needs_the_token_and_401_reveals_nothing,
    auth::the_token_never_reaches_logs_or_children,
    exec::exit_codes_and_streams,
    exec::stdin_cwd_env_and_the_clean_environment,
    exec::login_profile_is_read_but_interactive_banners_never_appear,
    exec::a_timeout_kills_the_whole_group_including_background_children,
    exec::commands_run_in_their_own_session_without_a_tty,
    ready::walks_through_every_state_from_real_files,
    ready::failed_setup_is_failed_at_once_with_reason_and_log,
    ready::long_poll_returns_when_the_state_becomes_ready,
    setup::success_is_recorded_logged_and_echoed,
    setup::a_failing_script_is_mirrored,
    setup::serve_run_setup_reports_setting_up_then_ready,
    setup::serve_run_setup_failure_is_reported,
    setup::an_installer_failure_is_a_failed_setup_with_its_reason,
    setup::a_root_filesystem_too_small_fails_before_the_script,
    setup::a_root_filesystem_large_enough_runs_the_script,
    setup::a_small_root_with_warn_is_ready_with_a_banner,
}
