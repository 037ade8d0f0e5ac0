//! `labctl timeline [FILE…]`: where many VMs' preparation time went — per
//! phase (kernel to agent start, each cloud-init stage, setup, kernel to
//! ready) the count, median, p90 and max over the `/v1/ready` answers a
//! backend logged (or `labctl wait --json` outputs). The statistics are the
//! client library's ([`lab_agent_client::distribution`]), so a backend
//! computing them itself gets the same numbers.

use super::exit::{Exit, Failure};
use super::life::secs;
use lab_agent_client::{Distribution, distribution};
use lab_agent_proto::lifecycle::Timeline;
use serde::Deserialize as _;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct TimelineArgs {
    /// Files of `/v1/ready` answers or `labctl wait --json` outputs, one
    /// JSON document per line or a JSON array; `-` is stdin [default: stdin]
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Print the distribution as JSON on stdout
    #[arg(long)]
    pub json: bool,
}

/// What was read: the timelines, and how many answers had none.
#[derive(Debug, Default)]
struct Gathered {
    answers: usize,
    timelines: Vec<Timeline>,
}

pub fn run(args: &TimelineArgs) -> Result<Exit, Failure> {
    let stdin = [PathBuf::from("-")];
    let files = if args.files.is_empty() {
        &stdin[..]
    } else {
        &args.files[..]
    };
    let mut read = Gathered::default();
    for file in files {
        let (name, text) = read_source(file)?;
        collect(&name, &text, &mut read)?;
    }
    let without = read.answers - read.timelines.len();
    let d = distribution(&read.timelines);
    if without > 0 {
        eprintln!(
            "note: {without} of {} answers carry no timeline (an agent that predates it, or a VM \
             that never answered): skipped",
            read.answers
        );
    }
    if read.answers == 0 {
        eprintln!("note: no answers read");
    }
    // A reader that stops early (`| head`) is not an error.
    let _ = if args.json {
        // Numbers and this module's own names: no guest text to escape.
        writeln!(std::io::stdout(), "{}", to_json(&d, read.answers))
    } else {
        write!(std::io::stdout(), "{}", table(&d))
    };
    Ok(Exit::Success)
}

/// `(name to show, content)` of a FILE argument; `-` is stdin.
fn read_source(file: &Path) -> Result<(String, String), Failure> {
    let unreadable = |name: &str, e: std::io::Error| {
        Failure::usage(format!("failed to read `{name}`"))
            .with_source(e)
            .hint("give files of logged `/v1/ready` answers, or `-` for stdin")
    };
    if file == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| unreadable("stdin", e))?;
        return Ok(("stdin".to_owned(), text));
    }
    let name = file.display().to_string();
    let text = std::fs::read_to_string(file).map_err(|e| unreadable(&name, e))?;
    Ok((name, text))
}

/// Every answer in `text`: a stream of JSON documents (one per line, or
/// pretty-printed), each an answer, a `labctl wait --json` output (its
/// VMs' answers) or an array of either.
fn collect(name: &str, text: &str, read: &mut Gathered) -> Result<(), Failure> {
    let docs = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    for (doc, index) in docs.zip(1..) {
        let doc = doc.map_err(|e| {
            Failure::usage(format!("`{name}` is not JSON at line {}", e.line()))
                .with_source(e)
                .hint(
                    "give `/v1/ready` answers or `labctl wait --json` outputs, one per line or \
                     as a JSON array",
                )
        })?;
        let at = |what: &str| format!("`{name}`, document {index}: {what}");
        answers(&doc, read).map_err(|what| Failure::usage(at(&what)))?;
    }
    Ok(())
}

