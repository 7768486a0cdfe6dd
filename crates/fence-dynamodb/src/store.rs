//! [`DynamoDbStore`]: the [`ConditionalStore`] contract over DynamoDB conditional writes.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::{
    Capabilities, CasGuard, Clock, ConditionalStore, Current, DeleteOutcome, Entropy, Error,
    ErrorKind, Key, PutOutcome, Stored, Version,
};
use fence_wire::body::{over_put_limit, over_record_limit};
use fence_wire::client::CONTROL_ANSWER_LIMIT;
use fence_wire::limits::StoreLimits;
use fence_wire::listing::{collect, Page, PageAsk};
use serde_json::Value;
use tokio::sync::OnceCell;

use crate::builder::DynamoDbStoreBuilder;
use crate::classify::{self, condition_failed, exception, Failure};
use crate::item::{
    item_answer_cap, next_version, ErrorAnswer, GetAnswer, Item, Place, QueryAnswer,
};
use crate::table::{Described, Unfit};
use crate::wire::{self, Answer, Body, Caps, Op, Refusal, Signer};

/// The most of an answer without an item (a write's success, an error without `ALL_OLD`, a
/// table's description) that is read.
const CONTROL: usize = CONTROL_ANSWER_LIMIT as usize;
/// How long [`DynamoDbStore::create_table`] waits for a new table to become `ACTIVE`.
const CREATE_WAIT: Duration = Duration::from_secs(120);

/// Everything [`DynamoDbStoreBuilder::build`] validated.
pub(crate) struct Config {
    pub place: Place,
    pub endpoint: String,
    pub signer: Signer,
    /// Conditional writes: no retries, `cas_timeout`, their own pool.
    pub writes: reqwest::Client,
    /// Reads, listings and the table's description: retried, their own pool.
    pub reads: reqwest::Client,
    pub cas_timeout: Duration,
    pub read_timeout: Duration,
    pub read_retries: usize,
    pub limits: StoreLimits,
    pub entropy: Entropy,
}

/// A DynamoDB table (one partition of it: the prefix) as a fence [`ConditionalStore`].
///
/// - create: `PutItem` with `attribute_not_exists(sk)`; replace: `PutItem` with `#v = :v` on
///   the version attribute fence writes (`<generation>-<random>`, so a delete and re-create
///   never repeats one); delete: `DeleteItem` with the same condition; read: `GetItem` with
///   `ConsistentRead`; list: a `Query` of the partition's sort keys, never a `Scan`;
/// - every conditional write asks for `ReturnValuesOnConditionCheckFailure=ALL_OLD`: a
///   rejection carries the item the condition saw
///   ([`put_with_current`](ConditionalStore::put_with_current)), which settles a lost
///   compare-and-swap without a read;
/// - writes are sent once (no retries, `ttl / 3`, their own connection pool); reads retry;
/// - the table is described before the first request: fence's key schema, and no replica
///   in other Regions unless in multi-Region strong consistency.
///
/// ```
/// # async fn demo() -> Result<(), fence_core::Error> {
/// use fence_core::{CasGuard, ConditionalStore, Key, PutOutcome};
/// let store = fence_dynamodb::DynamoDbStore::from_env()
///     .with_url("dynamodb://fence-locks/fleet-a")
///     .build()?;
/// let key = Key::new("nodes/n1.json")?;
/// match store.put(&key, "{}".into(), CasGuard::Absent).await? {
///     PutOutcome::Applied(version) => println!("created at {version}"),
///     PutOutcome::Rejected => println!("someone else was first"),
/// }
/// # Ok(()) }
/// ```
pub struct DynamoDbStore {
    cfg: Config,
    /// Set once the table was described and found fit.
    table_fit: OnceCell<()>,
    /// HTTP requests sent so far (for measurements).
    requests: AtomicU64,
}

impl DynamoDbStore {
    /// A builder with nothing set.
    pub fn builder() -> DynamoDbStoreBuilder {
        DynamoDbStoreBuilder::new()
    }

    /// A builder reading the `AWS_*` environment variables (see
    /// [`DynamoDbStoreBuilder::from_env`]).
    pub fn from_env() -> DynamoDbStoreBuilder {
        DynamoDbStoreBuilder::from_env()
    }

    pub(crate) fn new(cfg: Config) -> Self {
        DynamoDbStore {
            cfg,
            table_fit: OnceCell::new(),
            requests: AtomicU64::new(0),
        }
    }

    /// The table.
    pub fn table(&self) -> &str {
        &self.cfg.place.table
    }

    /// The prefix: the partition key of every item of this store (`None`: the partition
    /// `/`).
    pub fn prefix(&self) -> Option<&str> {
        let p = self.cfg.place.partition.as_str();
        (p != crate::item::ROOT_PARTITION).then_some(p)
    }

