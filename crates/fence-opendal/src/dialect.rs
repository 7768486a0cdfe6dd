//! The guard dialect of one operator, read once from its capabilities; and the layers an
//! operator may carry.

use fence_core::{Error, ErrorKind};
use opendal::{Capability, Operator};

/// Which metadata field is the compare-and-swap token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Token {
    /// The ETag (`if_match` on writes; `If-Match` on S3 and Azure Blob).
    ETag,
    /// The object version (`if_version_match`; the generation on GCS).
    Version,
}

/// How an [`OpendalStore`](crate::OpendalStore) guards its writes, chosen from the operator's
/// capabilities at construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dialect {
    /// The OpenDAL scheme (`s3`, `azblob`, `gcs`, ...).
    pub scheme: &'static str,
    /// The token `CasGuard::Match` compares: the version where the service can match it,
    /// else the ETag.
    pub token: Token,
    /// Deletes are conditional on the same token.
    pub conditional_delete: bool,
    /// Versions are content hashes (ETags of S3 and S3-compatible stores).
    pub content_versions: bool,
}

/// Schemes whose conditional delete fence has seen honoured by a test server (Azurite). The
/// S3 service advertises conditional delete whatever the server does, and GCS emulators
/// ignore it: there it is opt-in.
const VERIFIED_CONDITIONAL_DELETE: &[&str] = &["azblob"];

/// Schemes whose ETags change on every write, also of identical bytes.
const ETAG_PER_WRITE: &[&str] = &["azblob"];

/// The dialect of an operator with `cap`, or `Unsupported` naming the missing capability.
/// `conditional_delete`: `None` = where verified, `Some(true)` = required.
pub(crate) fn choose(
    scheme: &'static str,
    cap: &Capability,
    conditional_delete: Option<bool>,
) -> Result<Dialect, Error> {
    let needs = [
        (cap.read, "read"),
        (cap.write, "write"),
        (cap.delete, "delete"),
        (cap.list, "list"),
        (cap.write_with_if_not_exists, "write_with_if_not_exists"),
    ];
    if let Some((_, name)) = needs.iter().find(|(has, _)| !has) {
        return Err(missing(scheme, name, "fence needs it"));
    }
    let token = match (cap.write_with_if_version_match, cap.write_with_if_match) {
        (true, _) => Token::Version,
        (false, true) => Token::ETag,
        (false, false) => {
            return Err(missing(
                scheme,
                "write_with_if_match or write_with_if_version_match",
                "without compare-and-swap it can create but never replace a record",
            ))
        }
    };
    let can_delete = match token {
        Token::Version => cap.delete_with_if_version_match,
        Token::ETag => cap.delete_with_if_match,
    };
    let conditional_delete = match conditional_delete {
        None => can_delete && VERIFIED_CONDITIONAL_DELETE.contains(&scheme),
        Some(false) => false,
        Some(true) if can_delete => true,
        Some(true) => {
            let name = match token {
                Token::Version => "delete_with_if_version_match",
                Token::ETag => "delete_with_if_match",
            };
            return Err(missing(scheme, name, "conditional delete was asked for"));
        }
    };
    Ok(Dialect {
        scheme,
        token,
        conditional_delete,
        content_versions: token == Token::ETag && !ETAG_PER_WRITE.contains(&scheme),
    })
}

fn missing(scheme: &str, capability: &str, why: &str) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("OpenDAL service {scheme:?} lacks the capability {capability} ({why})"),
    )
    .not_committed()
}

/// The layers [`opendal::Operator::new`] installs itself: error context, simulation of
/// missing operations, completion, and the capability check that refuses an unsupported
/// condition.
const BUILT_IN: &[&str] = &[
    "ErrorContextLayer",
    "SimulateLayer",
    "CompleteLayer",
    "CorrectnessCheckLayer",
];

/// Layers that only observe, bound or pace requests. A timeout is fine: fence classifies a
/// dropped write as ambiguous from what reached the network.
const HARMLESS: &[&str] = &[
    "LoggingLayer",
    "TracingLayer",
    "FastraceLayer",
    "MetricsLayer",
    "PrometheusLayer",
    "PrometheusClientLayer",
    "OtelTraceLayer",
    "OtelMetricsLayer",
    "FastmetricsLayer",
    "TimeoutLayer",
    "ConcurrentLimitLayer",
    "ThrottleLayer",
    "AsyncBacktraceLayer",
    "AwaitTreeLayer",
];

