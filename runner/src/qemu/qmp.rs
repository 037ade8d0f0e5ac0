//! A QEMU Machine Protocol client over the VM's unix socket: one JSON object
//! per line; asynchronous events may arrive between a command and its answer.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use super::QemuError;

/// A connected, capability-negotiated QMP session.
#[derive(Debug)]
pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    /// Events seen while waiting for answers (e.g. `SHUTDOWN`), oldest first.
    pub events: Vec<Value>,
}

impl Qmp {
    /// Connects and leaves capabilities negotiation mode.
    pub fn connect(path: &Path) -> Result<Qmp, QemuError> {
        let err = |message: String| QemuError::Qmp {
            command: "connect".into(),
            message,
        };
        let stream = UnixStream::connect(path)
            .map_err(|e| err(format!("cannot connect to `{}`: {e}", path.display())))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| err(e.to_string()))?;
        let writer = stream.try_clone().map_err(|e| err(e.to_string()))?;
        let mut qmp = Qmp {
            reader: BufReader::new(stream),
            writer,
            events: Vec::new(),
        };
        let greeting = qmp.read_message("greeting")?;
        if greeting.get("QMP").is_none() {
            return Err(err(format!("unexpected greeting {greeting}")));
        }
        qmp.execute("qmp_capabilities", None)?;
        Ok(qmp)
    }

    /// Runs `command` (with optional `arguments`) and returns its `return`
    /// value; a QMP `error` becomes [`QemuError::Qmp`].
    pub fn execute(&mut self, command: &str, arguments: Option<Value>) -> Result<Value, QemuError> {
        let mut request = json!({ "execute": command });
        if let Some(args) = arguments {
            request["arguments"] = args;
        }
        let line = format!("{request}\n");
        self.writer
            .write_all(line.as_bytes())
            .map_err(|e| QemuError::Qmp {
                command: command.into(),
                message: format!("cannot send: {e}"),
            })?;
        loop {
            let msg = self.read_message(command)?;
            if msg.get("event").is_some() {
                self.events.push(msg);
            } else if let Some(ret) = msg.get("return") {
                return Ok(ret.clone());
            } else if let Some(error) = msg.get("error") {
                return Err(QemuError::Qmp {
                    command: command.into(),
                    message: error.to_string(),
                });
            }
        }
    }

    fn read_message(&mut self, command: &str) -> Result<Value, QemuError> {
        let mut line = String::new();
        let n = self
            .reader
            .read_line(&mut line)
            .map_err(|e| QemuError::Qmp {
                command: command.into(),
                message: format!("cannot read the answer: {e}"),
            })?;
        if n == 0 {
            return Err(QemuError::Qmp {
                command: command.into(),
                message: "qemu closed the QMP socket".into(),
            });
        }
        serde_json::from_str(&line).map_err(|e| QemuError::Qmp {
            command: command.into(),
            message: format!("unparsable answer {line:?}: {e}"),
        })
    }
}