/// The answers in one document, into `read`; `Err` says what is wrong.
fn answers(doc: &Value, read: &mut Gathered) -> Result<(), String> {
    match doc {
        Value::Array(items) => items.iter().try_for_each(|item| answers(item, read)),
        Value::Object(o) => match o.get("vms") {
            // `labctl wait --json`: each VM's last answer, `null` for a VM
            // that never answered (counted: it has no timeline).
            Some(Value::Array(vms)) => vms.iter().try_for_each(|vm| match vm.get("ready") {
                None | Some(Value::Null) => {
                    read.answers += 1;
                    Ok(())
                }
                Some(answer) => answers(answer, read),
            }),
            _ => {
                read.answers += 1;
                match o.get("timeline") {
                    None | Some(Value::Null) => Ok(()),
                    Some(t) => {
                        let t = Timeline::deserialize(t)
                            .map_err(|e| format!("the timeline is malformed: {e}"))?;
                        read.timelines.push(t);
                        Ok(())
                    }
                }
            }
        },
        other => Err(format!(
            "a {} is no `/v1/ready` answer",
            match other {
                Value::String(_) => "string",
                Value::Number(_) => "number",
                Value::Bool(_) => "boolean",
                _ => "null",
            }
        )),
    }
}

/// `{"answers","timelines","without_timeline","phases":[{"phase","count",
/// "median_secs","p90_secs","max_secs"}]}`; a phase no timeline has is
/// there with count 0 and nulls.
fn to_json(d: &Distribution, answers: usize) -> Value {
    let phases: Vec<Value> = d
        .phases
        .iter()
        .map(|s| {
            json!({
                "phase": s.phase.name(),
                "count": s.count,
                "median_secs": s.median_secs,
                "p90_secs": s.p90_secs,
                "max_secs": s.max_secs,
            })
        })
        .collect();
    json!({
        "answers": answers,
        "timelines": d.timelines,
        "without_timeline": answers - d.timelines,
        "phases": phases,
    })
}

/// A table for people: a row per phase, in seconds.
fn table(d: &Distribution) -> String {
    let mut out = format!(
        "{:<26} {:>6} {:>9} {:>9} {:>9}\n",
        "phase (seconds)", "count", "median", "p90", "max"
    );
    for s in &d.phases {
        out.push_str(&format!(
            "{:<26} {:>6} {:>9} {:>9} {:>9}\n",
            s.phase.label(),
            s.count,
            secs(s.median_secs),
            secs(s.p90_secs),
            secs(s.max_secs)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Gathered, Failure> {
        let mut r = Gathered::default();
        collect("t", text, &mut r)?;
        Ok(r)
    }

    #[test]
    fn lines_arrays_and_wait_outputs() {
        let answer = |ready: f64| {
            format!(
                r#"{{"state":"ready","cloud_init":{{"done":true}},"setup":{{"state":"succeeded"}},"timeline":{{"ready_secs":{ready}}}}}"#
            )
        };
        let old = r#"{"state":"ready","cloud_init":{"done":true},"setup":{"state":"succeeded"}}"#;
        let wait = format!(
            r#"{{"ready":false,"vms":[{{"url":"u","ready":{}}},{{"url":"v","ready":null}}]}}"#,
            answer(3.0)
        );
        let text = format!(
            "{}\n\n{old}\n[{}, {}]\n{wait}\n",
            answer(1.0),
            answer(2.0),
            answer(4.0)
        );
        let r = read(&text).unwrap();
        assert_eq!(r.answers, 6);
        let ready: Vec<_> = r.timelines.iter().map(|t| t.ready_secs.unwrap()).collect();
        assert_eq!(ready, [1.0, 2.0, 4.0, 3.0]);
        let v = to_json(&distribution(&r.timelines), r.answers);
        assert_eq!(v["without_timeline"], 2);
        assert_eq!(v["phases"][6]["phase"], "ready");
        assert_eq!(v["phases"][6]["median_secs"], 2.5);
        assert_eq!(v["phases"][0]["count"], 0);
        assert_eq!(v["phases"][0]["max_secs"], Value::Null);
    }

    #[test]
    fn what_is_not_an_answer_is_named() {
        let e = read("{\"timeline\":{}}\nnot json\n").unwrap_err();
        assert!(
            e.message.contains("`t` is not JSON at line 2"),
            "{}",
            e.message
        );
        assert_eq!(e.exit, Exit::Usage);
        let e = read("{}\n42\n").unwrap_err();
        assert!(
            e.message
                .contains("`t`, document 2: a number is no `/v1/ready` answer"),
            "{}",
            e.message
        );
        let e = read(r#"{"timeline":{"ready_secs":"soon"}}"#).unwrap_err();
        assert!(
            e.message.contains("the timeline is malformed"),
            "{}",
            e.message
        );
    }
}
