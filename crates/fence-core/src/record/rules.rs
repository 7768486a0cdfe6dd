//! The rules of docs/protocol.md that fence's readers and `fence check` share: one function
//! per rule, so that a record `fence check` calls corrupt is one fence refuses, in the same
//! words.
//!
//! ```
//! use fence_core::record::rules::{self, Rule};
//! use fence_core::record::HeadFormat;
//! let breach = rules::zero_epoch(HeadFormat::V2, 0).unwrap();
//! assert_eq!(breach.rule, Rule::EpochNotRaisable);
//! assert_eq!(breach.to_string(), "`epoch`: epoch-not-raisable: epoch 0 cannot be written by a claim");
//! assert!(rules::zero_epoch(HeadFormat::Seed, 0).is_none());
//! ```

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Serialize;
use serde_json::{Map, Number, Value};

use super::HeadFormat;
use crate::error::Error;
use crate::key::Key;

/// The rules of docs/protocol.md §13, by the names `fence check` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Rule {
    /// Not JSON, not an object, (a v1 data head) no header line, or a record the store will
    /// not return whole (over its record limit).
    Unparseable,
    /// One object with two members of one name: readers that keep the first and readers
    /// that keep the last would read two different records.
    DuplicateMember,
    /// A field of the wrong JSON type.
    WrongType,
    /// A required field is absent.
    MissingField,
    /// `v` is not a version the protocol defines for the record.
    UnknownVersion,
    /// A negative, fractional, exponent or out-of-range number.
    BadInteger,
    /// A head whose epoch cannot be raised (or is 0).
    EpochNotRaisable,
    /// A missing or empty nonce where the version needs one.
    BadNonce,
    /// A lease under another node's key, an empty generation, an invalid node id.
    BadIdentity,
    /// More than one payload field, bad base64, a bad `blob`.
    BadPayload,
    /// A payload object the head names is missing or of another length.
    MissingPayload,
    /// A key of no known shape under `nodes/`, `cells/` or `fleet/`, or a name that is not a
    /// valid segment.
    BadName,
    /// A log head breaking the log's rules, or a committed log record missing.
    BadLog,
    /// A seed or version-1 record: readable (a note, not a violation).
    LegacyFormat,
}

impl Rule {
    /// The rule's name as docs/protocol.md §13 and `fence check` write it.
    pub fn name(self) -> &'static str {
        match self {
            Rule::Unparseable => "unparseable",
            Rule::DuplicateMember => "duplicate-member",
            Rule::WrongType => "wrong-type",
            Rule::MissingField => "missing-field",
            Rule::UnknownVersion => "unknown-version",
            Rule::BadInteger => "bad-integer",
            Rule::EpochNotRaisable => "epoch-not-raisable",
            Rule::BadNonce => "bad-nonce",
            Rule::BadIdentity => "bad-identity",
            Rule::BadPayload => "bad-payload",
            Rule::MissingPayload => "missing-payload",
            Rule::BadName => "bad-name",
            Rule::BadLog => "bad-log",
            Rule::LegacyFormat => "legacy-format",
        }
    }
}

/// A rule a record breaks: the field (if the rule is about one), the rule, and what was
/// found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Breach {
    /// The field.
    pub field: Option<&'static str>,
    /// The rule.
    pub rule: Rule,
    /// What was found, in words.
    pub detail: String,
}

impl Breach {
    fn new(field: &'static str, rule: Rule, detail: impl Into<String>) -> Self {
        Breach {
            field: Some(field),
            rule,
            detail: detail.into(),
        }
    }

    /// The [`ErrorKind::Corrupt`](crate::ErrorKind::Corrupt) error of the record at `key`
    /// breaking this rule, in `fence check`'s words.
    pub fn corrupt(&self, key: &Key) -> Error {
        Error::corrupt(key, self.to_string())
    }
}

/// "`field`: rule-name: detail".
impl fmt::Display for Breach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(field) = self.field {
            write!(f, "`{field}`: ")?;
        }
        write!(f, "{}: {}", self.rule.name(), self.detail)
    }
}

/// Parses a record's JSON object. Two members of one name in any object, at any depth, are
/// a breach ([`Rule::DuplicateMember`]): RFC 8259 leaves their meaning open, serde_json keeps
/// the last, other parsers the first, and two readers of one record must never read two
/// different records. Anything but one JSON object is [`Rule::Unparseable`].
///
/// ```
/// use fence_core::record::rules::{parse_object, Rule};
/// assert!(parse_object(br#"{"node":"a","epoch":1}"#).is_ok());
/// let twice = parse_object(br#"{"node":"a","epoch":1,"node":"b"}"#).unwrap_err();
/// assert_eq!(twice.rule, Rule::DuplicateMember);
/// let nested = parse_object(br#"{"blob":{"name":"a","name":"b","len":1}}"#).unwrap_err();
/// assert_eq!(nested.rule, Rule::DuplicateMember);
/// assert_eq!(parse_object(b"[1]").unwrap_err().rule, Rule::Unparseable);
/// ```
pub fn parse_object(bytes: &[u8]) -> Result<Map<String, Value>, Breach> {
    let unparseable = |detail: String| Breach {
        field: None,
        rule: Rule::Unparseable,
        detail,
    };
    match parse_json(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(unparseable("not a JSON object".into())),
        Err(e) if e.classify() == serde_json::error::Category::Data => Err(Breach {
            field: None,
            rule: Rule::DuplicateMember,
            detail: e.to_string(),
        }),
        Err(e) => Err(unparseable(format!(
            "not JSON ({} bytes): {e}",
            bytes.len()
        ))),
    }
}

