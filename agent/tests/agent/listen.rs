//! `--listen`, repeatable: every address bound serves the same API with the
//! same token and limits. (A vsock port is served the same way; it is proven
//! in real guests, `tests/tests/vm_lifecycle/vsock.rs`: this machine's own
//! vsock leads to whoever hosts it, not to a test.)

use crate::support::*;
use serde_json::json;
use std::net::SocketAddr;

/// The addresses of the start-up line `listening addr=A,B,…`.
fn listening(log: &str) -> Vec<SocketAddr> {
    let line = log
        .lines()
        .find(|l| l.contains(" listening "))
        .expect("a `listening` line");
    let addrs = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("addr="))
        .expect("its `addr=`");
    addrs.split(',').map(|a| a.parse().unwrap()).collect()
}

#[test]
fn every_address_serves_the_same_api_and_token() {
    let agent = Agent::builder("listen-two")
        .no_cloud_init()
        .args(["--listen", "127.0.0.1:0"])
        .start();
    let addrs = listening(&agent.log());
    assert_eq!(addrs.len(), 2, "{addrs:?}");
    assert_eq!(addrs[0], agent.addr, "the address file names the first");
    let second = addrs[1];
    assert_ne!(second, agent.addr);
    let ok = request_at(second, "GET", "/v1/info", Some(TOKEN), None);
    assert_eq!(ok.status, 200, "{}", ok.text());
    let denied = request_at(second, "GET", "/v1/ready", Some("wrong-token"), None);
    assert_eq!(denied.status, 401);
    let ran = exec_at(second, &json!({"command": "echo second"}));
    assert_eq!(ran.status, 200);
    assert_eq!(ran.json()["stdout"], "second\n");
    // The limits are the agent's, not a listener's: one body cap for both.
    let big = vec![b' '; 2 << 20];
    let too_big = request_at(second, "POST", "/v1/exec", Some(TOKEN), Some(&big));
    assert_eq!(too_big.status, 413);
}

#[test]
fn a_vsock_listen_value_is_checked_before_anything_binds() {
    for (value, want) in [
        ("vsock:", "is not a vsock port"),
        ("vsock:99999999999", "is not a vsock port"),
        ("tcp:8899", "give IP:PORT or vsock:PORT"),
    ] {
        let out = agent_command()
            .args(["serve", "--listen", value])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{value}: {err}");
        assert!(err.contains(want), "{value}: {err}");
    }
}
