//! What an adapter said about a write, checked against what the store did with it.

use std::fmt;

use fence_core::{Error, ErrorKind, PutOutcome};

use super::ledger::{fate_of, Fate, Send};

/// What the adapter answered to one conditional write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Said {
    /// `Ok(Applied)`.
    Applied,
    /// `Ok(Rejected)`.
    Rejected,
    /// An error of this kind, provably not committed.
    NotCommitted(ErrorKind),
    /// An error of this kind that may have landed.
    Ambiguous(ErrorKind),
}

impl Said {
    /// The classification of an adapter's answer.
    pub fn of(answer: &Result<PutOutcome, Error>) -> Said {
        match answer {
            Ok(PutOutcome::Applied(_)) => Said::Applied,
            Ok(PutOutcome::Rejected) => Said::Rejected,
            Err(e) if e.is_ambiguous() => Said::Ambiguous(e.kind()),
            Err(e) => Said::NotCommitted(e.kind()),
        }
    }
}

impl fmt::Display for Said {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Said::Applied => f.write_str("Applied"),
            Said::Rejected => f.write_str("Rejected"),
            Said::NotCommitted(k) => write!(f, "NotCommitted ({k:?})"),
            Said::Ambiguous(k) => write!(f, "Ambiguous ({k:?})"),
        }
    }
}

/// Checks one write: Applied ⇒ the store applied it; Rejected ⇒ it did not; NotCommitted ⇒
/// it did not, ever (call after the fault layer settled); Ambiguous may be either. A write
/// sent twice is a hidden retry of a conditional write (unless `resends_allowed`, for
/// callers that retry on their own). Returns the violation, naming the fault, the request,
/// what the adapter said and what the store did.
///
/// ```
/// use fence_testkit::wire::{judge, Said, Send, Upstream};
/// let lost = Send {
///     request: "PUT /b/k".into(),
///     fault: "reset after the server answered".into(),
///     upstream: Upstream::Answered(200),
/// };
/// assert!(judge(Said::Ambiguous(fence_core::ErrorKind::Unavailable), &[lost.clone()], false).is_none());
/// let wrong = judge(Said::NotCommitted(fence_core::ErrorKind::Unavailable), &[lost], false);
/// assert!(wrong.is_some());
/// ```
pub fn judge(said: Said, sends: &[Send], resends_allowed: bool) -> Option<String> {
    let history = || {
        let lines: Vec<String> = sends.iter().map(Send::to_string).collect();
        lines.join("; ")
    };
    if sends.len() > 1 && !resends_allowed {
        return Some(format!(
            "the adapter sent one conditional write {} times (a hidden retry): {}",
            sends.len(),
            history()
        ));
    }
    let fate = fate_of(sends);
    let wrong = matches!(
        (said, fate),
        (Said::Applied, None | Some(Fate::NotApplied))
            | (Said::Rejected | Said::NotCommitted(_), Some(Fate::Applied))
    );
    if !wrong {
        return None;
    }
    let did = match fate {
        None => "nothing reached the store".to_owned(),
        Some(_) => history(),
    };
    Some(format!("the adapter said {said}, but {did}"))
}
