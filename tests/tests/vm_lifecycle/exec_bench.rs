//! The exec benchmark where the agent ships: hello-lab's payload on Debian
//! 12 (the agent as the payload installs it, its unit, its delegated
//! cgroup), `true` in a login shell three ways, side by side:
//!
//! - inside the guest, one Python loop taking turns in random order: the
//!   floor (`posix_spawn` of the same login shell, `waitpid`), the
//!   installed agent over loopback (per-exec cgroup), and a second agent
//!   of the same binary with `--cgroup off` (the session fallback) — so
//!   the ratios are paired by round, as `bench/`'s on the host;
//! - from the host, the installed agent over the port forward (what a
//!   backend pays).
//!
//! `#[ignore]`d, not in CI (one boot, ~3 min under TCG):
//!
//! ```text
//! cargo test -p lab-agent-tests --test vm_lifecycle exec_bench::in_the_guest -- --ignored --nocapture
//! ```
//!
//! Everything runs as root here (the token is root's to read); the loop
//! gives the floor the environment the agent gives a command. Under TCG the
//! absolute times are an emulator's; the ratios are what carries over.

use crate::support::*;
use lab_agent_client::Client;
use lab_agent_proto::ExecRequest;
use lab_agent_tests::local::TempDir;
use lab_agent_tests::vm::{BootOptions, GuestOs, Vm};
use serde_json::Value;
use std::time::{Duration, Instant};

/// Rounds of the loop in the guest (each: one of every variant).
const ROUNDS: usize = 100;
/// Execs of `true` from the host.
const HOST_EXECS: usize = 50;