/// Refuses an operator carrying a layer that is neither built in nor known to be harmless.
///
/// OpenDAL's `Layer` trait names nothing and an operator does not list its layers, but its
/// `Debug` does (`Operator { service: …, context: …, layers: [ErrorContextLayer, …,
/// RetryLayer { … }], .. }`), so that is read. A `RetryLayer` replays a write whose answer
/// was lost and then reports the replay's 412 as a clean `ConditionNotMatch`; a cache or an
/// index layer answers reads from elsewhere; a capability override can claim a condition the
/// service ignores. The list is cut out exactly (the service's and the context's own `Debug`
/// are formatted on their own and stripped, since they may contain anything, even another
/// operator's list), quoted strings are skipped, and an unknown layer, an entry that names
/// no type, or a `Debug` that cannot be read is refused: fail closed. Only a layer whose
/// hand-written `Debug` claims another type's name can pass for it.
pub(crate) fn check_layers(op: &Operator) -> Result<(), Error> {
    let shown = format!("{op:?}");
    let names = layer_list(op, &shown)
        .and_then(layer_names)
        .ok_or_else(|| {
            unsupported_layer("(unreadable: this OpenDAL version lists its layers differently)")
        })?;
    match names
        .iter()
        .find(|n| !BUILT_IN.contains(&n.as_str()) && !HARMLESS.contains(&n.as_str()))
    {
        Some(name) => Err(unsupported_layer(name)),
        None => Ok(()),
    }
}

fn unsupported_layer(name: &str) -> Error {
    let name: String = name
        .chars()
        .take(64)
        .flat_map(char::escape_default)
        .collect();
    Error::new(
        ErrorKind::Unsupported,
        format!(
            "the operator carries the layer {name}; fence classifies every request itself and \
             refuses layers that may retry, cache or rewrite them (a RetryLayer replays a write \
             whose answer was lost, and reports the replay's 412 as a clean rejection): build \
             the store from an operator without it"
        ),
    )
    .not_committed()
}

/// The text between the brackets of `op`'s layer list in `shown` (its `Debug`): what is left
/// once the exact `Debug` of its service and its context is stripped from the front.
fn layer_list<'a>(op: &Operator, shown: &'a str) -> Option<&'a str> {
    let head = format!(
        "Operator {{ service: {:?}, context: {:?}, layers: [",
        op.service(),
        op.context()
    );
    shown.strip_prefix(head.as_str())?.strip_suffix("], .. }")
}

/// The type names of the top-level entries of a `Debug` list's inside (`A, B { x: "]" },
/// path::C<I> { .. }`); `None` if an entry names no type or the text is unbalanced.
fn layer_names(list: &str) -> Option<Vec<String>> {
    if list.trim().is_empty() {
        return Some(Vec::new());
    }
    let mut names = Vec::new();
    let mut chars = list.chars();
    let (mut depth, mut current, mut naming) = (0usize, String::new(), true);
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' => {
                skip_quoted(&mut chars, c)?;
                naming = false;
            }
            '<' if depth == 0 && naming => {
                skip_generics(&mut chars)?;
                naming = false;
            }
            '[' | '{' | '(' => {
                depth += 1;
                naming = false;
            }
            ']' | '}' | ')' => depth = depth.checked_sub(1)?,
            ',' if depth == 0 => {
                names.push(type_name(&current)?);
                current.clear();
                naming = true;
            }
            c if depth == 0 && naming && (c.is_alphanumeric() || c == '_' || c == ':') => {
                current.push(c)
            }
            c if depth == 0 && c.is_whitespace() && current.is_empty() => {}
            _ if depth == 0 => naming = false,
            _ => {}
        }
    }
    if depth != 0 {
        return None;
    }
    names.push(type_name(&current)?);
    Some(names)
}

/// Skips a string or char literal of a `Debug` (escaped as Rust does) after its `quote`.
fn skip_quoted(chars: &mut std::str::Chars<'_>, quote: char) -> Option<()> {
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                chars.next()?;
            }
            c if c == quote => return Some(()),
            _ => {}
        }
    }
    None
}

