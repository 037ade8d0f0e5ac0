//! lab-agent-bench: measures lab-agent against its targets (BENCHMARKS.md,
//! "Targets") side by side with the
//! local floor, OpenSSH and qemu-guest-agent, in one run, and prints the
//! tables of BENCHMARKS.md. Run it through `bench/run.sh`, which installs the
//! peers, creates the bench user and builds the shipped (static) agent.
//!
//! # Layout
//! - [`children`]: every process we start dies with us (drop, pdeathsig,
//!   signal/time-limit thread).
//! - [`peers`]: lab-agent, sshd and qemu-ga on loopback.
//! - [`floor`]: the posix_spawn floor, in a helper running as the user.
//! - [`exec`]: the exec variants and the interleaved sampling loop.
//! - [`detect`], [`memory`], [`wrk`], [`size`]: the other targets.
//! - [`fleet`]: `lab-agent-bench fleet`, one process grading many agents.
//! - [`report`]: the tables and the targets verdicts from one run's results.
//! - [`http`]: a minimal blocking HTTP/1.1 client; [`stats`]: percentiles.

mod children;
mod detect;
mod exec;
mod fleet;
mod floor;
mod http;
mod memory;
mod peers;
mod report;
mod size;
mod stats;
mod wrk;

use children::User;
use clap::Parser;
use exec::{AgentFresh, AgentKeepAlive, FloorV, Qga, Ssh, Variant};
use peers::{AgentOpts, BenchCgroup, QemuGa, Sshd, start_agent};
use report::ExecRow;
use stats::{Rng, Summary};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

const SHELL_COMMAND: &str = "true";

