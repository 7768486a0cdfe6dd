//! The items fence stores, and the JSON of the requests and answers that carry them.
//!
//! Every key of a store is one item of its table:
//!
//! | attribute | type | value |
//! |---|---|---|
//! | `pk` (partition key) | S | the store's prefix (`/` without one): every key of a store is one item collection |
//! | `sk` (sort key) | S | the key (`cells/orders/own.json`), so a prefix is a range of sort keys |
//! | `v` | S | the version: `<generation>-<64 random bits in hex>`, written by fence on every write |
//! | `b` | S or B | the record: S when it is UTF-8 without control characters (JSON records, readable in the console), B otherwise |

use base64::Engine;
use bytes::Bytes;
use fence_core::{CasGuard, Entropy, Key, Stored, Version};
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// The partition of a store without a prefix (a key attribute cannot be empty, and no prefix
/// starts with `/`).
pub(crate) const ROOT_PARTITION: &str = "/";

/// Where one store's items live: its table and its partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Place {
    pub table: String,
    pub partition: String,
}

impl Place {
    fn item_key(&self, sk: &str) -> Value {
        json!({ "pk": { "S": self.partition }, "sk": { "S": sk } })
    }

    /// `PutItem` of `body` at `version` under `guard`; a failed condition returns the item.
    pub fn put(&self, key: &Key, version: &str, body: &[u8], guard: &CasGuard) -> Value {
        let mut item = self.item_key(key.as_str());
        item["v"] = json!({ "S": version });
        item["b"] = body_value(body);
        let mut request = json!({
            "TableName": self.table,
            "Item": item,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        });
        add_condition(&mut request, guard);
        request
    }

    /// `GetItem`, strongly consistent.
    pub fn get(&self, key: &Key) -> Value {
        json!({
            "TableName": self.table,
            "Key": self.item_key(key.as_str()),
            "ConsistentRead": true,
        })
    }

    /// `DeleteItem`, only if the item is at `version` (`None`: unconditional).
    pub fn delete(&self, key: &Key, version: Option<&Version>) -> Value {
        let mut request = json!({ "TableName": self.table, "Key": self.item_key(key.as_str()) });
        if let Some(v) = version {
            add_condition(&mut request, &CasGuard::Match(v.clone()));
        }
        request
    }

    /// One page of the sort keys equal to `prefix` or under `prefix/` (every key of the
    /// partition for `None`), after `start`. `BETWEEN prefix AND prefix0` holds `prefix`,
    /// every `prefix/…` (`/` sorts right before `0`) and a few siblings (`prefix-x`), which
    /// the caller drops.
    pub fn query(&self, prefix: Option<&Key>, start: Option<&str>) -> Value {
        let mut values = Map::new();
        values.insert(":p".into(), json!({ "S": self.partition }));
        let condition = match prefix {
            None => "pk = :p",
            Some(p) => {
                values.insert(":lo".into(), json!({ "S": p.as_str() }));
                values.insert(":hi".into(), json!({ "S": format!("{p}0") }));
                "pk = :p AND sk BETWEEN :lo AND :hi"
            }
        };
        let mut request = json!({
            "TableName": self.table,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ProjectionExpression": "sk",
            "ConsistentRead": true,
        });
        if let Some(sk) = start {
            request["ExclusiveStartKey"] = self.item_key(sk);
        }
        request
    }

    /// `DescribeTable`.
    pub fn describe(&self) -> Value {
        json!({ "TableName": self.table })
    }

    /// `CreateTable` with fence's key schema, billed on demand.
    pub fn create(&self) -> Value {
        json!({
            "TableName": self.table,
            "AttributeDefinitions": [
                { "AttributeName": "pk", "AttributeType": "S" },
                { "AttributeName": "sk", "AttributeType": "S" },
            ],
            "KeySchema": [
                { "AttributeName": "pk", "KeyType": "HASH" },
                { "AttributeName": "sk", "KeyType": "RANGE" },
            ],
            "BillingMode": "PAY_PER_REQUEST",
        })
    }
}

