//! Listings bounded in names, bytes and pages: a store that never ends a listing, or answers
//! pages of any size, gets an error that says which limit was hit.

use std::future::Future;

use fence_core::{Error, ErrorKind};
use object_store::list::PaginatedListResult;

/// The most bytes one page's answer may have, whatever is left of a listing's byte limit.
/// A page of 1,000 names is about 0.1 MB on GCS (names only), 0.4 MB on S3 and 1 MB on
/// Azure; the adapters ask for at most 1,000 names a page.
pub const MAX_LISTING_PAGE: u64 = 4 << 20;

/// The names a listing page is asked for.
pub const NAMES_PER_PAGE: usize = 1000;

/// The bounds of one `list` call.
///
/// ```
/// use fence_wire::listing::ListingLimits;
/// let limits = ListingLimits::default();
/// assert_eq!((limits.names, limits.bytes, limits.pages), (100_000, 32 << 20, 2_000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListingLimits {
    /// Names in total (every name the store lists counts, also those that are no fence key).
    pub names: usize,
    /// Bytes of the answers in total (never held at once: each page is parsed and dropped;
    /// what stays are the names).
    pub bytes: u64,
    /// Pages in total (a store may answer short or empty pages with a next-page token).
    pub pages: usize,
}

impl ListingLimits {
    /// 100,000 names, 32 MiB of answers, 2,000 pages: what `fence status` of a fleet of tens
    /// of thousands of cells needs, and under 64 MiB of memory whatever the store answers.
    pub const DEFAULT: ListingLimits = ListingLimits {
        names: 100_000,
        bytes: 32 << 20,
        pages: 2_000,
    };
}

impl Default for ListingLimits {
    fn default() -> Self {
        ListingLimits::DEFAULT
    }
}

/// Which limit a listing hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListingCap {
    /// More names than [`ListingLimits::names`].
    Names(usize),
    /// More answer bytes than [`ListingLimits::bytes`].
    Bytes(u64),
    /// More pages than [`ListingLimits::pages`].
    Pages(usize),
    /// One page's answer longer than [`MAX_LISTING_PAGE`].
    Page(u64),
    /// The store answered the page token it was just asked for: the listing never advances.
    Stalled,
}

impl ListingCap {
    /// The error of a listing that hit this cap: [`ErrorKind::Unsupported`], not committed
    /// (a listing changes nothing), saying which limit and that it can be raised.
    pub fn error(self) -> Error {
        let why = match self {
            ListingCap::Names(n) => format!("the listing passed its limit of {n} names"),
            ListingCap::Bytes(n) => {
                format!("the listing's answers passed their limit of {n} bytes")
            }
            ListingCap::Pages(n) => format!("the listing passed its limit of {n} pages"),
            ListingCap::Page(n) => format!("a listing page passed the limit of {n} bytes a page"),
            ListingCap::Stalled => {
                return Error::new(
                    ErrorKind::Unsupported,
                    "the store answered a listing page with the page token it was asked for: \
                     the listing never ends",
                )
                .not_committed()
            }
        };
        let message = format!("{why} (the store's listing limits: see with_listing_limits)");
        Error::new(ErrorKind::Unsupported, message).not_committed()
    }
}

/// One listing, counted page by page against its [`ListingLimits`].
///
/// ```
/// use fence_wire::listing::{Listing, ListingCap, ListingLimits};
/// let mut listing = Listing::new(ListingLimits { names: 3, bytes: 1 << 20, pages: 10 });
/// let next = listing.page(100, 2, Some("t1".into())).unwrap();
/// assert_eq!(next.as_deref(), Some("t1"));
/// assert_eq!(listing.page(100, 2, Some("t2".into())), Err(ListingCap::Names(3)));
/// ```
#[derive(Debug, Clone)]
pub struct Listing {
    limits: ListingLimits,
    names: usize,
    bytes: u64,
    pages: usize,
    token: Option<String>,
}

impl Listing {
    /// A listing that has read nothing yet.
    pub fn new(limits: ListingLimits) -> Listing {
        Listing {
            limits,
            names: 0,
            bytes: 0,
            pages: 0,
            token: None,
        }
    }

