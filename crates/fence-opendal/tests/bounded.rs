//! fence-opendal (OpenDAL's s3 service) against hostile canned answers: the suite every HTTP
//! adapter runs (`fence_testkit::canned::bounded`), in S3's dialect, with the listing limits
//! of fence-wire's `ListingLimits` as on the other adapters.

use std::sync::Arc;
use std::time::Duration;

use fence_core::{ConditionalStore, ErrorKind};
use fence_opendal::emulator::{self, S3Server};
use fence_opendal::OpendalStore;
use fence_testkit::canned::bounded::{Dialect, Limits, Listings, Records};
use fence_testkit::canned::s3;

fn store(endpoint: &str, limits: Limits) -> Arc<dyn ConditionalStore> {
    let s3 = S3Server {
        endpoint: endpoint.to_owned(),
        bucket: "b".into(),
        region: "us-east-1".into(),
        access_key_id: "AKIDCANNED".into(),
        secret_access_key: "canned-secret".into(),
    };
    let operator = emulator::s3(&s3, "/fleet").unwrap();
    let mut builder = OpendalStore::builder(operator).with_cas_timeout(Duration::from_secs(20));
    if let Some(record) = limits.record {
        builder = builder.with_record_limit(record);
    }
    if let Some(listing) = limits.listing {
        builder = builder.with_listing_limits(listing);
    }
    Arc::new(builder.build().unwrap())
}

fn dialect() -> Dialect {
    let records = Records {
        // OpenDAL's s3 reader refuses an object answer without a length: unreadable.
        unannounced: ErrorKind::Unavailable,
        ..s3::records()
    };
    let listings = Listings {
        // OpenDAL's lister keeps the page tokens to itself.
        sees_page_tokens: false,
        ..s3::listings()
    };
    // All of S3's errors but the missing bucket: OpenDAL reads a 404 `NoSuchBucket` answering
    // a read as "no such object" when the answer is long (its error body cut at 4 KiB is no
    // XML it can parse), though it tells them apart in a short one.
    let errors = s3::ERRORS.split_at(4).0;
    Dialect::new(store, records, listings, s3::error, errors).with_version_header(s3::ETAG)
}

fence_testkit::bounded_answers!(dialect());
