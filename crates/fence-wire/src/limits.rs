//! What one store reads at most: the one record limit and the listing limits.

use fence_core::DEFAULT_RECORD_LIMIT;

use crate::listing::ListingLimits;

/// The bounds of one store's reads, set through its builder (`with_record_limit`,
/// `with_listing_limits`).
///
/// ```
/// let limits = fence_wire::limits::StoreLimits::default();
/// assert_eq!(limits.record, fence_core::DEFAULT_RECORD_LIMIT);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreLimits {
    /// The record limit: the largest body `put` sends and `get` reads (declared as
    /// [`Capabilities::max_body`](fence_core::Capabilities::max_body)).
    pub record: usize,
    /// The bounds of one listing.
    pub listing: ListingLimits,
}

impl Default for StoreLimits {
    fn default() -> Self {
        StoreLimits {
            record: DEFAULT_RECORD_LIMIT,
            listing: ListingLimits::DEFAULT,
        }
    }
}
