//! The Kubernetes Secret that carries the user-data to KubeVirt
//! (`cloudInitNoCloud.userDataSecretRef`), as YAML or JSON.
//!
//! This is where the 1 MiB limit is enforced: a NoCloud seed on a local disk
//! has no such limit, a Secret does.

use crate::error::{Error, TooLarge};
use crate::k8s_names;
use crate::payload::UserData;
use crate::yaml::quoted;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Serialize;
use std::collections::BTreeMap;

/// The data key KubeVirt reads the user-data from (it also accepts `userData`).
pub const USERDATA_KEY: &str = "userdata";

/// The manifest's syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Yaml,
    Json,
}

/// The Secret's `metadata`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretMeta {
    /// A DNS-1123 subdomain.
    pub name: String,
    /// A DNS-1123 label; `None` leaves it to `kubectl apply -n`.
    pub namespace: Option<String>,
    /// Sorted, so the output is stable.
    pub labels: BTreeMap<String, String>,
    /// Sorted too; values are free text. [`crate::lab_payload::render`]
    /// adds the lab's
    /// [`READY_TIMEOUT_ANNOTATION`](lab_agent_proto::lab::READY_TIMEOUT_ANNOTATION).
    pub annotations: BTreeMap<String, String>,
}

impl SecretMeta {
    pub fn new(name: impl Into<String>) -> Self {
        SecretMeta {
            name: name.into(),
            ..Default::default()
        }
    }

    /// Checks every field as the API server would.
    pub fn validate(&self) -> Result<(), Error> {
        let meta = |field: &str, value: &str, problem: String| Error::Metadata {
            field: field.to_owned(),
            value: value.escape_debug().to_string(),
            problem,
        };
        k8s_names::check_object_name(&self.name)
            .map_err(|p| meta("metadata.name", &self.name, p))?;
        if let Some(ns) = &self.namespace {
            k8s_names::check_namespace(ns).map_err(|p| meta("metadata.namespace", ns, p))?;
        }
        for (key, value) in &self.labels {
            k8s_names::check_label_key(key).map_err(|p| meta("label key", key, p))?;
            k8s_names::check_label_value(value)
                .map_err(|p| meta(&format!("value of label `{key}`"), value, p))?;
        }
        // An annotation's key follows the label keys' rule; its value may
        // be anything.
        for key in self.annotations.keys() {
            k8s_names::check_label_key(key).map_err(|p| meta("annotation key", key, p))?;
        }
        Ok(())
    }
}

/// Renders the Secret holding `user_data`, after checking `meta` and the
/// size limit. The text ends with a newline.
pub fn render_secret(
    user_data: &UserData,
    meta: &SecretMeta,
    format: Format,
) -> Result<String, Error> {
    meta.validate()?;
    check_size(user_data)?;
    let data = STANDARD.encode(user_data.as_bytes());
    Ok(match format {
        Format::Yaml => yaml(meta, &data),
        Format::Json => json(meta, &data),
    })
}

/// Errors when the user-data is over the 1 MiB Secret limit.
pub fn check_size(user_data: &UserData) -> Result<(), Error> {
    match user_data.budget().excess() {
        None => Ok(()),
        Some(_) => Err(Error::TooLarge(Box::new(TooLarge {
            budget: user_data.budget().clone(),
        }))),
    }
}

fn yaml(meta: &SecretMeta, data: &str) -> String {
    let mut out = String::with_capacity(data.len() + 512);
    yaml_head(&mut out, "Secret", meta);
    out.push_str("\ntype: Opaque\ndata:\n  ");
    out.push_str(USERDATA_KEY);
    out.push_str(": \"");
    out.push_str(data);
    out.push_str("\"\n");
    out
}

/// A v1 object's head: `apiVersion`, `kind` and `metadata` (name,
/// namespace, labels, annotations; every value quoted), no newline after.
pub(crate) fn yaml_head(out: &mut String, kind: &str, meta: &SecretMeta) {
    out.push_str("apiVersion: v1\nkind: ");
    out.push_str(kind);
    out.push_str("\nmetadata:\n  name: ");
    quoted(out, &meta.name);
    if let Some(ns) = &meta.namespace {
        out.push_str("\n  namespace: ");
        quoted(out, ns);
    }
    for (title, map) in [("labels", &meta.labels), ("annotations", &meta.annotations)] {
        if map.is_empty() {
            continue;
        }
        out.push_str("\n  ");
        out.push_str(title);
        out.push(':');
        for (key, value) in map {
            out.push_str("\n    ");
            quoted(out, key);
            out.push_str(": ");
            quoted(out, value);
        }
    }
}

fn json(meta: &SecretMeta, data: &str) -> String {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Secret<'a> {
        api_version: &'a str,
        kind: &'a str,
        metadata: Metadata<'a>,
        #[serde(rename = "type")]
        type_: &'a str,
        data: BTreeMap<&'a str, &'a str>,
    }
    #[derive(Serialize)]
    struct Metadata<'a> {
        name: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        namespace: Option<&'a str>,
        #[serde(skip_serializing_if = "no_labels")]
        labels: &'a BTreeMap<String, String>,
        #[serde(skip_serializing_if = "no_labels")]
        annotations: &'a BTreeMap<String, String>,
    }
    fn no_labels(labels: &&BTreeMap<String, String>) -> bool {
        labels.is_empty()
    }
    let secret = Secret {
        api_version: "v1",
        kind: "Secret",
        metadata: Metadata {
            name: &meta.name,
            namespace: meta.namespace.as_deref(),
            labels: &meta.labels,
            annotations: &meta.annotations,
        },
        type_: "Opaque",
        data: BTreeMap::from([(USERDATA_KEY, data)]),
    };
    // Serializing plain strings and maps cannot fail.
    let mut text = serde_json::to_string_pretty(&secret).expect("serialize Secret");
    text.push('\n');
    text
}
