//! `serve --config FILE`: every `serve` flag as a YAML key, with the OpenTelemetry Collector's `${env:VAR}`
//! expansion.
//!
//! A key is a flag's name without the dashes, in `snake_case` or `kebab-case` (`queue_spans: 50000` is
//! `--queue-spans 50000`). A value is a scalar, `true` for a switch (`false` leaves it off), a list for a
//! flag that repeats (`api_allowed_host: [a, b]`), or a map for `forward_header`
//! (`forward_header: {authorization: "Bearer ${env:TOKEN}"}` is `--forward-header authorization=Bearer …`).
//! The file becomes command-line arguments that the `serve` parser reads first; flags given on the command
//! line come after them and win. So the file and the flags share one definition, and an unknown key is
//! refused by the same parser that refuses an unknown flag.
//!
//! Expansion follows the Collector's confmap: in a string value, `${env:NAME}` is the variable's value,
//! `${env:NAME:-default}` falls back to `default` when it is unset or empty, and `$$` is a literal `$`.
//! Expansion happens after parsing, so a variable's value is never read as YAML. Unlike the Collector, which
//! substitutes an empty string and logs a warning, an unset variable without a default is an error: a
//! missing credential must stop the start, not send requests without it.
//!
//! For example `grpc_listen: 0.0.0.0:4317`, `queue-spans: 50000`, `strict_attributes: true` and
//! `forward_header: {authorization: Bearer ${env:TOKEN}}` are `--grpc-listen 0.0.0.0:4317 --queue-spans 50000
//! --strict-attributes --forward-header "authorization=Bearer <TOKEN>"` (test `the_module_example`).

use yaml_serde::Value;

/// Why a config file could not be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// The file is not YAML.
    #[error("not valid YAML: {0}")]
    Yaml(String),
    /// The document is not a mapping of keys to values.
    #[error("the document must be a mapping of flag names to values, like `queue_spans: 50000`")]
    NotAMapping,
    /// A key is not a string.
    #[error("key {0} is not a string")]
    BadKey(String),
    /// A value has a shape that no flag takes.
    #[error("{key}: {why}")]
    BadValue {
        /// The key.
        key: String,
        /// What is wrong.
        why: String,
    },
    /// `${env:NAME}` names a variable that is not set, and gives no default.
    #[error("{key}: ${{env:{name}}} is not set (give a default with ${{env:{name}:-value}})")]
    UnsetVariable {
        /// The key whose value names it.
        key: String,
        /// The variable.
        name: String,
    },
    /// A `${…}` reference that is not `${env:NAME}` or `${env:NAME:-default}`.
    #[error(
        "{key}: {reference:?} is not a reference this file supports (only ${{env:NAME}} and ${{env:NAME:-default}}; $$ is a literal $)"
    )]
    BadReference {
        /// The key whose value holds it.
        key: String,
        /// The reference as written.
        reference: String,
    },
}

/// The command-line arguments that `yaml` stands for, in the file's order, with `${env:…}` expanded through
/// `env` (which returns a variable's value, or `None` when it is unset).
pub fn to_args(yaml: &str, env: impl Fn(&str) -> Option<String>) -> Result<Vec<String>, ConfigError> {
    let doc: Value = yaml_serde::from_str(yaml).map_err(|e| ConfigError::Yaml(e.to_string()))?;
    let map = match doc {
        Value::Mapping(m) => m,
        // an empty file
        Value::Null => return Ok(Vec::new()),
        _ => return Err(ConfigError::NotAMapping),
    };
    let mut args = Vec::new();
    for (k, v) in map {
        let key = match k {
            Value::String(s) => s,
            other => {
                return Err(ConfigError::BadKey(
                    scalar(&other).unwrap_or_else(|| format!("{other:?}")),
                ));
            }
        };
        let flag = format!("--{}", key.replace('_', "-"));
        let bad = |why: &str| ConfigError::BadValue {
            key: key.clone(),
            why: why.to_string(),
        };
        match v {
            Value::Bool(true) => args.push(flag),
            Value::Bool(false) | Value::Null => {}
            Value::Sequence(items) => {
                for item in items {
                    let s = scalar(&item).ok_or_else(|| bad("a list may hold only scalars"))?;
                    args.push(flag.clone());
                    args.push(expand(&key, &s, &env)?);
                }
            }
            Value::Mapping(pairs) => {
                for (name, value) in pairs {
                    let name = scalar(&name).ok_or_else(|| bad("a map's keys must be scalars"))?;
                    let value = scalar(&value).ok_or_else(|| bad("a map's values must be scalars"))?;
                    args.push(flag.clone());
                    args.push(format!("{name}={}", expand(&key, &value, &env)?));
                }
            }
            other => {
                let s = scalar(&other).ok_or_else(|| bad("not a scalar, list or map"))?;
                args.push(flag);
                args.push(expand(&key, &s, &env)?);
            }
        }
    }
    Ok(args)
}

