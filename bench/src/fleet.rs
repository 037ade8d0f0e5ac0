//! `lab-agent-bench fleet`: one backend process grading a class of VMs.
//!
//! Starts `--vms` loopback agents (each its own token and state dir, setup
//! recorded as succeeded), waits for all, and grades `--lab` on every one
//! with `lab_agent_client::grade_all` on a current-thread runtime, so the
//! client's CPU is this one thread's (`RUSAGE_THREAD`). Reports wall time,
//! client CPU per VM, the client's peak RSS (`VmHWM`, reset before
//! grading), p50/p99 of each VM's grade, and the agents' own CPU (theirs
//! and their commands', from `/proc/PID/stat`) for comparison. With
//! `--hostile`, grades the fleet a second time with one fake hostile VM of
//! each behaviour of `lab_agent_tests::hostile` added, and compares each
//! honest VM's result and the p99.

use crate::children::Proc;
use crate::peers::{AgentOpts, start_agent};
use crate::stats::{Summary, ms};
use clap::Parser;
use lab_agent_client::{Client, GradeOutcome, GradeReport};
use lab_agent_proto::lab::Lab;
use lab_agent_tests::hostile::{Behaviour, HostileAgent};
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, Parser)]
#[command(
    name = "lab-agent-bench fleet",
    about = "Grade a lab on many loopback agents from one process"
)]
pub struct FleetArgs {
    /// The agent binary to start `--vms` times.
    #[arg(long)]
    agent: PathBuf,
    /// The lab to grade.
    #[arg(long, default_value = "examples/hello-lab")]
    lab: PathBuf,
    /// Agents (VMs) in the fleet.
    #[arg(long, default_value_t = 100)]
    vms: usize,
    /// VMs graded at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Grade again with one hostile VM of each behaviour added.
    #[arg(long)]
    hostile: bool,
}

/// CPU time of this thread (the current-thread runtime's, the client's).
fn thread_cpu() -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU time of an agent and its reaped commands, from `/proc/PID/stat`.
fn agent_cpu(pid: u32) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    // Fields after the `(comm)`: utime is the 14th field, cstime the 17th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .filter_map(|v| v.parse().ok())
        .collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_millis(f.iter().sum::<u64>() * 1000 / hz)
}

fn vm_hwm_kib() -> u64 {
    crate::memory::status_kib(std::process::id(), "VmHWM").unwrap_or(0)
}

/// One grading pass: outcomes, wall time, client CPU, peak RSS.
struct Pass {
    outcomes: Vec<GradeOutcome>,
    wall: Duration,
    client_cpu: Duration,
    agents_cpu: Duration,
    hwm_kib: u64,
}

fn grade_pass(
    rt: &tokio::runtime::Runtime,
    clients: &[Client],
    lab: &Lab,
    concurrency: usize,
    agents: &[Proc],
) -> Pass {
    // Reset the peak RSS so it is this pass's.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let agents_before: Duration = agents.iter().map(|p| agent_cpu(p.pid())).sum();
    let cpu_before = thread_cpu();
    let start = Instant::now();
    let outcomes = rt.block_on(lab_agent_client::grade_all(clients, lab, concurrency));
    let wall = start.elapsed();
    let client_cpu = thread_cpu() - cpu_before;
    let agents_cpu = agents.iter().map(|p| agent_cpu(p.pid())).sum::<Duration>() - agents_before;
    Pass {
        outcomes,
        wall,
        client_cpu,
        agents_cpu,
        hwm_kib: vm_hwm_kib(),
    }
}

/// What must not change between passes: each check's status, exit code
/// and output.
fn verdict(r: &Result<GradeReport, lab_agent_client::Error>) -> String {
    match r {
        Ok(r) => r
            .checks
            .iter()
            .map(|c| {
                format!(
                    "{}:{:?}:{:?}:{:?}|",
                    c.name, c.status, c.exit_code, c.stdout
                )
            })
            .collect(),
        Err(e) => format!("error: {e}"),
    }
}

fn describe(out: &mut String, title: &str, p: &Pass, vms: usize) {
    let times: Vec<Duration> = p.outcomes.iter().take(vms).map(|o| o.elapsed).collect();
    let s = Summary::of(&times);
    let (mut passed, mut failed, mut errors, mut vm_errors) = (0, 0, 0, 0);
    for o in p.outcomes.iter().take(vms) {
        match &o.result {
            Ok(r) => {
                passed += r.passed;
                failed += r.failed;
                errors += r.errors;
            }
            Err(_) => vm_errors += 1,
        }
    }
    let ratio = if p.agents_cpu.is_zero() {
        f64::NAN
    } else {
        100.0 * p.client_cpu.as_secs_f64() / p.agents_cpu.as_secs_f64()
    };
    let _ = writeln!(
        out,
        "| {title} | {vms} | {:.2} s | {} ms | {:.1} % | {} MiB | {} / {} ms | {:.2} s | checks {passed} passed, {failed} failed, {errors} errors; {vm_errors} VMs not graded |",
        p.wall.as_secs_f64(),
        ms(p.client_cpu / vms.max(1) as u32),
        ratio,
        p.hwm_kib / 1024,
        ms(s.median),
        ms(s.p99),
        p.agents_cpu.as_secs_f64(),
    );
}

