//! The HTTP transport under every [`OpendalStore`](crate::OpendalStore): OpenDAL's own reqwest
//! transport over a client that never follows a redirect, wrapped to record what each request
//! of the store operation being observed came to, and to bound every answer body.
//!
//! Written here because an OpenDAL error does not say what happened on the wire: whether the
//! request was sent at all, what status answered it, or whether the connection failed before
//! or after sending. A conditional write's classification needs exactly those facts. OpenDAL
//! lets an operator's HTTP transport be replaced ([`opendal::OperationContext`]), so the
//! facts are taken where they happen. The default reqwest client follows up to ten redirects:
//! a `303` answering a conditional `PUT` is followed as a `GET`, whose `200` would be taken
//! for the write's success.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fence_wire::client::CONTROL_ANSWER_LIMIT;
use fence_wire::error_body::ERROR_BODY_LIMIT;
use fence_wire::headers::drop_unusable;
use fence_wire::listing::{ListingCap, ListingLimits, MAX_LISTING_PAGE};
use futures::StreamExt;
use opendal::{Buffer, HttpBody, HttpTransport, HttpTransporter};
use opendal_http_transport_reqwest::ReqwestTransport;

/// What one HTTP request of an observed operation came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Sent (or being sent) and not answered yet: a request whose future was dropped stays so.
    Pending,
    /// The store answered with this status.
    Answer(u16),
    /// The request could not be built: nothing was sent.
    NotSent,
    /// The connection could not be made (refused, unreachable, connect timeout): nothing sent.
    Connect,
    /// The request timed out after connecting.
    Timeout,
    /// The connection failed after connecting (reset, closed, unreadable answer).
    Broken,
}

/// One HTTP request of an observed operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Attempt {
    /// Whether the request can change the store (see [`is_mutating`]).
    pub mutating: bool,
    /// What it came to.
    pub outcome: Outcome,
}

impl Attempt {
    /// Whether this request may have changed the store: a mutating request that was sent and
    /// not refused (answered 2xx or 5xx, 408, 429, or never answered).
    pub(crate) fn may_have_landed(&self) -> bool {
        if !self.mutating {
            return false;
        }
        match self.outcome {
            Outcome::Pending | Outcome::Timeout | Outcome::Broken => true,
            Outcome::NotSent | Outcome::Connect => false,
            Outcome::Answer(status) => refusal(status).is_none(),
        }
    }
}

/// `Some(())` when `status` proves the request was refused as a whole: 3xx (never followed)
/// and 4xx except 408 and 429, which no provider documents as "not applied".
fn refusal(status: u16) -> Option<()> {
    match status {
        408 | 429 => None,
        300..=499 => Some(()),
        _ => None,
    }
}

tokio::task_local! {
    /// The exchange of the store operation being polled in this task.
    static CURRENT: Exchange;
}

/// The requests of one store operation, in the order they were sent. No attempt recorded
/// means the operation never reached the network. A listing's exchange also counts its pages
/// and answer bytes against its [`ListingLimits`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Exchange {
    attempts: Arc<Mutex<Vec<Attempt>>>,
    listing: Option<Arc<Mutex<PageCount>>>,
    /// Whether an answer body was cut off at its cap.
    cut: Arc<AtomicBool>,
}

impl Exchange {
    /// The exchange of a listing within `limits`: each request is one page, asked for only
    /// while pages are left, its answer cut off past what is left of the bytes (at most
    /// [`MAX_LISTING_PAGE`]).
    pub(crate) fn listing(limits: ListingLimits) -> Exchange {
        let count = PageCount {
            limits,
            pages: 0,
            bytes: 0,
            hit: None,
        };
        Exchange {
            listing: Some(Arc::new(Mutex::new(count))),
            ..Exchange::default()
        }
    }

    /// Whether an answer body of this exchange was longer than its cap (and cut off there).
    pub(crate) fn body_cut(&self) -> bool {
        self.cut.load(Ordering::Relaxed)
    }

    /// The listing limit this exchange's transport hit, if any.
    pub(crate) fn listing_cap(&self) -> Option<ListingCap> {
        self.listing.as_ref().and_then(|c| lock(c).hit)
    }

