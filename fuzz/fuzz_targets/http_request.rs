//! Whole requests, as bytes on a connection, through hyper and the agent's
//! real router (auth, routing, body limits, JSON parsing) in-process.
//! Never a panic, never a 500. Exec slots are zero, so a request that gets
//! through every check is answered 429: nothing is ever spawned.
#![no_main]

use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use lab_agent::App;
use lab_agent::Jobs;
use lab_agent::{Readiness, ReadinessConfig};
use lab_agent::Token;
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Semaphore, watch};

/// The peer every fuzzed request comes from (logged, never trusted).
const PEER: lab_agent::Peer = lab_agent::Peer::Tcp(std::net::SocketAddr::V4(
    std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 40000),
));

pub const TOKEN: &str = "fuzz-token-0123456789-abcdefghijklmnopqrstu";

struct World {
    rt: tokio::runtime::Runtime,
    app: Arc<App>,
    _shutdown: watch::Sender<bool>,
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("lab-agent-fuzz-http-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("state")).unwrap();
        std::fs::write(
            dir.join("state/setup.json"),
            r#"{"state":"succeeded","started_at":"x","exit_code":0}"#,
        )
        .unwrap();
        let token_file = dir.join("token");
        std::fs::write(&token_file, TOKEN).unwrap();
        std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let (tx, rx) = watch::channel(false);
        let app = Arc::new(App {
            token: Token::load(&token_file).unwrap(),
            readiness: Readiness::new(ReadinessConfig {
                state_dir: dir.join("state"),
                cloud_init_dir: None,
                agent_runs_setup: false,
                boot_id: None,
                agent_started_ms: None,
                root: "/".into(),
            }),
            exec_slots: Arc::new(Semaphore::new(0)),
            // No queue either: an exec is refused at once, never waits.
            exec_queue: Arc::new(Semaphore::new(0)),
            max_execs: 0,
            output: lab_agent::Budget::new(16 * 1024 * 1024),
            jobs: Jobs::default(),
            started: Instant::now(),
            lab_dir: "/opt/lab".into(),
            rejections: Default::default(),
            shutdown: rx,
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        World {
            rt,
            app,
            _shutdown: tx,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let w = world();
    let app = w.app.clone();
    w.rt.block_on(async move {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let svc = service_fn(move |req| lab_agent::handle(app.clone(), req, PEER));
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(lab_agent::HEADER_READ_TIMEOUT)
            .max_header_size(lab_agent::MAX_HEADER_BYTES);
        let conn = http.serve_connection(TokioIo::new(server), svc);
        let (mut rd, mut wr) = tokio::io::split(client);
        let input = data.to_vec();
        let talk = async move {
            let _ = wr.write_all(&input).await;
            let _ = wr.shutdown().await;
            let mut out = Vec::new();
            let _ = rd.read_to_end(&mut out).await;
            out
        };
        let (_, out) =
            tokio::time::timeout(Duration::from_secs(30), async { tokio::join!(conn, talk) })
                .await
                .expect("a connection that never ends");
        // Every status line the agent wrote: never a 500 (a 5xx other than
        // a version refusal would be the agent's fault).
        let text = String::from_utf8_lossy(&out);
        for line in text.split("\r\n").filter(|l| l.starts_with("HTTP/1.1 ")) {
            let status: u16 = line[9..12].parse().unwrap_or(0);
            assert!(
                status < 500 || status == 505,
                "{line} for {:?}",
                String::from_utf8_lossy(data)
            );
        }
    });
});
