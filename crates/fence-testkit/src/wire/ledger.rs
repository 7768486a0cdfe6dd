//! [`Ledger`]: what the server really did with each marked write, as seen on the wire.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// Marks the bodies a [`Ledger`] follows: a write whose body contains `wire-op-<token>` (the
/// token: ASCII letters, digits, `-` and `_`) is recorded under that token, whatever the
/// adapter wraps around the bytes (a multipart envelope, a trailer).
pub const TOKEN_MARKER: &str = "wire-op-";

/// What the server did with one send of a write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Upstream {
    /// Never sent to the server (a fault before forwarding, or the server refused the
    /// connection): not applied.
    NotSent,
    /// Still on its way (only seen before [`Ledger::settle`]).
    Pending,
    /// The server answered this HTTP status.
    Answered(u16),
    /// Sent, but the server's answer never came whole: applied or not.
    Lost(String),
    /// Applied by a store below the adapter that has no HTTP status (an in-process store).
    Applied,
    /// Not applied by such a store (its condition was false, or the fault came first).
    NotApplied,
}

/// Whether a send took effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// The server applied it (a 2xx answer).
    Applied,
    /// The server did not apply it (never sent, or a 3xx/4xx answer).
    NotApplied,
    /// Cannot be known from the wire (a 5xx answer, or the answer was lost).
    Unknown,
}

impl Upstream {
    /// The fate this answer proves.
    pub fn fate(&self) -> Fate {
        match self {
            Upstream::NotSent | Upstream::NotApplied => Fate::NotApplied,
            Upstream::Applied => Fate::Applied,
            Upstream::Answered(s) if (200..300).contains(s) => Fate::Applied,
            Upstream::Answered(s) if *s < 500 => Fate::NotApplied,
            Upstream::Answered(_) | Upstream::Lost(_) | Upstream::Pending => Fate::Unknown,
        }
    }
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Upstream::NotSent => f.write_str("never reached the server"),
            Upstream::Pending => f.write_str("still in flight"),
            Upstream::Answered(s) => write!(f, "the server answered {s}"),
            Upstream::Lost(why) => write!(f, "the server's answer was lost ({why})"),
            Upstream::Applied => f.write_str("the store applied it"),
            Upstream::NotApplied => f.write_str("the store did not apply it"),
        }
    }
}

/// One send of a marked write: which request, under which fault, and what became of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Send {
    /// The request, as `METHOD path`.
    pub request: String,
    /// The fault injected on it.
    pub fault: String,
    /// What the server did.
    pub upstream: Upstream,
}

impl fmt::Display for Send {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} under {}: {}",
            self.request, self.fault, self.upstream
        )
    }
}

/// The record of every marked write that went through a fault layer (a
/// [`FaultProxy`](crate::wire::FaultProxy) or a
/// [`FaultyObjectStore`](crate::objstore::FaultyObjectStore)), and what the store below did
/// with it. Writes may still be in flight after the adapter gave up; [`Ledger::settle`]
/// waits for them.
///
/// ```
/// use fence_testkit::wire::{Fate, Ledger, Upstream};
/// let ledger = Ledger::new();
/// let send = ledger.begin(b"{\"v\":\"wire-op-7\"}", "PUT /b/k", "forward");
/// send.finish(Upstream::Answered(200));
/// assert_eq!(ledger.fate("7"), Some(Fate::Applied));
/// assert_eq!(ledger.fate("8"), None);
/// ```
#[derive(Debug, Default)]
pub struct Ledger {
    sends: Mutex<HashMap<String, Vec<Send>>>,
    in_flight: AtomicUsize,
    settled: Notify,
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Arc<Ledger> {
        Arc::new(Ledger::default())
    }

    fn sends_mut(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Send>>> {
        self.sends.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that a write with `body` is being sent as `request` under `fault`; finish it
    /// with [`InFlight::finish`] (dropping it unfinished records [`Upstream::Lost`]).
    pub fn begin(self: &Arc<Self>, body: &[u8], request: &str, fault: &str) -> InFlight {
        let tokens = tokens_in(body);
        let mut sends = self.sends_mut();
        let slots = tokens
            .into_iter()
            .map(|token| {
                let list = sends.entry(token.clone()).or_default();
                list.push(Send {
                    request: request.to_owned(),
                    fault: fault.to_owned(),
                    upstream: Upstream::Pending,
                });
                (token, list.len() - 1)
            })
            .collect();
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight {
            ledger: self.clone(),
            slots,
            done: false,
        }
    }

    /// Every send of the write marked `token`, in the order they began.
    pub fn sends(&self, token: &str) -> Vec<Send> {
        self.sends_mut().get(token).cloned().unwrap_or_default()
    }

    /// Whether the write marked `token` took effect: applied if any send was, not applied if
    /// every send provably was not; `None` if it was never sent.
    pub fn fate(&self, token: &str) -> Option<Fate> {
        fate_of(&self.sends(token))
    }

    /// Writes still in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Waits until no write is in flight, at most `timeout`; true when settled.
    pub async fn settle(&self, timeout: Duration) -> bool {
        let wait = async {
            loop {
                let settled = self.settled.notified();
                tokio::pin!(settled);
                settled.as_mut().enable();
                if self.in_flight() == 0 {
                    return;
                }
                settled.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.is_ok()
    }

    fn finish(&self, slots: &[(String, usize)], upstream: Upstream) {
        let mut sends = self.sends_mut();
        for (token, i) in slots {
            if let Some(send) = sends.get_mut(token).and_then(|l| l.get_mut(*i)) {
                send.upstream = upstream.clone();
            }
        }
        drop(sends);
        if self.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.settled.notify_waiters();
        }
    }
}

/// The fate of a write from all its sends; `None` for no send.
pub fn fate_of(sends: &[Send]) -> Option<Fate> {
    let fates = sends.iter().map(|s| s.upstream.fate());
    fates.fold(None, |acc, f| match (acc, f) {
        (Some(Fate::Applied), _) | (_, Fate::Applied) => Some(Fate::Applied),
        (Some(Fate::Unknown), _) | (_, Fate::Unknown) => Some(Fate::Unknown),
        _ => Some(Fate::NotApplied),
    })
}

/// A write on its way to the store; see [`Ledger::begin`].
#[derive(Debug)]
pub struct InFlight {
    ledger: Arc<Ledger>,
    slots: Vec<(String, usize)>,
    done: bool,
}

impl InFlight {
    /// Records what became of the write.
    pub fn finish(mut self, upstream: Upstream) {
        self.done = true;
        self.ledger.finish(&self.slots, upstream);
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.done {
            let why = Upstream::Lost("the fault layer dropped the request".into());
            self.ledger.finish(&self.slots, why);
        }
    }
}

/// The tokens marked with [`TOKEN_MARKER`] in `body`.
///
/// ```
/// use fence_testkit::wire::tokens_in;
/// assert_eq!(tokens_in(b"--x\r\nwire-op-a1-2\r\n--x wire-op-b_3!"), ["a1-2", "b_3"]);
/// assert!(tokens_in(b"nothing here").is_empty());
/// ```
pub fn tokens_in(body: &[u8]) -> Vec<String> {
    let marker = TOKEN_MARKER.as_bytes();
    let mut tokens = Vec::new();
    let mut at = 0;
    while let Some(found) = find(&body[at..], marker) {
        let start = at + found + marker.len();
        let len = body[start..]
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric() || **b == b'-' || **b == b'_')
            .count();
        if len > 0 {
            tokens.push(String::from_utf8_lossy(&body[start..start + len]).into_owned());
        }
        at = start + len;
    }
    tokens
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
