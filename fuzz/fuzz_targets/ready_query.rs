//! `/v1/ready` query strings: never a panic, never a wait over 60 s.
#![no_main]

use lab_agent_proto::MAX_READY_WAIT_SECS;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(query) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(wait) = lab_agent::parse_wait(Some(query)) {
        assert!(wait.as_secs() <= MAX_READY_WAIT_SECS);
        assert_eq!(wait.subsec_nanos(), 0);
    }
});