    /// Runs `operation` (an OpenDAL call) with its HTTP requests recorded here. OpenDAL sends
    /// the requests of a read, a single-shot write, a delete and a listing from inside the
    /// operation's own future, so a task-local reaches the transport without OpenDAL's help.
    pub(crate) async fn observe<F: Future>(&self, operation: F) -> F::Output {
        CURRENT.scope(self.clone(), operation).await
    }

    fn current() -> Option<Exchange> {
        CURRENT.try_with(Exchange::clone).ok()
    }

    fn start(&self, mutating: bool) -> usize {
        let mut attempts = lock(&self.attempts);
        attempts.push(Attempt {
            mutating,
            outcome: Outcome::Pending,
        });
        attempts.len() - 1
    }

    fn finish(&self, index: usize, outcome: Outcome) {
        let mut attempts = lock(&self.attempts);
        if let Some(attempt) = attempts.get_mut(index) {
            attempt.outcome = outcome;
        }
    }

    /// Every request so far.
    pub(crate) fn attempts(&self) -> Vec<Attempt> {
        lock(&self.attempts).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A listing's pages and answer bytes so far, against its limits (the names are counted by
/// the store, as OpenDAL's lister hands them over).
#[derive(Debug)]
struct PageCount {
    limits: ListingLimits,
    pages: usize,
    bytes: u64,
    /// The limit hit, once one is.
    hit: Option<ListingCap>,
}

impl PageCount {
    /// Before a page is asked for: how far its answer may be read (the most bytes, and the
    /// cap it hits past them), or the cap hit if no page may be asked for any more.
    fn ask(&mut self) -> Result<(u64, ListingCap), ListingCap> {
        if self.pages >= self.limits.pages {
            return Err(*self.hit.insert(ListingCap::Pages(self.limits.pages)));
        }
        self.pages += 1;
        let left = self.limits.bytes.saturating_sub(self.bytes);
        Ok(match left < MAX_LISTING_PAGE {
            true => (left, ListingCap::Bytes(self.limits.bytes)),
            false => (MAX_LISTING_PAGE, ListingCap::Page(MAX_LISTING_PAGE)),
        })
    }
}

/// How far one answer body is read: `cap` bytes; past them the exchange's `cut` is set (and
/// a listing page's `over` hit). A listing page's bytes count into the listing's.
#[derive(Debug, Clone, Default)]
struct BodyCap {
    cap: u64,
    exchange: Option<Exchange>,
    over: Option<ListingCap>,
}

impl BodyCap {
    /// Counts `len` more bytes of the answer (`seen` in all): `false` once past the cap.
    fn take(&self, len: u64, seen: u64) -> bool {
        let within = seen <= self.cap;
        let Some(exchange) = &self.exchange else {
            return within;
        };
        if !within {
            exchange.cut.store(true, Ordering::Relaxed);
        }
        if let Some(count) = &exchange.listing {
            let mut count = lock(count);
            count.bytes = count.bytes.saturating_add(len);
            if let (false, Some(over)) = (within, self.over) {
                count.hit.get_or_insert(over);
            }
        }
        within
    }
}

/// The transport's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bounds {
    /// Whole request, connect to last body byte.
    pub request: Duration,
    /// TCP + TLS connect.
    pub connect: Duration,
    /// The most bytes of any answer body handed to OpenDAL.
    pub body: u64,
}

/// OpenDAL's reqwest transport, observed and bounded.
#[derive(Debug, Clone)]
pub(crate) struct ObservingTransport {
    inner: ReqwestTransport,
    body_cap: u64,
}

impl ObservingTransport {
    /// A transport over a new reqwest client (its own connection pool) that never follows a
    /// redirect.
    pub(crate) fn new(bounds: Bounds) -> reqwest::Result<ObservingTransport> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(bounds.request)
            .connect_timeout(bounds.connect.min(bounds.request))
            .pool_idle_timeout(Duration::from_secs(60))
            .user_agent(concat!("fence-opendal/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(ObservingTransport {
            inner: ReqwestTransport::new(client),
            body_cap: bounds.body,
        })
    }

    /// As an operator's HTTP transport.
    pub(crate) fn into_transporter(self) -> HttpTransporter {
        HttpTransporter::new(self)
    }
}