    /// The most bytes the next page's answer may have: what is left, at most
    /// [`MAX_LISTING_PAGE`].
    pub fn page_budget(&self) -> u64 {
        self.limits
            .bytes
            .saturating_sub(self.bytes)
            .min(MAX_LISTING_PAGE)
    }

    /// The cap a page's answer passed when it wanted more than [`Listing::page_budget`].
    pub fn over_page(&self) -> ListingCap {
        match self.page_budget() < MAX_LISTING_PAGE {
            true => ListingCap::Bytes(self.limits.bytes),
            false => ListingCap::Page(MAX_LISTING_PAGE),
        }
    }

    /// Counts a page that was read (`bytes` of answer carrying `names` names, then `next`,
    /// the next page's token or `None` at the end), before its names are kept. Returns the
    /// token to ask for next, or the cap the listing hit.
    pub fn page(
        &mut self,
        bytes: u64,
        names: usize,
        next: Option<String>,
    ) -> Result<Option<String>, ListingCap> {
        self.pages += 1;
        self.bytes = self.bytes.saturating_add(bytes);
        self.names = self.names.saturating_add(names);
        if self.names > self.limits.names {
            return Err(ListingCap::Names(self.limits.names));
        }
        if self.bytes > self.limits.bytes {
            return Err(ListingCap::Bytes(self.limits.bytes));
        }
        if next.is_some() && next == self.token {
            return Err(ListingCap::Stalled);
        }
        if next.is_some() && self.pages >= self.limits.pages {
            return Err(ListingCap::Pages(self.limits.pages));
        }
        self.token.clone_from(&next);
        Ok(next)
    }
}

/// How the next page of a listing is asked for: after `token` (`None`: the first page), with
/// an answer of at most `budget` bytes; an answer past it fails with `over.error()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageAsk {
    /// The page token the store gave with the previous page.
    pub token: Option<String>,
    /// The most bytes this page's answer may have.
    pub budget: u64,
    /// The cap an answer past `budget` hits.
    pub over: ListingCap,
}

/// One page of a listing as the store answered it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    /// The object names listed.
    pub names: Vec<String>,
    /// The length of the answer.
    pub bytes: u64,
    /// The next page's token; `None` when the listing ended.
    pub next: Option<String>,
}

impl Page {
    /// The page of an object_store paginated listing whose answer had `bytes` bytes.
    pub fn listed(result: PaginatedListResult, bytes: u64) -> Page {
        let objects = result.result.objects;
        Page {
            names: objects.into_iter().map(|m| m.location.into()).collect(),
            bytes,
            next: result.page_token,
        }
    }
}