    /// The bound of one conditional write.
    pub fn cas_timeout(&self) -> Duration {
        self.cfg.cas_timeout
    }

    /// The record limit: the largest body `put` sends and `get` reads.
    pub fn record_limit(&self) -> usize {
        self.cfg.limits.record
    }

    /// HTTP requests this store has sent (every attempt, the table's description included).
    pub fn requests_sent(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Describes the table and judges it, once per store (a fit table is remembered): fence's
    /// key schema ([`ErrorKind::InvalidInput`] otherwise), and no replica in other Regions
    /// unless the table is in multi-Region strong consistency ([`ErrorKind::Unsupported`]
    /// otherwise: conditional writes would not fence across Regions). A missing table is
    /// [`ErrorKind::NotFound`]. Every operation calls it first; errors are not committed.
    pub async fn check_table(&self) -> Result<(), Error> {
        self.table_fit
            .get_or_try_init(|| self.retry_read(|| self.describe()))
            .await
            .map(|_| ())
    }

    /// Creates the table with fence's key schema, billed on demand, and waits until it is
    /// active (at most two minutes). `Ok(false)` when a table of that name exists already
    /// (then [`check_table`](Self::check_table) judges it).
    pub async fn create_table(&self) -> Result<bool, Error> {
        let request = (Op::CreateTable, &self.cfg.place.create());
        let answer = self.call_reads(request, CONTROL).await?;
        let refusal = Refusal::of(answer.status, &answer.body);
        let created = match (answer.status, refusal.code()) {
            (200, _) => true,
            (400, Some("ResourceInUseException")) => false,
            _ => return Err(self.refused(None, refusal, false)),
        };
        let clock = Clock::system();
        let until = clock.mono_ms() + CREATE_WAIT.as_millis() as u64;
        while !self.retry_read(|| self.table_active()).await? {
            if clock.mono_ms() >= until {
                let why = "the new table did not become ACTIVE within two minutes";
                return Err(Error::new(ErrorKind::Timeout, why).not_committed());
            }
            clock.sleep(Duration::from_secs(1)).await;
        }
        Ok(created)
    }

    async fn describe(&self) -> Result<(), Error> {
        let table = self.description().await?.table;
        table.judge().map_err(|unfit| {
            let (kind, why) = match unfit {
                Unfit::KeySchema(why) => (ErrorKind::InvalidInput, why),
                Unfit::EventualReplicas(why) => (ErrorKind::Unsupported, why),
            };
            let message = format!("DynamoDB table {:?}: {why}", self.table());
            Error::new(kind, message).not_committed()
        })
    }

    async fn table_active(&self) -> Result<bool, Error> {
        Ok(self.description().await?.table.is_active())
    }

    async fn description(&self) -> Result<Described, Error> {
        let request = (Op::DescribeTable, &self.cfg.place.describe());
        let answer = self.call_reads(request, CONTROL).await?;
        match (answer.status, &answer.body) {
            (200, Body::Whole(body)) => serde_json::from_slice(body).map_err(|e| {
                let why = "DynamoDB answered DescribeTable with an unreadable description";
                Error::new(ErrorKind::Unsupported, why)
                    .with_source(e)
                    .not_committed()
            }),
            (status, body) => Err(self.refused(None, Refusal::of(status, body), true)),
        }
    }

    /// One request through the read client, bounded by the read timeout, reading an answer
    /// of at most `cap` bytes whatever its status.
    async fn call_reads(&self, request: (Op, &Value), cap: usize) -> Result<Answer, Error> {
        let caps = Caps {
            ok: cap,
            refused: cap,
        };
        let bound = self.cfg.read_timeout;
        let answer = self.call(&self.cfg.reads, request, bound, caps).await;
        answer.map_err(Error::not_committed)
    }

    async fn call(
        &self,
        client: &reqwest::Client,
        request: (Op, &Value),
        bound: Duration,
        caps: Caps,
    ) -> Result<Answer, Error> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let (endpoint, signer) = (&self.cfg.endpoint, &self.cfg.signer);
        wire::call(client, endpoint, signer, request, bound, caps).await
    }

    /// The error of an answer that refused a request (of a read: `read`, not committed),
    /// with what it said as its source.
    fn refused(&self, key: Option<&Key>, refusal: Refusal, read: bool) -> Error {
        let f = match refusal.status {
            200 => classify::unreadable(),
            status => classify::failed(status, refusal.code()),
        };
        let f = if read { f.read() } else { f };
        self.error(key, f).with_source(refusal)
    }

