//! Answer bodies read only up to a cap: a body is never read whole and cut afterwards.
//!
//! Two shapes, for two kinds of client:
//!
//! - [`read_capped`] and [`read_prefix`] consume a stream of chunks — a reqwest body
//!   ([`reqwest_chunks`]), object_store's `GetResult::into_stream`, OpenDAL's
//!   `Reader::into_bytes_stream` — and stop at the cap. The stream is dropped there, and with
//!   it the connection, which is then closed rather than drained.
//! - [`AnswerBudget`] and [`Budgeted`] sit under a client that reads bodies whole on its own
//!   (object_store's listings, its credential fetches): the body ends in an error once the
//!   budget is spent, and the budget remembers that it was.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use fence_core::{Error, ErrorKind, Key};
use futures::{Stream, StreamExt};
use http_body::{Body, Frame, SizeHint};

/// Why [`read_capped`] stopped before the body ended.
#[derive(Debug)]
pub enum CappedError<E> {
    /// The body is longer than `limit` bytes: reading stopped at the first chunk past it.
    OverLimit {
        /// The cap that was passed.
        limit: usize,
    },
    /// The stream failed before the body ended.
    Stream(E),
}

/// Whether an announced length (`Content-Length`) is already over `limit`: such a body is
/// refused before a byte of it is read.
///
/// ```
/// use fence_wire::body::announced_over;
/// assert!(announced_over(Some(6), 5));
/// assert!(!announced_over(Some(5), 5) && !announced_over(None, 5));
/// ```
pub fn announced_over(announced: Option<u64>, limit: usize) -> bool {
    announced.is_some_and(|n| n > limit as u64)
}

/// Reads a stream of chunks into one buffer of at most `limit` bytes. At the first chunk that
/// would pass `limit` it stops with [`CappedError::OverLimit`] and drops the stream unread.
/// Holds at most `limit` bytes plus that one chunk.
///
/// ```
/// # futures::executor::block_on(async {
/// use bytes::Bytes;
/// use fence_wire::body::{read_capped, CappedError};
/// let chunks = || futures::stream::iter(["ab", "cd"].map(|c| Ok::<_, ()>(Bytes::from(c))));
/// assert_eq!(read_capped(chunks(), 4).await.unwrap(), "abcd");
/// assert!(matches!(read_capped(chunks(), 3).await, Err(CappedError::OverLimit { limit: 3 })));
/// # });
/// ```
pub async fn read_capped<S, C, E>(chunks: S, limit: usize) -> Result<Bytes, CappedError<E>>
where
    S: Stream<Item = Result<C, E>>,
    C: Buf,
{
    let mut chunks = std::pin::pin!(chunks);
    let mut body = Collected::default();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(CappedError::Stream)?;
        if chunk.remaining() > limit - body.len() {
            return Err(CappedError::OverLimit { limit });
        }
        body.push(chunk);
    }
    Ok(body.finish())
}

/// Reads the first `limit` bytes of a stream of chunks and drops the rest unread: for error
/// bodies, of which only the beginning is ever parsed. A stream that fails before `limit`
/// bytes or its end fails the read.
///
/// ```
/// # futures::executor::block_on(async {
/// use bytes::Bytes;
/// let endless = futures::stream::repeat_with(|| Ok::<_, ()>(Bytes::from_static(b"<Error>")));
/// let start = fence_wire::body::read_prefix(endless, 10).await.unwrap();
/// assert_eq!(start, "<Error><Er");
/// # });
/// ```
pub async fn read_prefix<S, C, E>(chunks: S, limit: usize) -> Result<Bytes, E>
where
    S: Stream<Item = Result<C, E>>,
    C: Buf,
{
    let mut chunks = std::pin::pin!(chunks);
    let mut body = Collected::default();
    while body.len() < limit {
        let Some(chunk) = chunks.next().await else {
            break;
        };
        let mut chunk = chunk?;
        let keep = chunk.remaining().min(limit - body.len());
        body.push(chunk.copy_to_bytes(keep));
    }
    Ok(body.finish())
}