fn add_condition(request: &mut Value, guard: &CasGuard) {
    match guard {
        CasGuard::Absent => request["ConditionExpression"] = json!("attribute_not_exists(sk)"),
        CasGuard::Match(v) => {
            request["ConditionExpression"] = json!("#v = :v");
            request["ExpressionAttributeNames"] = json!({ "#v": "v" });
            request["ExpressionAttributeValues"] = json!({ ":v": { "S": v.as_str() } });
        }
    }
}

/// The body as an attribute value: S when it is UTF-8 without control characters other than
/// tab and line breaks (JSON escapes it to at most twice its length), B (base64) otherwise.
pub(crate) fn body_value(body: &[u8]) -> Value {
    match std::str::from_utf8(body) {
        Ok(text)
            if !text
                .chars()
                .any(|c| c.is_control() && !"\t\n\r".contains(c)) =>
        {
            json!({ "S": text })
        }
        _ => json!({ "B": base64::engine::general_purpose::STANDARD.encode(body) }),
    }
}

/// The most an answer carrying one item can take on the wire, for a record limit of
/// `record` bytes: the body JSON-escaped (S, at most 2×) or base64 (B, 4/3×), the key
/// attributes (each at most 1 KiB as a key, 6× escaped) and the JSON around them.
pub(crate) fn item_answer_cap(record: usize) -> usize {
    record.saturating_mul(2).saturating_add(64 << 10)
}

/// The version of the next write under `guard`: one generation past the guard's (1 for a
/// create), and 64 random bits, so that no version repeats after a delete and re-create.
pub(crate) fn next_version(entropy: &Entropy, guard: &CasGuard) -> String {
    let generation = match guard {
        CasGuard::Absent => 1,
        CasGuard::Match(v) => generation(v.as_str()).map_or(1, |g| g.saturating_add(1)),
    };
    format!("{generation}-{:016x}", entropy.next_u64())
}

fn generation(version: &str) -> Option<u64> {
    version.split_once('-')?.0.parse().ok()
}

/// One attribute value, as far as fence reads them.
#[derive(Debug, Deserialize)]
pub(crate) struct Attr {
    #[serde(rename = "S")]
    s: Option<String>,
    #[serde(rename = "B")]
    b: Option<String>,
}

/// An item, as far as fence reads it.
#[derive(Debug, Deserialize)]
pub(crate) struct Item {
    sk: Option<Attr>,
    v: Option<Attr>,
    b: Option<Attr>,
}

impl Item {
    /// The record and its version, or why the item is not one of fence's.
    pub fn stored(self) -> Result<Stored, &'static str> {
        let version = self.v.and_then(|a| a.s).filter(|v| !v.is_empty());
        let version = version.ok_or("the item has no version attribute `v` (S)")?;
        let body = match self.b {
            Some(Attr { s: Some(text), .. }) => Bytes::from(text),
            Some(Attr { b: Some(b64), .. }) => base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map(Bytes::from)
                .map_err(|_| "the item's record `b` is not valid base64")?,
            _ => return Err("the item has no record attribute `b` (S or B)"),
        };
        let version = Version::new(version).map_err(|_| "the item's version is empty")?;
        Ok(Stored { body, version })
    }

    /// The sort key, for listings.
    pub fn sort_key(self) -> Option<String> {
        self.sk.and_then(|a| a.s)
    }
}

/// The answer to `GetItem`: the item, if there is one.
#[derive(Debug, Deserialize)]
pub(crate) struct GetAnswer {
    #[serde(rename = "Item")]
    pub item: Option<Item>,
}

/// An error answer: its exception, and the item a failed condition returned (`ALL_OLD`),
/// read as it is so that an item fence cannot read leaves the exception readable.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ErrorAnswer {
    #[serde(rename = "__type")]
    pub kind: Option<String>,
    #[serde(alias = "Message")]
    pub message: Option<String>,
    #[serde(rename = "Item")]
    pub item: Option<Value>,
}

