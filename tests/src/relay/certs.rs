//! A throwaway certificate authority and a server certificate it signed,
//! for 127.0.0.1 and `localhost`, made with the `openssl` command at test
//! time (no crate for it, no key kept): what the stand-in API server
//! presents, and the CA a client is told to trust. A second, unrelated CA
//! is made too, for the client that must refuse the server.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The files, in the folder given.
#[derive(Debug, Clone)]
pub struct Certs {
    /// The CA's certificate (PEM): what `--kube-ca-file` gives.
    pub ca: PathBuf,
    /// Another CA's certificate, which did not sign the server's.
    pub other_ca: PathBuf,
    /// The server's certificate and key (PEM).
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run `openssl` (Debian's `openssl` package)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Makes the certificates in `dir`.
pub fn make(dir: &Path) -> Certs {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    for (name, cn) in [("ca", "stand-in cluster CA"), ("other-ca", "another CA")] {
        let (key, crt) = (format!("{name}.key"), format!("{name}.crt"));
        let subj = format!("/CN={cn}");
        let mut args = vec!["req", "-x509"];
        args.extend(ec);
        args.extend([
            "-keyout",
            &key,
            "-out",
            &crt,
            "-days",
            "2",
            "-subj",
            &subj,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        openssl(dir, &args);
    }
    let mut args = vec!["req"];
    args.extend(ec);
    args.extend([
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=kube-apiserver",
    ]);
    openssl(dir, &args);
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    );
    Certs {
        ca: dir.join("ca.crt"),
        other_ca: dir.join("other-ca.crt"),
        cert: dir.join("server.crt"),
        key: dir.join("server.key"),
    }
}