/// The error of a read whose object is longer than the store's record limit: no record of
/// this store can be that long. [`ErrorKind::Corrupt`] naming the key, not committed; the
/// body was read no further than the limit.
///
/// ```
/// let key = fence_core::Key::new("cells/c/own.json").unwrap();
/// let e = fence_wire::body::over_record_limit(&key, 5);
/// assert_eq!((e.kind(), e.key()), (fence_core::ErrorKind::Corrupt, Some(&key)));
/// ```
pub fn over_record_limit(key: &Key, limit: usize) -> Error {
    Error::corrupt(
        key,
        format!(
            "the object is longer than the store's record limit of {limit} bytes \
             (with_record_limit raises it); it was read no further"
        ),
    )
}

/// Reads a record's body from `chunks`, or refuses it as [`over_record_limit`]: before a
/// byte of it is read when `announced` (its `Content-Length`) is over `limit`, else at the
/// first chunk past `limit`. A failing stream fails the read with `broken(e)`.
pub async fn read_record<S, C, E>(
    key: &Key,
    announced: Option<u64>,
    chunks: S,
    limit: usize,
    broken: impl FnOnce(E) -> Error,
) -> Result<Bytes, Error>
where
    S: Stream<Item = Result<C, E>>,
    C: Buf,
{
    if announced_over(announced, limit) {
        return Err(over_record_limit(key, limit));
    }
    match read_capped(chunks, limit).await {
        Ok(body) => Ok(body),
        Err(CappedError::OverLimit { .. }) => Err(over_record_limit(key, limit)),
        Err(CappedError::Stream(e)) => Err(broken(e)),
    }
}

/// The error of a `put` of a body longer than the store's record limit: refused before any
/// I/O ([`ErrorKind::InvalidInput`], not committed).
pub fn over_put_limit(key: &Key, len: usize, limit: usize) -> Error {
    let message = format!(
        "a body of {len} bytes is over the store's record limit of {limit} bytes \
         (with_record_limit raises it)"
    );
    Error::new(ErrorKind::InvalidInput, message)
        .with_key(key)
        .not_committed()
}

/// The chunks of a reqwest answer's body as a stream (reqwest's own `bytes_stream` needs its
/// `stream` feature).
pub fn reqwest_chunks(
    response: reqwest::Response,
) -> impl Stream<Item = Result<Bytes, reqwest::Error>> + Send {
    futures::stream::try_unfold(response, |mut response| async move {
        Ok(response.chunk().await?.map(|chunk| (chunk, response)))
    })
}

/// A body being collected: the first chunk as it came (no copy when it is the only one),
/// later ones appended.
#[derive(Default)]
struct Collected {
    first: Bytes,
    rest: Option<BytesMut>,
}

impl Collected {
    fn len(&self) -> usize {
        self.rest.as_ref().map_or(self.first.len(), BytesMut::len)
    }

    fn push(&mut self, mut chunk: impl Buf) {
        match &mut self.rest {
            Some(rest) => rest.extend_from_slice(&chunk.copy_to_bytes(chunk.remaining())),
            None if self.first.is_empty() => self.first = chunk.copy_to_bytes(chunk.remaining()),
            None => {
                let mut rest = BytesMut::from(&self.first[..]);
                rest.extend_from_slice(&chunk.copy_to_bytes(chunk.remaining()));
                self.first = Bytes::new();
                self.rest = Some(rest);
            }
        }
    }

    fn finish(self) -> Bytes {
        self.rest.map_or(self.first, BytesMut::freeze)
    }
}

/// The bytes an operation's answers may still bring, shared by its attempts (a read retried
/// after a cut, every page of a listing). Clones share one budget.
///
/// ```
/// let budget = fence_wire::body::AnswerBudget::new(10);
/// assert_eq!(budget.take(6), 6);
/// assert_eq!(budget.take(6), 4);
/// assert!(budget.exceeded());
/// assert_eq!(budget.spent(), 10);
/// ```
#[derive(Debug, Clone)]
pub struct AnswerBudget(Arc<BudgetState>);

#[derive(Debug)]
struct BudgetState {
    left: AtomicU64,
    spent: AtomicU64,
    exceeded: AtomicBool,
}

