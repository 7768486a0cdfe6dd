//! What the canned tests of fence-dynamodb share: the operation a request names, JSON
//! answers, and the table's description.
#![allow(dead_code)]

use fence_testkit::canned::{Reply, Request};
use serde_json::{json, Value};

/// DynamoDB's content type.
pub const JSON: &str = "application/x-amz-json-1.0";

/// The operation a request asks for (`PutItem`).
pub fn op(r: &Request) -> &str {
    let target = r.header("x-amz-target").unwrap_or_default();
    target.trim_start_matches("DynamoDB_20120810.")
}

/// An answer of `status` with the JSON `body`.
pub fn json_reply(status: u16, body: Value) -> Reply {
    Reply::status(status, JSON, body.to_string())
}

/// A description of the table `fence-test`: fence's key schema, active, plus `extra` fields.
pub fn described(extra: Value) -> Reply {
    let mut table = json!({
        "TableName": "fence-test",
        "TableStatus": "ACTIVE",
        "AttributeDefinitions": [
            { "AttributeName": "pk", "AttributeType": "S" },
            { "AttributeName": "sk", "AttributeType": "S" },
        ],
        "KeySchema": [
            { "AttributeName": "pk", "KeyType": "HASH" },
            { "AttributeName": "sk", "KeyType": "RANGE" },
        ],
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        table[k] = v.clone();
    }
    json_reply(200, json!({ "Table": table }))
}
