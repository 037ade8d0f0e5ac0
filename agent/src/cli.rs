//! Command-line arguments and their conversion into validated
//! configurations, before any work starts.
//!
//! Hand-written rather than clap: the agent ships base64'd inside every lab
//! VM's user-data, and clap's ~150 KiB was the largest dependency in it
//! (measured with `cargo bloat`; see BENCHMARKS.md). Twelve flags do not
//! need a framework. `labctl` uses clap.

use crate::http::listen::Listen;
use crate::serve::ServeConfig;
use crate::setup::SetupConfig;
use lab_agent_proto::guest::OnSmallRoot;
use lab_agent_proto::{GUEST_LAB_DIR, guest};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

#[derive(Debug)]
pub enum Command {
    Serve(ServeConfig),
    Setup(SetupConfig),
    Version,
    /// `--help` somewhere: print this text and exit 0.
    Help(&'static str),
    /// Internal, not in the help: the agent starts its binary so to keep a
    /// pooled cgroup populated (`process::cgroup::holder`); the argument is
    /// the agent's pid.
    HoldCgroup(u32),
}

/// A usage mistake: printed with a hint, exit status 2.
#[derive(Debug, thiserror::Error)]
#[error("{message}\nhint: run `{usage}` for the flags")]
pub struct UsageError {
    message: String,
    usage: &'static str,
}

const MAIN_HELP: &str = "\
lab-agent: readiness and grading agent of a lab VM

Usage: lab-agent <COMMAND> [FLAGS]

Commands:
  serve    Serve the HTTP API (readiness, exec, info)
  setup    Run the lab's setup script and record its outcome
  version  Print version and build information

Run `lab-agent <COMMAND> --help` for a command's flags.
";

const SERVE_HELP: &str = "\
Serve the HTTP API (readiness, exec, info)

Usage: lab-agent serve [FLAGS]

Flags:
  --listen ADDR          IP:PORT, or vsock:PORT (virtio-vsock, any CID);
                         repeatable [default: 0.0.0.0:8899] (port 0 picks
                         a free TCP port; see --addr-file)
  --token-file PATH      Per-VM bearer token, mode 0600, >= 32 characters
                         [default: /etc/lab-agent/token]
  --state-dir PATH       Where setup.json and setup.log live
                         [default: /var/lib/lab-agent]
  --cloud-init-dir PATH  Where cloud-init's result.json appears
                         [default: /run/cloud-init]
  --no-cloud-init        Local/dev mode: do not wait for cloud-init
  --run-setup SCRIPT     Local/dev mode: run this setup script at start,
                         recorded as `lab-agent setup` does
  --setup-timeout SECS   Timeout of the --run-setup script [default: 600]
  --lab-dir PATH         LAB_DIR for --run-setup; reported in /v1/info
                         [default: /opt/lab]
  --env-file PATH        The lab's variables for every command: NUL-ended
                         KEY=VALUE [default: /etc/lab-agent/env, if any]
  --min-root-bytes N     With --run-setup: as `lab-agent setup`'s, with
                         --on-small-root warn|fail [default: warn]
  --max-execs N          Concurrent exec limit; more wait briefly, then 429 [default: 8]
  --output-budget MIB    Output held at once for running commands and
                         answers not yet sent (each exec reserves twice its
                         max_output_bytes); past it execs get 429
                         [default: 256]
  --cgroup auto|off|PATH Run each command in a cgroup v2 of its own, made
                         under PATH, or under the agent's own cgroup when
                         systemd delegated it (auto); off: kill by session
                         [default: auto]
  --pids-max N           Each command's pids.max (without the controller:
                         RLIMIT_NPROC if not root); 0: none [default: 4096]
  --memory-max MIB       Each command's memory.max, and the most a request
                         gets; 0: none [default: RAM - max(256 MiB, RAM/8)]
  --addr-file PATH       After binding, write the bound address here
  --shutdown-grace SECS  On SIGTERM, time running commands get before they
                         are killed [default: 10]
  -h, --help             Print this help
";

const VERSION_HELP: &str = "\
Print the agent's version and build information

Usage: lab-agent version
";
/// Where `lab-agent version` with a wrong flag points.
const VERSION_USAGE: &str = "lab-agent version --help";

