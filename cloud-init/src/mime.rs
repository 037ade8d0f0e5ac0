//! The user-data envelope: a MIME multipart message, the form cloud-init
//! splits into parts and hands each to its own handler. Only
//! `text/cloud-config` parts are YAML-parsed; the installer's part is
//! written out as a script and run.
//!
//! Every part is ASCII (see [`crate::shell`] for why), so no
//! `Content-Transfer-Encoding` is needed, and the message reads as plain
//! text in `kubectl get secret … | base64 -d`.

/// Separates the parts. A line beginning with `--` and this string would
/// cut a part short: no line of the cloud-config part begins with `--`,
/// base64 lines cannot begin with `-`, and a text file with such a line
/// travels base64 ([`crate::installer`]).
pub const BOUNDARY: &str = "lab-agent-payload";

/// The MIME type that makes cloud-init run a script once per instance, in
/// the final stage before `runcmd` (cloud-init ≥ 22.1).
pub const INSTALLER_TYPE: &str = "text/x-shellscript-per-instance";

/// The installer's file name in `/var/lib/cloud/scripts/per-instance/`.
pub const INSTALLER_NAME: &str = "lab-agent-install";

/// One part: its MIME type, file name (cloud-init names a script after it;
/// without one it picks `part-NNN`) and body.
#[derive(Debug, Clone, Copy)]
pub struct Part<'a> {
    pub content_type: &'static str,
    pub filename: Option<&'static str>,
    pub body: &'a str,
}

/// Joins the parts into one message. Returns the text and, per part, the
/// byte range of its body.
pub fn multipart(parts: &[Part<'_>]) -> (String, Vec<std::ops::Range<usize>>) {
    let size: usize = parts.iter().map(|p| p.body.len() + 200).sum();
    let mut out = String::with_capacity(size + 300);
    out.push_str(&format!(
        "Content-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\n\
         MIME-Version: 1.0\n\
         \n"
    ));
    let mut ranges = Vec::with_capacity(parts.len());
    for part in parts {
        debug_assert!(part.body.is_ascii());
        // A text part's charset defaults to US-ASCII (RFC 2046), which it is.
        out.push_str(&format!(
            "--{BOUNDARY}\nContent-Type: {}\n",
            part.content_type
        ));
        if let Some(name) = part.filename {
            out.push_str(&format!(
                "Content-Disposition: attachment; filename=\"{name}\"\n"
            ));
        }
        out.push('\n');
        let start = out.len();
        out.push_str(part.body);
        ranges.push(start..out.len());
        // The line break before a boundary belongs to the boundary: without
        // this one, the body's own last newline would be lost.
        out.push('\n');
    }
    out.push_str(&format!("--{BOUNDARY}--\n"));
    (out, ranges)
}