/// Parses JSON as [`serde_json::from_slice`] does, except that an object with two members of
/// one name is an error (its [`classify`](serde_json::Error::classify) is `Data`; a syntax
/// error is `Syntax` or `Eof`). Records read through serde types go through it too
/// (`serde_json::from_value(parse_json(bytes)?)`): serde's derived readers keep the last of
/// two members of one name in a map, a `#[serde(flatten)]`ed one included.
pub fn parse_json(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    serde_json::from_slice::<Unique>(bytes).map(|u| u.0)
}

/// A JSON value read without duplicate member names. Written by hand: serde_json has no
/// setting that refuses them (its `Value` keeps the last), and no maintained crate does it
/// for `Value`.
struct Unique(Value);

impl<'de> Deserialize<'de> for Unique {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueVisitor).map(Unique)
    }
}

struct UniqueVisitor;

impl<'de> Visitor<'de> for UniqueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Value, E> {
        Number::from_f64(n)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number JSON cannot hold"))
    }

    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Unique(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        while let Some(name) = members.next_key::<String>()? {
            if map.contains_key(&name) {
                return Err(de::Error::custom(format!(
                    "member name {name:?} appears twice in one object"
                )));
            }
            let Unique(v) = members.next_value()?;
            map.insert(name, v);
        }
        Ok(Value::Object(map))
    }
}

/// A head's `node` member: `Ok(None)` when it names no owner (released). Version 2 requires
/// a string (`""` when released); version 1 a string or `null`; the seed's shape may leave
/// it out or write `null`.
///
/// ```
/// use serde_json::json;
/// use fence_core::record::{rules, HeadFormat};
/// assert_eq!(rules::head_node(HeadFormat::V2, Some(json!(""))).unwrap(), None);
/// assert_eq!(rules::head_node(HeadFormat::Seed, None).unwrap(), None);
/// let null = rules::head_node(HeadFormat::V2, Some(json!(null))).unwrap_err();
/// assert_eq!(null.rule, rules::Rule::WrongType);
/// ```
pub fn head_node(format: HeadFormat, node: Option<Value>) -> Result<Option<String>, Breach> {
    let nullable = format != HeadFormat::V2;
    match node {
        None if format == HeadFormat::Seed => Ok(None),
        None => Err(Breach::new("node", Rule::MissingField, "required")),
        Some(Value::Null) if nullable => Ok(None),
        Some(Value::Null) => Err(Breach::new(
            "node",
            Rule::WrongType,
            "null where a string is needed",
        )),
        Some(Value::String(n)) => Ok(Some(n).filter(|n| !n.is_empty())),
        Some(_) => Err(Breach::new("node", Rule::WrongType, "not a string")),
    }
}

/// A version-2 head at epoch 0, which no claim writes (the first claim writes 1). A reader
/// must not claim over it: that would take epoch 1, and a writer that holds epoch 0 (a
/// hand-made head) would not be fenced by it. The seed's and version 1's heads are read as
/// they are.
pub fn zero_epoch(format: HeadFormat, epoch: u64) -> Option<Breach> {
    (format == HeadFormat::V2 && epoch == 0).then(|| {
        Breach::new(
            "epoch",
            Rule::EpochNotRaisable,
            format!("epoch {epoch} cannot be written by a claim"),
        )
    })
}

/// A lease's `ttl_ms`: a version-1 lease that is not released (`expires_ms` > 0) must state
/// its holder's TTL, so that a peer never judges it by a shorter TTL than its holder's. A
/// released lease is dead at once whatever its TTL; the seed's shape (`versioned` false) has
/// none, and peers assume their own. (A `ttl_ms` above
/// [`MAX_RECORD_TTL_MS`](crate::decide::observe::MAX_RECORD_TTL_MS), a century,
/// which no conforming writer writes, is not corrupt: readers ignore it, so that a hostile
/// record cannot hold a lease for ever; `fence check` names it.)
///
/// ```
/// use fence_core::record::rules::{lease_ttl, Rule};
/// assert_eq!(lease_ttl(true, 5, None).unwrap().rule, Rule::MissingField);
/// assert!(lease_ttl(true, 0, None).is_none());
/// assert!(lease_ttl(false, 5, None).is_none());
/// assert!(lease_ttl(true, 5, Some(10_000)).is_none());
/// ```
pub fn lease_ttl(versioned: bool, expires_ms: u64, ttl_ms: Option<u64>) -> Option<Breach> {
    (versioned && expires_ms != 0 && ttl_ms.is_none()).then(|| {
        Breach::new(
            "ttl_ms",
            Rule::MissingField,
            "a version-1 lease that is not released must state its holder's TTL",
        )
    })
}