/// The loop the guest runs (as root, through the installed agent): prints
/// one JSON object, each variant's times in ms, in round order.
const LOOP: &str = r#"
import http.client, json, os, random, subprocess, time
token = open("/etc/lab-agent/token").read().strip()
os.makedirs("/run/lab-agent-bench", exist_ok=True)
fallback = subprocess.Popen(
    ["/usr/local/bin/lab-agent", "serve", "--listen", "127.0.0.1:0",
     "--addr-file", "/run/lab-agent-bench/addr", "--token-file", "/etc/lab-agent/token",
     "--state-dir", "/run/lab-agent-bench", "--no-cloud-init", "--cgroup", "off"],
    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(600):
    if os.path.exists("/run/lab-agent-bench/addr"):
        break
    time.sleep(0.05)
port = int(open("/run/lab-agent-bench/addr").read().strip().rsplit(":", 1)[1])
env = {"HOME": "/root", "USER": "root", "LOGNAME": "root", "SHELL": "/bin/bash",
       "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
body = json.dumps({"command": "true"})
head = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
conns = {"cgroup": http.client.HTTPConnection("127.0.0.1", 8899),
         "fallback": http.client.HTTPConnection("127.0.0.1", port)}
def floor():
    pid = os.posix_spawn("/bin/bash", ["bash", "--login", "-c", "true"], env)
    os.waitpid(pid, 0)
def agent(name):
    c = conns[name]
    c.request("POST", "/v1/exec", body, head)
    r = c.getresponse()
    answer = json.loads(r.read())
    assert r.status == 200 and answer["exit_code"] == 0, answer
run = {"floor": floor, "cgroup": lambda: agent("cgroup"), "fallback": lambda: agent("fallback")}
times = {k: [] for k in run}
# The agents' own CPU time (ns on CPU, their main thread) over the
# recorded rounds: what each costs per exec whatever the emulator's pace.
main_pid = int(subprocess.run(["systemctl", "show", "-P", "MainPID", "lab-agent.service"],
                              capture_output=True, text=True).stdout)
pids = {"cgroup": main_pid, "fallback": fallback.pid}
def on_cpu(pid):
    return int(open("/proc/%d/schedstat" % pid).read().split()[0])
cpu = {}
for i in range(10 + ROUNDS):
    if i == 10:
        cpu = {k: on_cpu(p) for k, p in pids.items()}
    order = list(run)
    random.shuffle(order)
    for k in order:
        t = time.perf_counter()
        run[k]()
        if i >= 10:
            times[k].append((time.perf_counter() - t) * 1000)
times["cpu_us_per_exec"] = {k: (on_cpu(p) - cpu[k]) / 1000 / ROUNDS for k, p in pids.items()}
fallback.terminate()
fallback.wait()
print(json.dumps(times))
"#;

#[test]
#[ignore = "benchmark: one boot, ~3 min under TCG; `cargo test -p lab-agent-tests --test \
            vm_lifecycle exec_bench::in_the_guest -- --ignored --nocapture`"]
fn in_the_guest() {
    let guest = GuestOs::Debian12;
    let image = image(guest);
    let dir = TempDir::new("vm-exec-bench");
    let payload = render_payload(&repo_root().join("examples/hello-lab"), &dir, guest.arch());
    let vm = Vm::boot(
        &image,
        BootOptions::new("vm-exec-bench", payload.user_data.clone()),
    )
    .expect("qemu starts");
    let conn = Conn {
        url: vm.agent_url(),
        token_file: payload.token_file.clone(),
    };
    let waited = conn.labctl("wait", &["--timeout", &WAIT_TIMEOUT_SECS.to_string()]);
    assert_eq!(waited.status.code(), Some(0), "labctl wait");
    let uname = conn.run("uname -r; nproc; cat /proc/loadavg");
    // The installed agent contains each command in a cgroup of its own.
    let cgroup = conn.run("cat /proc/self/cgroup");
    assert!(cgroup.contains("/lab-agent.service/exec-"), "{cgroup}");

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = Client::new(&conn.url, &payload.token).unwrap();
    let (host, guest_loop) = rt.block_on(async {
        let req = ExecRequest::new("true");
        client.exec(&req).await.expect("a warm-up exec");
        let mut host = Vec::new();
        for _ in 0..HOST_EXECS {
            let t = Instant::now();
            let r = client.exec(&req).await.expect("exec true");
            assert_eq!(r.exit_code, Some(0));
            host.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        let script = LOOP.replace("ROUNDS", &ROUNDS.to_string());
        let req = ExecRequest::new("exec python3 -")
            .stdin(script)
            .timeout_secs(1800);
        let r = client.exec(&req).await.expect("the loop in the guest");
        assert_eq!(r.exit_code, Some(0), "the loop: {}", r.stderr);
        (host, r.stdout)
    });
    let times: Value = serde_json::from_str(&guest_loop).expect("the loop's JSON");
    let series = |k: &str| -> Vec<f64> {
        times[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    let floor = series("floor");
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let paired = |v: &[f64]| {
        let r: Vec<f64> = v.iter().zip(&floor).map(|(a, f)| a / f).collect();
        median(&r)
    };
    eprintln!(
        "exec `true` (bash --login, root), {guest} under this host's qemu ({}), {ROUNDS} rounds:",
        uname.split_whitespace().collect::<Vec<_>>().join(" ")
    );
    eprintln!("| variant | median ms | × floor (medians) | × floor (paired by round) |");
    eprintln!("|---|---:|---:|---:|");
    for (name, k) in [
        ("in the guest: floor, posix_spawn + waitpid", "floor"),
        (
            "in the guest: lab-agent, per-exec cgroup, kept-alive",
            "cgroup",
        ),
        (
            "in the guest: lab-agent `--cgroup off` (session), kept-alive",
            "fallback",
        ),
    ] {
        let v = series(k);
        eprintln!(
            "| {name} | {:.2} | {:.3} | {:.3} |",
            median(&v),
            median(&v) / median(&floor),
            paired(&v)
        );
    }
    let cpu = &times["cpu_us_per_exec"];
    eprintln!(
        "the agents' own CPU time per exec in the guest (main thread, /proc/PID/schedstat): \
         per-exec cgroup {:.0} µs, `--cgroup off` {:.0} µs",
        cpu["cgroup"].as_f64().unwrap(),
        cpu["fallback"].as_f64().unwrap()
    );
    eprintln!(
        "| from the host: lab-agent, per-exec cgroup, kept-alive ({HOST_EXECS} execs) | {:.2} | {:.3} | – |",
        median(&host),
        median(&host) / median(&floor)
    );
    vm.powerdown(Duration::from_secs(30)).unwrap();
}
