//! Unknown keys in `lab.toml`, every one in one run, in the file's order,
//! each with the key it most likely meant. serde's `deny_unknown_fields`
//! stops at the first (and a map's order is not the file's), so an author
//! with two typos would need two runs; here the file is walked once with
//! the spans TOML's parser keeps, against the keys the model's own serde
//! structs declare (read from their `Deserialize` impls, so a key added to
//! a struct is known here without a second list to keep in step). What is
//! unknown is then left out, and the rest is parsed as usual, so its
//! problems are reported in the same run.

use super::raw::{RawCheckKeys, RawFiles, RawLabKeys, RawReadiness, RawSetup, RawSolve};
use super::{LabError, vms::RawVm};
use crate::exec::RawExecOptions;
use serde::Deserialize;
use serde::de::{self, Visitor};
use std::fmt;
use std::path::Path;
use toml::de::{DeTable, DeValue};

/// One step of the path to a key: a table's key or an array's index.
#[derive(Debug, Clone)]
pub(super) enum Step {
    Key(String),
    Index(usize),
}

/// An unknown key found, with where it is (to remove it) and the error.
#[derive(Debug)]
pub(super) struct Unknown {
    pub(super) at: Vec<Step>,
    pub(super) error: LabError,
}

/// A table's known keys and what each of its sub-tables holds.
struct Schema {
    /// How the author calls the table, for messages.
    name: &'static str,
    keys: &'static [&'static str],
    /// A key holding a table (or an array of tables) of its own schema.
    nested: fn(&str) -> Option<Schema>,
    /// A key holding a table of free keys (`env`): not walked.
    free: &'static [&'static str],
}

fn top() -> Schema {
    Schema {
        name: "the top level",
        keys: with_exec_options(fields_of::<RawLabKeys>()),
        nested: |key| {
            Some(match key {
                "setup" => table("[setup]", fields_of::<RawSetup>()),
                "files" => table("[files]", fields_of::<RawFiles>()),
                "readiness" => table("[readiness]", fields_of::<RawReadiness>()),
                "solve" => table("[solve]", fields_of::<RawSolve>()),
                "vms" => table("a [[vms]] table", fields_of::<RawVm>()),
                "checks" => Schema {
                    free: &["env"],
                    ..table(
                        "a [[checks]] table",
                        with_exec_options(fields_of::<RawCheckKeys>()),
                    )
                },
                _ => return None,
            })
        },
        free: &[],
    }
}

/// A table's own keys and the exec options' (flattened into it): leaked
/// once per table kind and process, a few hundred bytes.
fn with_exec_options(own: &'static [&'static str]) -> &'static [&'static str] {
    use std::sync::OnceLock;
    static LAB: OnceLock<&'static [&'static str]> = OnceLock::new();
    static CHECK: OnceLock<&'static [&'static str]> = OnceLock::new();
    let cell = if own.contains(&"checks") {
        &LAB
    } else {
        &CHECK
    };
    cell.get_or_init(|| Vec::leak([own, fields_of::<RawExecOptions>()].concat()))
}

