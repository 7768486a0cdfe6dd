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
/// `Debug` does (`layers: [ErrorContextLayer, …, RetryLayer { … }]`), so that is read. A
/// `RetryLayer` replays a write whose answer was lost and then reports the replay's 412 as a
/// clean `ConditionNotMatch`; a cache or an index layer answers reads from elsewhere; a
/// capability override can claim a condition the service ignores. An unknown layer, or a
/// `Debug` that cannot be read, is refused too: fail closed.
pub(crate) fn check_layers(op: &Operator) -> Result<(), Error> {
    let shown = format!("{op:?}");
    let names = layer_names(&shown).ok_or_else(|| {
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

/// The names of the top-level entries of the last `layers: [...]` list in `shown`.
fn layer_names(shown: &str) -> Option<Vec<String>> {
    let (_, list) = shown.rsplit_once("layers: [")?;
    let mut names = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    for c in list.chars() {
        match c {
            '[' | '{' | '(' => depth += 1,
            ']' | '}' | ')' if depth == 0 => {
                push_name(&mut names, &mut current);
                return Some(names);
            }
            ']' | '}' | ')' => depth -= 1,
            ',' if depth == 0 => push_name(&mut names, &mut current),
            c if depth == 0 && (c.is_alphanumeric() || c == '_' || c == ':' || c == '<') => {
                current.push(c)
            }
            _ => {}
        }
    }
    None
}

fn push_name(names: &mut Vec<String>, current: &mut String) {
    // `Foo<Bar>` and `path::Foo` name the type `Foo`.
    let name = current.split('<').next().unwrap_or("");
    let name = name.rsplit("::").next().unwrap_or("");
    if !name.is_empty() {
        names.push(name.to_string());
    }
    current.clear();
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
        let shown = "Operator { service: S { x: [1, 2] }, context: C, layers: [ErrorContextLayer, \
                     SimulateLayer { a: Some(1), b: [Inner] }, opendal_layer_retry::RetryLayer<I> \
                     { builder: E { x: 1 } }, CorrectnessCheckLayer], .. }";
        assert_eq!(
            layer_names(shown).unwrap(),
            [
                "ErrorContextLayer",
                "SimulateLayer",
                "RetryLayer",
                "CorrectnessCheckLayer"
            ]
        );
        assert_eq!(layer_names("layers: []").unwrap(), Vec::<String>::new());
        assert_eq!(layer_names("no list here"), None);
        assert_eq!(layer_names("layers: [Unclosed"), None);
    }
}