impl AnswerBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: u64) -> AnswerBudget {
        AnswerBudget(Arc::new(BudgetState {
            left: AtomicU64::new(bytes),
            spent: AtomicU64::new(0),
            exceeded: AtomicBool::new(false),
        }))
    }

    /// Takes up to `want` bytes and returns how many were granted; granting fewer marks the
    /// budget exceeded.
    pub fn take(&self, want: u64) -> u64 {
        let state = &self.0;
        let left = state
            .left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                Some(left.saturating_sub(want))
            })
            .unwrap_or_else(|left| left);
        let granted = left.min(want);
        state.spent.fetch_add(granted, Ordering::AcqRel);
        if granted < want {
            state.exceeded.store(true, Ordering::Release);
        }
        granted
    }

    /// Whether an answer wanted more than was left.
    pub fn exceeded(&self) -> bool {
        self.0.exceeded.load(Ordering::Acquire)
    }

    /// The bytes granted so far.
    pub fn spent(&self) -> u64 {
        self.0.spent.load(Ordering::Acquire)
    }

    /// The bytes still available.
    pub fn left(&self) -> u64 {
        self.0.left.load(Ordering::Acquire)
    }
}

/// A body that passes at most what its [`AnswerBudget`] grants: the chunk that passes the
/// budget is cut to what is left, and the next poll ends the body with `over(budget)`'s error.
/// Its size hint never promises more than the budget, so a reader that preallocates from the
/// hint (object_store does, from `Content-Length`) allocates no more than the budget.
///
/// ```
/// # futures::executor::block_on(async {
/// use bytes::Bytes;
/// use http_body_util::{BodyExt, Full};
/// use fence_wire::body::{AnswerBudget, Budgeted};
/// let budget = AnswerBudget::new(3);
/// let body = Full::new(Bytes::from("abcdef")).map_err(|e| match e {});
/// let capped = Budgeted::new(body, budget.clone(), |_| "over budget");
/// assert!(capped.collect().await.is_err());
/// assert!(budget.exceeded());
/// # });
/// ```
#[derive(Debug)]
pub struct Budgeted<B: Body, F> {
    inner: B,
    budget: AnswerBudget,
    over: F,
    spent: bool,
}

impl<B: Body, F: Fn(&AnswerBudget) -> B::Error> Budgeted<B, F> {
    /// `inner`, bounded by `budget`; `over` makes the error that ends a body past it.
    pub fn new(inner: B, budget: AnswerBudget, over: F) -> Self {
        Budgeted {
            inner,
            budget,
            over,
            spent: false,
        }
    }
}