/// A scalar as the text a flag would take.
fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Expands `${env:NAME}`, `${env:NAME:-default}` and `$$` in `value`.
fn expand(key: &str, value: &str, env: &impl Fn(&str) -> Option<String>) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('{') {
            let end = body.find('}').ok_or_else(|| ConfigError::BadReference {
                key: key.to_string(),
                reference: format!("${{{body}"),
            })?;
            let reference = &body[..end];
            let bad = || ConfigError::BadReference {
                key: key.to_string(),
                reference: format!("${{{reference}}}"),
            };
            let spec = reference.strip_prefix("env:").ok_or_else(bad)?;
            let (name, default) = match spec.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (spec, None),
            };
            let valid_name = !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid_name {
                return Err(bad());
            }
            match (env(name).filter(|v| !v.is_empty()), default) {
                (Some(v), _) => out.push_str(&v),
                (None, Some(d)) => out.push_str(d),
                (None, None) => {
                    return Err(ConfigError::UnsetVariable {
                        key: key.to_string(),
                        name: name.to_string(),
                    });
                }
            }
            rest = &body[end + 1..];
        } else {
            // a lone `$` is itself
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "PORT" => Some("4317".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn keys_become_flags_in_order() {
        let args = to_args(
            "grpc-listen: 127.0.0.1:${env:PORT}\nno_analysis: true\nstrict_attributes: false\n\
             api_allowed_host: [a.example, b.example]\nqueue_spans: 1000\n",
            env,
        )
        .unwrap();
        assert_eq!(
            args,
            [
                "--grpc-listen",
                "127.0.0.1:4317",
                "--no-analysis",
                "--api-allowed-host",
                "a.example",
                "--api-allowed-host",
                "b.example",
                "--queue-spans",
                "1000"
            ]
        );
    }

    #[test]
    fn expansion_follows_the_collector() {
        let one = |v: &str| to_args(&format!("k: \"{v}\"\n"), env).map(|a| a[1].clone());
        assert_eq!(one("${env:PORT}").unwrap(), "4317");
        assert_eq!(one("x${env:MISSING:-9}y").unwrap(), "x9y");
        assert_eq!(one("${env:EMPTY:-d}").unwrap(), "d");
        assert_eq!(one("$$${env:PORT}").unwrap(), "$4317");
        assert_eq!(one("cost $5").unwrap(), "cost $5");
        assert_eq!(
            one("${env:MISSING}"),
            Err(ConfigError::UnsetVariable {
                key: "k".into(),
                name: "MISSING".into()
            })
        );
        assert!(matches!(
            one("${file:/etc/passwd}"),
            Err(ConfigError::BadReference { .. })
        ));
        assert!(matches!(one("${env:1X}"), Err(ConfigError::BadReference { .. })));
        assert!(matches!(one("${env:PORT"), Err(ConfigError::BadReference { .. })));
    }

    #[test]
    fn a_variable_is_never_read_as_yaml() {
        let env = |_: &str| Some("x\nno_analysis: true".to_string());
        let args = to_args("forward_grpc: ${env:V}\n", env).unwrap();
        assert_eq!(args, ["--forward-grpc", "x\nno_analysis: true"]);
    }

    #[test]
    fn bad_documents_are_refused() {
        assert!(matches!(to_args("[1, 2]", env), Err(ConfigError::NotAMapping)));
        assert!(matches!(to_args("a: [b: c", env), Err(ConfigError::Yaml(_))));
        assert!(matches!(to_args("a: [[1]]", env), Err(ConfigError::BadValue { .. })));
        assert!(matches!(to_args("1: x", env), Err(ConfigError::BadKey(_))));
        assert_eq!(to_args("", env), Ok(Vec::new()));
    }

    #[test]
    fn the_module_example() {
        let yaml = "grpc_listen: 0.0.0.0:4317\nqueue-spans: 50000\nstrict_attributes: true\n\
                    forward_header:\n  authorization: Bearer ${env:TOKEN}\n";
        let env = |name: &str| (name == "TOKEN").then(|| "s3cret".to_string());
        let args = to_args(yaml, env).unwrap();
        assert_eq!(
            args,
            [
                "--grpc-listen",
                "0.0.0.0:4317",
                "--queue-spans",
                "50000",
                "--strict-attributes",
                "--forward-header",
                "authorization=Bearer s3cret",
            ]
        );
    }
}