impl HttpTransport for ObservingTransport {
    async fn fetch(&self, req: http::Request<Buffer>) -> opendal::Result<http::Response<HttpBody>> {
        let exchange = Exchange::current();
        let cap = self.body_cap(exchange.as_ref())?;
        let mutating = is_mutating(&req);
        let slot = exchange.map(|x| {
            let index = x.start(mutating);
            (x, index)
        });
        let sendable = reqwest::Url::parse(&req.uri().to_string()).is_ok();
        let result = self.inner.fetch(req).await;
        let outcome = match &result {
            Ok(resp) => Outcome::Answer(resp.status().as_u16()),
            Err(e) => transport_outcome(e, sendable),
        };
        if let Some((exchange, index)) = slot {
            exchange.finish(index, outcome);
        }
        result.map(|mut resp| {
            // Two different versions on one answer name none: OpenDAL would take one of them.
            for header in ["etag", "x-goog-generation"] {
                drop_unusable(resp.headers_mut(), header);
            }
            bounded_body(resp, mutating, cap)
        })
    }
}

/// `resp` with its body read no further than its cap: an error's start, a write's small
/// answer, or a read's record or listing page within `cap`.
fn bounded_body(
    resp: http::Response<HttpBody>,
    mutating: bool,
    cap: BodyCap,
) -> http::Response<HttpBody> {
    match (resp.status().is_success(), mutating) {
        (false, _) => resp.map(|body| first_bytes(body, ERROR_BODY_LIMIT)),
        // A write's answer: the status and headers are its proof; a body (GCS's object
        // resource) is small.
        (true, true) => resp.map(|body| first_bytes(body, CONTROL_ANSWER_LIMIT as usize)),
        (true, false) => resp.map(|body| capped(body, cap)),
    }
}

impl ObservingTransport {
    /// How far the answer to the next request of `exchange` may be read; an error, and no
    /// request sent, if it would be a listing page past the listing's limit of pages.
    fn body_cap(&self, exchange: Option<&Exchange>) -> opendal::Result<BodyCap> {
        let cap = BodyCap {
            cap: self.body_cap,
            exchange: exchange.cloned(),
            over: None,
        };
        let Some(count) = exchange.and_then(|x| x.listing.as_ref()) else {
            return Ok(cap);
        };
        let asked = lock(count).ask();
        match asked {
            Ok((page, over)) => Ok(BodyCap {
                cap: page,
                over: Some(over),
                ..cap
            }),
            Err(_) => Err(opendal::Error::new(
                opendal::ErrorKind::Unexpected,
                "the listing reached its limit of pages",
            )),
        }
    }
}

/// Whether a request can change the store: `PUT`, `PATCH`, `DELETE`, and `POST` except the
/// start of a GCS resumable upload (which creates a session, not an object) and the IMDSv2
/// token request (`PUT /latest/api/token`, a credential fetch).
pub(crate) fn is_mutating<B>(req: &http::Request<B>) -> bool {
    let uri = req.uri();
    match *req.method() {
        http::Method::POST => !uri.query().unwrap_or("").contains("uploadType=resumable"),
        http::Method::PUT => uri.path() != "/latest/api/token",
        http::Method::PATCH | http::Method::DELETE => true,
        _ => false,
    }
}

/// What a failed fetch came to, from the reqwest error OpenDAL's transport chains as source.
/// reqwest's connect timeout is both a connect and a timeout error: connect wins, since no
/// byte of the request was sent. An error of OpenDAL's own (no reqwest source) proves nothing
/// was sent only for a URL that cannot be parsed (`sendable` false): OpenDAL's transport also
/// fails *after* the answer came, when it cannot read its `Content-Length` or
/// `Content-Encoding`, and that answer may be to a write that landed.
fn transport_outcome(e: &opendal::Error, sendable: bool) -> Outcome {
    let reqwest = std::error::Error::source(e).and_then(|s| s.downcast_ref::<reqwest::Error>());
    match reqwest {
        None if !sendable => Outcome::NotSent,
        None => Outcome::Broken,
        Some(r) if r.is_builder() => Outcome::NotSent,
        Some(r) if r.is_connect() => Outcome::Connect,
        Some(r) if r.is_timeout() => Outcome::Timeout,
        Some(_) => Outcome::Broken,
    }
}

