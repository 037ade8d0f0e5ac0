//! Inputs the API says are 400s and the released agent took: `wait=+5`
//! (Rust's integer parser accepts the sign) and an `env` key given twice
//! (serde's map kept the last one silently).

use crate::support::*;

#[test]
fn a_signed_wait_is_a_400() {
    let agent = Agent::local("strict-wait");
    for q in ["wait=+5", "wait=%2B5", "wait= 5"] {
        let r = agent.get(&format!("/v1/ready?{q}"));
        assert_eq!(r.status, 400, "{q}: {}", r.text());
    }
    assert_ne!(agent.get("/v1/ready?wait=0").status, 400);
}

#[test]
fn an_env_name_given_twice_is_a_400_that_names_it() {
    let agent = Agent::local("strict-env");
    let body = br#"{"command":"echo $A","env":{"A":"first","A":"second"}}"#;
    let r = agent.request("POST", "/v1/exec", Some(TOKEN), Some(body));
    let msg = r.error(400, "bad_request");
    assert!(msg.contains("`A` is given twice"), "{msg}");
}
