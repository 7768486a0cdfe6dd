//! [`GcsStore`]: the [`ConditionalStore`] on GCS object generations.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::store::delete_unsupported;
use fence_core::{
    Capabilities, CasGuard, Clock, ConditionalStore, DeleteOutcome, Entropy, Error, ErrorKind, Key,
    PutOutcome, Stored, Version, MAX_KEY_LEN,
};
use fence_wire::body::{
    over_put_limit, read_capped, read_prefix, read_record, reqwest_chunks, CappedError,
};
use fence_wire::client::CONTROL_ANSWER_LIMIT;
use fence_wire::headers::{single, Header};
use fence_wire::limits::StoreLimits;
use fence_wire::listing::{collect, Page, PageAsk};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE};
use reqwest::{RequestBuilder, Response, StatusCode};

use crate::auth::{token_timeout, AccessToken, Credentials};
use crate::builder::{GcsStoreBuilder, Timeouts};
use crate::classify::{self, Missing};
use crate::wire;

/// Attempts of one read (a read changes nothing, so repeating it is safe).
const READ_ATTEMPTS: u32 = 3;
/// Timeout of listing requests, which are inspection traffic on their own pool.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a bucket seen to exist explains a 404 whose body does not say what is missing.
const BUCKET_SEEN_FOR_MS: u64 = 30_000;
/// The most of a 404's body read to tell a missing object from a missing bucket.
const MAX_404_BODY: usize = 4096;

/// Everything [`GcsStoreBuilder::build`] validated.
pub(crate) struct Config {
    pub endpoint: String,
    pub bucket: String,
    pub prefix: Option<String>,
    pub credentials: Credentials,
    pub timeouts: Timeouts,
    pub limits: StoreLimits,
    pub conditional_delete: bool,
    pub entropy: Entropy,
}

/// A [`ConditionalStore`] on one GCS bucket (optionally under a prefix), speaking the JSON API.
///
/// - The [`Version`] is the object's **generation** (a decimal integer that changes on every
///   write, also when identical bytes are rewritten), never the ETag or MD5.
/// - `put` is one `multipart` upload with `ifGenerationMatch=0` ([`CasGuard::Absent`]) or
///   `ifGenerationMatch=<generation>` ([`CasGuard::Match`]); it is never retried.
/// - `get` is one `alt=media` download answering body and `x-goog-generation` together.
/// - Record traffic has its own connection pool with timeouts derived from the lease TTL;
///   listings use another pool.
///
/// ```
/// use fence_gcs::GcsStore;
/// use fence_core::ConditionalStore;
/// let store = GcsStore::builder()
///     .with_url("gs://fence-test/run-1")
///     .with_endpoint("http://127.0.0.1:4443")
///     .with_anonymous()
///     .build()
///     .unwrap();
/// assert!(!store.capabilities().conditional_delete);
/// assert!(!format!("{store:?}").contains("Bearer"));
/// ```
pub struct GcsStore {
    cfg: Config,
    /// Record traffic (get/put/delete): short timeouts, its own pool.
    records: reqwest::Client,
    /// Listings: inspection only, long timeout, its own pool.
    listings: reqwest::Client,
    /// When the bucket was last seen to exist (monotonic ms + 1; 0: not yet), so a 404 whose
    /// body does not say what is missing means "no such object" for a while.
    bucket_seen: AtomicU64,
    /// HTTP requests sent so far (round trips, for measurements).
    requests: AtomicU64,
    clock: Clock,
}

impl fmt::Debug for GcsStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GcsStore")
            .field("endpoint", &self.cfg.endpoint)
            .field("bucket", &self.cfg.bucket)
            .field("prefix", &self.cfg.prefix)
            .field("credentials", &self.cfg.credentials)
            .field("timeouts", &self.cfg.timeouts)
            .field("limits", &self.cfg.limits)
            .field("conditional_delete", &self.cfg.conditional_delete)
            .finish()
    }
}

