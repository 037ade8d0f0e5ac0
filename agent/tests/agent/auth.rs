use crate::support::*;

#[test]
pub(crate) fn every_path_and_method_needs_the_token_and_401_reveals_nothing() {
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
pub(crate) fn the_token_never_reaches_logs_or_children() {
    let mut agent = Agent::local("auth-leak");
    // A wrong token that shares a long prefix with the right one, and the
    // right one: neither may be logged.
    agent.request("GET", "/v1/ready", Some(&TOKEN[..40]), None);
    let out =
        agent.run(serde_json::json!({"command": "env; cat /proc/$PPID/cmdline | tr '\\0' ' '"}));
    let stdout = out["stdout"].as_str().unwrap();
    assert!(!stdout.contains(TOKEN), "child saw the token: {stdout}");
    assert!(!stdout.contains("test-token"), "{stdout}");
    // Nor in the agent's own argv.
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", agent.child.id())).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains(&TOKEN[..20]));
    // 401s are summarised (at the latest when the agent stops).
    agent.signal("TERM");
    agent.wait_exit(20);
    let log = agent.log();
    assert!(log.contains("unauthorized=1 "), "{log}");
    assert!(!log.contains(&TOKEN[..20]), "token in log: {log}");
}

/// Wrong tokens of every length, case and encoding: prefixes and
/// extensions, each byte changed, each letter's case flipped, the token
/// base64'd, hex'd, percent-encoded, quoted, in look-alike Unicode, with
/// control bytes. Each is checked in-process (`Token::verify_header`) and
/// over HTTP (where hyper may refuse the header itself: 400).
fn wrong_tokens() -> Vec<Vec<u8>> {
    let t = TOKEN.as_bytes();
    let mut v: Vec<Vec<u8>> = Vec::new();
    for len in 0..t.len() {
        v.push(t[..len].to_vec()); // every shorter prefix
        v.push(t[t.len() - len..].to_vec()); // every shorter suffix
    }
    for extra in 1..=t.len() + 5 {
        let mut longer = t.to_vec();
        longer.extend(std::iter::repeat_n(b'a', extra));
        v.push(longer);
        let mut x = vec![b'x'; extra];
        x.extend_from_slice(t);
        v.push(x);
    }
    for len in 0..=100 {
        v.push(vec![b'A'; len]);
    }
    for i in 0..t.len() {
        let mut flipped = t.to_vec();
        if flipped[i].is_ascii_alphabetic() {
            flipped[i] ^= 0x20; // case
            v.push(flipped.clone());
        }
        let mut changed = t.to_vec();
        changed[i] = if changed[i] == b'~' {
            b'!'
        } else {
            changed[i] + 1
        };
        v.push(changed);
        let mut dropped = t.to_vec();
        dropped.remove(i);
        v.push(dropped);
    }
    v.push(TOKEN.to_uppercase().into_bytes());
    v.push(TOKEN.to_lowercase().replace('-', "_").into_bytes());
    let b64 = |bytes: &[u8], alphabet: &[u8; 64], pad: bool| {
        let mut out = Vec::new();
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, &b)| n | (b as u32) << (16 - 8 * i));
            for i in 0..=chunk.len() {
                out.push(alphabet[(n >> (18 - 6 * i) & 63) as usize]);
            }
            if pad {
                out.extend(std::iter::repeat_n(b'=', 3 - chunk.len()));
            }
        }
        out
    };
    let std_alpha = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let url_alpha = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    v.push(b64(t, std_alpha, true));
    v.push(b64(t, url_alpha, false));
    v.push(
        t.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
            .into_bytes(),
    );
    v.push(
        t.iter()
            .map(|b| format!("%{b:02X}"))
            .collect::<String>()
            .into_bytes(),
    );
    v.push(TOKEN.replace('-', "%2D").into_bytes());
    v.push(format!("\"{TOKEN}\"").into_bytes());
    v.push(format!("'{TOKEN}'").into_bytes());
    v.push(format!("<{TOKEN}>").into_bytes());
    v.push(format!("{TOKEN},{TOKEN}").into_bytes());
    v.push(format!("{TOKEN}\t").into_bytes());
    v.push(format!("\t{TOKEN}").into_bytes());
    v.push(TOKEN.replace('a', "\u{430}").into_bytes()); // Cyrillic a
    v.push(
        TOKEN
            .chars()
            .map(|c| {
                char::from_u32(c as u32 + 0xFEE0)
                    .filter(|_| c.is_ascii_graphic())
                    .unwrap_or(c)
            })
            .collect::<String>()
            .into_bytes(), // fullwidth forms
    );
    for bad in [b'\0', b'\x01', b'\x7f', b'\xff', b'\x80'] {
        let mut with = t.to_vec();
        with.insert(t.len() / 2, bad);
        v.push(with);
        let mut replaced = t.to_vec();
        replaced[t.len() - 1] = bad;
        v.push(replaced);
    }
    v.retain(|w| w.as_slice() != t);
    v
}

#[test]
fn wrong_tokens_of_every_length_case_and_encoding_are_refused() {
    let agent = Agent::local("auth-wrong");
    let token = lab_agent::Token::load(&agent.dir.join("token")).unwrap();
    let wrong = wrong_tokens();
    let mut over_http = 0;
    for guess in &wrong {
        let mut header = b"Bearer ".to_vec();
        header.extend_from_slice(guess);
        assert!(
            !token.verify_header(Some(&header)),
            "accepted in-process: {:?}",
            String::from_utf8_lossy(guess)
        );
        // Trailing whitespace is not part of a header value on the wire
        // (RFC 9110 5.5: the parser strips it), so that one is the right
        // token over HTTP.
        if guess.last().is_some_and(|b| b.is_ascii_whitespace()) {
            continue;
        }
        let mut raw =
            b"GET /v1/info HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: ".to_vec();
        raw.extend_from_slice(&header);
        raw.extend_from_slice(b"\r\n\r\n");
        if let Some(r) = agent.raw(&raw) {
            assert!(
                r.status == 401 || r.status == 400,
                "{:?} over HTTP: {}",
                String::from_utf8_lossy(guess),
                r.status
            );
        }
        over_http += 1;
    }
    eprintln!(
        "wrong tokens: {} in-process, {over_http} over HTTP",
        wrong.len()
    );
    assert!(wrong.len() > 400);
    // And the right one still works, so the refusals meant something.
    assert_eq!(agent.get("/v1/info").status, 200);
}
