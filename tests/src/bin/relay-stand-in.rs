//! `relay-stand-in DIR AGENT_ADDR [DIE_AFTER]`: serves the stand-ins of
//! `lab_agent_tests::relay` in front of the agent at `AGENT_ADDR` (whose
//! TCP port stands for the guest's vsock port 8899): a hybrid vsock
//! socket in `DIR` and KubeVirt's vsock subresource (VMI `labs/vm-1`;
//! API token `grader-token`, RBAC `get` on `virtualmachineinstances/vsock`
//! in `labs` only). Prints one JSON line (`hybrid`: the `vsock+unix://`
//! URL; `kube_server`, `kube_ca`, `kube_other_ca`, `kube_token_file`) and
//! stops when stdin closes. For the Python tests, which meet the same
//! relays as the Rust ones.

use lab_agent_tests::relay::kubevirt::Account;
use lab_agent_tests::relay::{GuestVsock, HybridStandIn, KubevirtStandIn, StandInVmi};
use std::io::{Read, Write};
use std::path::PathBuf;

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(dir), Some(Ok(agent))) = (args.first(), args.get(1).map(|a| a.parse())) else {
        eprintln!("usage: relay-stand-in DIR AGENT_ADDR [DIE_AFTER]");
        return std::process::ExitCode::from(2);
    };
    let die_after = args.get(2).and_then(|n| n.parse().ok());
    let dir = PathBuf::from(dir);
    let guest = GuestVsock::Loopback { port: 8899, agent };
    let hybrid = HybridStandIn::start(&dir.join("vm.vsock"), guest.clone(), die_after);
    let k = KubevirtStandIn::start(
        &dir,
        vec![StandInVmi::running("labs", "vm-1", guest)],
        vec![Account {
            token: "grader-token".into(),
            user: "system:serviceaccount:lab-backend:grader".into(),
            vsock_in: vec!["labs".into()],
        }],
        die_after,
    );
    let token_file = dir.join("api-token");
    std::fs::write(&token_file, "grader-token\n").unwrap();
    let line = serde_json::json!({
        "hybrid": hybrid.url(8899),
        "kube_server": k.server(),
        "kube_ca": k.certs().ca,
        "kube_other_ca": k.certs().other_ca,
        "kube_token_file": token_file,
    });
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    std::process::ExitCode::SUCCESS
}
