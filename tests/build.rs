//! Cfgs for tests that cannot run in every build, so that cargo reports
//! them as ignored, never as a pass that ran nothing:
//!
//! - `vm_guest_left_out="NAME"` for each guest `LAB_AGENT_VM_GUESTS` leaves
//!   out (`src/vm/guest.rs`, compiled here too: one definition of the names
//!   and of the default set); `per_guest!` ignores that guest's tests.

#[allow(dead_code)] // the build script needs only the names and the selection
#[path = "src/vm/guest.rs"]
mod guest;

use guest::GuestOs;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src/vm/guest.rs");
    println!("cargo::rerun-if-env-changed=LAB_AGENT_VM_GUESTS");

    let names: Vec<String> = GuestOs::KNOWN
        .iter()
        .map(|g| format!("\"{}\"", g.name()))
        .collect();
    println!(
        "cargo::rustc-check-cfg=cfg(vm_guest_left_out, values({}))",
        names.join(", ")
    );

    let var = match std::env::var("LAB_AGENT_VM_GUESTS") {
        Ok(v) => Some(v),
        Err(std::env::VarError::NotPresent) => None,
        Err(e) => panic!("LAB_AGENT_VM_GUESTS: {e}"),
    };
    let selected = GuestOs::selection(var.as_deref()).unwrap_or_else(|e| panic!("{e}"));
    for guest in GuestOs::KNOWN {
        if !selected.contains(&guest) {
            println!("cargo::rustc-cfg=vm_guest_left_out=\"{guest}\"");
        }
    }
}