impl GcsStore {
    /// A builder; see [`GcsStoreBuilder`].
    pub fn builder() -> GcsStoreBuilder {
        GcsStoreBuilder::default()
    }

    pub(crate) fn new(cfg: Config) -> Result<GcsStore, Error> {
        let records = http_client(cfg.timeouts.request, cfg.timeouts.connect)?;
        let listings = http_client(LIST_TIMEOUT, cfg.timeouts.connect)?;
        Ok(GcsStore {
            cfg,
            records,
            listings,
            bucket_seen: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            clock: Clock::system(),
        })
    }

    /// The bucket's name.
    pub fn bucket(&self) -> &str {
        &self.cfg.bucket
    }

    /// The prefix every key lives under, if any.
    pub fn prefix(&self) -> Option<&str> {
        self.cfg.prefix.as_deref()
    }

    /// The timeouts of record traffic.
    pub fn timeouts(&self) -> Timeouts {
        self.cfg.timeouts
    }

    /// The record limit: the largest body `put` sends and `get` reads.
    pub fn record_limit(&self) -> usize {
        self.cfg.limits.record
    }

    /// HTTP requests this store has sent (every round trip, retries of reads included).
    pub fn requests_sent(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// One attempt of record traffic: token, request and answer together bounded by the
    /// request timeout.
    async fn send(&self, req: RequestBuilder) -> Result<Response, Error> {
        self.send_within(req, self.cfg.timeouts.request).await
    }

    /// One attempt bounded by `bound` as a whole: the token lookup spends from the same
    /// budget as the request, and the request (to the last body byte) gets what is left.
    async fn send_within(&self, req: RequestBuilder, bound: Duration) -> Result<Response, Error> {
        let start = self.clock.mono_ms();
        let token = tokio::time::timeout(bound, self.cfg.credentials.bearer())
            .await
            .map_err(|_| token_timeout())??;
        let spent = Duration::from_millis(self.clock.mono_ms().saturating_sub(start));
        let left = bound.saturating_sub(spent);
        if left.is_zero() {
            return Err(token_timeout());
        }
        let req = authorize(req, token).timeout(left);
        self.requests.fetch_add(1, Ordering::Relaxed);
        req.send().await.map_err(transport_error)
    }

    /// The GCS object name of `key`: `prefix/key`.
    pub fn object_name(&self, key: &Key) -> Result<String, Error> {
        let name = match &self.cfg.prefix {
            Some(p) => format!("{p}/{key}"),
            None => key.as_str().to_owned(),
        };
        if name.len() > MAX_KEY_LEN {
            return Err(Error::new(
                ErrorKind::InvalidKey,
                "prefix + key is longer than GCS's 1024-byte object names",
            )
            .with_key(key)
            .not_committed());
        }
        Ok(name)
    }

    fn key_of(&self, name: &str) -> Option<Key> {
        let rel = match &self.cfg.prefix {
            Some(p) => name.strip_prefix(p.as_str())?.strip_prefix('/')?,
            None => name,
        };
        Key::new(rel).ok()
    }

    fn check_record(&self, key: &Key, body: &Bytes) -> Result<(), Error> {
        match body.len() <= self.cfg.limits.record {
            true => Ok(()),
            false => Err(over_put_limit(key, body.len(), self.cfg.limits.record)),
        }
    }

    /// An error for a non-success status, naming the bucket where that is the subject.
    fn status_error(&self, key: Option<&Key>, status: StatusCode) -> Error {
        let class = classify::status(status.as_u16());
        let message = match class.kind {
            ErrorKind::PermissionDenied => format!(
                "GCS refused access to bucket {:?} (HTTP {status})",
                self.cfg.bucket
            ),
            ErrorKind::NotFound => format!("GCS bucket {:?} does not exist", self.cfg.bucket),
            ErrorKind::InvalidInput if status.is_redirection() => format!(
                "GCS redirected the request (HTTP {status}); redirects are not followed: \
                 check the endpoint"
            ),
            _ => format!(
                "GCS answered HTTP {status} for bucket {:?}",
                self.cfg.bucket
            ),
        };
        let err = Error::new(class.kind, message).with_commit(class.commit);
        match key {
            Some(k) => err.with_key(k),
            None => err,
        }
    }

    /// After a 404 on an object: `Ok(())` if the object is what is missing, `NotFound` if
    /// the bucket is. Told by the body (real GCS says which), so object-only roles
    /// (`roles/storage.objectAdmin`, no `storage.buckets.get`) work; only a body that does not
    /// say (emulators) costs a bucket check, remembered for [`BUCKET_SEEN_FOR_MS`].
    async fn resolve_404(&self, resp: Response) -> Result<(), Error> {
        let body = read_prefix(reqwest_chunks(resp), MAX_404_BODY)
            .await
            .unwrap_or_default();
        match classify::missing(&body) {
            Missing::Object => Ok(()),
            Missing::Bucket => Err(self.bucket_missing()),
            Missing::Unsure => self.check_bucket().await,
        }
    }

    fn bucket_missing(&self) -> Error {
        self.status_error(None, StatusCode::NOT_FOUND)
            .not_committed()
    }

    async fn check_bucket(&self) -> Result<(), Error> {
        let seen = self.bucket_seen.load(Ordering::Relaxed);
        if seen > 0 && self.clock.mono_ms() < seen - 1 + BUCKET_SEEN_FOR_MS {
            return Ok(());
        }
        let url = wire::bucket_url(&self.cfg.endpoint, &self.cfg.bucket);
        let resp = self.send(self.records.get(url)).await?;
        match resp.status() {
            s if s.is_success() => {
                self.bucket_seen
                    .store(self.clock.mono_ms() + 1, Ordering::Relaxed);
                Ok(())
            }
            StatusCode::NOT_FOUND => Err(self.bucket_missing()),
            // A role without `storage.buckets.get`: the object's own 404 stands.
            StatusCode::FORBIDDEN | StatusCode::UNAUTHORIZED => Ok(()),
            other => Err(self.status_error(None, other).not_committed()),
        }
    }

    async fn get_once(&self, key: &Key, name: &str) -> Result<Option<Stored>, Error> {
        let url = wire::media_url(&self.cfg.endpoint, &self.cfg.bucket, name);
        let resp = self.send(self.records.get(url)).await?;
        match resp.status() {
            StatusCode::OK => read_media(key, resp, self.cfg.limits.record)
                .await
                .map(Some),
            StatusCode::NOT_FOUND => self.resolve_404(resp).await.map(|()| None),
            other => Err(self.status_error(Some(key), other)),
        }
    }

    async fn put_once(
        &self,
        key: &Key,
        body: &[u8],
        if_generation: u64,
    ) -> Result<PutOutcome, Error> {
        let name = self.object_name(key)?;
        let upload = wire::multipart(&self.cfg.entropy, &name, body)?;
        let url = wire::upload_url(&self.cfg.endpoint, &self.cfg.bucket, if_generation);
        let req = self
            .records
            .post(url)
            .header(CONTENT_TYPE, upload.content_type)
            .body(upload.payload);
        let resp = self.send(req).await?;
        match resp.status() {
            StatusCode::OK | StatusCode::CREATED => applied_version(key, resp).await,
            StatusCode::PRECONDITION_FAILED => Ok(PutOutcome::Rejected),
            other => Err(self.status_error(Some(key), other)),
        }
    }

    async fn delete_once(&self, key: &Key, name: &str) -> Result<(), Error> {
        let url = wire::object_url(&self.cfg.endpoint, &self.cfg.bucket, name);
        let resp = self.send(self.records.delete(url)).await?;
        match resp.status() {
            s if s.is_success() => Ok(()),
            StatusCode::NOT_FOUND => self.resolve_404(resp).await,
            other => Err(self.status_error(Some(key), other)),
        }
    }

    /// One page of a listing (one attempt), its answer read only up to the page's budget.
    async fn list_page(&self, prefix: &str, ask: &PageAsk) -> Result<Page, Error> {
        let url = wire::list_url(
            &self.cfg.endpoint,
            &self.cfg.bucket,
            prefix,
            ask.token.as_deref(),
        );
        let resp = self
            .send_within(self.listings.get(url), LIST_TIMEOUT)
            .await?;
        if !resp.status().is_success() {
            return Err(self.status_error(None, resp.status()));
        }
        let budget = usize::try_from(ask.budget).unwrap_or(usize::MAX);
        let bytes = read_capped(reqwest_chunks(resp), budget)
            .await
            .map_err(|e| match e {
                CappedError::OverLimit { .. } => ask.over.error(),
                CappedError::Stream(e) => transport_error(e),
            })?;
        let page: wire::ListPage = serde_json::from_slice(&bytes).map_err(|e| {
            Error::new(ErrorKind::Unsupported, "unreadable object listing from GCS").with_source(e)
        })?;
        Ok(Page {
            names: page.items.into_iter().map(|i| i.name).collect(),
            bytes: bytes.len() as u64,
            next: page.next_page_token,
        })
    }
}

fn authorize(req: RequestBuilder, token: Option<AccessToken>) -> RequestBuilder {
    match token {
        Some(t) => req.header(AUTHORIZATION, format!("Bearer {}", t.secret())),
        None => req,
    }
}

fn http_client(timeout: Duration, connect: Duration) -> Result<reqwest::Client, Error> {
    reqwest::Client::builder()
        // reqwest follows up to ten redirects by default: a 303 answering an upload was
        // followed as a GET, and that GET's 200 taken for the upload's success.
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout)
        .connect_timeout(connect)
        .pool_idle_timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| {
            Error::new(ErrorKind::InvalidInput, "cannot build the HTTP client")
                .with_source(e)
                .not_committed()
        })
}

