//! fence-gcs against hostile canned answers: the suite every HTTP adapter runs
//! (`fence_testkit::canned::bounded`) in the JSON API's dialect, and an upload's answer never
//! trusted on one of its generations.

use std::sync::Arc;
use std::time::Duration;

use fence_core::{CasGuard, Commit, ConditionalStore, ErrorKind, Key, PutOutcome, Version};
use fence_gcs::GcsStore;
use fence_testkit::canned::bounded::{
    Dialect, ErrorCase, Expect, Limits, Listings, Records, RefusedListing, VersionHeader,
};
use fence_testkit::canned::{serve, Reply, Request};

fn store(endpoint: &str, limits: Limits) -> Arc<dyn ConditionalStore> {
    let mut builder = GcsStore::builder()
        .with_url("gs://fence-test/x")
        .with_endpoint(endpoint)
        .with_anonymous()
        .with_lease_ttl(Duration::from_secs(60));
    if let Some(record) = limits.record {
        builder = builder.with_record_limit(record);
    }
    if let Some(listing) = limits.listing {
        builder = builder.with_listing_limits(listing);
    }
    Arc::new(builder.build().unwrap())
}

/// `len` bytes of JSON: `start`, then spaces (a complete `start` when it is short).
fn json(status: u16, start: &str, len: u64) -> Reply {
    match len <= start.len() as u64 {
        true => Reply::status(status, "application/json", start.to_owned()),
        false => Reply::stream(status, "application/json", len, b' ').with_body_start(start),
    }
}

/// A download of `len` bytes at generation 7.
fn media(len: u64, announced: bool) -> Reply {
    let fill = if len > 1 << 30 { b'{' } else { b'x' };
    let reply =
        Reply::stream(200, "application/json", len, fill).with_header("x-goog-generation", "7");
    match announced {
        true => reply,
        false => reply.unannounced(),
    }
}

/// An upload's success at generation 8, its body `len` bytes long (0: as GCS answers).
fn uploaded(len: u64) -> Reply {
    let reply = match len {
        0 => Reply::status(200, "application/json", r#"{"generation":"8"}"#),
        len => json(200, r#"{"generation":"8","padding":""#, len),
    };
    reply.with_header("x-goog-generation", "8")
}

/// A JSON API error whose message is `message`.
fn error(status: u16, message: &str, len: u64) -> Reply {
    let body = format!(r#"{{"error":{{"code":{status},"message":"{message}"}}}}"#);
    json(status, &body, len)
}

fn absent() -> Reply {
    Reply::status(404, "text/plain", "No such object: fence-test/x/cells")
}

fn is_listing(r: &Request) -> bool {
    r.target.contains("/o?prefix=")
}

fn listing(page: u64, names: u64, next: &str) -> Reply {
    let items: Vec<String> = (0..names)
        .map(|i| format!(r#"{{"name":"x/cells/c{page}-{i}/own.json"}}"#))
        .collect();
    let body = format!(
        r#"{{"items":[{}],"nextPageToken":"{next}"}}"#,
        items.join(",")
    );
    Reply::status(200, "application/json", body)
}

const ERRORS: &[ErrorCase] = {
    use Commit::{Ambiguous, NotCommitted};
    use ErrorKind::{NotFound, PermissionDenied, Unavailable};
    use Expect::{Absent, Fails, Rejected, Unchecked};
    &[
        // The start of a 404 says what is missing: here the object.
        ErrorCase::new(
            404,
            "No such object: fence-test/x/cells/c1/own.json",
            Fails(NotFound, NotCommitted),
            Absent,
        ),
        ErrorCase::new(
            500,
            "backend error",
            Fails(Unavailable, Ambiguous),
            Fails(Unavailable, NotCommitted),
        ),
        ErrorCase::new(
            403,
            "forbidden",
            Fails(PermissionDenied, NotCommitted),
            Fails(PermissionDenied, NotCommitted),
        ),
        ErrorCase::new(412, "Precondition Failed", Rejected, Unchecked),
    ]
};

const REFUSED_LISTINGS: &[RefusedListing] = &[
    RefusedListing::new(403, "The bucket says no.", ErrorKind::PermissionDenied),
    RefusedListing::new(
        404,
        "The specified bucket does not exist.",
        ErrorKind::NotFound,
    ),
    RefusedListing::new(400, "Invalid argument.", ErrorKind::InvalidInput),
];

fn records() -> Records {
    Records {
        is_write: |r| r.method == "POST",
        record: media,
        unannounced: ErrorKind::Corrupt,
        absent,
        written: uploaded,
        // The generation is in the body, which is never read past 64 KiB.
        long_write: Expect::Fails(ErrorKind::Other, Commit::Ambiguous),
    }
}

fn listings() -> Listings {
    Listings {
        is_listing,
        page: listing,
        page_asked: |r| r.query_number("pageToken=t").unwrap_or(0),
        long_page: |len| json(200, r#"{"items":[{"name":"x/"#, len),
        sees_page_tokens: true,
        refused: REFUSED_LISTINGS,
    }
}

fn dialect() -> Dialect {
    Dialect::new(store, records(), listings(), error, ERRORS).with_version_header(VersionHeader {
        name: "x-goog-generation",
        other: "9",
        write: Expect::Fails(ErrorKind::Other, Commit::Ambiguous),
    })
}

fence_testkit::bounded_answers!(dialect());

fn with_generations(body: &str, generations: &[&str]) -> Reply {
    let reply = Reply::status(200, "application/json", body.to_owned());
    generations
        .iter()
        .fold(reply, |r, g| r.with_header("x-goog-generation", g))
}

/// An upload's answer is trusted only when everything it says of the generation agrees.
#[tokio::test]
async fn an_upload_answer_that_names_two_generations_is_ambiguous() {
    let five = r#"{"generation":"5"}"#;
    let answers = [
        with_generations(five, &["6"]),
        with_generations(five, &["junk"]),
        with_generations(r#"{"generation":"5","generation":"6"}"#, &[]),
    ];
    let key = Key::new("k").unwrap();
    for answer in answers {
        let server = serve(move |_| answer.clone()).await;
        let store = store(&server.endpoint(), Limits::default());
        let err = store.put(&key, "ours".into(), CasGuard::Absent).await;
        let err = err.unwrap_err();
        assert_eq!(err.commit(), Commit::Ambiguous, "{err:?}");
    }
    let agreeing = serve(move |_| with_generations(five, &["5"])).await;
    let store = store(&agreeing.endpoint(), Limits::default());
    let applied = PutOutcome::Applied(Version::new("5").unwrap());
    let created = store.put(&key, "ours".into(), CasGuard::Absent).await;
    assert_eq!(created.unwrap(), applied);
}
