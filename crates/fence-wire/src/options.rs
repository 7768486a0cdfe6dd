//! The settings the object_store adapters' builders share, in one struct each builder embeds
//! ([`StoreOptions`]), and the `with_*` setters each builder exposes for them
//! ([`store_option_setters!`](crate::store_option_setters)): the lease TTL the
//! conditional-write timeout derives from, that timeout, the read policy, and the store's
//! limits. What each client of a store is built with follows from them here, so the S3 and
//! Azure builders cannot drift apart.

use std::time::Duration;

use object_store::{BackoffConfig, RetryConfig};

use crate::client::Timeouts;
use crate::limits::StoreLimits;

/// The lease TTL the conditional-write timeout derives from unless set.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);

/// The shortest conditional-write timeout a lease TTL derives.
const MIN_CAS_TIMEOUT: Duration = Duration::from_millis(100);

/// The longest connect of a conditional request: past it, the renewal it carries is better
/// given up while authority remains.
const MAX_CAS_CONNECT: Duration = Duration::from_secs(1);

/// The longest connect of a read.
const MAX_READ_CONNECT: Duration = Duration::from_secs(5);

/// A builder's timeouts and limits (set through its `with_*` setters, or all at once with
/// `with_store_options`).
///
/// ```
/// use std::time::Duration;
/// use fence_wire::options::StoreOptions;
/// let options = StoreOptions { lease_ttl: Duration::from_secs(9), ..StoreOptions::default() };
/// assert_eq!(options.cas_timeout(), Duration::from_secs(3));
/// assert_eq!(options.cas_timeouts().connect, Duration::from_secs(1));
/// assert_eq!(options.cas_retry().max_retries, 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreOptions {
    /// The lease TTL the conditional-write timeout derives from (default 10 s).
    pub lease_ttl: Duration,
    /// The whole-request timeout of one conditional request; `None`: lease TTL / 3.
    pub cas_timeout: Option<Duration>,
    /// The request timeout of reads and lists (default 30 s).
    pub read_timeout: Duration,
    /// How often a failed read or list is retried (default 3).
    pub read_retries: usize,
    /// The record limit and the listing limits.
    pub limits: StoreLimits,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            lease_ttl: DEFAULT_LEASE_TTL,
            cas_timeout: None,
            read_timeout: Duration::from_secs(30),
            read_retries: 3,
            limits: StoreLimits::default(),
        }
    }
}

impl StoreOptions {
    /// The bound of one conditional request: the one set, else lease TTL / 3 (at least
    /// 100 ms), so a renewal sent at TTL / 3 gives up while authority remains.
    pub fn cas_timeout(&self) -> Duration {
        let derived = (self.lease_ttl / 3).max(MIN_CAS_TIMEOUT);
        self.cas_timeout.unwrap_or(derived)
    }

    /// The timeouts of the conditional-write client: [`cas_timeout`](Self::cas_timeout) for
    /// the whole request, at most 1 s of it to connect.
    pub fn cas_timeouts(&self) -> Timeouts {
        let request = self.cas_timeout();
        Timeouts {
            request,
            connect: request.min(MAX_CAS_CONNECT),
        }
    }

    /// The timeouts of the read client: the read timeout, at most 5 s of it to connect.
    pub fn read_timeouts(&self) -> Timeouts {
        Timeouts {
            request: self.read_timeout,
            connect: self.read_timeout.min(MAX_READ_CONNECT),
        }
    }

    /// object_store's retries of the conditional-write client: none at all (a retried
    /// conditional write is answered 412 on its own landed write).
    pub fn cas_retry(&self) -> RetryConfig {
        RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: 0,
            retry_timeout: self.cas_timeout(),
        }
    }

    /// object_store's retries of the read client: the read retries, within twice the read
    /// timeout.
    pub fn read_retry(&self) -> RetryConfig {
        RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: self.read_retries,
            retry_timeout: self.read_timeout * 2,
        }
    }
}

