//! What the wire tests of the adapters assert with: an error's kind and commit state, what a
//! log line could show of it, deadlines, and how much of an answer was read.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use fence_core::{CasGuard, Commit, ConditionalStore, Error, ErrorKind, Key};

use super::server::{serve, Canned, Reply};

/// A gibibyte.
pub const GIB: u64 = 1 << 30;

/// What a server may write before a client that stopped reading hangs up, beyond what was
/// read: the sockets' buffers on loopback hold a few MiB each way.
pub const HANG_UP_SLACK: u64 = 32 << 20;

/// `op`, which must end well within a minute on any machine (without the caps of the hostile
/// answer tests, it reads gigabytes first).
pub async fn within_deadline<T>(op: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), op)
        .await
        .expect("the operation outlived its deadline")
}

/// Asserts `err`'s kind and commit state.
pub fn assert_error(err: &Error, kind: ErrorKind, commit: Commit) {
    assert_eq!(kind_commit(err), (kind, commit), "{err:?}");
}

/// An error's kind and commit state, the pair wire tests assert.
pub fn kind_commit(e: &Error) -> (ErrorKind, Commit) {
    (e.kind(), e.commit())
}

/// `Display`, `Debug` and every source's `Display` and `Debug`, in one string: what a log
/// line could ever show of `err`.
pub fn error_texts(err: &Error) -> String {
    let mut texts = vec![err.to_string(), format!("{err:?}")];
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        texts.push(s.to_string());
        texts.push(format!("{s:?}"));
        source = s.source();
    }
    texts.join(" | ")
}

/// `server`'s streamed answers were read no further than their start: each could have
/// written no more than the sockets hold.
pub fn assert_read_no_further(server: &Canned) {
    let (sent, answers) = (server.streamed(), server.requests().len() as u64);
    assert!(
        sent < answers.max(1) * HANG_UP_SLACK,
        "{sent} bytes for {answers} answers"
    );
}

/// A proxy to `upstream` that carries out every `method` request there, then answers `reply`
/// in its place; other requests pass through.
pub async fn replacing_answers(upstream: SocketAddr, method: &'static str, reply: Reply) -> Canned {
    serve(move |r| match r.method == method {
        true => Reply::ForwardThen(upstream, Box::new(reply.clone())),
        false => Reply::Forward(upstream),
    })
    .await
}

/// Creates `key` through `via` (a proxy whose answer is not the truth): the answer must be an
/// ambiguous `kind`, and `direct` must show that the create landed.
pub async fn assert_create_lands_ambiguously(
    via: &dyn ConditionalStore,
    direct: &dyn ConditionalStore,
    key: &Key,
    kind: ErrorKind,
) {
    let body = Bytes::from("ours");
    let got = via.put(key, body.clone(), CasGuard::Absent).await;
    let err = got.expect_err("the proxy answered an error");
    assert_eq!(kind_commit(&err), (kind, Commit::Ambiguous), "{err:?}");
    let landed = direct.get(key).await.unwrap().expect("the create landed");
    assert_eq!(landed.body, body);
}