/// Reads a listing page by page until the store says it ended, within `limits`: `read_page`
/// reads the page it is asked for; returns `keep` of every name listed (names it maps to
/// `None`, foreign objects, still count against the limits).
///
/// ```
/// # futures::executor::block_on(async {
/// use fence_wire::listing::{collect, ListingLimits, Page, PageAsk};
/// let pages = |ask: PageAsk| async move {
///     let next = match ask.token.as_deref() {
///         None => Some("2".to_string()),
///         Some(_) => None,
///     };
///     let names = vec![format!("p/{}", next.as_deref().unwrap_or("last"))];
///     Ok(Page { names, bytes: 100, next })
/// };
/// let keys = collect(ListingLimits::DEFAULT, pages, |n| n.strip_prefix("p/").map(String::from));
/// assert_eq!(keys.await.unwrap(), ["2", "last"]);
/// # });
/// ```
pub async fn collect<T, F, Fut>(
    limits: ListingLimits,
    mut read_page: F,
    keep: impl Fn(&str) -> Option<T>,
) -> Result<Vec<T>, Error>
where
    F: FnMut(PageAsk) -> Fut,
    Fut: Future<Output = Result<Page, Error>>,
{
    let mut listing = Listing::new(limits);
    let mut kept = Vec::new();
    let mut token = None;
    loop {
        let ask = PageAsk {
            token: token.take(),
            budget: listing.page_budget(),
            over: listing.over_page(),
        };
        let page = read_page(ask).await?;
        token = listing
            .page(page.bytes, page.names.len(), page.next)
            .map_err(ListingCap::error)?;
        kept.extend(page.names.iter().filter_map(|name| keep(name)));
        if token.is_none() {
            return Ok(kept);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: ListingLimits = ListingLimits {
        names: 10,
        bytes: 1000,
        pages: 3,
    };

    #[test]
    fn a_listing_within_its_limits_ends_when_the_store_says() {
        let mut listing = Listing::new(SMALL);
        assert_eq!(listing.page(400, 5, Some("a".into())), Ok(Some("a".into())));
        assert_eq!(listing.page_budget(), 600);
        assert_eq!(listing.page(400, 5, Some("b".into())), Ok(Some("b".into())));
        assert_eq!(listing.page(200, 0, None), Ok(None));
    }

    #[test]
    fn each_limit_is_named_when_hit() {
        let mut names = Listing::new(SMALL);
        assert_eq!(names.page(10, 11, None), Err(ListingCap::Names(10)));
        let mut bytes = Listing::new(SMALL);
        assert_eq!(bytes.page(1001, 0, None), Err(ListingCap::Bytes(1000)));
        let mut pages = Listing::new(SMALL);
        for token in ["a", "b"] {
            pages.page(1, 0, Some(token.into())).unwrap();
        }
        assert_eq!(
            pages.page(1, 0, Some("c".into())),
            Err(ListingCap::Pages(3))
        );
        let mut stalled = Listing::new(SMALL);
        stalled.page(1, 0, Some("a".into())).unwrap();
        assert_eq!(
            stalled.page(1, 0, Some("a".into())),
            Err(ListingCap::Stalled)
        );
    }

    #[test]
    fn the_last_page_may_use_the_last_page_allowed() {
        let mut listing = Listing::new(SMALL);
        listing.page(1, 0, Some("a".into())).unwrap();
        listing.page(1, 0, Some("b".into())).unwrap();
        assert_eq!(listing.page(1, 0, None), Ok(None));
    }

    #[test]
    fn a_page_over_its_budget_says_which_limit() {
        let listing = Listing::new(ListingLimits::DEFAULT);
        assert_eq!(listing.page_budget(), MAX_LISTING_PAGE);
        assert_eq!(listing.over_page(), ListingCap::Page(MAX_LISTING_PAGE));
        let mut nearly = Listing::new(SMALL);
        nearly.page(900, 0, Some("a".into())).unwrap();
        assert_eq!(nearly.page_budget(), 100);
        assert_eq!(nearly.over_page(), ListingCap::Bytes(1000));
    }

    #[test]
    fn collecting_stops_at_the_first_cap_and_passes_page_errors_on() {
        let endless = |ask: PageAsk| async move {
            let n: u64 = ask.token.as_deref().unwrap_or("0").parse().unwrap();
            let names = vec!["a".to_string(); 4];
            Ok(Page {
                names,
                bytes: 10,
                next: Some((n + 1).to_string()),
            })
        };
        let got = futures::executor::block_on(collect(SMALL, endless, |n| Some(n.to_string())));
        assert_eq!(got.unwrap_err().kind(), ErrorKind::Unsupported);
        let failing = |ask: PageAsk| async move { Err::<Page, _>(ask.over.error()) };
        let got = futures::executor::block_on(collect(SMALL, failing, |_| Some(())));
        assert_eq!(got.unwrap_err().kind(), ErrorKind::Unsupported);
    }

    #[test]
    fn caps_are_unsupported_and_not_committed() {
        for cap in [
            ListingCap::Names(1),
            ListingCap::Bytes(1),
            ListingCap::Pages(1),
            ListingCap::Page(1),
            ListingCap::Stalled,
        ] {
            let e = cap.error();
            assert_eq!(e.kind(), ErrorKind::Unsupported, "{cap:?}");
            assert_eq!(e.commit(), fence_core::Commit::NotCommitted, "{cap:?}");
        }
    }
}