const SETUP_HELP: &str = "\
Run the lab's setup script through a login shell and record its outcome
(STATE_DIR/setup.json, STATE_DIR/setup.log); exit with the script's status

Usage: lab-agent setup [FLAGS]

Flags:
  --script PATH      The setup script (none: nothing to do, succeeded)
  --state-dir PATH   Where setup.json and setup.log go
                     [default: /var/lib/lab-agent]
  --timeout SECS     Kill the script's process group after this long
                     [default: 600]
  --user NAME        Run the script as this user [default: root]
  --lab-dir PATH     LAB_DIR for the script [default: /opt/lab]
  --env-file PATH    The lab's variables for the script: NUL-ended
                     KEY=VALUE [default: /etc/lab-agent/env, if any]
  --min-root-bytes N Hold the root filesystem against N bytes (the lab's
                     [readiness].min_root_bytes): see --on-small-root;
                     readiness reports it (root.min_bytes, below_min)
  --on-small-root warn|fail
                     A smaller root: warn runs the setup, the VM is
                     ready with the reason, and interactive shells show a
                     banner; fail fails before the script [default: warn]
  --small-root-banner PATH
                     Where the banner goes (a profile.d script that
                     prints in interactive shells only)
                     [default: /etc/profile.d/lab-agent-small-root.sh]
  -h, --help         Print this help
";

/// Parses `lab-agent`'s arguments (without `argv[0]`).
pub fn parse<I: IntoIterator<Item = OsString>>(args: I) -> Result<Command, UsageError> {
    let mut args = Args::new(args);
    let main_usage = "lab-agent --help";
    let Some(cmd) = args.next_word(main_usage)? else {
        return Err(UsageError {
            message: "a command is required: serve, setup or version".into(),
            usage: main_usage,
        });
    };
    match cmd.as_str() {
        "serve" => parse_serve(args),
        "setup" => parse_setup(args),
        "version" | "-V" | "--version" => match args.next_flag(VERSION_USAGE)? {
            None => Ok(Command::Version),
            Some(f) if f == "--help" || f == "-h" => Ok(Command::Help(VERSION_HELP)),
            Some(f) => Err(args.unknown(&f, VERSION_USAGE)),
        },
        "help" | "-h" | "--help" => Ok(Command::Help(MAIN_HELP)),
        crate::process::cgroup::HOLD_COMMAND => {
            let parent = args.next_word(main_usage)?;
            match parent.as_deref().map(str::parse) {
                Some(Ok(pid)) if args.next_word(main_usage)?.is_none() => {
                    Ok(Command::HoldCgroup(pid))
                }
                _ => Err(UsageError {
                    message: "`hold-cgroup` is the agent's own: it takes the agent's pid".into(),
                    usage: main_usage,
                }),
            }
        }
        other => Err(UsageError {
            message: format!("unknown command `{other}`: use serve, setup or version"),
            usage: main_usage,
        }),
    }
}

