//! A generated corpus of hostile requests: malformed HTTP and malformed
//! JSON, hand-picked shapes plus seeded random mutations of valid requests.
//! Deterministic for a seed (`LAB_AGENT_CORPUS_SEED` picks another one).
//!
//! No input may make the agent run a real command: exec bodies name a user
//! that does not exist (a 400 before anything is spawned) or a command that
//! does nothing, and a mutation that happens to parse is checked by the test.

use crate::support::TOKEN;

/// A user name no guest has: an exec naming it is refused before spawning.
pub const NO_USER: &str = "no-such-user-hostile";

/// What the agent must do with an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Malformed: every response is 4xx (or the connection just closes).
    Reject,
    /// A JSON body the exec parser must refuse: exactly 400 (413 if large).
    BadJson,
    /// A random mutation: anything but a 5xx, and never a panic.
    NoServerError,
}

#[derive(Debug, Clone)]
pub struct Input {
    pub name: String,
    pub bytes: Vec<u8>,
    pub expect: Expect,
}

/// xorshift64*: small, seeded, good enough to pick mutations.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

fn auth() -> String {
    format!("Authorization: Bearer {TOKEN}\r\n")
}

/// A request with a correct head around `body`.
pub fn exec_request(body: &[u8]) -> Vec<u8> {
    let mut v = format!(
        "POST /v1/exec HTTP/1.1\r\nHost: x\r\n{}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        auth(),
        body.len()
    )
    .into_bytes();
    v.extend_from_slice(body);
    v
}

fn input(name: impl Into<String>, bytes: impl Into<Vec<u8>>, expect: Expect) -> Input {
    Input {
        name: name.into(),
        bytes: bytes.into(),
        expect,
    }
}

