//! Kubernetes name and label syntax, checked before anything is rendered, so
//! a bad `--name` or `--label` fails here with a sentence instead of at
//! `kubectl apply` time with a regex.
//!
//! The rules are those of `k8s.io/apimachinery/pkg/util/validation`:
//! `IsDNS1123Subdomain` (object names), `IsDNS1123Label` (namespaces) and
//! `IsQualifiedName` / `IsValidLabelValue` (labels). Each function returns
//! `Err(problem)`, a lowercase phrase saying what is wrong and what is allowed.

/// Longest DNS-1123 subdomain (an object's `metadata.name`).
pub const MAX_SUBDOMAIN: usize = 253;
/// Longest DNS-1123 label (a namespace), label name, or label value.
pub const MAX_LABEL: usize = 63;

/// `metadata.name` of a Secret: a DNS-1123 subdomain.
pub fn check_object_name(name: &str) -> Result<(), String> {
    check_subdomain(name)
}

/// `metadata.namespace`: a DNS-1123 label.
pub fn check_namespace(ns: &str) -> Result<(), String> {
    check_dns_label(ns)
}

/// A label key: `[prefix/]name`, the prefix a DNS-1123 subdomain.
pub fn check_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.contains('/') {
            return Err("has more than one `/`: use `prefix/name`".into());
        }
        check_subdomain(prefix).map_err(|p| format!("prefix `{prefix}` {p}"))?;
    }
    if name.is_empty() {
        return Err("has an empty name part: use `name` or `prefix/name`".into());
    }
    check_label_name(name).map_err(|p| format!("name part `{name}` {p}"))
}

/// A label value: empty, or a label name (≤ 63, alphanumeric at both ends,
/// `-`, `_`, `.` and alphanumerics between).
pub fn check_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    check_label_name(value)
}

fn check_label_name(s: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    check_shape(s, MAX_LABEL, allowed, char::is_ascii_alphanumeric).map_err(|p| {
        format!(
            "{p} (allowed: at most {MAX_LABEL} of `A-Z a-z 0-9 - _ .`, alphanumeric at both ends)"
        )
    })
}

/// A DNS-1123 label: a namespace, a VM's name (its hostname).
pub fn check_dns_label(s: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    check_shape(s, MAX_LABEL, allowed, is_lower_alnum).map_err(|p| {
        format!(
            "{p} (a DNS-1123 label: at most {MAX_LABEL} of `a-z 0-9 -`, alphanumeric at both ends)"
        )
    })
}

fn check_subdomain(s: &str) -> Result<(), String> {
    let hint = "(a DNS-1123 subdomain: at most 253 of `a-z 0-9 - .`, \
                each dot-separated part alphanumeric at both ends)";
    if s.is_empty() {
        return Err(format!("is empty {hint}"));
    }
    if s.len() > MAX_SUBDOMAIN {
        return Err(format!("is {} characters long {hint}", s.len()));
    }
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    for part in s.split('.') {
        check_shape(part, MAX_SUBDOMAIN, allowed, is_lower_alnum).map_err(|p| {
            if part.is_empty() {
                format!("has an empty part between dots {hint}")
            } else {
                format!("{p} {hint}")
            }
        })?;
    }
    Ok(())
}

fn is_lower_alnum(c: &char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// Length, allowed characters, and what the first and last must be.
fn check_shape(
    s: &str,
    max: usize,
    allowed: impl Fn(char) -> bool,
    ends: impl Fn(&char) -> bool,
) -> Result<(), String> {
    if s.is_empty() {
        return Err("is empty".into());
    }
    if s.len() > max {
        return Err(format!("is {} characters long", s.len()));
    }
    if let Some((i, bad)) = s.char_indices().find(|&(_, c)| !allowed(c)) {
        return Err(format!("contains {bad:?} at byte {i}"));
    }
    let first = s.chars().next().unwrap_or_default();
    let last = s.chars().next_back().unwrap_or_default();
    if !ends(&first) {
        return Err(format!("starts with {first:?}"));
    }
    if !ends(&last) {
        return Err(format!("ends with {last:?}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(input, None)` must pass; `(input, Some(fragment))` must fail with a
    /// message containing `fragment`.
    fn check(f: fn(&str) -> Result<(), String>, cases: &[(&str, Option<&str>)]) {
        for (input, want) in cases {
            match (f(input), want) {
                (Ok(()), None) => {}
                (Err(msg), Some(frag)) => {
                    assert!(msg.contains(frag), "{input:?}: {msg:?} lacks {frag:?}")
                }
                (got, want) => panic!("{input:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn object_names() {
        let long = "a".repeat(254);
        check(
            check_object_name,
            &[
                ("hello-lab-userdata", None),
                ("a.b-c.d", None),
                ("0abc", None),
                ("", Some("is empty")),
                ("Hello", Some("contains 'H'")),
                ("-a", Some("starts with '-'")),
                ("a-", Some("ends with '-'")),
                ("a..b", Some("empty part between dots")),
                ("a_b", Some("contains '_'")),
                ("a b", Some("contains ' '")),
                ("ünï", Some("contains 'ü'")),
                (&long, Some("254 characters")),
            ],
        );
    }

    #[test]
    fn namespaces() {
        check(
            check_namespace,
            &[
                ("labs", None),
                ("lab-vms-2", None),
                ("a.b", Some("contains '.'")),
                (&"n".repeat(64), Some("64 characters")),
            ],
        );
    }

    #[test]
    fn label_keys_and_values() {
        check(
            check_label_key,
            &[
                ("app", None),
                ("tt-lab.example/session-id", None),
                ("Some_Key.v1", None),
                ("a/b/c", Some("more than one `/`")),
                ("/x", Some("prefix `` is empty")),
                ("x/", Some("empty name part")),
                ("Bad.Prefix/x", Some("prefix `Bad.Prefix` contains 'B'")),
                ("x/-y", Some("starts with '-'")),
                ("a:b", Some("contains ':'")),
            ],
        );
        check(
            check_label_value,
            &[
                ("", None),
                ("dev", None),
                ("A_b.c-9", None),
                ("a b", Some("contains ' '")),
                ("x-", Some("ends with '-'")),
                (&"v".repeat(64), Some("64 characters")),
                ("ü", Some("contains 'ü'")),
            ],
        );
    }
}