fn parse_serve(mut args: Args) -> Result<Command, UsageError> {
    const USAGE: &str = "lab-agent serve --help";
    let mut c = ServeConfig {
        listen: Vec::new(),
        addr_file: None,
        token_file: guest::TOKEN_PATH.into(),
        state_dir: guest::STATE_DIR.into(),
        cloud_init_dir: Some(guest::CLOUD_INIT_DIR.into()),
        run_setup: None,
        min_root_bytes: None,
        on_small_root: OnSmallRoot::Warn,
        setup_timeout: Duration::from_secs(guest::DEFAULT_SETUP_TIMEOUT_SECS),
        lab_dir: GUEST_LAB_DIR.into(),
        env_file: guest::ENV_PATH.into(),
        max_execs: 8,
        shutdown_grace: Duration::from_secs(10),
        output_budget: 256 * 1024 * 1024,
        cgroup: crate::process::cgroup::Mode::Auto,
        pids_max: Some(lab_agent_proto::exec::DEFAULT_MAX_PIDS),
        memory_max: None,
    };
    let mut cloud_init_dir: PathBuf = guest::CLOUD_INIT_DIR.into();
    let mut no_cloud_init = false;
    while let Some(flag) = args.next_flag(USAGE)? {
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help(SERVE_HELP)),
            "--listen" => c.listen.push(args.value(&flag, USAGE)?),
            "--token-file" => c.token_file = args.path(&flag, USAGE)?,
            "--state-dir" => c.state_dir = args.path(&flag, USAGE)?,
            "--cloud-init-dir" => cloud_init_dir = args.path(&flag, USAGE)?,
            "--no-cloud-init" => no_cloud_init = true,
            "--run-setup" => c.run_setup = Some(args.absolute_path(&flag, USAGE)?),
            "--setup-timeout" => {
                c.setup_timeout = args.secs(&flag, 1, guest::MAX_WAIT_SECS, USAGE)?
            }
            "--lab-dir" => c.lab_dir = args.absolute_path(&flag, USAGE)?,
            "--env-file" => c.env_file = args.path(&flag, USAGE)?,
            "--min-root-bytes" => {
                c.min_root_bytes = Some(args.number(&flag, 1, u64::MAX, USAGE)?);
            }
            "--on-small-root" => c.on_small_root = args.value(&flag, USAGE)?,
            "--max-execs" => c.max_execs = args.number(&flag, 1, 1024, USAGE)? as usize,
            "--addr-file" => c.addr_file = Some(args.path(&flag, USAGE)?),
            "--shutdown-grace" => c.shutdown_grace = args.secs(&flag, 0, 3600, USAGE)?,
            "--output-budget" => {
                c.output_budget = args.number(&flag, 2, 1 << 20, USAGE)? * 1024 * 1024;
            }
            "--cgroup" => c.cgroup = args.value(&flag, USAGE)?,
            "--pids-max" => {
                c.pids_max = Some(args.number(&flag, 0, 1 << 22, USAGE)? as u32).filter(|&n| n > 0);
            }
            "--memory-max" => {
                let mib = args.number(&flag, 0, 1 << 30, USAGE)?;
                if (1..16).contains(&mib) {
                    return Err(UsageError {
                        message: "`--memory-max` under 16 (MiB) is less than a login shell needs: give at least 16, or 0 for no limit".into(),
                        usage: USAGE,
                    });
                }
                c.memory_max = Some((mib > 0).then_some(mib << 20));
            }
            _ => return Err(args.unknown(&flag, USAGE)),
        }
    }
    if c.listen.is_empty() {
        c.listen
            .push(Listen::Tcp(SocketAddr::from(([0, 0, 0, 0], guest::PORT))));
    }
    if c.addr_file.is_some() && !c.listen.iter().any(|l| matches!(l, Listen::Tcp(_))) {
        return Err(UsageError {
            message: "`--addr-file` writes a TCP address: add a `--listen IP:PORT`".into(),
            usage: USAGE,
        });
    }
    c.cloud_init_dir = (!no_cloud_init).then_some(cloud_init_dir);
    Ok(Command::Serve(c))
}

fn parse_setup(mut args: Args) -> Result<Command, UsageError> {
    const USAGE: &str = "lab-agent setup --help";
    let mut c = SetupConfig {
        script: None,
        state_dir: guest::STATE_DIR.into(),
        timeout: Duration::from_secs(guest::DEFAULT_SETUP_TIMEOUT_SECS),
        user: "root".into(),
        lab_dir: GUEST_LAB_DIR.into(),
        echo: true,
        min_root_bytes: None,
        on_small_root: OnSmallRoot::Warn,
        small_root_banner: guest::SMALL_ROOT_BANNER_PATH.into(),
        cloud_init_dir: Some(guest::CLOUD_INIT_DIR.into()),
        env_file: guest::ENV_PATH.into(),
    };
    while let Some(flag) = args.next_flag(USAGE)? {
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help(SETUP_HELP)),
            "--script" => c.script = Some(args.absolute_path(&flag, USAGE)?),
            "--state-dir" => c.state_dir = args.path(&flag, USAGE)?,
            "--timeout" => c.timeout = args.secs(&flag, 1, guest::MAX_WAIT_SECS, USAGE)?,
            "--user" => c.user = args.value::<String>(&flag, USAGE)?,
            "--lab-dir" => c.lab_dir = args.absolute_path(&flag, USAGE)?,
            "--env-file" => c.env_file = args.path(&flag, USAGE)?,
            "--min-root-bytes" => {
                c.min_root_bytes = Some(args.number(&flag, 1, u64::MAX, USAGE)?);
            }
            "--on-small-root" => c.on_small_root = args.value(&flag, USAGE)?,
            "--small-root-banner" => c.small_root_banner = args.absolute_path(&flag, USAGE)?,
            _ => return Err(args.unknown(&flag, USAGE)),
        }
    }
    Ok(Command::Setup(c))
}

