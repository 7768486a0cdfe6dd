//! S3's answers, for the dialects of the adapters that speak S3 (fence-s3, fence-opendal's s3
//! service), each of which stores under the prefix `fleet`.

use fence_core::{Commit, ErrorKind};

use super::bounded::{ErrorCase, Expect, Listings, Records, RefusedListing, VersionHeader};
use super::checks::GIB;
use super::server::{Reply, Request};

/// S3's records: `PUT` writes, objects with an ETag; a write's success is proven by its ETag
/// (its body is never read), and object_store needs the length of an object it reads.
pub fn records() -> Records {
    Records {
        is_write: |r| r.method == "PUT",
        record: object,
        unannounced: ErrorKind::Unsupported,
        absent,
        written,
        long_write: Expect::Applied,
    }
}

/// S3's listings (`ListObjectsV2`).
pub fn listings() -> Listings {
    Listings {
        is_listing,
        page: listing,
        page_asked,
        long_page: long_listing,
        sees_page_tokens: true,
        refused: REFUSED_LISTINGS,
    }
}

/// Two different ETags on an answer: a write so answered landed at an unknown version.
pub const ETAG: VersionHeader = VersionHeader {
    name: "ETag",
    other: "\"other\"",
    write: Expect::Fails(ErrorKind::Unsupported, Commit::Ambiguous),
};

/// S3's error answers and what they come to.
pub const ERRORS: &[ErrorCase] = {
    use Commit::{Ambiguous, NotCommitted};
    use ErrorKind::{NotFound, PermissionDenied, Unavailable};
    use Expect::{Absent, Fails, Rejected, Unchecked};
    &[
        ErrorCase::new(
            500,
            "InternalError",
            Fails(Unavailable, Ambiguous),
            Fails(Unavailable, NotCommitted),
        ),
        ErrorCase::new(
            403,
            "AccessDenied",
            Fails(PermissionDenied, NotCommitted),
            Fails(PermissionDenied, NotCommitted),
        ),
        ErrorCase::new(412, "PreconditionFailed", Rejected, Unchecked),
        ErrorCase::new(404, "NoSuchKey", Fails(NotFound, NotCommitted), Absent),
        // The code is read from the start: a missing bucket is not a missing key. (Last, so
        // that a dialect that cannot tell yet can leave it out: `ERRORS.split_at(4).0`.)
        ErrorCase::new(
            404,
            "NoSuchBucket",
            Fails(NotFound, NotCommitted),
            Fails(NotFound, NotCommitted),
        ),
    ]
};

/// Listings S3 refuses, and the errors they come to. A listing is never answered "no such
/// key": a 404 of any kind is the bucket's.
pub const REFUSED_LISTINGS: &[RefusedListing] = &[
    RefusedListing::new(403, "AccessDenied", ErrorKind::PermissionDenied),
    RefusedListing::new(404, "NoSuchBucket", ErrorKind::NotFound),
    RefusedListing::new(404, "NoSuchKey", ErrorKind::NotFound),
    RefusedListing::new(400, "InvalidArgument", ErrorKind::Other),
];

const LAST_MODIFIED: &str = "Tue, 01 Dec 2026 07:00:00 GMT";

/// A `GetObject` answer: `len` bytes of `x` (a JSON `{` first when `len` is over a GiB, as a
/// record would start), its length announced or not, ETag `"e1"`.
pub fn object(len: u64, announced: bool) -> Reply {
    let fill = if len > GIB { b'{' } else { b'x' };
    let reply = Reply::stream(200, "application/json", len, fill)
        .with_header("ETag", "\"e1\"")
        .with_header("Last-Modified", LAST_MODIFIED);
    match announced {
        true => reply,
        false => reply.unannounced(),
    }
}

/// A `PutObject` success, ETag `"e2"`, its body `len` bytes of spaces.
pub fn written(len: u64) -> Reply {
    Reply::stream(200, "text/xml", len, b' ').with_header("ETag", "\"e2\"")
}

/// An S3 error answer: its code and message first, then spaces up to `len` bytes.
pub fn error(status: u16, code: &str, len: u64) -> Reply {
    let start = format!("<?xml version=\"1.0\"?><Error><Code>{code}</Code><Message>m</Message>");
    let len = len.max(start.len() as u64 + "</Error>".len() as u64);
    match len < 4096 {
        true => Reply::status(status, "application/xml", format!("{start}</Error>")),
        false => Reply::stream(status, "application/xml", len, b' ').with_body_start(&start),
    }
}

/// 404 `NoSuchKey`.
pub fn absent() -> Reply {
    error(404, "NoSuchKey", 0)
}

/// Whether `r` asks for a listing page (`ListObjectsV2`).
pub fn is_listing(r: &Request) -> bool {
    r.target.contains("list-type=2")
}

/// The page a listing asks for: `N` of `continuation-token=tN`, 0 for the first.
pub fn page_asked(r: &Request) -> u64 {
    r.query_number("continuation-token=t").unwrap_or(0)
}

/// Page `page` of a listing under `fleet/cells/`: `names` objects, continued by `next`.
pub fn listing(page: u64, names: u64, next: &str) -> Reply {
    let mut xml = format!(
        "<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>true</IsTruncated>\
         <NextContinuationToken>{next}</NextContinuationToken>"
    );
    for i in 0..names {
        xml.push_str(&format!(
            "<Contents><Key>fleet/cells/c{page}-{i}/own.json</Key><Size>10</Size>\
             <LastModified>2026-12-01T07:00:00.000Z</LastModified></Contents>"
        ));
    }
    Reply::status(200, "application/xml", xml + "</ListBucketResult>")
}

/// A listing page of `len` bytes: a listing's head, then one name without end.
pub fn long_listing(len: u64) -> Reply {
    let head = "<?xml version=\"1.0\"?><ListBucketResult><Contents><Key>";
    Reply::stream(200, "application/xml", len, b'a').with_body_start(head)
}
