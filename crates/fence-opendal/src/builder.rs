//! [`OpendalStoreBuilder`]: the settings of an [`OpendalStore`] over an operator.

use std::time::Duration;

use fence_core::{Error, ErrorKind, DEFAULT_RECORD_LIMIT};
use opendal::Operator;

use crate::dialect::{check_layers, choose};
use crate::transport::{Bounds, ObservingTransport};
use crate::OpendalStore;

/// The lease TTL the timeouts derive from when none is given.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);

/// The slack over the record limit an answer body may have (headers of a multipart answer,
/// a listing page's XML) before the transport cuts it off.
const BODY_SLACK: u64 = 64 * 1024;

/// Settings of an [`OpendalStore`]; [`build`](OpendalStoreBuilder::build) checks the operator.
///
/// ```
/// use std::time::Duration;
/// let op = opendal::Operator::new(
///     opendal::services::Azblob::default()
///         .container("fleet")
///         .endpoint("http://127.0.0.1:10000/devstoreaccount1")
///         .account_name("devstoreaccount1")
///         .account_key("a2V5"),
/// )
/// .unwrap();
/// let store = fence_opendal::OpendalStore::builder(op)
///     .with_lease_ttl(Duration::from_secs(30))
///     .build()
///     .unwrap();
/// assert_eq!(store.cas_timeout(), Duration::from_secs(10));
/// assert!(store.dialect().conditional_delete, "verified on Azure Blob");
/// ```
#[derive(Debug)]
pub struct OpendalStoreBuilder {
    op: Operator,
    cas_timeout: Option<Duration>,
    lease_ttl: Duration,
    conditional_delete: Option<bool>,
    record_limit: usize,
}

impl OpendalStoreBuilder {
    pub(crate) fn new(op: Operator) -> Self {
        OpendalStoreBuilder {
            op,
            cas_timeout: None,
            lease_ttl: DEFAULT_LEASE_TTL,
            conditional_delete: None,
            record_limit: DEFAULT_RECORD_LIMIT,
        }
    }

    /// The lease TTL the store serves: every request is bounded by `ttl / 3` (unless
    /// [`with_cas_timeout`](Self::with_cas_timeout) says otherwise).
    #[must_use]
    pub fn with_lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// The bound of one conditional write (and of every request).
    #[must_use]
    pub fn with_cas_timeout(mut self, timeout: Duration) -> Self {
        self.cas_timeout = Some(timeout);
        self
    }

    /// Conditional delete: `true` requires it (refused if the service does not advertise
    /// it), `false` never uses it (releases write tombstones). Unset: used where the service
    /// advertises it and fence has seen it honoured (Azure Blob); the S3 service advertises
    /// it whatever the server does.
    #[must_use]
    pub fn with_conditional_delete(mut self, on: bool) -> Self {
        self.conditional_delete = Some(on);
        self
    }

    /// The largest body `put` accepts and `get` reads (a larger object reads as
    /// `Corrupt`). Default [`DEFAULT_RECORD_LIMIT`].
    #[must_use]
    pub fn with_record_limit(mut self, bytes: usize) -> Self {
        self.record_limit = bytes;
        self
    }

    /// Checks the operator (layers, capabilities), puts fence's transport under it and
    /// builds the store.
    ///
    /// Errors: `Unsupported` (not committed) naming the missing capability or the refused
    /// layer; `InvalidInput` for a zero timeout or record limit.
    pub fn build(self) -> Result<OpendalStore, Error> {
        let cas_timeout = self.cas_timeout.unwrap_or(self.lease_ttl / 3);
        if cas_timeout.is_zero() || self.record_limit == 0 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "the write timeout and the record limit must be above zero",
            )
            .not_committed());
        }
        check_layers(&self.op)?;
        let info = self.op.info();
        let dialect = choose(info.scheme(), &info.capability(), self.conditional_delete)?;
        let bounds = Bounds {
            request: cas_timeout,
            connect: (cas_timeout / 3).min(Duration::from_secs(1)),
            body: self.record_limit as u64 + BODY_SLACK,
        };
        let transport = ObservingTransport::new(bounds).map_err(|e| {
            Error::new(ErrorKind::Other, "could not build the HTTP client")
                .with_source(e.without_url())
                .not_committed()
        })?;
        let context = self
            .op
            .base_context()
            .with_http_transport(transport.into_transporter());
        let op = self.op.with_context(context);
        Ok(OpendalStore::from_parts(
            op,
            dialect,
            cas_timeout,
            self.record_limit,
        ))
    }
}