/// The first `limit` bytes of a body, handed on as the whole body: an error answer's first
/// [`ERROR_BODY_LIMIT`] bytes, where every store puts its code and message (OpenDAL reads an
/// error body whole to parse it), or a write answer's first [`CONTROL_ANSWER_LIMIT`] bytes.
/// The rest is never read (the connection is dropped). Announced as of unknown length, so
/// that OpenDAL does not take the shorter body for a broken answer.
fn first_bytes(body: HttpBody, limit: usize) -> HttpBody {
    let start = futures::stream::unfold((body, limit), |(mut body, left)| async move {
        use opendal::raw::oio::ReadStream;
        if left == 0 {
            return None;
        }
        match body.read().await {
            Ok(buf) if buf.is_empty() => None,
            Ok(buf) => {
                let take = buf.len().min(left);
                Some((Ok(buf.slice(..take)), (body, left - take)))
            }
            Err(e) => Some((Err(e), (body, 0))),
        }
    });
    HttpBody::new(Box::pin(start), None)
}

/// The body, cut off with an error once more than `cap` bytes arrived.
fn capped(body: HttpBody, cap: BodyCap) -> HttpBody {
    body.map_inner(|stream| {
        Box::new(stream.scan(0u64, move |seen, item| {
            let item = item.and_then(|buf| {
                *seen = seen.saturating_add(buf.len() as u64);
                match cap.take(buf.len() as u64, *seen) {
                    false => Err(opendal::Error::new(
                        opendal::ErrorKind::Unexpected,
                        format!("the answer is larger than {} bytes", cap.cap),
                    )),
                    true => Ok(buf),
                }
            });
            futures::future::ready(Some(item))
        }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: http::Method, uri: &str) -> http::Request<()> {
        http::Request::builder()
            .method(method)
            .uri(uri)
            .body(())
            .unwrap()
    }

    #[test]
    fn only_requests_that_can_change_the_store_are_mutating() {
        use http::Method;
        let cases = [
            (Method::PUT, "http://h/b/k", true),
            (Method::DELETE, "http://h/b/k", true),
            (
                Method::POST,
                "http://h/upload/storage/v1/b/b/o?uploadType=multipart",
                true,
            ),
            (
                Method::POST,
                "http://h/upload/storage/v1/b/b/o?uploadType=resumable&name=k",
                false,
            ),
            (
                Method::PUT,
                "http://169.254.169.254/latest/api/token",
                false,
            ),
            (Method::GET, "http://h/b/k", false),
            (Method::HEAD, "http://h/b/k", false),
        ];
        for (method, uri, mutating) in cases {
            assert_eq!(
                is_mutating(&request(method.clone(), uri)),
                mutating,
                "{method} {uri}"
            );
        }
    }

    #[test]
    fn refused_and_unsent_requests_did_not_land() {
        let at = |outcome| Attempt {
            mutating: true,
            outcome,
        };
        for landed in [
            Outcome::Pending,
            Outcome::Timeout,
            Outcome::Broken,
            Outcome::Answer(200),
            Outcome::Answer(500),
            Outcome::Answer(503),
            Outcome::Answer(408),
            Outcome::Answer(429),
        ] {
            assert!(at(landed).may_have_landed(), "{landed:?}");
        }
        for refused in [
            Outcome::NotSent,
            Outcome::Connect,
            Outcome::Answer(303),
            Outcome::Answer(308),
            Outcome::Answer(400),
            Outcome::Answer(403),
            Outcome::Answer(409),
            Outcome::Answer(412),
        ] {
            assert!(!at(refused).may_have_landed(), "{refused:?}");
        }
        let read = Attempt {
            mutating: false,
            outcome: Outcome::Pending,
        };
        assert!(!read.may_have_landed());
    }

    #[tokio::test]
    async fn answers_above_the_cap_are_cut_off() {
        use opendal::raw::oio::ReadStream;
        let chunks = futures::stream::iter(
            [b"abc".as_slice(), b"def", b"g"].map(|b| Ok(Buffer::from(b.to_vec()))),
        );
        let cap = BodyCap {
            cap: 6,
            ..BodyCap::default()
        };
        let mut body = capped(HttpBody::new(chunks, None), cap);
        assert_eq!(body.read().await.unwrap().to_vec(), b"abc");
        assert_eq!(body.read().await.unwrap().to_vec(), b"def");
        assert!(body.read().await.is_err(), "the 7th byte is over the cap");
    }
}