pub fn run(args: &FleetArgs, work: &Path) -> io::Result<String> {
    let lab = Lab::load(&args.lab).map_err(|e| io::Error::other(e.to_string()))?;
    // One succeeded setup record, copied into every agent's state dir.
    let template = work.join("state-template");
    std::fs::create_dir_all(&template)?;
    crate::peers::run(
        std::process::Command::new(&args.agent)
            .args(["setup", "--state-dir"])
            .arg(&template),
    )?;
    eprintln!("bench fleet: starting {} agents", args.vms);
    let mut agents = Vec::with_capacity(args.vms);
    let mut clients = Vec::with_capacity(args.vms);
    for i in 0..args.vms {
        let state = work.join(format!("state-{i}"));
        std::fs::create_dir_all(&state)?;
        for f in ["setup.json", "setup.log"] {
            if template.join(f).exists() {
                std::fs::copy(template.join(f), state.join(f))?;
            }
        }
        let token_path = work.join(format!("token-{i}"));
        let token = crate::make_token(&token_path)?;
        let name = format!("fleet-{i}");
        let agent = start_agent(
            &args.agent,
            work,
            &token_path,
            AgentOpts {
                name: &name,
                state_dir: &state,
                cloud_init_dir: None,
                cpu: None,
                cgroup: None,
            },
        )?;
        clients.push(
            Client::new(&format!("http://{}", agent.addr), &token).map_err(io::Error::other)?,
        );
        agents.push(agent.proc);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let waited = rt.block_on(lab_agent_client::wait_all(
        &clients,
        Instant::now() + Duration::from_secs(120),
        |_, _| {},
    ));
    if let Some(w) = waited.iter().find(|w| w.result.is_err()) {
        return Err(io::Error::other(format!(
            "agent {} not ready: {:?}",
            w.url, w.result
        )));
    }
    eprintln!("bench fleet: grading `{}` on {} VMs", lab.name, args.vms);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## Fleet: `{}` on {} loopback agents, concurrency {}\n",
        lab.name, args.vms, args.concurrency
    );
    let _ = writeln!(
        out,
        "| pass | VMs | wall | client CPU per VM | client CPU / agents' CPU | client peak RSS | p50 / p99 per VM | agents' CPU | results |\n|---|---|---|---|---|---|---|---|---|"
    );
    let honest = grade_pass(&rt, &clients, &lab, args.concurrency, &agents);
    describe(&mut out, "honest fleet", &honest, args.vms);
    if args.hostile {
        let behaviours = [
            Behaviour::Busy { retry_after: 1 },
            Behaviour::ContinueFlood,
            Behaviour::HugeContentLength,
            Behaviour::Oversized {
                stdout_bytes: 8 << 20,
            },
            Behaviour::Exit {
                exit_code: Some(-1),
                signal: None,
            },
            Behaviour::Escapes,
            Behaviour::NonJsonError,
            Behaviour::RelativeLabDir,
            Behaviour::Hangup,
        ];
        let fakes: Vec<HostileAgent> = behaviours
            .iter()
            .cloned()
            .map(HostileAgent::start)
            .collect();
        let mut all = clients.clone();
        for f in &fakes {
            all.push(Client::new(&f.url(), "hostile-token").map_err(io::Error::other)?);
        }
        let mixed = grade_pass(&rt, &all, &lab, args.concurrency, &agents);
        describe(&mut out, "with 9 hostile VMs", &mixed, args.vms);
        let changed = honest
            .outcomes
            .iter()
            .zip(&mixed.outcomes)
            .filter(|(a, b)| verdict(&a.result) != verdict(&b.result))
            .count();
        let p99 = |p: &Pass| {
            Summary::of(
                &p.outcomes
                    .iter()
                    .take(args.vms)
                    .map(|o| o.elapsed)
                    .collect::<Vec<_>>(),
            )
            .p99
        };
        let _ = writeln!(
            out,
            "\nhonest VMs whose result changed with the hostile ones in the fleet: {changed} of {}; honest p99 {} → {} ms",
            args.vms,
            ms(p99(&honest)),
            ms(p99(&mixed))
        );
        for (b, o) in behaviours.iter().zip(&mixed.outcomes[args.vms..]) {
            let what = match &o.result {
                Ok(r) => format!(
                    "graded: {} passed, {} failed, {} errors",
                    r.passed, r.failed, r.errors
                ),
                Err(e) => format!(
                    "not graded: {}",
                    lab_agent_proto::text::escape(&e.to_string())
                ),
            };
            let _ = writeln!(
                out,
                "- hostile {b:?}: {:.2} s, {what}",
                o.elapsed.as_secs_f64()
            );
        }
    }
    let _ = writeln!(
        out,
        "\nclient CPU: the grading thread's own (RUSAGE_THREAD, a current-thread runtime); agents' CPU: utime+stime+cutime+cstime of every agent (their commands included)."
    );
    // The report first: stopping a thousand agents takes a while.
    print!("{out}");
    let _ = io::Write::flush(&mut io::stdout());
    // Throwaway agents: SIGKILL to all at once (one graceful stop after
    // another took ~3 s each); each `Proc`'s drop then only reaps.
    drop(clients);
    drop(rt);
    for a in &agents {
        // SAFETY: plain kill(2) on our own unreaped child.
        unsafe { libc::kill(a.pid() as libc::pid_t, libc::SIGKILL) };
    }
    Ok(String::new())
}
