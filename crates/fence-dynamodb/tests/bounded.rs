//! fence-dynamodb against hostile canned answers: the suite every HTTP adapter runs
//! (`fence_testkit::canned::bounded`), in DynamoDB's JSON dialect (every request a `POST`
//! named by `X-Amz-Target`; the table described first).

use std::sync::Arc;
use std::time::Duration;

use fence_core::{Commit, ConditionalStore, ErrorKind};
use fence_dynamodb::{DynamoDbStore, MAX_RECORD};
use fence_testkit::canned::bounded::{
    Dialect, ErrorCase, Expect, Limits, Listings, Records, RefusedListing,
};
use fence_testkit::canned::{Reply, Request};
use serde_json::{json, Value};
use support::{described, op, JSON};

mod support;

fn store(endpoint: &str, limits: Limits) -> Arc<dyn ConditionalStore> {
    let mut builder = DynamoDbStore::builder()
        .with_url("dynamodb://fence-test/x")
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_credentials("AKIDCANNED", "canned-secret")
        .with_cas_timeout(Duration::from_secs(20))
        .with_read_policy(Duration::from_secs(20), 1);
    if let Some(record) = limits.record {
        builder = builder.with_record_limit(record);
    }
    if let Some(listing) = limits.listing {
        builder = builder.with_listing_limits(listing);
    }
    Arc::new(builder.build().unwrap())
}

/// `start`, then `fill` up to `len` bytes; just `start` when it is as long.
fn padded(status: u16, start: &str, len: u64, fill: u8) -> Reply {
    match len <= start.len() as u64 {
        true => Reply::status(status, JSON, start.to_owned()),
        false => Reply::stream(status, JSON, len, fill).with_body_start(start),
    }
}

/// A `GetItem` answer whose record is `len` bytes of `x` (a whole item when it is small, an
/// item that never ends when it is not).
fn item(len: u64, announced: bool) -> Reply {
    let reply = match len < 1 << 20 {
        true => {
            let body = "x".repeat(len as usize);
            let item = json!({ "Item": { "v": { "S": "1-a" }, "b": { "S": body } } });
            Reply::status(200, JSON, item.to_string())
        }
        false => {
            let start = r#"{"Item":{"v":{"S":"1-a"},"b":{"S":""#;
            Reply::stream(200, JSON, len, b'x').with_body_start(start)
        }
    };
    match announced {
        true => reply,
        false => reply.unannounced(),
    }
}

/// An error answer of `code` (its `__type` first, as DynamoDB writes it), `len` bytes long.
fn error(status: u16, code: &str, len: u64) -> Reply {
    let kind = format!("com.amazonaws.dynamodb.v20120810#{code}");
    match len < 1 << 20 {
        true => {
            let whole = json!({ "__type": kind, "message": "m" }).to_string();
            let pad = (len as usize).saturating_sub(whole.len());
            Reply::status(status, JSON, whole + &" ".repeat(pad))
        }
        false => {
            let start = format!(r#"{{"__type":"{kind}","message":"m"#);
            Reply::stream(status, JSON, len, b' ').with_body_start(&start)
        }
    }
}

/// A page of a `Query`: `names` sort keys under `cells/`, continued after `next`.
fn listing(page: u64, names: u64, next: &str) -> Reply {
    let items: Vec<Value> = (0..names)
        .map(|i| json!({ "sk": { "S": format!("cells/c{page}-{i}/own.json") } }))
        .collect();
    let last = json!({ "pk": { "S": "x" }, "sk": { "S": next } });
    let page = json!({ "Items": items, "Count": names, "LastEvaluatedKey": last });
    Reply::status(200, JSON, page.to_string())
}

/// `N` of the `ExclusiveStartKey` `tN` a `Query` continues after (0 for the first page).
fn page_asked(r: &Request) -> u64 {
    let body: Value = serde_json::from_slice(&r.body).unwrap_or_default();
    let start = body["ExclusiveStartKey"]["sk"]["S"]
        .as_str()
        .unwrap_or_default();
    start.trim_start_matches('t').parse().unwrap_or(0)
}

const ERRORS: &[ErrorCase] = {
    use Commit::{Ambiguous, NotCommitted};
    use ErrorKind::{NotFound, PermissionDenied, Unavailable};
    use Expect::{Fails, Rejected, Unchecked};
    &[
        ErrorCase::new(
            500,
            "InternalServerError",
            Fails(Unavailable, Ambiguous),
            Fails(Unavailable, NotCommitted),
        ),
        ErrorCase::new(
            400,
            "AccessDeniedException",
            Fails(PermissionDenied, NotCommitted),
            Fails(PermissionDenied, NotCommitted),
        ),
        // Its exception is read from its start: a rejection however long its item.
        ErrorCase::new(400, "ConditionalCheckFailedException", Rejected, Unchecked),
        ErrorCase::new(
            400,
            "ThrottlingException",
            Fails(Unavailable, NotCommitted),
            Fails(Unavailable, NotCommitted),
        ),
        ErrorCase::new(
            400,
            "ResourceNotFoundException",
            Fails(NotFound, NotCommitted),
            Fails(NotFound, NotCommitted),
        ),
    ]
};

const REFUSED_LISTINGS: &[RefusedListing] = &[
    RefusedListing::new(400, "AccessDeniedException", ErrorKind::PermissionDenied),
    RefusedListing::new(400, "ResourceNotFoundException", ErrorKind::NotFound),
    RefusedListing::new(400, "ValidationException", ErrorKind::InvalidInput),
];

fn records() -> Records {
    Records {
        is_write: |r| op(r) == "PutItem",
        record: item,
        unannounced: ErrorKind::Corrupt,
        absent: || Reply::status(200, JSON, "{}"),
        written: |len| match len {
            0 => Reply::status(200, JSON, "{}"),
            len => padded(200, "{", len, b' '),
        },
        // A success is `{}`: one whose answer does not end is no verdict.
        long_write: Expect::Fails(ErrorKind::Unavailable, Commit::Ambiguous),
    }
}

fn listings() -> Listings {
    Listings {
        is_listing: |r| op(r) == "Query",
        page: listing,
        page_asked,
        long_page: |len| padded(200, r#"{"Items":[{"sk":{"S":""#, len, b'a'),
        sees_page_tokens: true,
        refused: REFUSED_LISTINGS,
    }
}

fn dialect() -> Dialect {
    Dialect::new(store, records(), listings(), error, ERRORS)
        .with_control(|r| (op(r) == "DescribeTable").then(|| described(json!({}))))
        .with_default_record_limit(MAX_RECORD)
}

// DynamoDB's versions travel in its JSON, never in a header: the case of two version headers
// does not apply.
fence_testkit::bounded_answers!(dialect(), without_version_header);
