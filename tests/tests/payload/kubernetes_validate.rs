//! The Secret against Kubernetes' own schemas (`kubernetes-validate
//! --strict`, cluster version 1.34), and the helpers the other manifests'
//! tests share (`kubevirt_examples.rs`, `labctl_render.rs`).

use crate::support::{TempDir, fixture_lab, labs, run, secret, spec_for, user_data};
use lab_agent_cloudinit::Format;
use lab_agent_tests::pydeps;
use serde_json::Value;
use std::path::Path;
use std::process::Output;

/// `kubernetes-validate --strict -k 1.34.0 FILE` (the platform's cluster
/// version), from the test virtualenv (`tests/pydeps.sh`).
pub(crate) fn kubernetes_validate(file: &Path) -> Output {
    run(
        pydeps::venv_tool("kubernetes-validate")
            .args(["--strict", "-k", "1.34.0"])
            .arg(file),
        pydeps::HINT,
    )
}

pub(crate) fn assert_valid(file: &Path) {
    let out = kubernetes_validate(file);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.contains("passed"),
        "`{}`: kubernetes-validate said:\n{said}",
        file.display()
    );
}

#[test]
fn secrets_pass_strict_validation() {
    for lab in labs() {
        let ud = user_data(&spec_for(&lab));
        for (format, name) in [(Format::Yaml, "secret.yaml"), (Format::Json, "secret.json")] {
            let dir = TempDir::new("k8s");
            assert_valid(&dir.write(name, secret(&ud, format)));
        }
    }
}

/// So that a pass means something: an unknown field fails under `--strict`.
#[test]
fn a_secret_with_an_unknown_field_fails() {
    let ud = user_data(&spec_for(&fixture_lab()));
    let text = secret(&ud, Format::Yaml).replace("type: Opaque", "type: Opaque\nstringdata: {}");
    let dir = TempDir::new("k8s-bad");
    let out = kubernetes_validate(&dir.write("secret.yaml", text));
    assert!(
        !out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// One YAML document as JSON, read by PyYAML (unpacked with cloud-init).
pub(crate) fn load_yaml(path: &Path) -> Value {
    let out = run(
        pydeps::cloud_init_python()
            .args([
                "-c",
                "import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)",
            ])
            .arg(path),
        pydeps::HINT,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every YAML document of `text` as JSON, read by PyYAML.
pub(crate) fn load_yaml_all(text: &str) -> Vec<Value> {
    let dir = TempDir::new("yaml");
    let file = dir.write("all.yaml", text);
    let out = run(
        pydeps::cloud_init_python()
            .args([
                "-c",
                "import json, sys, yaml; json.dump(list(yaml.safe_load_all(open(sys.argv[1]))), sys.stdout)",
            ])
            .arg(&file),
        pydeps::HINT,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
