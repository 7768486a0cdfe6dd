//! Operators fence must refuse at construction, before any I/O: services that cannot
//! compare-and-swap, and operators carrying a layer that may replay writes.

use std::time::Duration;

use fence_core::{Commit, ErrorKind};
use fence_opendal::OpendalStore;
use opendal::layers::RetryLayer;
use opendal::services::{Fs, Memory};
use opendal::Operator;

fn refusal(op: Operator) -> fence_core::Error {
    OpendalStore::new(op).expect_err("must be refused")
}

#[test]
fn a_memory_operator_is_refused_naming_the_missing_capability() {
    let e = refusal(Operator::new(Memory::default()).unwrap());
    assert_eq!(
        (e.kind(), e.commit()),
        (ErrorKind::Unsupported, Commit::NotCommitted)
    );
    assert!(e.message().contains("memory"), "{e}");
    assert!(e.message().contains("write_with_if"), "{e}");
}

/// OpenDAL's fs service is create-only, and its create-if-absent is not atomic across
/// processes: fence-fs is the local backend.
#[test]
fn an_fs_operator_is_refused_naming_the_missing_capability() {
    let dir = std::env::temp_dir().join("fence-opendal-refusal");
    let op = Operator::new(Fs::default().root(&dir.display().to_string())).unwrap();
    let e = refusal(op);
    assert_eq!(
        (e.kind(), e.commit()),
        (ErrorKind::Unsupported, Commit::NotCommitted)
    );
    assert!(e.message().contains("\"fs\""), "{e}");
    assert!(e.message().contains("write_with_if_match"), "{e}");
}

fn s3() -> Operator {
    let server = fence_opendal::emulator::S3Server {
        endpoint: "http://127.0.0.1:9".into(),
        bucket: "b".into(),
        region: "us-east-1".into(),
        access_key_id: "AKID".into(),
        secret_access_key: "secret".into(),
    };
    fence_opendal::emulator::s3(&server, "/").unwrap()
}

#[test]
fn an_operator_with_a_retry_layer_is_refused() {
    let e = refusal(s3().layer(RetryLayer::new()));
    assert_eq!(
        (e.kind(), e.commit()),
        (ErrorKind::Unsupported, Commit::NotCommitted)
    );
    assert!(e.message().contains("RetryLayer"), "{e}");
    OpendalStore::new(s3()).expect("the same operator without it is accepted");
}

/// A layer fence does not know is refused too: it might retry, cache or rewrite requests.
#[test]
fn an_operator_with_an_unknown_layer_is_refused() {
    #[derive(Debug)]
    struct Mystery;
    impl opendal::raw::Layer for Mystery {}
    let e = refusal(s3().layer(Mystery));
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(e.message().contains("Mystery"), "{e}");
}

#[test]
fn conditional_delete_is_refused_where_not_offered_and_opt_in_on_s3() {
    let store = OpendalStore::new(s3()).unwrap();
    assert!(
        !store.dialect().conditional_delete,
        "S3 advertises it statically"
    );
    let opted = OpendalStore::builder(s3())
        .with_conditional_delete(true)
        .build()
        .unwrap();
    assert!(opted.dialect().conditional_delete);
    let zero = OpendalStore::builder(s3())
        .with_cas_timeout(Duration::ZERO)
        .build();
    assert_eq!(zero.unwrap_err().kind(), ErrorKind::InvalidInput);
}

/// A layer that holds an operator of its own (a mirror, a fallback, a cache) shows that
/// operator's layer list inside its `Debug`; the check must still see the layers of the
/// operator it was given, the retry layer before it among them.
#[test]
fn a_retry_layer_is_refused_also_before_a_layer_that_holds_an_operator() {
    #[derive(Debug)]
    struct Mirror {
        #[allow(dead_code)] // shown by Debug only
        backup: Operator,
    }
    impl opendal::raw::Layer for Mirror {}
    let e = refusal(s3().layer(RetryLayer::new()).layer(Mirror { backup: s3() }));
    assert_eq!(
        (e.kind(), e.commit()),
        (ErrorKind::Unsupported, Commit::NotCommitted)
    );
}

/// A layer whose `Debug` names no type is unknown, so refused: the check fails closed.
#[test]
fn a_layer_whose_debug_names_nothing_is_refused() {
    struct Quiet;
    impl std::fmt::Debug for Quiet {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("<redacted>")
        }
    }
    impl opendal::raw::Layer for Quiet {}
    let e = refusal(s3().layer(Quiet));
    assert_eq!(e.kind(), ErrorKind::Unsupported);
}
