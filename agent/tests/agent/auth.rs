use crate::support::*;

#[test]
fn every_path_and_method_needs_the_token_and_401_reveals_nothing() {
    let agent = Agent::local("auth");
    let wrong = format!("{}x", &TOKEN[..TOKEN.len() - 1]);
    let cases: &[(&str, &str, Option<&str>)] = &[
        ("GET", "/v1/ready", None),
        ("GET", "/v1/ready", Some(wrong.as_str())),
        ("POST", "/v1/exec", Some("short")),
        ("GET", "/v1/info", Some("")),
        ("GET", "/no/such/path", None),
        ("DELETE", "/v1/exec", None),
        ("GET", "/", Some(&TOKEN[..TOKEN.len() - 1])),
    ];
    let mut bodies = std::collections::HashSet::new();
    for (method, path, token) in cases {
        let r = agent.request(method, path, *token, None);
        r.error(401, "unauthorized");
        assert_eq!(r.header("www-authenticate"), Some("Bearer"));
        bodies.insert(r.body.clone());
    }
    // The same answer whatever the path: nothing to learn about what exists.
    assert_eq!(bodies.len(), 1);
}

#[test]
fn scheme_variants_and_raw_headers() {
    let agent = Agent::local("auth-raw");
    let ask = |auth: &str| {
        agent
            .raw(format!("GET /v1/info HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: {auth}\r\n\r\n").as_bytes())
            .unwrap()
            .status
    };
    assert_eq!(ask(&format!("Bearer {TOKEN}")), 200);
    assert_eq!(ask(&format!("bearer {TOKEN}")), 200);
    assert_eq!(ask(&format!("Basic {TOKEN}")), 401);
    assert_eq!(ask(&format!("Bearer {}", TOKEN.to_uppercase())), 401);
    assert_eq!(ask(&format!("Bearer {TOKEN}{TOKEN}")), 401);
    assert_eq!(ask(TOKEN), 401);
    // Two Authorization headers: refused whichever comes first.
    let right = format!("Bearer {TOKEN}");
    assert_eq!(ask(&format!("{right}\r\nAuthorization: Bearer wrong")), 401);
    assert_eq!(ask(&format!("Bearer wrong\r\nAuthorization: {right}")), 401);
    assert_eq!(ask(&format!("{right}\r\nAuthorization: {right}")), 401);
}

#[test]
fn the_token_never_reaches_logs_or_children() {
    let agent = Agent::local("auth-leak");
    // A wrong token that shares a long prefix with the right one, and the
    // right one: neither may be logged.
    agent.request("GET", "/v1/ready", Some(&TOKEN[..40]), None);
    let out =
        agent.run(serde_json::json!({"command": "env; cat /proc/$PPID/cmdline | tr '\\0' ' '"}));
    let stdout = out["stdout"].as_str().unwrap();
    assert!(!stdout.contains(TOKEN), "child saw the token: {stdout}");
    assert!(!stdout.contains("test-token"), "{stdout}");
    let log = agent.log();
    assert!(log.contains("status=401"), "{log}");
    assert!(!log.contains(&TOKEN[..20]), "token in log: {log}");
    // Nor in the agent's own argv.
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", agent.child.id())).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains(&TOKEN[..20]));
}
