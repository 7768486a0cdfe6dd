//! A canned HTTP/1.1 server on 127.0.0.1 for the wire tests of the HTTP adapters, and the
//! suite of hostile answers every one of them runs ([`bounded`]).
//!
//! Each request is answered as the test's handler says — a fixed answer, a body cut short, a
//! body of gigabytes streamed from one small buffer, a delay, or the request forwarded to a
//! real server (whose answer is passed on or replaced). Every answer closes its connection,
//! so no client reuses one the server has dropped. Small on purpose: it reads a request's
//! headers and a `Content-Length` body, nothing more. Written on raw TCP rather than hyper's
//! server because the faults are below HTTP's framing: a body cut short of its
//! `Content-Length`, a body of gigabytes, and SigV4-signed requests forwarded byte for byte.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use fence_testkit::canned::{serve, Reply};
//! let server = serve(|_| Reply::status(404, "text/plain", "no")).await;
//! assert!(server.endpoint().starts_with("http://127.0.0.1:"));
//! assert!(server.requests().is_empty());
//! # });
//! ```

pub mod bounded;
mod checks;
pub mod s3;
mod server;

pub use checks::{
    assert_create_lands_ambiguously, assert_error, assert_read_no_further, error_texts,
    kind_commit, replacing_answers, within_deadline, GIB, HANG_UP_SLACK,
};
pub use server::{serve, Canned, Reply, Request};