/// Malformed HTTP: request lines, headers, framing, chunked encoding,
/// truncation, pipelining.
pub fn http_cases() -> Vec<Input> {
    use Expect::Reject;
    let a = auth();
    let mut v = Vec::new();

    // Request lines.
    let lines: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"\r\n".to_vec(),
        b"GET".to_vec(),
        b"GET /v1/ready".to_vec(),
        b"GET /v1/ready HTTP/1.1 extra".to_vec(),
        b"GET  /v1/ready HTTP/1.1".to_vec(),
        b"GET /v1/ready  HTTP/1.1".to_vec(),
        b" GET /v1/ready HTTP/1.1".to_vec(),
        b"GET /v1/ready HTTP/9.9".to_vec(),
        b"GET /v1/ready HTTP/2.0".to_vec(),
        b"GET /v1/ready HTTP/1.10".to_vec(),
        b"GET /v1/ready HTTX/1.1".to_vec(),
        b"GET /v1/ready http/1.1".to_vec(),
        b"GET /v1/re ady HTTP/1.1".to_vec(),
        b"GET /v1/ready\x00 HTTP/1.1".to_vec(),
        b"GET /v1/\xff\xfe HTTP/1.1".to_vec(),
        b"GET v1/ready HTTP/1.1".to_vec(),
        b"G\x00T /v1/ready HTTP/1.1".to_vec(),
        b"G(T /v1/ready HTTP/1.1".to_vec(),
        b"PRI * HTTP/2.0\r\n\r\nSM".to_vec(),
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03".to_vec(),
        format!("{} /v1/ready HTTP/1.1", "G".repeat(20_000)).into_bytes(),
        format!("GET /{} HTTP/1.1", "a".repeat(70_000)).into_bytes(),
        format!("GET /v1/ready?{} HTTP/1.1", "wait=1&".repeat(3000)).into_bytes(),
    ];
    for (i, line) in lines.into_iter().enumerate() {
        let mut bytes = line;
        bytes.extend_from_slice(format!("\r\nHost: x\r\n{a}\r\n").as_bytes());
        v.push(input(format!("request line {i}"), bytes, Reject));
    }
    // Paths and queries that parse but must not reach anything: with the
    // token they are 400/404/405, without it 401.
    for (i, target) in [
        "/v1/ready?wait=-1",
        "/v1/ready?wait=99999999999999999999999",
        "/v1/ready?wait=1e3",
        "/v1/ready?wait=%31",
        "/v1/ready?wait=1&wait=61",
        "/v1/ready?%00=1",
        "/v1/ready?wait=\u{661}",
        "/v1/ready/",
        "/v1//ready",
        "/v1/./ready",
        "/v1/%72eady",
        "/V1/READY",
        "/v1/ready%00",
        "//v1/ready",
        "/../../etc/passwd",
        "*",
        "http://x/v1/nope",
        "/v1/exec?x=1",
    ]
    .iter()
    .enumerate()
    {
        v.push(input(
            format!("target {i} {target}"),
            format!("GET {target} HTTP/1.1\r\nHost: x\r\n{a}\r\n"),
            Reject,
        ));
        v.push(input(
            format!("target {i} {target} without a token"),
            format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n"),
            Reject,
        ));
    }
    for method in [
        "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT", "HEAD", "BREW", "get",
    ] {
        for path in ["/v1/exec", "/v1/info"] {
            v.push(input(
                format!("{method} {path}"),
                format!("{method} {path} HTTP/1.1\r\nHost: x\r\n{a}Content-Length: 0\r\n\r\n"),
                Reject,
            ));
        }
    }

    // Headers.
    let head = |headers: &str| format!("POST /v1/exec HTTP/1.1\r\nHost: x\r\n{a}{headers}\r\n");
    let body = br#"{"command":"true","user":"no-such-user-hostile"}"#;
    let framings: Vec<(&str, String)> = vec![
        ("huge header", format!("X-Big: {}\r\n", "b".repeat(40_000))),
        (
            "many headers",
            (0..2000).map(|i| format!("X-{i}: v\r\n")).collect(),
        ),
        ("header name with space", "Bad Header: x\r\n".into()),
        ("header without colon", "NoColon\r\n".into()),
        ("empty header name", ": x\r\n".into()),
        ("NUL in header value", "X-A: a\0b\r\n".into()),
        ("CR alone", "X-A: a\rb\r\n".into()),
        ("obs-fold", "X-A: a\r\n  continued\r\n".into()),
        ("non-token name", "X(A): 1\r\n".into()),
        ("utf-8 name", "X-\u{e9}: 1\r\n".into()),
        (
            "two content-lengths",
            "Content-Length: 5\r\nContent-Length: 6\r\n".into(),
        ),
        ("content-length list", "Content-Length: 5, 6\r\n".into()),
        ("negative content-length", "Content-Length: -1\r\n".into()),
        ("signed content-length", "Content-Length: +5\r\n".into()),
        ("hex content-length", "Content-Length: 0x10\r\n".into()),
        (
            "overflowing content-length",
            "Content-Length: 99999999999999999999999\r\n".into(),
        ),
        (
            "content-length over the body limit",
            "Content-Length: 1048577\r\n".into(),
        ),
        ("content-length and chunked", "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n".into()),
        ("gzip transfer-encoding", "Transfer-Encoding: gzip\r\n".into()),
        ("chunked twice", "Transfer-Encoding: chunked, chunked\r\n".into()),
        ("chunked not last", "Transfer-Encoding: chunked, identity\r\n".into()),
        ("bogus transfer-encoding", "Transfer-Encoding: \x01\r\n".into()),
        ("expect 100-continue", "Expect: 100-continue\r\nContent-Length: 10\r\n".into()),
        ("bogus expect", "Expect: 200-ok\r\nContent-Length: 10\r\n".into()),
        ("upgrade h2c", "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n".into()),
        ("upgrade websocket", "Connection: Upgrade\r\nUpgrade: websocket\r\n".into()),
        ("lf line endings", "X-A: 1\nX-B: 2\n".into()),
    ];
    for (name, headers) in &framings {
        let mut bytes = head(headers).into_bytes();
        bytes.extend_from_slice(b"abc");
        v.push(input(format!("header: {name}"), bytes, Reject));
    }
    // Authorization itself, malformed.
    for (i, value) in [
        "Bearer",
        "Bearer ",
        "Bearer\t",
        "Bearer \0",
        "Bearer \u{ff}\u{fe}",
        "Bearer \"x\"",
        "bearer,bearer",
        "Bearer a b c",
    ]
    .iter()
    .enumerate()
    {
        v.push(input(
            format!("authorization {i}"),
            format!("GET /v1/info HTTP/1.1\r\nHost: x\r\nAuthorization: {value}\r\n\r\n"),
            Reject,
        ));
    }
    v.push(input(
        "two authorization headers, wrong first",
        format!("GET /v1/info HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n{a}\r\n"),
        Reject,
    ));
    v.push(input(
        "two authorization headers, right first",
        format!("GET /v1/info HTTP/1.1\r\nHost: x\r\n{a}Authorization: Bearer wrong\r\n\r\n"),
        Reject,
    ));

    // Chunked bodies.
    let chunked_head =
        format!("POST /v1/exec HTTP/1.1\r\nHost: x\r\n{a}Transfer-Encoding: chunked\r\n\r\n");
    for (name, chunks) in [
        ("bad hex", "zz\r\nabc\r\n0\r\n\r\n".to_string()),
        ("negative size", "-5\r\nabc\r\n0\r\n\r\n".into()),
        (
            "size overflow",
            "ffffffffffffffffffff\r\nabc\r\n0\r\n\r\n".into(),
        ),
        ("size larger than data", "100\r\nabc\r\n".into()),
        ("missing crlf after data", "3\r\nabcdef0\r\n\r\n".into()),
        ("missing final chunk", "3\r\nabc\r\n".into()),
        (
            "extension garbage",
            "3;\x01=\x02\r\nabc\r\n0\r\n\r\n".into(),
        ),
        (
            "huge extension",
            format!("3;{}\r\nabc\r\n0\r\n\r\n", "e".repeat(100_000)),
        ),
        (
            "trailer garbage",
            "3\r\nabc\r\n0\r\nBad Trailer\r\n\r\n".into(),
        ),
        ("size with spaces", "3 \r\nabc\r\n0\r\n\r\n".into()),
        ("lf only", "3\nabc\n0\n\n".into()),
        ("empty size", "\r\nabc\r\n0\r\n\r\n".into()),
        (
            "many tiny chunks past the limit",
            "1\r\nx\r\n".repeat(300_000) + "0\r\n\r\n",
        ),
    ] {
        v.push(input(
            format!("chunked: {name}"),
            format!("{chunked_head}{chunks}"),
            Reject,
        ));
    }

    // Truncated bodies: fewer bytes than announced, then EOF.
    for (len, sent) in [(10, 3), (1000, 999), (1_048_576, 100), (2, 0)] {
        let mut bytes =
            format!("POST /v1/exec HTTP/1.1\r\nHost: x\r\n{a}Content-Length: {len}\r\n\r\n")
                .into_bytes();
        bytes.extend(std::iter::repeat_n(b'{', sent));
        v.push(input(format!("truncated body {sent}/{len}"), bytes, Reject));
    }
    // Truncated heads.
    for cut in [1, 5, 20, 40] {
        let full = format!("GET /v1/info HTTP/1.1\r\nHost: x\r\n{a}\r\n");
        v.push(input(
            format!("truncated head at {cut}"),
            full.as_bytes()[..cut].to_vec(),
            Reject,
        ));
    }

    // Pipelining: valid requests, then garbage on the same connection. The
    // valid ones are answered (2xx/4xx), the garbage is refused or closed.
    let ok = format!("GET /v1/info HTTP/1.1\r\nHost: x\r\n{a}\r\n");
    let bad_exec = exec_request(body);
    for (i, junk) in [
        &b"GARBAGE\r\n\r\n"[..],
        b"\x00\x00\x00\x00",
        b"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        b"POST /v1/exec HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ]
    .iter()
    .enumerate()
    {
        let mut bytes = ok.clone().into_bytes();
        bytes.extend_from_slice(&bad_exec);
        bytes.extend_from_slice(ok.as_bytes());
        bytes.extend_from_slice(junk);
        bytes.extend_from_slice(ok.as_bytes());
        v.push(input(
            format!("pipelined garbage {i}"),
            bytes,
            Expect::NoServerError,
        ));
    }
    let mut many = Vec::new();
    for _ in 0..200 {
        many.extend_from_slice(ok.as_bytes());
    }
    many.extend_from_slice(b"\xff\xff\xff\r\n\r\n");
    v.push(input(
        "200 pipelined, then garbage",
        many,
        Expect::NoServerError,
    ));
    v
}