/// A cursor over the arguments that understands `--flag value` and
/// `--flag=value`.
struct Args {
    rest: std::vec::IntoIter<OsString>,
    /// The value of a `--flag=value` just split off.
    inline: Option<OsString>,
}

impl Args {
    fn new<I: IntoIterator<Item = OsString>>(args: I) -> Args {
        Args {
            rest: args.into_iter().collect::<Vec<_>>().into_iter(),
            inline: None,
        }
    }

    fn next_word(&mut self, usage: &'static str) -> Result<Option<String>, UsageError> {
        self.rest
            .next()
            .map(|a| {
                a.into_string().map_err(|a| UsageError {
                    message: format!("argument {a:?} is not valid UTF-8"),
                    usage,
                })
            })
            .transpose()
    }

    fn next_flag(&mut self, usage: &'static str) -> Result<Option<String>, UsageError> {
        if let Some(v) = self.inline.take() {
            return Err(UsageError {
                message: format!("unexpected value {v:?}"),
                usage,
            });
        }
        let Some(word) = self.next_word(usage)? else {
            return Ok(None);
        };
        if !word.starts_with('-') {
            return Err(UsageError {
                message: format!("unexpected argument `{word}`"),
                usage,
            });
        }
        match word.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                self.inline = Some(value.into());
                Ok(Some(flag.to_owned()))
            }
            _ => Ok(Some(word)),
        }
    }

    fn raw_value(&mut self, flag: &str, usage: &'static str) -> Result<OsString, UsageError> {
        match self.inline.take().or_else(|| self.rest.next()) {
            Some(v) => Ok(v),
            None => Err(UsageError {
                message: format!("`{flag}` needs a value"),
                usage,
            }),
        }
    }

    fn path(&mut self, flag: &str, usage: &'static str) -> Result<PathBuf, UsageError> {
        let v = self.raw_value(flag, usage)?;
        if v.is_empty() {
            return Err(UsageError {
                message: format!("`{flag}` needs a non-empty path"),
                usage,
            });
        }
        Ok(PathBuf::from(v))
    }

    /// A path made absolute against the current directory: the setup runs
    /// in the lab dir, where a relative script path would mean another file.
    fn absolute_path(&mut self, flag: &str, usage: &'static str) -> Result<PathBuf, UsageError> {
        let p = self.path(flag, usage)?;
        std::path::absolute(&p).map_err(|e| UsageError {
            message: format!("cannot make `{}` absolute for `{flag}`: {e}", p.display()),
            usage,
        })
    }

    fn value<T: FromStr>(&mut self, flag: &str, usage: &'static str) -> Result<T, UsageError>
    where
        T::Err: std::fmt::Display,
    {
        let raw = self.raw_value(flag, usage)?;
        let text = raw.to_string_lossy();
        text.parse().map_err(|e| UsageError {
            message: format!("invalid value {text:?} for `{flag}`: {e}"),
            usage,
        })
    }

    fn number(
        &mut self,
        flag: &str,
        min: u64,
        max: u64,
        usage: &'static str,
    ) -> Result<u64, UsageError> {
        let n: u64 = self.value(flag, usage)?;
        if n < min || n > max {
            return Err(UsageError {
                message: format!("`{flag} {n}` is out of range: use {min} to {max}"),
                usage,
            });
        }
        Ok(n)
    }

    fn secs(
        &mut self,
        flag: &str,
        min: u64,
        max: u64,
        usage: &'static str,
    ) -> Result<Duration, UsageError> {
        self.number(flag, min, max, usage).map(Duration::from_secs)
    }

    fn unknown(&self, flag: &str, usage: &'static str) -> UsageError {
        UsageError {
            message: format!("unknown flag `{flag}`"),
            usage,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Command, UsageError> {
        parse(args.iter().map(OsString::from))
    }

    /// The agent's own command for its cgroup holders: exactly one pid,
    /// and nowhere in the help a person reads.
    #[test]
    fn hold_cgroup_takes_the_agent_s_pid_and_is_not_in_the_help() {
        assert!(matches!(
            run(&["hold-cgroup", "1234"]),
            Ok(Command::HoldCgroup(1234))
        ));
        for bad in [
            &["hold-cgroup"][..],
            &["hold-cgroup", "x"],
            &["hold-cgroup", "1", "2"],
        ] {
            let e = run(bad).err().unwrap_or_else(|| panic!("{bad:?} parsed"));
            assert!(e.to_string().contains("the agent's pid"), "{e}");
        }
        assert!(!MAIN_HELP.contains("hold-cgroup"));
    }

    fn serve(args: &[&str]) -> ServeConfig {
        match run(args).unwrap() {
            Command::Serve(c) => c,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn serve_defaults_match_the_spec() {
        let c = serve(&["serve"]);
        assert_eq!(c.listen, [Listen::Tcp("0.0.0.0:8899".parse().unwrap())]);
        assert_eq!(c.token_file, PathBuf::from("/etc/lab-agent/token"));
        assert_eq!(c.state_dir, PathBuf::from("/var/lib/lab-agent"));
        assert_eq!(c.cloud_init_dir, Some(PathBuf::from("/run/cloud-init")));
        assert_eq!(c.max_execs, 8);
        assert_eq!(c.lab_dir, PathBuf::from("/opt/lab"));
        assert_eq!(c.setup_timeout, Duration::from_secs(600));
        assert!(c.run_setup.is_none() && c.addr_file.is_none());
        assert_eq!(c.env_file, PathBuf::from("/etc/lab-agent/env"));
        assert_eq!(
            serve(&["serve", "--env-file", "/tmp/e"]).env_file,
            PathBuf::from("/tmp/e")
        );
    }

    #[test]
    fn serve_takes_every_flag_in_both_spellings() {
        let c = serve(&[
            "serve",
            "--listen",
            "127.0.0.1:9",
            "--token-file=/t",
            "--state-dir",
            "/s",
            "--cloud-init-dir",
            "/c",
            "--run-setup",
            "/r.sh",
            "--setup-timeout=5",
            "--lab-dir",
            "/l",
            "--min-root-bytes=1",
            "--max-execs",
            "3",
            "--addr-file",
            "/a",
            "--shutdown-grace",
            "0",
        ]);
        assert_eq!(c.listen, [Listen::Tcp("127.0.0.1:9".parse().unwrap())]);
        assert_eq!(c.token_file, PathBuf::from("/t"));
        assert_eq!(c.state_dir, PathBuf::from("/s"));
        assert_eq!(c.cloud_init_dir, Some(PathBuf::from("/c")));
        assert_eq!(c.run_setup, Some(PathBuf::from("/r.sh")));
        assert_eq!(c.setup_timeout, Duration::from_secs(5));
        assert_eq!(c.lab_dir, PathBuf::from("/l"));
        assert_eq!(c.min_root_bytes, Some(1));
        assert_eq!(c.max_execs, 3);
        assert_eq!(c.addr_file, Some(PathBuf::from("/a")));
        assert_eq!(c.shutdown_grace, Duration::ZERO);
        assert_eq!(serve(&["serve", "--no-cloud-init"]).cloud_init_dir, None);
        let cwd = std::env::current_dir().unwrap();
        let c = serve(&["serve", "--run-setup", "setup.sh", "--lab-dir", "lab"]);
        assert_eq!(
            c.run_setup,
            Some(cwd.join("setup.sh")),
            "relative to where the agent starts"
        );
        assert_eq!(c.lab_dir, cwd.join("lab"));
    }

    #[test]
    fn listen_is_repeatable_and_takes_vsock() {
        let c = serve(&["serve", "--listen", "vsock:8899", "--listen=0.0.0.0:8899"]);
        assert_eq!(
            c.listen,
            [
                Listen::Vsock(8899),
                Listen::Tcp("0.0.0.0:8899".parse().unwrap())
            ],
            "both channels, in order; the default is replaced"
        );
        assert_eq!(
            serve(&["serve", "--listen", "vsock:8899"]).listen,
            [Listen::Vsock(8899)]
        );
    }

    #[test]
    fn setup_flags() {
        let Command::Setup(c) = run(&[
            "setup",
            "--script",
            "/x.sh",
            "--timeout",
            "30",
            "--user",
            "student",
            "--lab-dir",
            "/l",
            "--state-dir",
            "/s",
            "--min-root-bytes",
            "9663676416",
            "--on-small-root=fail",
            "--small-root-banner",
            "/b.sh",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!(c.script, Some(PathBuf::from("/x.sh")));
        assert_eq!(c.min_root_bytes, Some(9 << 30));
        assert_eq!(c.on_small_root, OnSmallRoot::Fail);
        assert_eq!(c.small_root_banner, PathBuf::from("/b.sh"));
        assert_eq!(c.timeout, Duration::from_secs(30));
        assert_eq!(c.user, "student");
        assert!(c.echo);
        let Command::Setup(c) = run(&["setup"]).unwrap() else {
            panic!()
        };
        assert_eq!(c.script, None);
        assert_eq!(c.state_dir, PathBuf::from("/var/lib/lab-agent"));
        assert_eq!(c.min_root_bytes, None);
        assert_eq!(c.on_small_root, OnSmallRoot::Warn);
        assert_eq!(
            c.small_root_banner,
            PathBuf::from("/etc/profile.d/lab-agent-small-root.sh")
        );
    }

    #[test]
    fn mistakes_say_what_is_wrong_and_where_help_is() {
        let cases: &[(&[&str], &str)] = &[
            (&[], "a command is required"),
            (&["serv"], "unknown command `serv`"),
            (&["serve", "--bogus"], "unknown flag `--bogus`"),
            (&["serve", "--listen"], "`--listen` needs a value"),
            (&["serve", "--listen", "vsock:x"], "`x` is not a vsock port"),
            (
                &["serve", "--listen", "vsock:1", "--addr-file", "/a"],
                "`--addr-file` writes a TCP address",
            ),
            (
                &["serve", "--listen", "nope"],
                "invalid value \"nope\" for `--listen`",
            ),
            (
                &["serve", "--max-execs", "0"],
                "`--max-execs 0` is out of range",
            ),
            (&["serve", "--max-execs", "-1"], "invalid value"),
            (&["serve", "--setup-timeout", "0"], "out of range"),
            (&["serve", "--no-cloud-init=yes"], "unexpected value"),
            (&["serve", "extra"], "unexpected argument `extra`"),
            (&["serve", "--state-dir", ""], "non-empty path"),
            (&["setup", "--timeout", "99999999"], "out of range"),
            (
                &["setup", "--min-root-bytes", "0"],
                "`--min-root-bytes 0` is out of range",
            ),
            (
                &["setup", "--min-root-bytes", "10G"],
                "invalid value \"10G\"",
            ),
            (
                &["setup", "--on-small-root", "ignore"],
                "invalid value \"ignore\" for `--on-small-root`: use `warn` or `fail`",
            ),
            (&["version", "--x"], "unknown flag"),
        ];
        for (args, want) in cases {
            let err = run(args).unwrap_err().to_string();
            assert!(err.contains(want), "{args:?}: {err:?} lacks {want:?}");
            assert!(err.contains("hint: run `lab-agent"), "{err}");
        }
    }

    #[test]
    fn help_everywhere() {
        for args in [
            &["--help"][..],
            &["help"],
            &["serve", "--help"],
            &["setup", "-h"],
            &["version", "--help"],
            &["version", "-h"],
        ] {
            assert!(matches!(run(args), Ok(Command::Help(_))), "{args:?}");
        }
        assert!(matches!(run(&["version"]), Ok(Command::Version)));
        // Every serve flag is documented in the help text.
        for flag in [
            "--listen",
            "--token-file",
            "--state-dir",
            "--cloud-init-dir",
            "--no-cloud-init",
            "--run-setup",
            "--setup-timeout",
            "--lab-dir",
            "--min-root-bytes",
            "--on-small-root",
            "--max-execs",
            "--addr-file",
            "--shutdown-grace",
        ] {
            assert!(SERVE_HELP.contains(flag), "{flag}");
        }
    }
}