/// Skips a type's generic arguments after its `<`.
fn skip_generics(chars: &mut std::str::Chars<'_>) -> Option<()> {
    let mut depth = 1usize;
    for c in chars.by_ref() {
        match c {
            '<' => depth += 1,
            '>' => {
                depth -= 1;
                if depth == 0 {
                    return Some(());
                }
            }
            _ => {}
        }
    }
    None
}

/// `path::Foo` names the type `Foo`; an entry that starts with no identifier names none.
fn type_name(entry: &str) -> Option<String> {
    let name = entry.rsplit("::").next().unwrap_or("");
    let first = name.chars().next()?;
    (first.is_alphabetic() || first == '_').then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap_s3() -> Capability {
        Capability {
            read: true,
            write: true,
            delete: true,
            list: true,
            write_with_if_not_exists: true,
            write_with_if_match: true,
            delete_with_if_match: true,
            ..Capability::default()
        }
    }

    #[test]
    fn the_dialect_follows_the_capabilities() {
        let s3 = choose("s3", &cap_s3(), None).unwrap();
        assert_eq!(s3.token, Token::ETag);
        assert!(s3.content_versions);
        assert!(!s3.conditional_delete, "advertised statically: opt-in");
        assert!(
            choose("s3", &cap_s3(), Some(true))
                .unwrap()
                .conditional_delete
        );
        let az = choose("azblob", &cap_s3(), None).unwrap();
        assert!(az.conditional_delete && !az.content_versions);
        let gcs = Capability {
            write_with_if_match: false,
            write_with_if_version_match: true,
            delete_with_if_match: false,
            delete_with_if_version_match: true,
            ..cap_s3()
        };
        let gcs = choose("gcs", &gcs, None).unwrap();
        assert_eq!(gcs.token, Token::Version);
        assert!(!gcs.content_versions && !gcs.conditional_delete);
    }

    #[test]
    fn a_service_without_compare_and_swap_is_refused_naming_what_it_lacks() {
        let create_only = Capability {
            write_with_if_match: false,
            ..cap_s3()
        };
        let e = choose("oss", &create_only, None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(e.message().contains("write_with_if_match"), "{e}");
        let nothing = Capability {
            write_with_if_not_exists: false,
            ..cap_s3()
        };
        let e = choose("webdav", &nothing, None).unwrap_err();
        assert!(e.message().contains("write_with_if_not_exists"), "{e}");
        let no_delete = Capability {
            delete_with_if_match: false,
            ..cap_s3()
        };
        let e = choose("s3", &no_delete, Some(true)).unwrap_err();
        assert!(e.message().contains("delete_with_if_match"), "{e}");
    }

    #[test]
    fn layer_names_are_read_at_the_top_level_only() {
        let list = "ErrorContextLayer, SimulateLayer { a: Some(1), b: [Inner] }, \
                    opendal_layer_retry::RetryLayer<I> { builder: E { x: 1 } }, \
                    CorrectnessCheckLayer";
        assert_eq!(
            layer_names(list).unwrap(),
            [
                "ErrorContextLayer",
                "SimulateLayer",
                "RetryLayer",
                "CorrectnessCheckLayer"
            ]
        );
        assert_eq!(layer_names("").unwrap(), Vec::<String>::new());
        assert_eq!(layer_names("Unclosed { x"), None);
        assert_eq!(layer_names("Unopened }"), None);
    }

    #[test]
    fn quoted_brackets_and_commas_do_not_end_an_entry() {
        let list = r#"TimeoutLayer { label: "], \"x\", {" }, RetryLayer, C { c: ']' }"#;
        assert_eq!(
            layer_names(list).unwrap(),
            ["TimeoutLayer", "RetryLayer", "C"]
        );
        assert_eq!(layer_names(r#"A { s: "unterminated }"#), None);
    }

    #[test]
    fn an_entry_that_names_no_type_is_unreadable() {
        for list in ["A, , B", "A, ", "<redacted>", "A, ..", "A, 42"] {
            assert_eq!(layer_names(list), None, "{list}");
        }
    }
}