/// The `with_*` setters of [`StoreOptions`] on a builder whose field `$field` holds them:
/// `with_lease_ttl`, `with_cas_timeout`, `with_read_policy`, `with_record_limit`,
/// `with_listing_limits`, and `with_store_options` / `store_options` for all of them at
/// once. Invoked inside the builder's `impl` block, so every builder documents and names
/// them alike. A store whose record limit is not [`fence_core::DEFAULT_RECORD_LIMIT`] gives
/// the first sentence of `with_record_limit`'s doc as a second argument.
#[macro_export]
macro_rules! store_option_setters {
    ($field:ident) => {
        $crate::store_option_setters!(
            $field,
            "The record limit (default [`fence_core::DEFAULT_RECORD_LIMIT`], 5 MiB)."
        );
    };
    ($field:ident, $record_limit:literal) => {
        /// The lease TTL the conditional-request timeout derives from (default 10 s): each
        /// conditional request is bounded by `ttl / 3` unless
        /// [`with_cas_timeout`](Self::with_cas_timeout) says otherwise.
        pub fn with_lease_ttl(mut self, ttl: ::std::time::Duration) -> Self {
            self.$field.lease_ttl = ttl;
            self
        }

        /// The whole-request timeout of one conditional request (default: lease TTL / 3).
        pub fn with_cas_timeout(mut self, timeout: ::std::time::Duration) -> Self {
            self.$field.cas_timeout = Some(timeout);
            self
        }

        /// The request timeout and retry count of reads and lists (default 30 s, 3
        /// retries).
        pub fn with_read_policy(mut self, timeout: ::std::time::Duration, retries: usize) -> Self {
            self.$field.read_timeout = timeout;
            self.$field.read_retries = retries;
            self
        }

        #[doc = $record_limit]
        ///
        /// `put` refuses a larger body before any I/O, and `get` stops reading an object past
        /// it and answers [`ErrorKind::Corrupt`](fence_core::ErrorKind::Corrupt) naming the
        /// key. Declared as [`Capabilities::max_body`](fence_core::Capabilities::max_body).
        /// It bounds what a read can make this process hold.
        pub fn with_record_limit(mut self, bytes: usize) -> Self {
            self.$field.limits.record = bytes;
            self
        }

        /// The bounds of one `list` (default
        /// [`ListingLimits::DEFAULT`]($crate::listing::ListingLimits::DEFAULT)); a listing
        /// past them fails with [`ErrorKind::Unsupported`](fence_core::ErrorKind::Unsupported)
        /// saying which.
        pub fn with_listing_limits(mut self, limits: $crate::listing::ListingLimits) -> Self {
            self.$field.limits.listing = limits;
            self
        }

        /// Every timeout and limit at once.
        pub fn with_store_options(mut self, options: $crate::options::StoreOptions) -> Self {
            self.$field = options;
            self
        }

        /// The timeouts and limits as set now.
        pub fn store_options(&self) -> &$crate::options::StoreOptions {
            &self.$field
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cas_timeout_derives_from_the_lease_ttl_unless_set() {
        let mut options = StoreOptions {
            lease_ttl: Duration::from_secs(9),
            ..StoreOptions::default()
        };
        assert_eq!(options.cas_timeouts().request, Duration::from_secs(3));
        assert_eq!(options.cas_timeouts().connect, Duration::from_secs(1));
        options.lease_ttl = Duration::from_millis(30);
        assert_eq!(options.cas_timeout(), MIN_CAS_TIMEOUT);
        options.cas_timeout = Some(Duration::from_millis(700));
        assert_eq!(options.cas_timeouts().request, Duration::from_millis(700));
        assert_eq!(options.cas_timeouts().connect, Duration::from_millis(700));
        assert_eq!(
            options.cas_retry().retry_timeout,
            Duration::from_millis(700)
        );
    }

    #[test]
    fn reads_retry_and_connect_within_their_timeout() {
        let options = StoreOptions {
            read_timeout: Duration::from_secs(2),
            read_retries: 5,
            ..StoreOptions::default()
        };
        assert_eq!(options.read_timeouts().connect, Duration::from_secs(2));
        assert_eq!(options.read_retry().max_retries, 5);
        assert_eq!(options.read_retry().retry_timeout, Duration::from_secs(4));
        let default = StoreOptions::default().read_timeouts();
        assert_eq!(default.connect, MAX_READ_CONNECT);
    }
}