/// A reqwest failure without a status. reqwest's errors name the URL (bucket and object,
/// never a token: tokens travel in a header).
fn transport_error(e: reqwest::Error) -> Error {
    let class = classify::transport(e.is_connect(), e.is_timeout());
    let what = if e.is_connect() {
        "could not connect to GCS"
    } else {
        "GCS request failed after it may have been sent"
    };
    Error::new(class.kind, what)
        .with_commit(class.commit)
        .with_source(e)
}

/// The object's bytes and generation from one download, the bytes read only up to `limit`.
async fn read_media(key: &Key, resp: Response, limit: usize) -> Result<Stored, Error> {
    let generation = match single(resp.headers(), "x-goog-generation") {
        Header::One(g) => wire::parse_generation(g),
        Header::Absent | Header::Unusable => None,
    };
    let Some(generation) = generation else {
        let message = "GCS answered a download without one usable x-goog-generation";
        return Err(Error::new(ErrorKind::Unsupported, message).with_key(key));
    };
    let announced = resp.content_length();
    let body = read_record(key, announced, reqwest_chunks(resp), limit, transport_error).await?;
    Ok(Stored {
        body,
        version: generation_version(generation),
    })
}

/// The version of an applied upload: the object resource's generation, which an
/// `x-goog-generation` header, if the answer has one, must repeat. Anything unreadable or
/// contradictory is ambiguous: the write landed, but we do not know as what.
async fn applied_version(key: &Key, resp: Response) -> Result<PutOutcome, Error> {
    let header = match single(resp.headers(), "x-goog-generation") {
        Header::Absent => Ok(None),
        Header::One(g) => wire::parse_generation(g).map(Some).ok_or(()),
        Header::Unusable => Err(()),
    };
    let limit = usize::try_from(CONTROL_ANSWER_LIMIT).unwrap_or(usize::MAX);
    let body = match read_capped(reqwest_chunks(resp), limit).await {
        Ok(body) => Some(body),
        Err(CappedError::OverLimit { .. }) => None,
        Err(CappedError::Stream(e)) => return Err(transport_error(e).with_key(key)),
    };
    let generation = body
        .and_then(|b| serde_json::from_slice::<wire::ObjectResource>(&b).ok())
        .and_then(|o| o.generation)
        .and_then(|g| wire::parse_generation(&g));
    match (generation, header) {
        (Some(g), Ok(None)) => Ok(PutOutcome::Applied(generation_version(g))),
        (Some(g), Ok(Some(h))) if g == h => Ok(PutOutcome::Applied(generation_version(g))),
        _ => Err(Error::new(
            ErrorKind::Other,
            "GCS accepted the upload but answered no single readable generation",
        )
        .with_key(key)),
    }
}

