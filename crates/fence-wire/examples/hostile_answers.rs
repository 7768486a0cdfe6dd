//! A hostile store on 127.0.0.1 for measuring what a `fence` command holds in memory against
//! it (`scripts/hostile-rss.sh`). It speaks enough of S3, GCS and Azure at once for
//! `fence get`, `run` and `status`, and answers every request with one of:
//!
//! - `record`: 200 and a body of 2 GiB (with an `ETag`, a `Last-Modified` and an
//!   `x-goog-generation`, so every dialect takes it for an object);
//! - `unannounced`: the same without a `Content-Length` (the body ends with the connection);
//! - `error`: 500 and a body of 1 GiB;
//! - `listing`: listing pages of 1,000 names that never end (other requests: 404);
//! - `absent`: 404 and nothing else (the baseline).
//!
//! Bodies are streamed from one small buffer. Usage: `hostile_answers MODE`; prints
//! `http://127.0.0.1:PORT` and serves until killed.

use fence_testkit::canned::{serve, Reply, Request, GIB};

fn object(len: u64) -> Reply {
    Reply::stream(200, "application/json", len, b'{')
        .with_header("ETag", "\"hostile\"")
        .with_header("Last-Modified", "Tue, 01 Dec 2026 07:00:00 GMT")
        .with_header("x-goog-generation", "7")
}

fn absent(r: &Request) -> Reply {
    let reply = Reply::status(
        404,
        "application/xml",
        "<Error><Code>NoSuchKey</Code></Error>",
    );
    match r.target.starts_with("/storage/") {
        true => Reply::status(404, "text/plain", "No such object"),
        false => reply.with_header("x-ms-error-code", "BlobNotFound"),
    }
}

/// One listing page in the dialect `r` speaks, continuing with the next page without end.
fn listing(r: &Request) -> Option<Reply> {
    let names = |page: u64, wrap: &dyn Fn(String) -> String| -> String {
        (0..1000)
            .map(|i| wrap(format!("fleet/cells/c{page}-{i}/own.json")))
            .collect()
    };
    if r.target.contains("list-type=2") {
        let page = r.query_number("continuation-token=t").unwrap_or(0);
        let contents = names(page, &|n| {
            format!("<Contents><Key>{n}</Key><Size>1</Size><LastModified>2026-12-01T07:00:00.000Z</LastModified></Contents>")
        });
        let body = format!("<ListBucketResult><NextContinuationToken>t{}</NextContinuationToken>{contents}</ListBucketResult>", page + 1);
        return Some(Reply::status(200, "application/xml", body));
    }
    if r.target.contains("comp=list") {
        let page = r.query_number("marker=t").unwrap_or(0);
        let blobs = names(page, &|n| {
            format!("<Blob><Name>{n}</Name><Properties><Last-Modified>Tue, 01 Dec 2026 07:00:00 GMT</Last-Modified><Content-Length>1</Content-Length><Content-Type>a/b</Content-Type></Properties></Blob>")
        });
        let body = format!("<EnumerationResults><Blobs>{blobs}</Blobs><NextMarker>t{}</NextMarker></EnumerationResults>", page + 1);
        return Some(Reply::status(200, "application/xml", body));
    }
    if r.target.contains("/o?prefix=") {
        let page = r.query_number("pageToken=t").unwrap_or(0);
        let items = names(page, &|n| {
            format!(r#"{{"name":"{}"}},"#, n.replacen("fleet", "x", 1))
        });
        let body = format!(
            r#"{{"items":[{}],"nextPageToken":"t{}"}}"#,
            items.trim_end_matches(','),
            page + 1
        );
        return Some(Reply::status(200, "application/json", body));
    }
    None
}

#[tokio::main]
async fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let handler: fn(&Request) -> Reply = match mode.as_str() {
        "record" => |_| object(2 * GIB),
        "unannounced" => |_| object(2 * GIB).unannounced(),
        "error" => |_| Reply::stream(500, "application/xml", GIB, b' '),
        "listing" => |r| listing(r).unwrap_or_else(|| absent(r)),
        "absent" => absent,
        other => {
            eprintln!(
                "usage: hostile_answers record|unannounced|error|listing|absent (not {other:?})"
            );
            std::process::exit(2);
        }
    };
    let server = serve(handler).await;
    println!("{}", server.endpoint());
    std::future::pending::<()>().await;
}