/// A page of a `Query`.
#[derive(Debug, Deserialize)]
pub(crate) struct QueryAnswer {
    #[serde(rename = "Items", default)]
    pub items: Vec<Item>,
    #[serde(rename = "LastEvaluatedKey")]
    pub last: Option<Item>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place() -> Place {
        Place {
            table: "t".into(),
            partition: "fleet".into(),
        }
    }

    #[test]
    fn records_are_strings_when_readable_and_binary_otherwise() {
        assert_eq!(body_value(b"{\"a\":1}\n"), json!({ "S": "{\"a\":1}\n" }));
        assert_eq!(body_value(b"\0x"), json!({ "B": "AHg=" }));
        assert_eq!(body_value(&[0xff]), json!({ "B": "/w==" }));
        assert_eq!(body_value(b""), json!({ "S": "" }));
    }

    #[test]
    fn items_read_back_both_ways() {
        for body in [&b"{\"a\":1}"[..], b"\0\xff", b""] {
            let mut item = json!({ "v": { "S": "1-ab" } });
            item["b"] = body_value(body);
            let item: Item = serde_json::from_value(item).unwrap();
            let stored = item.stored().unwrap();
            assert_eq!((&stored.body[..], stored.version.as_str()), (body, "1-ab"));
        }
        let bare: Item = serde_json::from_value(json!({ "b": { "S": "x" } })).unwrap();
        assert!(bare.stored().is_err());
        let no_body: Item = serde_json::from_value(json!({ "v": { "S": "1-a" } })).unwrap();
        assert!(no_body.stored().is_err());
    }

    #[test]
    fn versions_count_generations_and_never_repeat() {
        let entropy = Entropy::seeded(1);
        let first = next_version(&entropy, &CasGuard::Absent);
        assert!(first.starts_with("1-"));
        let v = Version::new(&first).unwrap();
        let second = next_version(&entropy, &CasGuard::Match(v));
        assert!(second.starts_with("2-"));
        let again = next_version(&entropy, &CasGuard::Absent);
        assert!(
            again.starts_with("1-") && again != first,
            "a re-create is new"
        );
        let foreign = Version::new("opaque").unwrap();
        assert!(next_version(&entropy, &CasGuard::Match(foreign)).starts_with("1-"));
    }

    #[test]
    fn writes_carry_their_condition_and_ask_for_the_old_item() {
        let key = Key::new("cells/c/own.json").unwrap();
        let create = place().put(&key, "1-a", b"x", &CasGuard::Absent);
        assert_eq!(create["ConditionExpression"], "attribute_not_exists(sk)");
        assert_eq!(create["ReturnValuesOnConditionCheckFailure"], "ALL_OLD");
        assert_eq!(create["Item"]["pk"], json!({ "S": "fleet" }));
        assert_eq!(create["Item"]["sk"], json!({ "S": "cells/c/own.json" }));
        let v = Version::new("1-a").unwrap();
        let swap = place().put(&key, "2-b", b"x", &CasGuard::Match(v.clone()));
        assert_eq!(
            swap["ExpressionAttributeValues"][":v"],
            json!({ "S": "1-a" })
        );
        let delete = place().delete(&key, Some(&v));
        assert_eq!(delete["ConditionExpression"], "#v = :v");
        assert!(place()
            .delete(&key, None)
            .get("ConditionExpression")
            .is_none());
    }

    #[test]
    fn a_prefix_is_a_range_of_sort_keys() {
        let prefix = Key::new("cells/c").unwrap();
        let q = place().query(Some(&prefix), Some("cells/c/a"));
        let values = &q["ExpressionAttributeValues"];
        assert_eq!(values[":lo"], json!({ "S": "cells/c" }));
        assert_eq!(values[":hi"], json!({ "S": "cells/c0" }));
        assert_eq!(q["ExclusiveStartKey"]["sk"], json!({ "S": "cells/c/a" }));
        assert_eq!(
            place().query(None, None)["KeyConditionExpression"],
            "pk = :p"
        );
    }
}
