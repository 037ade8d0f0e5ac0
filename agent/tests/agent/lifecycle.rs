use crate::support::*;
use serde_json::json;

fn serve_with_token(contents: &str, mode: u32) -> (i32, String) {
    let dir = TempDir::new("token");
    write_file(&dir.join("token"), contents, mode);
    let out = agent_command()
        .args(["serve", "--listen", "127.0.0.1:0", "--token-file"])
        .arg(dir.join("token"))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn refuses_a_token_readable_by_others() {
    let (code, err) = serve_with_token(TOKEN, 0o644);
    assert_eq!(code, 2);
    assert!(err.contains("readable by group or others"), "{err}");
    assert!(err.contains("chmod 600"), "{err}");
    let (code, _) = serve_with_token(TOKEN, 0o640);
    assert_eq!(code, 2);
}

#[test]
fn refuses_a_short_or_missing_token() {
    let (code, err) = serve_with_token("tooshort\n", 0o600);
    assert_eq!(code, 2);
    assert!(
        err.contains("8 characters long") && err.contains("shorter than 32"),
        "{err}"
    );
    let out = agent_command()
        .args(["serve", "--token-file", "/no/such/token"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/no/such/token"));
}

#[test]
fn bad_flags_are_usage_errors() {
    let out = agent_command()
        .args(["serve", "--max-execs", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-execs"));
    let out = agent_command().args(["serve", "--bogus"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn version_and_info() {
    let out = agent_command().arg("version").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!("lab-agent {}", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    assert!(text.contains("target:"), "{text}");
    let agent = Agent::local("info");
    let v = agent.get("/v1/info").json();
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["boot_id"], boot_id());
    assert!(v["uptime_secs"].as_f64().unwrap() > 0.0);
    assert!(v["os"].is_string());
    // Where checks find the lab: `--lab-dir`, here its default.
    assert_eq!(v["lab_dir"], "/opt/lab");
}

#[test]
fn sigterm_lets_a_running_exec_finish_then_exits() {
    let mut agent = Agent::local("sigterm-finish");
    let addr = agent.addr;
    let marker = agent.dir.join("started");
    let cmd = format!("touch {}; sleep 1; echo finished", marker.display());
    let exec = std::thread::spawn(move || {
        let body = json!({"command": cmd}).to_string();
        let raw = format!(
            "POST /v1/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        std::io::Write::write_all(&mut s, raw.as_bytes()).unwrap();
        read_response(&mut std::io::BufReader::new(s))
    });
    eventually(10, "the exec to start", || marker.exists().then_some(()));
    agent.signal("TERM");
    let r = exec.join().unwrap().expect("the running exec is answered");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["stdout"], "finished\n");
    let status = agent.wait_exit(20);
    assert!(status.success(), "{status}");
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "no longer accepting"
    );
}

#[test]
fn sigterm_kills_commands_still_running_after_the_grace() {
    let mut agent = Agent::builder("sigterm-kill")
        .no_cloud_init()
        .args(["--shutdown-grace", "1"])
        .start();
    let addr = agent.addr;
    let pidfile = agent.dir.join("pid");
    let cmd = format!("sleep 300 & echo $! > {}; wait", pidfile.display());
    let exec = std::thread::spawn(move || {
        let body = json!({"command": cmd}).to_string();
        let raw = format!(
            "POST /v1/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        std::io::Write::write_all(&mut s, raw.as_bytes()).unwrap();
        read_response(&mut std::io::BufReader::new(s))
    });
    let pid: u32 = eventually(10, "the exec to start", || {
        std::fs::read_to_string(&pidfile).ok()?.trim().parse().ok()
    });
    agent.signal("TERM");
    let status = agent.wait_exit(20);
    assert!(status.success(), "{status}");
    eventually(10, "the command's group to be killed", || {
        (!alive(pid)).then_some(())
    });
    if let Some(r) = exec.join().unwrap() {
        assert_eq!(r.json()["signal"], 9);
    }
}