fn table(name: &'static str, keys: &'static [&'static str]) -> Schema {
    Schema {
        name,
        keys,
        nested: |_| None,
        free: &[],
    }
}

/// Every unknown key of `text` (TOML that parses), in the file's order.
/// Empty when the text does not parse: its syntax error is reported
/// instead.
pub(super) fn unknown_keys(text: &str, path: &Path) -> Vec<Unknown> {
    let Ok(doc) = DeTable::parse(text) else {
        return Vec::new();
    };
    let mut found: Vec<(usize, Unknown)> = Vec::new();
    walk(
        doc.get_ref(),
        &top(),
        &mut Vec::new(),
        text,
        path,
        &mut found,
    );
    found.sort_by_key(|(offset, _)| *offset);
    found.into_iter().map(|(_, u)| u).collect()
}

fn walk(
    table: &DeTable<'_>,
    schema: &Schema,
    at: &mut Vec<Step>,
    text: &str,
    path: &Path,
    found: &mut Vec<(usize, Unknown)>,
) {
    for (key, value) in table {
        let name: &str = key.get_ref();
        at.push(Step::Key(name.to_owned()));
        if !schema.keys.contains(&name) {
            let offset = key.span().start;
            let error = LabError::UnknownKey {
                path: path.to_path_buf(),
                line: text.as_bytes()[..offset.min(text.len())]
                    .iter()
                    .filter(|b| **b == b'\n')
                    .count()
                    + 1,
                key: name.to_owned(),
                table: schema.name,
                suggestion: closest(name, schema.keys).map(str::to_owned),
                known: schema.keys.iter().map(|k| (*k).to_owned()).collect(),
            };
            found.push((
                offset,
                Unknown {
                    at: at.clone(),
                    error,
                },
            ));
        } else if let (false, Some(inner)) = (schema.free.contains(&name), (schema.nested)(name)) {
            match value.get_ref() {
                DeValue::Table(t) => walk(t, &inner, at, text, path, found),
                DeValue::Array(items) => {
                    for (i, item) in items.iter().enumerate() {
                        if let DeValue::Table(t) = item.get_ref() {
                            at.push(Step::Index(i));
                            walk(t, &inner, at, text, path, found);
                            at.pop();
                        }
                    }
                }
                // A wrong type: the model's parse says so.
                _ => {}
            }
        }
        at.pop();
    }
}

/// Removes the key at `at` from `doc`, if it is there.
pub(super) fn remove(doc: &mut toml::Table, at: &[Step]) {
    let Some((Step::Key(last), parents)) = at.split_last() else {
        return;
    };
    let mut table = doc;
    let mut steps = parents.iter().peekable();
    while let Some(step) = steps.next() {
        let Step::Key(key) = step else { return };
        let value = match table.get_mut(key) {
            Some(v) => v,
            None => return,
        };
        let value = match (value, steps.peek()) {
            (toml::Value::Array(items), Some(Step::Index(i))) => {
                steps.next();
                match items.get_mut(*i) {
                    Some(v) => v,
                    None => return,
                }
            }
            (v, _) => v,
        };
        let toml::Value::Table(t) = value else { return };
        table = t;
    }
    table.remove(last);
}

/// The known key an author most likely meant by `key`: the nearest by
/// edit distance, when it is near enough to be a typo (at most a third of
/// the key's length, and at least 1), or one of the two names the other
/// contains (`timeout` for `timeout_secs`).
fn closest<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    let key = key.to_ascii_lowercase();
    let near = known
        .iter()
        .map(|k| (distance(&key, k), *k))
        .min()
        .filter(|(d, _)| *d <= (key.chars().count() / 3).max(1))
        .map(|(_, k)| k);
    near.or_else(|| {
        known
            .iter()
            .find(|k| key.len() >= 3 && (k.starts_with(&key) || key.starts_with(**k)))
            .copied()
    })
}

/// Levenshtein distance, with a swap of two neighbours counting one
/// (the typo a fast typist makes).
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = d;
        }
    }
    rows[a.len()][b.len()]
}

/// The field names a serde-derived struct declares, from its own
/// `Deserialize` impl: it hands them to `deserialize_struct`, which this
/// deserializer records before refusing everything.
fn fields_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    let mut probe = Probe(None);
    let _ = T::deserialize(&mut probe);
    probe.0.unwrap_or(&[])
}

struct Probe(Option<&'static [&'static str]>);

#[derive(Debug)]
struct Stop;

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("field names read")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<M: fmt::Display>(_: M) -> Stop {
        Stop
    }
}

impl<'de> de::Deserializer<'de> for &mut Probe {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Stop> {
        self.0 = Some(fields);
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_structs_name_their_keys() {
        let check = with_exec_options(fields_of::<RawCheckKeys>());
        assert!(check.contains(&"fail_message") && check.contains(&"initially"));
        assert!(with_exec_options(fields_of::<RawLabKeys>()).contains(&"checks"));
        assert!(fields_of::<RawVm>().contains(&"setup_timeout_secs"));
    }

    #[test]
    fn typos_find_what_they_meant() {
        let keys = with_exec_options(fields_of::<RawCheckKeys>());
        for (typo, meant) in [
            ("fail_mesage", Some("fail_message")),
            ("timeout", Some("timeout_secs")),
            ("uesr", Some("user")),
            ("Run", Some("run")),
            ("points_max", Some("points")),
            ("banana", None),
            ("x", None),
        ] {
            assert_eq!(closest(typo, keys), meant, "{typo}");
        }
        assert_eq!(
            closest("setpu", with_exec_options(fields_of::<RawLabKeys>())),
            Some("setup")
        );
        assert_eq!(
            closest("check", with_exec_options(fields_of::<RawLabKeys>())),
            Some("checks")
        );
    }
}