    /// `f` as fence's error, naming the table where it is the subject, and `key`.
    fn error(&self, key: Option<&Key>, f: Failure) -> Error {
        let message = match f.kind {
            ErrorKind::PermissionDenied | ErrorKind::NotFound | ErrorKind::InvalidInput => {
                format!("DynamoDB table {:?}: {}", self.table(), f.why)
            }
            _ => f.why.to_string(),
        };
        let e = Error::new(f.kind, message).with_commit(f.commit);
        match key {
            Some(key) => e.with_key(key),
            None => e,
        }
    }

    /// One conditional `PutItem`, never repeated.
    async fn put_once(
        &self,
        key: &Key,
        body: &[u8],
        guard: &CasGuard,
    ) -> Result<(PutOutcome, Current), Error> {
        let version = next_version(&self.cfg.entropy, guard);
        let request = self.cfg.place.put(key, &version, body, guard);
        let caps = Caps {
            ok: CONTROL,
            refused: item_answer_cap(self.cfg.limits.record),
        };
        let bound = self.cfg.cas_timeout;
        let answer = self.call(&self.cfg.writes, (Op::PutItem, &request), bound, caps);
        let answer = answer.await.map_err(|e| e.with_key(key))?;
        match (answer.status, &answer.body) {
            (200, Body::Whole(_)) => {
                let version = Version::new(version)?;
                Ok((PutOutcome::Applied(version), Current::Untold))
            }
            (400, Body::Whole(refusal)) => self.refused_put(key, refusal, guard),
            (status, body) => {
                // A rejection whose item is past its cap is still a rejection.
                let refusal = Refusal::of(status, body);
                match status == 400 && condition_failed(refusal.code()) {
                    true => Ok((PutOutcome::Rejected, Current::Untold)),
                    false => Err(self.refused(Some(key), refusal, false)),
                }
            }
        }
    }

    /// A `400` to a write: rejected with the item the condition saw, or refused.
    fn refused_put(
        &self,
        key: &Key,
        refusal: &Bytes,
        guard: &CasGuard,
    ) -> Result<(PutOutcome, Current), Error> {
        let answer: ErrorAnswer = serde_json::from_slice(refusal).unwrap_or_default();
        if !condition_failed(answer.kind.as_deref().map(exception)) {
            let body = Body::Whole(refusal.clone());
            return Err(self.refused(Some(key), Refusal::of(400, &body), false));
        }
        let current = match (answer.item, guard) {
            (Some(item), _) => self.current(item),
            // No item: absent, unless the condition was "absent" (then the answer is odd).
            (None, CasGuard::Match(_)) => Current::Absent,
            (None, CasGuard::Absent) => Current::Untold,
        };
        Ok((PutOutcome::Rejected, current))
    }

    /// The item a failed condition returned, if it is one of fence's records.
    fn current(&self, item: Value) -> Current {
        let stored = serde_json::from_value::<Item>(item).ok().map(Item::stored);
        match stored {
            Some(Ok(s)) if s.body.len() <= self.cfg.limits.record => Current::Found(s),
            _ => Current::Untold,
        }
    }

    /// One `GetItem` (one attempt), its answer read only up to the record limit's cap.
    async fn get_once(&self, key: &Key) -> Result<Option<Stored>, Error> {
        let request = (Op::GetItem, &self.cfg.place.get(key));
        let cap = item_answer_cap(self.cfg.limits.record);
        let answer = self.call_reads(request, cap).await?;
        let limit = self.cfg.limits.record;
        let read = |f: Failure| self.error(Some(key), f.read());
        let found = match (answer.status, answer.body) {
            (200, Body::Whole(body)) => serde_json::from_slice::<GetAnswer>(&body)
                .map_err(|_| read(classify::unreadable()))?,
            (200, Body::OverCap { .. }) => return Err(over_record_limit(key, limit)),
            (200, Body::Broken(e)) => return Err(read(classify::unreadable()).with_source(e)),
            (status, body) => {
                return Err(self.refused(Some(key), Refusal::of(status, &body), true))
            }
        };
        let Some(item) = found.item else {
            return Ok(None);
        };
        let stored = item.stored().map_err(|why| Error::corrupt(key, why))?;
        if stored.body.len() > limit {
            return Err(over_record_limit(key, limit));
        }
        Ok(Some(stored))
    }

    /// One `DeleteItem`, conditional on `version` or not.
    async fn delete_once(
        &self,
        key: &Key,
        version: Option<&Version>,
    ) -> Result<DeleteOutcome, Error> {
        let request = self.cfg.place.delete(key, version);
        let caps = Caps {
            ok: CONTROL,
            refused: CONTROL,
        };
        let bound = self.cfg.cas_timeout;
        let answer = self.call(&self.cfg.writes, (Op::DeleteItem, &request), bound, caps);
        let answer = answer.await.map_err(|e| e.with_key(key))?;
        match (answer.status, &answer.body) {
            (200, Body::Whole(_)) => Ok(DeleteOutcome::Deleted),
            (status, body) => {
                let refusal = Refusal::of(status, body);
                match status == 400 && condition_failed(refusal.code()) {
                    true => Ok(DeleteOutcome::Rejected),
                    false => Err(self.refused(Some(key), refusal, false)),
                }
            }
        }
    }

