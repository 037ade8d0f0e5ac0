//! `POST /v1/exec` bodies: `lab_agent::parse_exec` never panics, and what
//! it accepts is within the limits and survives a round trip.
#![no_main]

use lab_agent_proto::ExecRequest;
use lab_agent_proto::exec::{MAX_COMMAND_BYTES, MAX_OUTPUT_BYTES_CAP, MAX_TIMEOUT_SECS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(req) = lab_agent::parse_exec(data) else {
        return;
    };
    assert!(!req.command.trim().is_empty());
    assert!(req.command.len() <= MAX_COMMAND_BYTES);
    assert!((1..=MAX_TIMEOUT_SECS).contains(&req.options.timeout_secs));
    assert!(req.options.max_output_bytes <= MAX_OUTPUT_BYTES_CAP);
    let again = serde_json::to_vec(&req).unwrap();
    let back: ExecRequest = lab_agent::parse_exec(&again).expect("a serialized request parses");
    assert_eq!(back, req);
});
