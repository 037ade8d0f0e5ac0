//! Smoke test of the VM harness: the neutral guest boots under qemu, real
//! cloud-init runs a tiny user-data to the end without errors, the port
//! forward carries HTTP, and ACPI power-off works.
//!
//! It also prints the baseline for the payload's boot cost: qemu start →
//! `final_message` with a minimal user-data (`--nocapture` shows it).
//! `LAB_AGENT_VM_SMOKE_BOOTS=N` boots N times and prints the median.

use std::time::Duration;

use lab_agent_tests::vm::{BootOptions, PowerOff, Vm, VmImage};

/// Generous for TCG on 2 shared cores (a boot takes ~60 s here).
const FINAL_TIMEOUT: Duration = Duration::from_secs(240);

const FINAL: &str = "LAB-AGENT-SMOKE-FINAL";

/// Needles are split in the user-data (`"A-""B"` prints `A-B`) so that only
/// the guest's output can match, never an echo of the config itself.
const USER_DATA: &str = r#"#cloud-config
runcmd:
  - [ sh, -c, 'echo smoke > /root/smoke-marker' ]
  # runcmd runs before result.json exists: a transient unit waits for it,
  # reports it on the serial console, then serves HTTP on the agent's port.
  - - systemd-run
    - --no-block
    - --unit=smoke-report
    - sh
    - -c
    - |
      while [ ! -e /run/cloud-init/result.json ]; do sleep 0.1; done
      {
        echo "SMOKE-RESULT-""BEGIN"
        cat /run/cloud-init/result.json
        echo
        echo "SMOKE-RESULT-""END"
        if [ -f /root/smoke-marker ]; then echo "SMOKE-MARKER-""OK"; fi
      } > /dev/ttyS0 2>&1
      cd /root && exec python3 -m http.server --bind 0.0.0.0 8899
final_message: "LAB-AGENT-SMOKE-FINAL after $UPTIME s (cloud-init $VERSION)"
"#;

#[test]
fn guest_boots_and_cloud_init_finishes_cleanly() {
    let image = VmImage::ensure().expect("the guest image");
    let boots: usize = std::env::var("LAB_AGENT_VM_SMOKE_BOOTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
        .max(1);

    let mut finals = Vec::new();
    for i in 0..boots {
        let vm = Vm::boot(&image, BootOptions::new(format!("vm-boot-{i}"), USER_DATA))
            .expect("qemu starts");

        // slirp accepts TCP at once; the harness must not take that for "up".
        assert!(
            vm.http_get("/", None).is_err(),
            "an HTTP answer before the guest even booted"
        );

        let t_final = vm
            .wait_for_console(FINAL, FINAL_TIMEOUT)
            .unwrap_or_else(|e| panic!("cloud-init did not finish: {e}"));
        let t_result = vm
            .wait_for_console("SMOKE-RESULT-END", Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("result.json was not reported: {e}"));

        let console = vm.console_text();
        let result = between(&console, "SMOKE-RESULT-BEGIN", "SMOKE-RESULT-END")
            .expect("result.json on the console");
        let result: serde_json::Value = serde_json::from_str(result.trim())
            .unwrap_or_else(|e| panic!("result.json is not JSON ({e}): {result:?}"));
        let errors = &result["v1"]["errors"];
        assert_eq!(
            errors,
            &serde_json::json!([]),
            "cloud-init reported errors: {result}"
        );
        let datasource = result["v1"]["datasource"].as_str().unwrap_or_default();
        assert!(datasource.contains("NoCloud"), "datasource {datasource:?}");
        assert!(
            console.contains("SMOKE-MARKER-OK"),
            "runcmd's marker file is missing"
        );

        let (t_http, answer) = vm
            .wait_for_http("/", Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("no HTTP through the port forward: {e}"));
        assert_eq!(answer.status, 200, "{}", answer.raw);

        let off = vm.powerdown(Duration::from_secs(30)).expect("power-off");
        assert!(
            matches!(off, PowerOff::Clean(_)),
            "ACPI power-off was ignored: {off:?}"
        );

        eprintln!(
            "vm_boot[{i}] ({:?}): qemu start → final_message {:.1} s, → result.json on console {:.1} s, \
             → HTTP on the forwarded port {:.1} s; power-off {off:?}",
            vm.accel(),
            t_final.as_secs_f64(),
            t_result.as_secs_f64(),
            t_http.as_secs_f64(),
        );
        finals.push(t_final);
    }

    finals.sort();
    eprintln!(
        "vm_boot: minimal user-data, qemu start → final_message: median {:.1} s over {} boot(s) (all: {:?})",
        finals[finals.len() / 2].as_secs_f64(),
        finals.len(),
        finals
            .iter()
            .map(|d| format!("{:.1}", d.as_secs_f64()))
            .collect::<Vec<_>>(),
    );
}

/// Bad qemu arguments fail fast and say why, instead of hanging a test.
#[test]
fn qemu_failure_is_reported_with_its_stderr() {
    let image = VmImage::ensure().expect("the guest image");
    let mut opts = BootOptions::new("vm-bad-args", "#cloud-config\n");
    opts.extra_qemu_args = vec!["-no-such-option".into()];
    let err = Vm::boot(&image, opts).expect_err("qemu must refuse");
    let msg = err.to_string();
    assert!(msg.contains("no-such-option"), "{msg}");
}

fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = text.find(start)? + start.len();
    let to = from + text[from..].find(end)?;
    Some(&text[from..to])
}