    /// One page of a `Query` (one attempt), its answer read only up to the page's budget.
    async fn query_page(&self, prefix: Option<&Key>, ask: &PageAsk) -> Result<Page, Error> {
        let request = self.cfg.place.query(prefix, ask.token.as_deref());
        let budget = usize::try_from(ask.budget).unwrap_or(usize::MAX);
        let answer = self.call_reads((Op::Query, &request), budget).await?;
        let read = |f: Failure| self.error(None, f.read());
        let body = match (answer.status, answer.body) {
            (200, Body::Whole(body)) => body,
            (200, Body::OverCap { .. }) => return Err(ask.over.error()),
            (200, Body::Broken(e)) => return Err(read(classify::unreadable()).with_source(e)),
            (status, body) => return Err(self.refused(None, Refusal::of(status, &body), true)),
        };
        let page: QueryAnswer = serde_json::from_slice(&body).map_err(|e| {
            let why = "DynamoDB answered a Query with an unreadable page";
            Error::new(ErrorKind::Unsupported, why)
                .with_source(e)
                .not_committed()
        })?;
        Ok(Page {
            names: page.items.into_iter().filter_map(Item::sort_key).collect(),
            bytes: body.len() as u64,
            next: page.last.and_then(Item::sort_key),
        })
    }

    /// `op` again while it fails in a way a read may be repeated for, at most
    /// `read_retries` more times.
    async fn retry_read<T, F, Fut>(&self, mut op: F) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        let clock = Clock::system();
        let mut attempt = 0;
        loop {
            match op().await {
                Err(e) if attempt < self.cfg.read_retries && classify::read_retryable(e.kind()) => {
                    attempt += 1;
                    clock
                        .sleep(Duration::from_millis(25 << attempt.min(6)))
                        .await;
                }
                done => return done,
            }
        }
    }

    fn check_record(&self, key: &Key, body: &Bytes) -> Result<(), Error> {
        match body.len() <= self.cfg.limits.record {
            true => Ok(()),
            false => Err(over_put_limit(key, body.len(), self.cfg.limits.record)),
        }
    }
}

#[async_trait]
impl ConditionalStore for DynamoDbStore {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        self.check_table().await?;
        self.retry_read(|| self.get_once(key))
            .await
            .map_err(|e| e.with_key(key).not_committed())
    }

    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        let (outcome, _) = self.put_with_current(key, body, guard).await?;
        Ok(outcome)
    }

    async fn put_with_current(
        &self,
        key: &Key,
        body: Bytes,
        guard: CasGuard,
    ) -> Result<(PutOutcome, Current), Error> {
        self.check_record(key, &body)?;
        self.check_table().await.map_err(|e| e.with_key(key))?;
        self.put_once(key, &body, &guard).await
    }

    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        self.check_table().await.map_err(|e| e.with_key(key))?;
        self.delete_once(key, Some(version)).await
    }

    /// One unconditional `DeleteItem` (right for an item written once under a name never
    /// reused; repeated when it fails in a way a read would be, as deleting twice is
    /// deleting once). Absent is `Ok`.
    async fn delete_immutable(&self, key: &Key) -> Result<(), Error> {
        self.check_table().await.map_err(|e| e.with_key(key))?;
        self.retry_read(|| self.delete_once(key, None))
            .await
            .map(|_| ())
    }

    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.check_table().await.map_err(|e| e.listing(prefix))?;
        let read_page =
            |ask: PageAsk| async move { self.retry_read(|| self.query_page(prefix, &ask)).await };
        let under = |k: &Key| prefix.is_none_or(|p| k.starts_with(p));
        let keep = |name: &str| Key::new(name).ok().filter(under);
        let listed = collect(self.cfg.limits.listing, read_page, keep).await;
        let mut keys = listed.map_err(|e| e.listing(prefix))?;
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::full()
            .with_max_body(self.cfg.limits.record)
            .with_current_on_reject()
    }
}

impl fmt::Debug for DynamoDbStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoDbStore")
            .field("table", &self.cfg.place.table)
            .field("partition", &self.cfg.place.partition)
            .field("endpoint", &self.cfg.endpoint)
            .field("signer", &self.cfg.signer)
            .field("cas_timeout", &self.cfg.cas_timeout)
            .field("limits", &self.cfg.limits)
            .finish_non_exhaustive()
    }
}