fn generation_version(generation: u64) -> Version {
    Version::new(generation.to_string()).unwrap_or_else(|_| unreachable!("digits are non-empty"))
}

async fn retry_read<T, F, Fut>(mut op: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let mut attempt = 1;
    loop {
        match op().await {
            Err(e) if attempt < READ_ATTEMPTS && classify::read_retryable(e.kind()) => {
                tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
                attempt += 1;
            }
            done => return done,
        }
    }
}

#[async_trait]
impl ConditionalStore for GcsStore {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        let name = self.object_name(key)?;
        // A read changes nothing: every failure is not committed, so a body cut short is a
        // retryable `Unavailable`.
        retry_read(|| self.get_once(key, &name))
            .await
            .map_err(|e| e.with_key(key).not_committed())
    }

    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        self.check_record(key, &body)?;
        let if_generation = match &guard {
            CasGuard::Absent => 0,
            // A token that is not a generation cannot be the current one.
            CasGuard::Match(v) => match wire::parse_generation(v.as_str()) {
                Some(g) => g,
                None => return Ok(PutOutcome::Rejected),
            },
        };
        self.put_once(key, &body, if_generation)
            .await
            .map_err(|e| e.with_key(key))
    }

    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        if !self.cfg.conditional_delete {
            return Err(delete_unsupported(key));
        }
        let Some(generation) = wire::parse_generation(version.as_str()) else {
            return Ok(DeleteOutcome::Rejected);
        };
        let name = self.object_name(key)?;
        let url = wire::delete_url(&self.cfg.endpoint, &self.cfg.bucket, &name, generation);
        let resp = self.send(self.records.delete(url)).await?;
        match resp.status() {
            s if s.is_success() => Ok(DeleteOutcome::Deleted),
            StatusCode::PRECONDITION_FAILED => Ok(DeleteOutcome::Rejected),
            StatusCode::NOT_FOUND => self
                .resolve_404(resp)
                .await
                .map(|()| DeleteOutcome::Rejected),
            other => Err(self.status_error(Some(key), other)),
        }
    }

    /// One `DELETE` without a precondition (right for an object written once under a name
    /// never reused; works also where conditional delete is not declared). Absent is `Ok`.
    async fn delete_immutable(&self, key: &Key) -> Result<(), Error> {
        let name = self.object_name(key)?;
        retry_read(|| self.delete_once(key, &name))
            .await
            .map_err(|e| e.with_key(key))
    }

    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        let gcs_prefix = match (prefix, &self.cfg.prefix) {
            (Some(p), _) => self.object_name(p)?,
            (None, Some(root)) => format!("{root}/"),
            (None, None) => String::new(),
        };
        let read_page = |ask: PageAsk| {
            let gcs_prefix = &gcs_prefix;
            async move { retry_read(|| self.list_page(gcs_prefix, &ask)).await }
        };
        let under = |k: &Key| prefix.is_none_or(|p| k.starts_with(p));
        let keep = |name: &str| self.key_of(name).filter(under);
        let listed = collect(self.cfg.limits.listing, read_page, keep).await;
        let mut keys = listed.map_err(|e| e.listing(prefix))?;
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    fn capabilities(&self) -> Capabilities {
        let base = if self.cfg.conditional_delete {
            Capabilities::full()
        } else {
            Capabilities::without_conditional_delete()
        };
        base.with_max_body(self.cfg.limits.record)
    }
}
