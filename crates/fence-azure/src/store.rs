//! [`AzureStore`]: the [`ConditionalStore`] contract over Azure Blob conditional requests.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::store::delete_unsupported;
use fence_core::{
    Capabilities, CasGuard, ConditionalStore, DeleteOutcome, Error, ErrorKind, Key, PutOutcome,
    Stored, Version,
};
use fence_wire::body::{over_put_limit, read_record};
use fence_wire::limits::StoreLimits;
use fence_wire::names::ObjectNames;
use object_store::azure::MicrosoftAzure;
use object_store::client::{HttpClient, HttpRequest, HttpRequestBody};
use object_store::path::Path;
use object_store::signer::Signer;
use object_store::{GetOptions, ObjectStore, PutMode, PutOptions, PutPayload, UpdateVersion};

use crate::builder::AzureStoreBuilder;
use crate::classify::{
    classify_delete, classify_put, classify_read, strong_etag, DeleteVerdict, Failure, PutVerdict,
    CONTAINER, DENIED,
};
use crate::observe::{error_code, list_names, transport_kind, Exchange, Observed};

/// Azure's bound of a blob name: 1024 characters.
const MAX_BLOB_NAME: usize = 1024;

/// How long the SAS of one delete is valid. It only needs to outlive the request; the margin
/// covers clock skew at the end of its window (a clock running ahead of the store's makes a
/// fresh SAS not yet valid: the delete is then refused, never misapplied).
const DELETE_SAS_LIFETIME: Duration = Duration::from_secs(300);

/// The clients of one store.
pub(crate) struct Clients {
    /// Conditional PUTs: no retries, no redirects, timeouts from the lease TTL.
    pub cas: MicrosoftAzure,
    /// Reads and lists: retries on.
    pub read: MicrosoftAzure,
    /// DELETEs (under a SAS the `cas` client signs), when the credentials can sign them.
    pub deletes: Option<HttpClient>,
}

/// An Azure Blob container (optionally under a key prefix) as a fence [`ConditionalStore`].
///
/// Creates with `If-None-Match: *`, replaces with `If-Match: <etag>`, deletes with
/// `If-Match: <etag>`, and passes ETags back exactly as the store returned them. Conditional
/// requests go through their own client (own connection pool, no retries, no redirects,
/// timeouts derived from the lease TTL) and are classified here from the HTTP status and
/// Azure error code, not by object_store; reads and lists use a second client that retries.
///
/// ```no_run
/// # async fn demo() -> Result<(), fence_core::Error> {
/// use fence_core::{CasGuard, ConditionalStore, Key, PutOutcome};
/// let store = fence_azure::AzureStore::from_env() // AZURE_STORAGE_ACCOUNT_NAME, ...
///     .with_url("az://my-container/fence")
///     .build()?;
/// let key = Key::new("nodes/n1.json")?;
/// match store.put(&key, "{}".into(), CasGuard::Absent).await? {
///     PutOutcome::Applied(version) => println!("created at {version}"),
///     PutOutcome::Rejected => println!("someone else was first"),
/// }
/// # Ok(()) }
/// ```
pub struct AzureStore {
    clients: Clients,
    container: String,
    names: ObjectNames,
    cas_timeout: Duration,
    limits: StoreLimits,
}

impl AzureStore {
    /// A builder with nothing set.
    pub fn builder() -> AzureStoreBuilder {
        AzureStoreBuilder::new()
    }

    /// A builder reading object_store's `AZURE_*` environment variables.
    pub fn from_env() -> AzureStoreBuilder {
        AzureStoreBuilder::from_env()
    }

    pub(crate) fn new(
        clients: Clients,
        container: String,
        names: ObjectNames,
        cas_timeout: Duration,
        limits: StoreLimits,
    ) -> Self {
        AzureStore {
            clients,
            container,
            names,
            cas_timeout,
            limits,
        }
    }

    /// The container.
    pub fn container(&self) -> &str {
        &self.container
    }

    /// The key prefix every key is stored under (empty for none).
    pub fn prefix(&self) -> String {
        self.names.prefix()
    }

    /// The bound of one conditional write or delete.
    pub fn cas_timeout(&self) -> Duration {
        self.cas_timeout
    }

    /// The record limit: the largest body `put` sends and `get` reads.
    pub fn record_limit(&self) -> usize {
        self.limits.record
    }

    /// The blob name of `key`: `prefix/key`, exactly these characters.
    ///
    /// ```
    /// let store = fence_azure::AzureStore::builder()
    ///     .with_url("az://fence-test/fleet")
    ///     .with_emulator("http://127.0.0.1:10000")
    ///     .build()
    ///     .unwrap();
    /// let key = fence_core::Key::new("cells/ñ 1/own.json").unwrap();
    /// assert_eq!(store.blob_name(&key), "fleet/cells/ñ 1/own.json");
    /// ```
    pub fn blob_name(&self, key: &Key) -> String {
        self.names.name(key)
    }

