//! Endless S3 listings (`ListObjectsV2`) for the canned server ([`crate::canned`]): shared by
//! the tests of the adapters that speak S3 (fence-s3, fence-opendal's s3 service), each of
//! which lists under the prefix `fleet`.
#![allow(dead_code)]

use crate::canned::{Reply, Request, GIB};

/// Page `page` of a listing under `fleet/cells/`: `names` objects, and always a next page.
pub fn listing_page(page: u64, names: u64) -> String {
    let mut xml = format!(
        "<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>true</IsTruncated>\
         <NextContinuationToken>t{}</NextContinuationToken>",
        page + 1
    );
    for i in 0..names {
        xml.push_str(&format!(
            "<Contents><Key>fleet/cells/c{page}-{i}/own.json</Key><Size>10</Size>\
             <LastModified>2026-12-01T07:00:00.000Z</LastModified></Contents>"
        ));
    }
    xml + "</ListBucketResult>"
}

/// Whether `r` asks for a listing page.
pub fn is_listing(r: &Request) -> bool {
    r.target.contains("list-type=2")
}

/// Every listing page continues with the next (`continuation-token=t<N>`), without end;
/// every other request finds no object.
pub fn endless_listing(names_per_page: u64) -> impl Fn(&Request) -> Reply + Send + Sync {
    move |r: &Request| match is_listing(r) {
        true => {
            let page = r.query_number("continuation-token=t").unwrap_or(0);
            Reply::status(200, "application/xml", listing_page(page, names_per_page))
        }
        false => Reply::status(
            404,
            "application/xml",
            "<Error><Code>NoSuchKey</Code></Error>",
        ),
    }
}

/// Every listing page is 1 GiB (a listing's head, then one name without end); every other
/// request finds nothing.
pub fn gibibyte_pages(r: &Request) -> Reply {
    let head = "<?xml version=\"1.0\"?><ListBucketResult><Contents><Key>";
    match is_listing(r) {
        true => Reply::stream(200, "application/xml", GIB, b'a').with_body_start(head),
        false => Reply::status(404, "application/xml", ""),
    }
}