#[derive(Debug, Parser)]
#[command(
    name = "lab-agent-bench",
    about = "Benchmark lab-agent against its targets (use bench/run.sh)"
)]
struct Args {
    /// The agent to measure (the static one `packaging/build-agent.sh` builds).
    #[arg(long)]
    agent: PathBuf,
    /// `labctl`, for the Secret's size budget.
    #[arg(long)]
    labctl: Option<PathBuf>,
    /// The lab whose Secret is sized.
    #[arg(long, default_value = "examples/hello-lab")]
    lab: PathBuf,
    /// Unprivileged user with an empty home every shell runs as.
    #[arg(long, default_value = "labbench")]
    user: String,
    /// Recorded exec rounds (each: one sample of every variant).
    #[arg(long, default_value_t = 200)]
    rounds: usize,
    /// Unrecorded exec rounds first.
    #[arg(long, default_value_t = 10)]
    warmup: usize,
    /// Readiness detections (alternating the two markers).
    #[arg(long, default_value_t = 120)]
    detections: usize,
    /// wrk runs, and seconds each.
    #[arg(long, default_value_t = 3)]
    wrk_runs: u32,
    #[arg(long, default_value_t = 5)]
    wrk_seconds: u32,
    #[arg(long, default_value_t = 32)]
    wrk_connections: u32,
    /// Another lab-agent binary to run side by side (before/after a change):
    /// adds its kept-alive exec row.
    #[arg(long)]
    baseline_agent: Option<PathBuf>,
    /// Also time the agent's way of spawning locally (fork, and the vfork
    /// alternative), to split its overhead into spawning and HTTP.
    #[arg(long)]
    diagnostic: bool,
    /// Leave out OpenSSH and qemu-ga (quick agent-vs-floor runs).
    #[arg(long)]
    no_peers: bool,
    /// Give up (and clean up) after this many seconds.
    #[arg(long, default_value_t = 600)]
    time_limit: u64,
    /// Also write the report to this file.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Only these parts (comma-separated: size,exec,detect,memory,wrk).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

impl Args {
    fn part(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|p| p == name)
    }
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("floor-helper") {
        let mode = argv.get(2).and_then(|m| floor::Mode::parse(m));
        let command = argv.get(3).map_or(SHELL_COMMAND, String::as_str);
        let Some(mode) = mode else {
            eprintln!("floor-helper: bad mode");
            return ExitCode::FAILURE;
        };
        return match floor::helper_main(mode, command) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("floor-helper: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if argv.get(1).map(String::as_str) == Some("fleet") {
        let args = fleet::FleetArgs::parse_from(
            std::iter::once("lab-agent-bench fleet".to_owned()).chain(argv[2..].iter().cloned()),
        );
        children::install_guard(Duration::from_secs(args.time_limit));
        let result = WorkDir::create().and_then(|work| fleet::run(&args, &work.0));
        return match result {
            Ok(report) => {
                print!("{report}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let args = Args::parse();
    children::install_guard(Duration::from_secs(args.time_limit));
    match run(&args) {
        Ok(report) => {
            print!("{report}");
            if let Some(path) = &args.report
                && let Err(e) = std::fs::write(path, &report)
            {
                eprintln!("error: failed to write `{}`: {e}", path.display());
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> io::Result<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(io::Error::other(
            "the benchmark must run as root (it starts sshd and runs shells as another user)\nhint: use `bench/run.sh`",
        ));
    }
    let user = User::lookup(&args.user)?;
    let work = WorkDir::create()?;
    let w = work.0.as_path();
    let token_path = w.join("token");
    let token = make_token(&token_path)?;
    let mut rng = Rng::seeded();
    let load_before = loadavg();

    let sizes = if args.part("size") {
        eprintln!("bench: sizes");
        Some(size::measure(
            &args.agent,
            args.labctl.as_deref(),
            &args.lab,
            w,
        )?)
    } else {
        None
    };

    // The exec agent: also the one whose idle RSS is reported.
    let ready_state = w.join("state-ready");
    std::fs::create_dir_all(&ready_state)?;
    peers::run(
        Command::new(&args.agent)
            .args(["setup", "--state-dir"])
            .arg(&ready_state),
    )?;
    let mut rows = Vec::new();
    let mut cgroup_skipped: Option<String> = None;
    let mut paired_costs: Vec<PairedCost> = Vec::new();
    let mut idle = None;
    // (part, load average when it started, when it ended)
    let mut loads: Vec<(&str, String, String)> = Vec::new();
    if args.part("exec") || args.part("memory") {
        let agent = start_agent(
            &args.agent,
            w,
            &token_path,
            AgentOpts {
                name: "agent-exec",
                state_dir: &ready_state,
                cloud_init_dir: None,
                cpu: None,
                cgroup: None,
            },
        )?;
        std::thread::sleep(Duration::from_millis(200));
        let rss_start = memory::status_kib(agent.proc.pid(), "VmRSS")?;
        if args.part("exec") {
            let baseline = match &args.baseline_agent {
                None => None,
                Some(bin) => Some(start_agent(
                    bin,
                    w,
                    &token_path,
                    AgentOpts {
                        name: "agent-baseline",
                        state_dir: &ready_state,
                        cloud_init_dir: None,
                        cpu: None,
                        cgroup: None,
                    },
                )?),
            };
            // The same agents again, each with a cgroup per exec (a temp
            // sub-cgroup each, declared before the agents: removed after
            // they stop).
            // A baseline from before containment has no `--cgroup`: it gets
            // no cgroup row, the comparison without one still stands.
            let baseline_cg = args.baseline_agent.as_ref().filter(|bin| {
                let knows = knows_cgroup_flag(bin);
                if !knows {
                    eprintln!(
                        "bench: the baseline agent has no `--cgroup`: no baseline cgroup row"
                    );
                }
                knows
            });
            let cgroups = match (
                BenchCgroup::create("exec"),
                baseline_cg.map(|_| BenchCgroup::create("baseline")),
            ) {
                (Ok(a), Some(Ok(b))) => Ok((a, Some(b))),
                (Ok(a), None) => Ok((a, None)),
                (Err(e), _) | (_, Some(Err(e))) => Err(e),
            };
            let cg_agents = match &cgroups {
                Err(why) => {
                    eprintln!("bench: skipped the per-exec cgroup variants: {why}");
                    cgroup_skipped = Some(why.clone());
                    None
                }
                Ok((cg, cg_base)) => {
                    let a = start_agent(
                        &args.agent,
                        w,
                        &token_path,
                        AgentOpts {
                            name: "agent-exec-cgroup",
                            state_dir: &ready_state,
                            cloud_init_dir: None,
                            cpu: None,
                            cgroup: Some(cg.path()),
                        },
                    )?;
                    let b = match (baseline_cg, cg_base) {
                        (Some(bin), Some(cgb)) => Some(start_agent(
                            bin,
                            w,
                            &token_path,
                            AgentOpts {
                                name: "agent-baseline-cgroup",
                                state_dir: &ready_state,
                                cloud_init_dir: None,
                                cpu: None,
                                cgroup: Some(cgb.path()),
                            },
                        )?),
                        _ => None,
                    };
                    Some((a, b))
                }
            };
            let before = loadavg();
            (rows, paired_costs) = exec_phase(
                args,
                &user,
                w,
                ExecAgents {
                    agent: &agent,
                    baseline: baseline.as_ref(),
                    cgroup: cg_agents.as_ref().map(|(a, _)| a),
                    baseline_cgroup: cg_agents.as_ref().and_then(|(_, b)| b.as_ref()),
                },
                &token,
                &mut rng,
            )?;
            drop(cg_agents);
            drop(cgroups);
            loads.push(("exec", before, loadavg()));
        }
        std::thread::sleep(Duration::from_millis(500));
        idle = Some((
            rss_start,
            memory::status_kib(agent.proc.pid(), "VmRSS")?,
            memory::status_kib(agent.proc.pid(), "VmHWM")?,
        ));
    }

    let detections = if args.part("detect") {
        eprintln!("bench: readiness detection, {} samples", args.detections);
        let markers = detect::Markers::create(w)?;
        let agent = start_agent(
            &args.agent,
            w,
            &token_path,
            AgentOpts {
                name: "agent-detect",
                state_dir: markers.state_dir(),
                cloud_init_dir: Some(markers.cloud_init_dir()),
                cpu: None,
                cgroup: None,
            },
        )?;
        let before = loadavg();
        let d = detect::measure(&markers, agent.addr, &token, args.detections, &mut rng)?;
        loads.push(("detect", before, loadavg()));
        drop(agent);
        Some(d)
    } else {
        None
    };

    let mut floods = Vec::new();
    if args.part("memory") {
        let before = loadavg();
        for cap in [None, Some(64 * 1024)] {
            let f = memory::Flood {
                execs: 8,
                bytes_each: 50_000_000,
                cap,
            };
            eprintln!("bench: memory flood, cap {cap:?}");
            let agent = start_agent(
                &args.agent,
                w,
                &token_path,
                AgentOpts {
                    name: "agent-flood",
                    state_dir: &ready_state,
                    cloud_init_dir: None,
                    cpu: None,
                    cgroup: None,
                },
            )?;
            std::thread::sleep(Duration::from_millis(200));
            let before = memory::status_kib(agent.proc.pid(), "VmRSS")?;
            let outcome = memory::flood(agent.addr, &token, &user.name, f)?;
            let peak = memory::status_kib(agent.proc.pid(), "VmHWM")?;
            std::thread::sleep(Duration::from_millis(500));
            let after = memory::status_kib(agent.proc.pid(), "VmRSS")?;
            floods.push((f, outcome, before, peak, after));
        }
        loads.push(("memory", before, loadavg()));
    }

    let mut wrk_runs = Vec::new();
    if args.part("wrk") {
        eprintln!(
            "bench: wrk, {} × {} s, {} connections",
            args.wrk_runs, args.wrk_seconds, args.wrk_connections
        );
        let agent = start_agent(
            &args.agent,
            w,
            &token_path,
            AgentOpts {
                name: "agent-wrk",
                state_dir: &ready_state,
                cloud_init_dir: None,
                cpu: Some(0),
                cgroup: None,
            },
        )?;
        let before = loadavg();
        for _ in 0..args.wrk_runs {
            wrk_runs.push(wrk::run_wrk(
                agent.addr,
                &token,
                1,
                args.wrk_connections,
                args.wrk_seconds,
            )?);
        }
        loads.push(("wrk", before, loadavg()));
    }
    let load_after = loadavg();
    Ok(report::render(
        args,
        &user,
        &report::Results {
            sizes,
            rows,
            paired_costs,
            cgroup_skipped,
            idle,
            detections,
            floods,
            wrk_runs,
            loads,
            load_before,
            load_after,
        },
    ))
}

/// The agents the exec phase measures: the one under test and, optionally,
/// the `--baseline-agent`, each without and (where a cgroup2 mount is
/// writable) with a per-exec cgroup.
struct ExecAgents<'a> {
    agent: &'a peers::Agent,
    baseline: Option<&'a peers::Agent>,
    cgroup: Option<&'a peers::Agent>,
    baseline_cgroup: Option<&'a peers::Agent>,
}

fn exec_phase(
    args: &Args,
    user: &User,
    w: &Path,
    agents: ExecAgents<'_>,
    token: &str,
    rng: &mut Rng,
) -> io::Result<(Vec<ExecRow>, Vec<PairedCost>)> {
    let ExecAgents {
        agent,
        baseline,
        cgroup,
        baseline_cgroup,
    } = agents;
    // Declared before `variants` borrows them, dropped after.
    let peers = if args.no_peers {
        None
    } else {
        eprintln!("bench: starting the peers");
        let sshd = Sshd::start(w, user)?;
        let master = sshd.start_master()?;
        let qga = QemuGa::start(w, user)?;
        Some((sshd, master, qga))
    };
    // Declared before `variants`: its helper's shells run in it.
    let diag_cgroup = args.diagnostic.then(|| BenchCgroup::create("diag"));
    let diag_held = args.diagnostic.then(|| BenchCgroup::create("diag-held"));
    let body = exec::exec_body(SHELL_COMMAND, &user.name, None);
    let mut variants: Vec<Box<dyn Variant + '_>> = vec![
        Box::new(FloorV(floor::Floor::start(
            user,
            SHELL_COMMAND,
            floor::Mode::PosixSpawn,
        )?)),
        Box::new(AgentKeepAlive {
            conn: http::Conn::connect(agent.addr, token)?,
            body: body.clone(),
            label: "lab-agent, kept-alive HTTP/1.1",
        }),
        Box::new(AgentFresh {
            addr: agent.addr,
            token: token.to_owned(),
            body,
        }),
    ];
    if let Some((sshd, (_, mux), qga)) = &peers {
        let remote = format!("bash --login -c {SHELL_COMMAND}");
        // The ControlMaster's session is there for good.
        let idle_sessions = sshd.sessions();
        variants.push(Box::new(Ssh {
            sshd,
            mux: None,
            remote: remote.clone(),
            idle_sessions,
        }));
        variants.push(Box::new(Ssh {
            sshd,
            mux: Some(mux.clone()),
            remote,
            idle_sessions,
        }));
        variants.push(Box::new(Qga::connect(
            &qga.socket,
            &["/bin/bash", "--login", "-c", SHELL_COMMAND],
        )?));
    }
    // (a row, the row it is compared with, what the ratio says): a cgroup's
    // own cost, streaming's, paired by round like the ratios to the floor.
    let mut pairs: Vec<(usize, usize, &str)> = Vec::new();
    let mut baseline_at = None;
    if let Some(b) = baseline {
        baseline_at = Some(variants.len());
        variants.push(Box::new(AgentKeepAlive {
            conn: http::Conn::connect(b.addr, token)?,
            body: exec::exec_body(SHELL_COMMAND, &user.name, None),
            label: "baseline lab-agent (--baseline-agent), kept-alive",
        }));
    }
    if let Some(a) = cgroup {
        pairs.push((
            variants.len(),
            1,
            "lab-agent: with a per-exec cgroup ÷ without",
        ));
        variants.push(Box::new(AgentKeepAlive {
            conn: http::Conn::connect(a.addr, token)?,
            body: exec::exec_body(SHELL_COMMAND, &user.name, None),
            label: "lab-agent, per-exec cgroup, kept-alive",
        }));
    }
    if let (Some(b), Some(off)) = (baseline_cgroup, baseline_at) {
        pairs.push((
            variants.len(),
            off,
            "baseline lab-agent: with a per-exec cgroup ÷ without",
        ));
        variants.push(Box::new(AgentKeepAlive {
            conn: http::Conn::connect(b.addr, token)?,
            body: exec::exec_body(SHELL_COMMAND, &user.name, None),
            label: "baseline lab-agent (--baseline-agent), per-exec cgroup, kept-alive",
        }));
    }
    // Streaming's cost beside the plain answer (row 1), in the same rounds.
    pairs.extend(exec::add_streaming(
        &mut variants,
        1,
        agent.addr,
        token,
        &user.name,
        SHELL_COMMAND,
    )?);
    if args.diagnostic {
        variants.push(Box::new(exec::TcpPingPong::start()?));
        variants.push(Box::new(exec::AgentReady {
            conn: http::Conn::connect(agent.addr, token)?,
        }));
        match &diag_cgroup {
            Some(Ok(cg)) => {
                let plain = variants.len();
                variants.push(Box::new(FloorV(floor::Floor::start(
                    user,
                    SHELL_COMMAND,
                    floor::Mode::Clone3,
                )?)));
                pairs.push((
                    variants.len(),
                    plain,
                    "local spawn, no agent (the kernel's part): with a per-exec cgroup ÷ without",
                ));
                variants.push(Box::new(FloorV(floor::Floor::start_in(
                    user,
                    SHELL_COMMAND,
                    floor::Mode::Clone3Cgroup,
                    Some(cg.path()),
                )?)));
                if let Some(Ok(held)) = &diag_held {
                    pairs.push((
                        variants.len(),
                        plain,
                        "local spawn, no agent (the kernel's part): into a cgroup holding an idle process ÷ without",
                    ));
                    variants.push(Box::new(FloorV(floor::Floor::start_in(
                        user,
                        SHELL_COMMAND,
                        floor::Mode::Clone3CgroupHeld,
                        Some(held.path()),
                    )?)));
                }
            }
            Some(Err(why)) => eprintln!("bench: no local cgroup diagnostic: {why}"),
            None => {}
        }
        for mode in [
            floor::Mode::PosixSpawnSetsid,
            floor::Mode::Fork,
            floor::Mode::Vfork,
            floor::Mode::VforkSameSession,
        ] {
            variants.push(Box::new(FloorV(floor::Floor::start(
                user,
                SHELL_COMMAND,
                mode,
            )?)));
        }
    }
    eprintln!(
        "bench: exec, {} variants × ({} + {}) rounds",
        variants.len(),
        args.warmup,
        args.rounds
    );
    let samples = exec::interleave(&mut variants, args.warmup, args.rounds, rng)?;
    // Round by round, each variant against the floor of the same round:
    // slow drift of the machine cancels out of these ratios.
    let costs = pairs
        .iter()
        .map(|&(cg, off, which)| (which.to_owned(), paired_median(&samples[cg], &samples[off])))
        .collect();
    let floor = samples[0].clone();
    let rows = variants
        .iter()
        .zip(samples)
        .map(|(v, s)| {
            let paired = paired_median(&s, &floor);
            (v.name(), Summary::of(&s), paired)
        })
        .collect();
    Ok((rows, costs))
}

/// One row's cost against another (a per-exec cgroup's, streaming's): (what
/// the ratio says, median over rounds of the one's time ÷ the other's).
type PairedCost = (String, f64);

/// The median over rounds of `a[i] / b[i]`.
fn paired_median(a: &[Duration], b: &[Duration]) -> f64 {
    let mut paired: Vec<f64> = a
        .iter()
        .zip(b)
        .map(|(a, b)| a.as_secs_f64() / b.as_secs_f64())
        .collect();
    paired.sort_by(f64::total_cmp);
    paired.get(paired.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The temp dir; removed on drop (and by the signal/time-limit path).
struct WorkDir(PathBuf);

impl WorkDir {
    fn create() -> io::Result<WorkDir> {
        // A fresh, unpredictable name made exclusively: the bench runs as
        // root in a world-writable /tmp. Removed by this type's Drop and by
        // the signal/time-limit path, so tempfile's own removal is off.
        let dir = lab_runner::tempdir::create("lab-agent-bench", 0o755)?.keep();
        // The bench user's helpers (qemu-ga) need to reach their subdir.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        children::set_work_dir(dir.clone());
        Ok(WorkDir(dir))
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn make_token(path: &Path) -> io::Result<String> {
    let token = labctl::token::generate().map_err(io::Error::other)?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    io::Write::write_all(&mut f, token.as_bytes())?;
    Ok(token)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        .unwrap_or_else(|| "unknown CPU".into())
}

/// Whether `bin serve --help` lists `--cgroup` (agents since containment).
fn knows_cgroup_flag(bin: &std::path::Path) -> bool {
    std::process::Command::new(bin)
        .args(["serve", "--help"])
        .output()
        .is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout).contains("--cgroup")
                || String::from_utf8_lossy(&o.stderr).contains("--cgroup")
        })
}