    /// The object_store path of `key` (its parts are the name's own characters, which the
    /// URL escapes once), refused before any I/O if Azure cannot store it.
    fn path_of(&self, key: &Key) -> Result<Path, Error> {
        // Azure counts a name's characters as .NET and Azurite do: UTF-16 code units.
        let fits = |name: &str| name.encode_utf16().count() <= MAX_BLOB_NAME;
        let bound = "prefix + key is longer than Azure's 1024-character blob names";
        self.names.path(key, fits, bound)
    }

    fn error(&self, key: Option<&Key>, f: Failure) -> Error {
        let message = match f.kind {
            ErrorKind::PermissionDenied | ErrorKind::NotFound | ErrorKind::InvalidInput => {
                format!("container {:?}: {}", self.container, f.why)
            }
            _ => f.why.to_string(),
        };
        let e = Error::new(f.kind, message).with_commit(f.commit);
        match key {
            Some(key) => e.with_key(key),
            None => e,
        }
    }

    async fn conditional_put(
        &self,
        key: &Key,
        path: &Path,
        body: Bytes,
        guard: &CasGuard,
    ) -> Result<PutOutcome, Error> {
        let exchange = Exchange::default();
        let mode = match guard {
            CasGuard::Absent => PutMode::Create,
            CasGuard::Match(version) => PutMode::Update(UpdateVersion {
                e_tag: Some(version.as_str().to_string()),
                version: None,
            }),
        };
        let opts = PutOptions {
            mode,
            extensions: exchange.extensions(),
            ..PutOptions::default()
        };
        let result = self
            .clients
            .cas
            .put_opts(path, PutPayload::from(body), opts)
            .await;
        let e_tag = result.as_ref().ok().map(|r| r.e_tag.as_deref());
        let is_create = matches!(guard, CasGuard::Absent);
        match classify_put(is_create, exchange.last().as_ref(), e_tag) {
            PutVerdict::Applied(tag) => Ok(PutOutcome::Applied(Version::new(tag)?)),
            PutVerdict::Rejected => Ok(PutOutcome::Rejected),
            PutVerdict::Failed(f) => Err(self.with_source(self.error(Some(key), f), result.err())),
        }
    }

    fn with_source(&self, e: Error, source: Option<object_store::Error>) -> Error {
        match source {
            Some(source) => e.with_source(source),
            None => e,
        }
    }

    /// Reads `key`; a miss is checked against the legacy name.
    async fn read(&self, key: &Key) -> Result<Option<Stored>, Error> {
        let path = self.path_of(key)?;
        match self.fetch(key, &path).await? {
            Some(stored) => Ok(Some(stored)),
            None => self.refuse_legacy_name(key).await.map(|()| None),
        }
    }

