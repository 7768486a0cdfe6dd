//! One suite of hostile answers that every HTTP adapter runs: answers of any size end within
//! their deadline, with the right classification, having read no more than their caps (a
//! record at the record limit, an error body at a few KiB, a write's answer at its own cap, a
//! listing within its limits), a refused listing is an error naming its prefix, and an answer
//! is never trusted on one version header picked out of several.
//!
//! An adapter describes its [`Dialect`] — how to build it at a canned server, and what its
//! store's answers look like — and runs every case with one line, as object_store's
//! `integration.rs` is run per backend:
//!
//! ```text
//! fence_testkit::bounded_answers!(dialect());
//! ```
//!
//! Each case is also a function here, for an adapter that runs some of them by hand.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use fence_core::{CasGuard, Commit, ConditionalStore, Error, ErrorKind, Key, PutOutcome, Stored};
use fence_wire::listing::ListingLimits;

use super::checks::{assert_error, assert_read_no_further, within_deadline, GIB, HANG_UP_SLACK};
use super::server::{serve, Canned, Reply, Request};

/// Limits of a listing that allow only 20 pages.
pub const TWENTY_PAGES: ListingLimits = ListingLimits {
    pages: 20,
    ..ListingLimits::DEFAULT
};

/// The limits a case builds its store with (`None`: the adapter's default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// The record limit.
    pub record: Option<usize>,
    /// The listing limits.
    pub listing: Option<ListingLimits>,
}

/// What a request comes to, as a case expects it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// A write applied (at whatever version).
    Applied,
    /// A write rejected.
    Rejected,
    /// A read that found nothing.
    Absent,
    /// An error of this kind and commit state.
    Fails(ErrorKind, Commit),
    /// Not checked: an answer the store never gives this request.
    Unchecked,
}

/// An error answer of the adapter's dialect and what it comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCase {
    /// The status.
    pub status: u16,
    /// The store's error code (`AccessDenied`).
    pub code: &'static str,
    /// What a create answered this way comes to.
    pub create: Expect,
    /// What a read answered this way comes to.
    pub read: Expect,
}

impl ErrorCase {
    /// An answer of `status` and `code`: a create comes to `create`, a read to `read`.
    pub const fn new(status: u16, code: &'static str, create: Expect, read: Expect) -> Self {
        ErrorCase {
            status,
            code,
            create,
            read,
        }
    }
}

/// A listing refused with `status` and `code`: an error of `kind`, not committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefusedListing {
    /// The status.
    pub status: u16,
    /// The store's error code.
    pub code: &'static str,
    /// The error's kind.
    pub kind: ErrorKind,
}

impl RefusedListing {
    /// A listing refused with `status` and `code`, an error of `kind`.
    pub const fn new(status: u16, code: &'static str, kind: ErrorKind) -> Self {
        RefusedListing { status, code, kind }
    }
}

/// A header that carries versions (`ETag`, `x-goog-generation`), and what a write answered
/// with two different ones comes to (a read so answered is `Unsupported`, not committed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionHeader {
    /// The header's name.
    pub name: &'static str,
    /// A value different from every one the dialect's answers carry.
    pub other: &'static str,
    /// What a create answered with two different versions comes to.
    pub write: Expect,
}

/// One adapter, as the suite sees it: how to build it at a canned server, and its store's
/// answers. Every answer function gives a complete answer the adapter would accept but for
/// what the case changes.
#[derive(Clone, Copy)]
pub struct Dialect {
    /// The adapter at `endpoint`, with `limits`; its requests' timeouts long enough that only
    /// the answers' sizes decide.
    pub store: fn(endpoint: &str, limits: Limits) -> Arc<dyn ConditionalStore>,
    /// The record limit the adapter declares when none is set.
    pub default_record_limit: usize,
    /// The answer to a request the adapter makes besides a case's own (DynamoDB's table
    /// description), if `request` is one; such requests are not counted.
    pub control: fn(&Request) -> Option<Reply>,
    /// Its records' answers.
    pub records: Records,
    /// An error answer of `status` and `code`, its body `len` bytes long.
    pub error: fn(status: u16, code: &str, len: u64) -> Reply,
    /// Error answers and what they come to.
    pub errors: &'static [ErrorCase],
    /// Its listings' answers.
    pub listings: Listings,
    /// The header of versions, when answers carry them in a header.
    pub version_header: Option<VersionHeader>,
}