/// Malformed JSON bodies for `POST /v1/exec`, all of which the parser must
/// refuse with 400 (or 413 when over the body limit).
pub fn json_cases() -> Vec<Input> {
    let u = NO_USER;
    let mut bodies: Vec<(String, Vec<u8>)> = Vec::new();
    let mut add = |name: &str, body: Vec<u8>| bodies.push((name.to_owned(), body));

    // Wrong types, field by field.
    let wrong: &[(&str, &[&str])] = &[
        (
            "command",
            &[
                "1",
                "1.5",
                "true",
                "null",
                "[]",
                "[\"true\"]",
                "{}",
                "{\"a\":1}",
            ],
        ),
        (
            "timeout_secs",
            &[
                "\"5\"",
                "-1",
                "1.5",
                "1e3",
                "true",
                "[]",
                "{}",
                "18446744073709551616",
                "1e400",
                "0",
                "3601",
                "-0.0",
            ],
        ),
        ("user", &["1", "true", "[]", "{}", "null"]),
        ("cwd", &["1", "true", "[]", "{}"]),
        (
            "env",
            &[
                "[]",
                "\"A=B\"",
                "1",
                "{\"A\":1}",
                "{\"A\":null}",
                "{\"A\":[]}",
                "{\"A\":{}}",
                "true",
            ],
        ),
        ("stdin", &["1", "true", "[]", "{}"]),
        (
            "max_output_bytes",
            &[
                "-1",
                "1.5",
                "\"10\"",
                "[]",
                "16777217",
                "18446744073709551616",
                "true",
                "null",
            ],
        ),
    ];
    for (field, values) in wrong {
        for value in *values {
            let body = if *field == "command" {
                format!(r#"{{"command":{value},"user":"{u}"}}"#)
            } else {
                format!(r#"{{"command":"true","user":"{u}","{field}":{value}}}"#)
            };
            add(&format!("{field}={value}"), body.into_bytes());
        }
    }
    // Not an object at all.
    for doc in [
        "",
        " ",
        "null",
        "true",
        "0",
        "\"command\"",
        "[]",
        "[{\"command\":\"true\"}]",
        "{",
        "}",
        "{\"command\"",
        "{\"command\":",
        "{\"command\":\"true\"",
        "{'command':'true'}",
        "{command:\"true\"}",
        "{\"command\":\"true\",}",
        "{,\"command\":\"true\"}",
        "NaN",
        "Infinity",
        "-",
        "\u{feff}{\"command\":\"true\"}",
        "{\"command\":\"true\"} {\"command\":\"true\"}",
        "{\"command\":\"true\"}x",
        "/*c*/{\"command\":\"true\"}",
        "{\"command\":\"tr\\ue\"}",
        "{\"command\":\"\\ud800\"}",
        "{\"command\":\"\\udc00x\"}",
        "{\"command\":\"\\u12\"}",
        "{\"command\":\"a\nb\"}",
        "{\"command\":\"a\tb\",\"user\":5}",
    ] {
        add(&format!("document {doc:?}"), doc.as_bytes().to_vec());
    }
    // Unknown and duplicate fields.
    for extra in [
        "\"timeout\":5",
        "\"Command\":\"x\"",
        "\"command \":\"x\"",
        "\"\":1",
        "\"\\u0000\":1",
        "\"user\":\"root\"",
        "\"command\":\"false\"",
        "\"args\":[]",
    ] {
        add(
            &format!("extra {extra}"),
            format!(r#"{{"command":"true","user":"{u}",{extra}}}"#).into_bytes(),
        );
    }
    // Deep nesting, in every place a value can go.
    for depth in [129, 1000, 100_000] {
        let open = "[".repeat(depth);
        let close = "]".repeat(depth);
        add(
            &format!("array depth {depth}"),
            format!("{open}{close}").into_bytes(),
        );
        add(
            &format!("unknown field depth {depth}"),
            format!(r#"{{"command":"true","user":"{u}","x":{open}{close}}}"#).into_bytes(),
        );
        add(
            &format!("env depth {depth}"),
            format!(r#"{{"command":"true","user":"{u}","env":{{"A":{open}{close}}}}}"#)
                .into_bytes(),
        );
        let objs = "{\"a\":".repeat(depth) + "1" + &"}".repeat(depth);
        add(&format!("object depth {depth}"), objs.into_bytes());
    }
    // Huge strings and numbers.
    add(
        "command over one execve argument",
        format!(r#"{{"command":"{}","user":"{u}"}}"#, "x".repeat(200_000)).into_bytes(),
    );
    add(
        "huge unknown key",
        format!(
            r#"{{"command":"true","user":"{u}","{}":1}}"#,
            "k".repeat(500_000)
        )
        .into_bytes(),
    );
    add(
        "huge number",
        format!(
            r#"{{"command":"true","user":"{u}","timeout_secs":{}}}"#,
            "9".repeat(500_000)
        )
        .into_bytes(),
    );
    add(
        "many env entries for a bad user",
        format!(
            r#"{{"command":"true","user":"{u}","env":{{{}}}}}"#,
            (0..20_000)
                .map(|i| format!("\"K{i}\":\"v\""))
                .collect::<Vec<_>>()
                .join(",")
        )
        .into_bytes(),
    );
    add(
        "body over the limit",
        format!(r#"{{"command":"{}"}}"#, "x".repeat(1_100_000)).into_bytes(),
    );
    // Invalid UTF-8, in strings and outside them.
    for (name, bytes) in [
        ("lone continuation", &b"{\"command\":\"\x80\"}"[..]),
        ("overlong slash", b"{\"command\":\"\xc0\xaf\"}"),
        ("surrogate bytes", b"{\"command\":\"\xed\xa0\x80\"}"),
        ("truncated sequence", b"{\"command\":\"\xe2\x82\"}"),
        ("ff", b"{\"command\":\"true\xff\"}"),
        ("in a key", b"{\"comm\xffand\":\"true\"}"),
        ("outside strings", b"{\"command\":\"true\"\xff}"),
        ("utf-16", b"\xff\xfe{\x00\"\x00c\x00"),
        ("nul bytes", b"{\"command\":\"true\",\x00\"user\":1}"),
    ] {
        add(&format!("invalid utf-8: {name}"), bytes.to_vec());
    }
    // Values that parse but are refused by validation.
    for body in [
        r#"{"command":""}"#.to_string(),
        r#"{"command":"   \n\t "}"#.into(),
        r#"{"command":"a\u0000b"}"#.into(),
        format!(r#"{{"command":"true","user":"{u}"}}"#),
        r#"{"command":"true","user":""}"#.into(),
        r#"{"command":"true","user":"a/b"}"#.into(),
        r#"{"command":"true","user":"a\u0000b"}"#.into(),
        r#"{"command":"true","user":"no-such","cwd":"relative"}"#.into(),
        r#"{"command":"true","cwd":"/no/such/dir/hostile"}"#.into(),
        r#"{"command":"true","cwd":"/etc/passwd"}"#.into(),
        r#"{"command":"true","cwd":"/tmp\u0000x"}"#.into(),
        r#"{"command":"true","env":{"":"x"}}"#.into(),
        r#"{"command":"true","env":{"A=B":"x"}}"#.into(),
        r#"{"command":"true","env":{"A\u0000":"x"}}"#.into(),
        r#"{"command":"true","env":{"A":"x\u0000"}}"#.into(),
    ] {
        add(&format!("refused value {body}"), body.into_bytes());
    }
    bodies
        .into_iter()
        .map(|(name, body)| {
            input(
                format!("json: {name}"),
                exec_request(&body),
                Expect::BadJson,
            )
        })
        .collect()
}

/// One random mutation of `base`: flip, insert, delete, duplicate, or
/// splice in a token that parsers find interesting.
pub fn mutate(rng: &mut Rng, base: &[u8]) -> Vec<u8> {
    const SPICE: &[&[u8]] = &[
        b"\r\n",
        b"\r\n\r\n",
        b"\n",
        b"\r",
        b"\0",
        b":",
        b" ",
        b"\t",
        b"\"",
        b"\\",
        b"{",
        b"}",
        b"[",
        b"]",
        b",",
        b"%",
        b"%00",
        b"\xff",
        b"\xc0\x80",
        b"\xed\xa0\x80",
        b"9999999999999999999999",
        b"-1",
        b"chunked",
        b"Transfer-Encoding: chunked\r\n",
        b"Content-Length: 0\r\n",
        b"Content-Length: 99999999\r\n",
        b"HTTP/1.1",
        b"\\u0000",
        b"\\ud800",
        b"null",
        b"1e999",
    ];
    let mut v = base.to_vec();
    for _ in 0..1 + rng.below(4) {
        if v.is_empty() {
            v.push(0);
        }
        let at = rng.below(v.len() + 1);
        match rng.below(6) {
            0 => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(v.len());
                v[i] = rng.next() as u8;
            }
            2 => {
                let end = (at + 1 + rng.below(16)).min(v.len());
                v.drain(at.min(v.len())..end);
            }
            3 => {
                let spice = rng.pick(SPICE);
                v.splice(at..at, spice.iter().copied());
            }
            4 => {
                let start = rng.below(v.len());
                let end = (start + 1 + rng.below(64)).min(v.len());
                let piece = v[start..end].to_vec();
                let times = 1 + rng.below(50);
                for _ in 0..times {
                    v.splice(at..at, piece.iter().copied());
                }
            }
            _ => {
                v.truncate(at);
            }
        }
    }
    v
}

/// Valid requests to mutate. Exec bodies only ever run `true`, or name a
/// user that does not exist.
pub fn bases() -> Vec<Vec<u8>> {
    let a = auth();
    vec![
        format!("GET /v1/ready HTTP/1.1\r\nHost: x\r\n{a}\r\n").into_bytes(),
        format!("GET /v1/ready?wait=0 HTTP/1.1\r\nHost: x\r\n{a}Connection: keep-alive\r\n\r\n")
            .into_bytes(),
        format!("GET /v1/info HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n{a}\r\n").into_bytes(),
        exec_request(
            format!(
                r#"{{"command":"true","timeout_secs":5,"user":"{NO_USER}","cwd":null,"env":{{"A":"b"}},"stdin":"x","max_output_bytes":10}}"#
            )
            .as_bytes(),
        ),
        // HOME without a profile: a login shell that starts in milliseconds.
        exec_request(
            br#"{"command":"true","timeout_secs":5,"max_output_bytes":10,"env":{"HOME":"/nonexistent-hostile"}}"#,
        ),
        format!(
            "POST /v1/exec HTTP/1.1\r\nHost: x\r\n{a}Transfer-Encoding: chunked\r\n\r\n10\r\n{{\"command\":\"tru\r\n4\r\ne\"}}\r\n0\r\n\r\n"
        )
        .into_bytes(),
    ]
}

/// Mutations of JSON bodies alone, under a correct head.
pub fn json_bases() -> Vec<Vec<u8>> {
    vec![
        format!(r#"{{"command":"true","user":"{NO_USER}","env":{{"K":"v"}},"stdin":"in","cwd":"/","timeout_secs":1,"max_output_bytes":0}}"#).into_bytes(),
        format!(r#"{{"user":"{NO_USER}","command":"true"}}"#).into_bytes(),
    ]
}