    /// A key absent under its name may exist under the name fence-azure used to give it.
    /// Reading it as absent would let a claim restart its epochs, so the operator is told.
    async fn refuse_legacy_name(&self, key: &Key) -> Result<(), Error> {
        let Some(legacy) = self.names.legacy(key) else {
            return Ok(());
        };
        match self.fetch(key, &legacy).await? {
            None => Ok(()),
            Some(_) => Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "container {:?}: this key is stored under its escaped name {:?} (written \
                     by an earlier fence-azure); rename the blob to {:?}",
                    self.container,
                    legacy.as_ref(),
                    self.blob_name(key)
                ),
            )
            .with_key(key)
            .not_committed()),
        }
    }

    /// One GET of `path` (with the read client's retries): body and version together, the
    /// body read only up to the record limit. The answers may bring one byte more than the
    /// limit (so that a longer body shows as one), and the reading stops there.
    async fn fetch(&self, key: &Key, path: &Path) -> Result<Option<Stored>, Error> {
        let limit = self.limits.record;
        let exchange = Exchange::with_budget(limit as u64 + 1);
        let opts = GetOptions {
            extensions: exchange.extensions(),
            ..GetOptions::default()
        };
        let fail = |e: object_store::Error| match classify_read(exchange.last_failure().as_ref()) {
            Some(f) => Err(self.error(Some(key), f).with_source(e)),
            None => Ok(None),
        };
        let got = match self.clients.read.get_opts(path, opts).await {
            Ok(got) => got,
            Err(e) => return fail(e),
        };
        let tag = got.meta.e_tag.clone().unwrap_or_default();
        let size = Some(got.meta.size);
        let broken = |e| unreadable(key).with_source(e);
        let body = read_record(key, size, got.into_stream(), limit, broken).await?;
        if !strong_etag(&tag) {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "the store answered a read without a usable ETag (none, several, empty or weak)",
            )
            .with_key(key)
            .not_committed());
        }
        let version = Version::new(tag).map_err(|e| e.with_key(key).not_committed())?;
        Ok(Some(Stored { body, version }))
    }

    async fn list_keys(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        let under = match prefix {
            Some(p) => Some(self.path_of(p)?),
            None => self.names.under(None)?,
        };
        let mut keys = self.list_under(under.as_ref()).await?;
        if let Some(p) = prefix {
            // A listing shows what lies under `p/`; the key `p` itself needs its own look-up.
            if self.read(p).await?.is_some() {
                keys.push(p.clone());
            }
        }
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// The keys of every blob under `under/` (the container's root for `None`), page by
    /// page (with the read client's retries), within the store's listing limits.
    async fn list_under(&self, under: Option<&Path>) -> Result<Vec<Key>, Error> {
        let keep = |name: &str| self.names.key_of(name);
        let failed = |x: &Exchange, e| {
            let f = classify_read(x.last_failure().as_ref()).unwrap_or(Failure::new(
                ErrorKind::NotFound,
                fence_core::Commit::NotCommitted,
                CONTAINER,
            ));
            self.error(None, f).with_source(e)
        };
        let read = &self.clients.read;
        list_names(read, under, self.limits.listing, keep, failed).await
    }

    /// One DELETE, with `If-Match: <version>` when given, under a SAS for exactly this blob.
    async fn send_delete(
        &self,
        key: &Key,
        version: Option<&Version>,
    ) -> Result<DeleteVerdict, Error> {
        let Some(http) = &self.clients.deletes else {
            return Err(delete_unsupported(key));
        };
        let path = self.path_of(key)?;
        let url = self
            .clients
            .cas
            .signed_url(http::Method::DELETE, &path, DELETE_SAS_LIFETIME)
            .await
            .map_err(|e| self.signing_error(key, e))?;
        let mut request = HttpRequest::new(HttpRequestBody::empty());
        *request.method_mut() = http::Method::DELETE;
        // The URL carries the SAS signature: it never goes into an error or a log.
        *request.uri_mut() = url.as_str().parse().map_err(|_| {
            Error::new(ErrorKind::InvalidInput, "unusable blob URL")
                .with_key(key)
                .not_committed()
        })?;
        let headers = request.headers_mut();
        headers.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(0));
        if let Some(version) = version {
            let value = http::HeaderValue::from_str(version.as_str()).map_err(|_| {
                Error::new(ErrorKind::InvalidInput, "the version is not a valid ETag")
                    .with_key(key)
                    .not_committed()
            })?;
            headers.insert(http::header::IF_MATCH, value);
        }
        let observed = match http.execute(request).await {
            Ok(response) => Observed::Answer {
                status: response.status().as_u16(),
                code: error_code(response.headers()),
            },
            Err(e) => Observed::Transport(transport_kind(&e)),
        };
        Ok(classify_delete(&observed))
    }

    fn signing_error(&self, key: &Key, e: object_store::Error) -> Error {
        let f = Failure::new(
            ErrorKind::PermissionDenied,
            fence_core::Commit::NotCommitted,
            DENIED,
        );
        self.error(Some(key), f).with_source(e)
    }

    fn delete_failure(&self, key: &Key, verdict: DeleteVerdict) -> Result<DeleteOutcome, Error> {
        match verdict {
            DeleteVerdict::Deleted => Ok(DeleteOutcome::Deleted),
            DeleteVerdict::Rejected => Ok(DeleteOutcome::Rejected),
            DeleteVerdict::Failed(f) => Err(self.error(Some(key), f)),
        }
    }
}

fn unreadable(key: &Key) -> Error {
    Error::new(ErrorKind::Unavailable, "the blob's body could not be read")
        .with_key(key)
        .not_committed()
}

#[async_trait]
impl ConditionalStore for AzureStore {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        self.read(key).await
    }

    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        if body.len() > self.limits.record {
            return Err(over_put_limit(key, body.len(), self.limits.record));
        }
        let path = self.path_of(key)?;
        self.conditional_put(key, &path, body, &guard).await
    }

    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        let verdict = self.send_delete(key, Some(version)).await?;
        self.delete_failure(key, verdict)
    }

    /// One unconditional DELETE: for a blob written once and never rewritten, a late delete
    /// can only remove that same blob. Absent is `Ok`.
    async fn delete_immutable(&self, key: &Key) -> Result<(), Error> {
        let verdict = self.send_delete(key, None).await?;
        self.delete_failure(key, verdict).map(|_| ())
    }

    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.list_keys(prefix).await.map_err(|e| e.listing(prefix))
    }

    fn capabilities(&self) -> Capabilities {
        let caps = if self.clients.deletes.is_some() {
            Capabilities::full()
        } else {
            Capabilities::without_conditional_delete()
        };
        caps.with_max_body(self.limits.record)
    }
}

impl fmt::Debug for AzureStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AzureStore")
            .field("container", &self.container)
            .field("prefix", &self.prefix())
            .field("cas_timeout", &self.cas_timeout)
            .field("conditional_delete", &self.clients.deletes.is_some())
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}