/// An adapter's answers to reads and writes of records.
#[derive(Debug, Clone, Copy)]
pub struct Records {
    /// Whether a request is a write of a record.
    pub is_write: fn(&Request) -> bool,
    /// A read's answer carrying a record of `len` bytes (at one version), its length
    /// announced or not.
    pub record: fn(len: u64, announced: bool) -> Reply,
    /// What a read of a record of unannounced length far over the limit comes to.
    pub unannounced: ErrorKind,
    /// A read's answer saying there is no such record.
    pub absent: fn() -> Reply,
    /// A write's success, its body `len` bytes long (0: as the store answers it).
    pub written: fn(len: u64) -> Reply,
    /// What a create answered by a success whose body is a gibibyte long comes to.
    pub long_write: Expect,
}

/// An adapter's listing pages.
#[derive(Debug, Clone, Copy)]
pub struct Listings {
    /// Whether a request asks for a listing page.
    pub is_listing: fn(&Request) -> bool,
    /// A listing page of `names` keys under `cells/` (page `page`'s), continued with the
    /// page token `next`.
    pub page: fn(page: u64, names: u64, next: &str) -> Reply,
    /// The page a listing request asks for: `N` of a token `tN` (0 for the first).
    pub page_asked: fn(&Request) -> u64,
    /// A listing page whose answer is `len` bytes long.
    pub long_page: fn(len: u64) -> Reply,
    /// Whether the adapter reads the listing's page tokens itself (OpenDAL's lister keeps
    /// them): a token that repeats is then refused at the second page, otherwise only at the
    /// limit of pages.
    pub sees_page_tokens: bool,
    /// Listings refused, and the errors they come to.
    pub refused: &'static [RefusedListing],
}

impl Dialect {
    /// The dialect of an adapter built by `store`: answers as `records` and `listings` say,
    /// errors by `error` coming to `errors`; the default record limit fence's
    /// ([`fence_core::DEFAULT_RECORD_LIMIT`]), no requests of its own, no version header.
    pub const fn new(
        store: fn(endpoint: &str, limits: Limits) -> Arc<dyn ConditionalStore>,
        records: Records,
        listings: Listings,
        error: fn(status: u16, code: &str, len: u64) -> Reply,
        errors: &'static [ErrorCase],
    ) -> Dialect {
        Dialect {
            store,
            default_record_limit: fence_core::DEFAULT_RECORD_LIMIT,
            control: |_| None,
            records,
            error,
            errors,
            listings,
            version_header: None,
        }
    }

    /// The same, its versions in `header` ([`Dialect::version_header`]).
    #[must_use]
    pub const fn with_version_header(mut self, header: VersionHeader) -> Dialect {
        self.version_header = Some(header);
        self
    }

    /// The same, with the requests of its own `control` answers ([`Dialect::control`]).
    #[must_use]
    pub const fn with_control(mut self, control: fn(&Request) -> Option<Reply>) -> Dialect {
        self.control = control;
        self
    }

    /// The same, declaring `limit` as its default record limit.
    #[must_use]
    pub const fn with_default_record_limit(mut self, limit: usize) -> Dialect {
        self.default_record_limit = limit;
        self
    }
}

impl fmt::Debug for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dialect")
            .field("default_record_limit", &self.default_record_limit)
            .field("records", &self.records)
            .field("listings", &self.listings)
            .finish_non_exhaustive()
    }
}

/// What a request came to, to compare with an [`Expect`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Applied,
    Rejected,
    Absent,
    Found(Bytes),
    Fails(ErrorKind, Commit),
}

impl Seen {
    fn of_put(r: Result<PutOutcome, Error>) -> Seen {
        match r {
            Ok(PutOutcome::Applied(_)) => Seen::Applied,
            Ok(PutOutcome::Rejected) => Seen::Rejected,
            Err(e) => Seen::Fails(e.kind(), e.commit()),
        }
    }

    fn of_get(r: Result<Option<Stored>, Error>) -> Seen {
        match r {
            Ok(None) => Seen::Absent,
            Ok(Some(s)) => Seen::Found(s.body),
            Err(e) => Seen::Fails(e.kind(), e.commit()),
        }
    }

    fn is(&self, want: Expect) -> bool {
        match (self, want) {
            (_, Expect::Unchecked) => true,
            (Seen::Applied, Expect::Applied) | (Seen::Rejected, Expect::Rejected) => true,
            (Seen::Absent, Expect::Absent) => true,
            (Seen::Fails(k, c), Expect::Fails(kind, commit)) => (*k, *c) == (kind, commit),
            _ => false,
        }
    }
}