impl<B, F> Body for Budgeted<B, F>
where
    B: Body<Data = Bytes> + Unpin,
    F: Fn(&AnswerBudget) -> B::Error + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        if this.spent {
            return Poll::Ready(Some(Err((this.over)(&this.budget))));
        }
        let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        let data = match frame.into_data() {
            Ok(data) => data,
            Err(trailers) => return Poll::Ready(Some(Ok(trailers))),
        };
        let want = data.len() as u64;
        let granted = this.budget.take(want);
        if granted == want {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        this.spent = true;
        match granted {
            0 => Poll::Ready(Some(Err((this.over)(&this.budget)))),
            n => Poll::Ready(Some(Ok(Frame::data(data.slice(..n as usize))))),
        }
    }

    fn is_end_stream(&self) -> bool {
        !self.spent && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().min(self.budget.left()));
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use http_body_util::{BodyExt, Full, StreamBody};

    fn chunks(sizes: &[usize]) -> impl Stream<Item = Result<Bytes, ()>> {
        let chunks: Vec<_> = sizes
            .iter()
            .map(|&n| Ok(Bytes::from(vec![b'x'; n])))
            .collect();
        futures::stream::iter(chunks)
    }

    #[test]
    fn a_body_up_to_the_limit_is_read_whole() {
        for sizes in [&[][..], &[0], &[5], &[2, 3], &[1, 1, 1, 1, 1]] {
            let body = block_on(read_capped(chunks(sizes), 5)).unwrap();
            assert_eq!(body.len(), sizes.iter().sum::<usize>(), "{sizes:?}");
        }
    }

    #[test]
    fn reading_stops_at_the_first_chunk_past_the_limit() {
        let polled = std::cell::Cell::new(0);
        let endless = futures::stream::repeat_with(|| {
            polled.set(polled.get() + 1);
            Ok::<_, ()>(Bytes::from_static(&[0u8; 1000]))
        });
        let got = block_on(read_capped(endless, 10_500));
        assert!(matches!(got, Err(CappedError::OverLimit { limit: 10_500 })));
        assert_eq!(
            polled.get(),
            11,
            "ten chunks fit, the eleventh passes the limit"
        );
    }

    #[test]
    fn a_record_announced_over_the_limit_is_refused_unread() {
        let key = Key::new("k").unwrap();
        let polled = std::cell::Cell::new(false);
        let unpolled = futures::stream::poll_fn(|_| {
            polled.set(true);
            std::task::Poll::Ready(None::<Result<Bytes, ()>>)
        });
        let got = block_on(read_record(
            &key,
            Some(11),
            unpolled,
            10,
            |_| unreachable!(),
        ));
        assert_eq!(got.unwrap_err().kind(), ErrorKind::Corrupt);
        assert!(!polled.get());
        let over = block_on(read_record(
            &key,
            None,
            chunks(&[6, 6]),
            10,
            |_| unreachable!(),
        ));
        assert_eq!(over.unwrap_err().key(), Some(&key));
        let fits = block_on(read_record(
            &key,
            Some(10),
            chunks(&[10]),
            10,
            |_| unreachable!(),
        ));
        assert_eq!(fits.unwrap().len(), 10);
    }

    #[test]
    fn a_failing_stream_fails_the_read() {
        let failing = futures::stream::iter([Ok(Bytes::from("a")), Err("reset")]);
        let got = block_on(read_capped(failing, 10));
        assert!(matches!(got, Err(CappedError::Stream("reset"))));
        let failing = futures::stream::iter([Ok(Bytes::from("a")), Err("reset")]);
        assert_eq!(block_on(read_prefix(failing, 10)), Err("reset"));
    }

    #[test]
    fn a_prefix_is_cut_inside_a_chunk_and_the_rest_never_polled() {
        let polled = std::cell::Cell::new(0);
        let endless = futures::stream::repeat_with(|| {
            polled.set(polled.get() + 1);
            Ok::<_, ()>(Bytes::from_static(b"0123456789"))
        });
        let start = block_on(read_prefix(endless, 25)).unwrap();
        assert_eq!(start, "0123456789012345678901234");
        assert_eq!(polled.get(), 3);
        assert_eq!(block_on(read_prefix(chunks(&[3]), 25)).unwrap().len(), 3);
    }

    #[test]
    fn a_budgeted_body_passes_exactly_the_budget_then_fails() {
        let budget = AnswerBudget::new(2500);
        let inner = StreamBody::new(chunks(&[1000, 1000, 1000, 1000]).map(|c| c.map(Frame::data)));
        let mut body = Budgeted::new(inner, budget.clone(), |_| ());
        let mut passed = 0;
        let end = block_on(async {
            while let Some(frame) = body.frame().await {
                match frame {
                    Ok(frame) => passed += frame.into_data().unwrap().len(),
                    Err(()) => return Err(()),
                }
            }
            Ok(())
        });
        assert_eq!((end, passed), (Err(()), 2500));
        assert!(budget.exceeded());
        assert_eq!((budget.spent(), budget.left()), (2500, 0));
    }

    #[test]
    fn a_body_within_budget_is_untouched_and_the_budget_is_shared() {
        let budget = AnswerBudget::new(10);
        let first = Full::new(Bytes::from("abcdef")).map_err(|e| match e {});
        let body = Budgeted::new(first, budget.clone(), |_| unreachable!());
        let got = block_on(body.collect()).unwrap().to_bytes();
        assert_eq!(got, "abcdef");
        assert!(!budget.exceeded());
        let second = Full::new(Bytes::from("ghijk")).map_err(|_: std::convert::Infallible| ());
        assert!(block_on(Budgeted::new(second, budget.clone(), |_| ()).collect()).is_err());
        assert_eq!(budget.spent(), 10);
    }

    #[test]
    fn the_size_hint_never_promises_more_than_the_budget() {
        let huge = Full::new(Bytes::from(vec![0u8; 4096])).map_err(|e| match e {});
        let body = Budgeted::new(huge, AnswerBudget::new(100), |_| ());
        assert_eq!(body.size_hint().lower(), 100);
        assert_eq!(body.size_hint().upper(), None);
    }
}