impl Dialect {
    /// A canned server answering the adapter's own requests ([`Dialect::control`]) and every
    /// other with `handler`.
    async fn serve(&self, handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Canned {
        let control = self.control;
        serve(move |r| control(r).unwrap_or_else(|| handler(r))).await
    }

    /// The requests of `server` that `f` picks, but the adapter's own.
    fn count(&self, server: &Canned, f: impl Fn(&Request) -> bool) -> usize {
        let control = self.control;
        server.count(|r| control(r).is_none() && f(r))
    }

    fn at(&self, server: &Canned, limits: Limits) -> Arc<dyn ConditionalStore> {
        (self.store)(&server.endpoint(), limits)
    }

    /// Listing pages of `names` names, each continued by the next, without end; every other
    /// request finds no record.
    async fn endless_listing(&self, names: u64) -> Canned {
        let d = *self;
        self.serve(move |r| match (d.listings.is_listing)(r) {
            true => {
                let page = (d.listings.page_asked)(r);
                (d.listings.page)(page, names, &format!("t{}", page + 1))
            }
            false => (d.records.absent)(),
        })
        .await
    }
}

fn key() -> Key {
    Key::new("cells/c1/own.json").expect("a valid key")
}

fn cells() -> Key {
    Key::new("cells").expect("a valid key")
}

async fn create(store: &dyn ConditionalStore) -> Result<PutOutcome, Error> {
    within_deadline(store.put(&key(), "ours".into(), CasGuard::Absent)).await
}

/// A read of a record far over the limit (`announced` or not) ends as `kind`, not committed,
/// naming the key, after one request, having read no further than the limit.
async fn long_record_refused(d: &Dialect, announced: bool, kind: ErrorKind) {
    let record = d.records.record;
    let server = d.serve(move |_| record(2 * GIB, announced)).await;
    let store = d.at(&server, Limits::default());
    let err = within_deadline(store.get(&key())).await.unwrap_err();
    assert_error(&err, kind, Commit::NotCommitted);
    assert_eq!(err.key(), Some(&key()));
    let streamed = server.streamed();
    assert!(streamed < HANG_UP_SLACK, "read {streamed} bytes");
    let reads = d.count(&server, |_| true);
    assert_eq!(reads, 1, "a record too long is not retried");
}

/// A record of 2 GiB, its length announced: `Corrupt`, read no further than the limit.
pub async fn a_record_far_over_the_limit_is_corrupt_and_read_no_further(d: Dialect) {
    long_record_refused(&d, true, ErrorKind::Corrupt).await;
}

/// The same without a `Content-Length` (the body ends when the connection does): read no
/// further, as [`Records::unannounced`] says.
pub async fn a_record_of_unannounced_length_is_read_no_further(d: Dialect) {
    long_record_refused(&d, false, d.records.unannounced).await;
}

/// One setting bounds puts and gets: with a record limit of 1,000, a read of 1,001 bytes is
/// `Corrupt` and a write of 1,001 is refused before it is sent, one of 1,000 is sent; the
/// adapter declares its limit, and its default when none is set.
pub async fn the_record_limit_is_one_setting_that_bounds_puts_and_gets(d: Dialect) {
    let server = d
        .serve(move |r| match (d.records.is_write)(r) {
            true => (d.records.written)(0),
            false => (d.records.record)(1001, true),
        })
        .await;
    let limits = Limits {
        record: Some(1000),
        ..Limits::default()
    };
    let limited = d.at(&server, limits);
    assert_eq!(limited.capabilities().max_body, Some(1000));
    let read = limited.get(&key()).await.unwrap_err();
    assert_eq!(read.kind(), ErrorKind::Corrupt, "{read:?}");
    let k = key();
    let long = limited.put(&k, vec![0; 1001].into(), CasGuard::Absent);
    let long = long.await.unwrap_err();
    assert_error(&long, ErrorKind::InvalidInput, Commit::NotCommitted);
    let fits = limited
        .put(&k, vec![0; 1000].into(), CasGuard::Absent)
        .await;
    assert!(matches!(fits, Ok(PutOutcome::Applied(_))), "{fits:?}");
    let writes = d.count(&server, d.records.is_write);
    assert_eq!(writes, 1, "the long body was never sent");
    let default = d.at(&server, Limits::default()).capabilities().max_body;
    assert_eq!(default, Some(d.default_record_limit));
}

/// A record of exactly the limit reads whole.
pub async fn a_record_at_the_limit_reads_whole(d: Dialect) {
    let server = d.serve(move |_| (d.records.record)(5000, true)).await;
    let limits = Limits {
        record: Some(5000),
        ..Limits::default()
    };
    let got = d.at(&server, limits).get(&key()).await.unwrap();
    assert_eq!(got.map(|s| s.body.len()), Some(5000));
}

/// What a create and a read come to against a server answering everything with `reply`,
/// and that the server was read no further than the caps allow.
async fn outcomes(d: &Dialect, reply: Reply) -> (Seen, Seen) {
    let server = d.serve(move |_| reply.clone()).await;
    let store = d.at(&server, Limits::default());
    let created = Seen::of_put(create(store.as_ref()).await);
    let read = Seen::of_get(within_deadline(store.get(&key())).await);
    assert_read_no_further(&server);
    (created, read)
}

/// Error answers of 1 GiB come to what the same answers of a few hundred bytes come to (only
/// their start is read), and to what the dialect's table says.
pub async fn error_answers_of_a_gibibyte_are_read_no_further_and_classified_as_usual(d: Dialect) {
    for case in d.errors {
        let (status, code) = (case.status, case.code);
        let short = outcomes(&d, (d.error)(status, code, 200)).await;
        let long = outcomes(&d, (d.error)(status, code, GIB)).await;
        assert_eq!(
            long, short,
            "HTTP {status} {code}: a long answer as a short one"
        );
        assert!(
            long.0.is(case.create),
            "HTTP {status} {code}: create {long:?}"
        );
        assert!(long.1.is(case.read), "HTTP {status} {code}: read {long:?}");
    }
}

/// A write's success whose body is 1 GiB: as [`Records::long_write`] says (its headers are
/// the proof, or it is ambiguous), the body read no further than its cap.
pub async fn a_write_answered_with_a_long_body_is_read_no_further(d: Dialect) {
    let server = d.serve(move |_| (d.records.written)(GIB)).await;
    let got = Seen::of_put(create(d.at(&server, Limits::default()).as_ref()).await);
    assert!(
        got.is(d.records.long_write),
        "{got:?}, expected {:?}",
        d.records.long_write
    );
    assert_read_no_further(&server);
}

/// Lists `prefix`, which must stop on a listing limit within the deadline: `Unsupported`,
/// not committed.
async fn assert_listing_capped(store: &dyn ConditionalStore, prefix: Option<&Key>) {
    let err = within_deadline(store.list(prefix)).await.unwrap_err();
    assert_error(&err, ErrorKind::Unsupported, Commit::NotCommitted);
}

/// Listing pages of 1,000 names that never end stop at the limit of names (the default
/// 100,000) at the 101st page, with an error that says so.
pub async fn a_listing_that_never_ends_stops_at_its_limit_of_names(d: Dialect) {
    let server = d.endless_listing(1000).await;
    assert_listing_capped(d.at(&server, Limits::default()).as_ref(), Some(&cells())).await;
    assert_eq!(d.count(&server, d.listings.is_listing), 101);
}

/// Empty pages that never end stop at the limit of pages.
pub async fn empty_pages_that_never_end_stop_at_the_limit_of_pages(d: Dialect) {
    let server = d.endless_listing(0).await;
    let limits = Limits {
        listing: Some(TWENTY_PAGES),
        ..Limits::default()
    };
    assert_listing_capped(d.at(&server, limits).as_ref(), None).await;
    assert_eq!(d.count(&server, d.listings.is_listing), 20);
}

/// A page token that repeats is an error, not the end of the listing: at the second page
/// when the adapter sees the tokens ([`Listings::sees_page_tokens`]), else at the limit of
/// pages.
pub async fn a_page_token_that_repeats_is_an_error_not_the_end(d: Dialect) {
    let server = d
        .serve(move |r| match (d.listings.is_listing)(r) {
            true => (d.listings.page)(0, 1, "same"),
            false => (d.records.absent)(),
        })
        .await;
    let limits = Limits {
        listing: Some(TWENTY_PAGES),
        ..Limits::default()
    };
    assert_listing_capped(d.at(&server, limits).as_ref(), None).await;
    let pages = if d.listings.sees_page_tokens {
        2
    } else {
        TWENTY_PAGES.pages
    };
    assert_eq!(d.count(&server, d.listings.is_listing), pages);
}

/// One listing page of 1 GiB: read up to the page limit, then refused.
pub async fn a_listing_page_of_a_gibibyte_is_read_no_further(d: Dialect) {
    let server = d
        .serve(move |r| match (d.listings.is_listing)(r) {
            true => (d.listings.long_page)(GIB),
            false => (d.records.absent)(),
        })
        .await;
    assert_listing_capped(d.at(&server, Limits::default()).as_ref(), None).await;
    assert_read_no_further(&server);
}

/// A listing the store refuses (403, a missing bucket, any error) is an error naming the
/// listed prefix, not committed — never an empty list.
pub async fn a_refused_listing_is_an_error_naming_the_prefix(d: Dialect) {
    for case in d.listings.refused {
        let (status, code) = (case.status, case.code);
        let server = d
            .serve(move |r| match (d.listings.is_listing)(r) {
                true => (d.error)(status, code, 0),
                false => (d.records.absent)(),
            })
            .await;
        let store = d.at(&server, Limits::default());
        let err = within_deadline(store.list(Some(&cells())))
            .await
            .unwrap_err();
        let got = (err.kind(), err.commit());
        assert_eq!(
            got,
            (case.kind, Commit::NotCommitted),
            "{status} {code}: {err}"
        );
        assert_eq!(err.key(), Some(&cells()), "{status} {code}: {err}");
    }
}

/// Two different versions on one answer: neither is the version of anything. The same one
/// twice is one. Only for a dialect with a [`Dialect::version_header`]; one without runs the
/// suite as `bounded_answers!(dialect, without_version_header)`, which leaves this case out.
pub async fn an_answer_is_never_trusted_on_one_of_two_versions(d: Dialect) {
    let header = d
        .version_header
        .expect("a dialect without a version header leaves this case out");
    let other = move |reply: Reply| reply.with_header(header.name, header.other);
    let server = d
        .serve(move |r| match (d.records.is_write)(r) {
            true => other((d.records.written)(0)),
            false => other((d.records.record)(2, true)),
        })
        .await;
    let store = d.at(&server, Limits::default());
    let written = Seen::of_put(create(store.as_ref()).await);
    assert!(written.is(header.write), "{written:?}");
    let read = Seen::of_get(store.get(&key()).await);
    let unsupported = Expect::Fails(ErrorKind::Unsupported, Commit::NotCommitted);
    assert!(read.is(unsupported), "{read:?}");
}

/// Runs every case of the suite against `$dialect` (an expression giving a [`Dialect`]), each
/// as its own `#[tokio::test]`, in a module `bounded_answers`. A dialect whose answers carry
/// no version header (DynamoDB's versions are in its JSON) is run as
/// `bounded_answers!(dialect(), without_version_header)`: every case but
/// [`an_answer_is_never_trusted_on_one_of_two_versions`], which it could not fail.
#[macro_export]
macro_rules! bounded_answers {
    ($dialect:expr) => {
        $crate::bounded_answers!(@module $dialect; an_answer_is_never_trusted_on_one_of_two_versions);
    };
    ($dialect:expr, without_version_header) => {
        $crate::bounded_answers!(@module $dialect;);
    };
    (@module $dialect:expr; $($more:ident),*) => {
        mod bounded_answers {
            use super::*;

            $crate::bounded_answers!(@cases $dialect;
                a_record_far_over_the_limit_is_corrupt_and_read_no_further,
                a_record_of_unannounced_length_is_read_no_further,
                the_record_limit_is_one_setting_that_bounds_puts_and_gets,
                a_record_at_the_limit_reads_whole,
                error_answers_of_a_gibibyte_are_read_no_further_and_classified_as_usual,
                a_write_answered_with_a_long_body_is_read_no_further,
                a_listing_that_never_ends_stops_at_its_limit_of_names,
                empty_pages_that_never_end_stop_at_the_limit_of_pages,
                a_page_token_that_repeats_is_an_error_not_the_end,
                a_listing_page_of_a_gibibyte_is_read_no_further,
                a_refused_listing_is_an_error_naming_the_prefix,
                $($more),*
            );
        }
    };
    (@cases $dialect:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                $crate::canned::bounded::$case($dialect).await;
            }
        )*
    };
}
