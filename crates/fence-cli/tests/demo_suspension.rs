//! `fence demo`'s suspended node does nothing until it wakes: what the demo (the README's main
//! command) prints against what its code does (the second review; failed on main 3edc867).
#![allow(clippy::disallowed_methods)]

mod common;

use common::fence;

/// Q6. The demo says node-0 is "SUSPENDED (its clock stops; its requests hang)", and its
/// module doc says that *when it wakes* its own lease check refuses its writes and "the late
/// writes it had in flight" are rejected by the store. In the code (demo.rs) a suspension
/// only stops the monotonic clock and freezes the link: the writer task keeps running on
/// tokio's timers, so node-0 prints "write … REJECTED … refused locally" *between* SUSPENDED
/// and WAKES UP — a suspended machine runs nothing. And the "late writes" rejected after it
/// wakes are not requests it had in flight: its frozen requests timed out and were dropped
/// in the link's gate; `late_writes` builds new `put_head` requests from the ledger after the
/// wake, through a bare `Ownership`, outside the runtime.
#[test]
fn the_suspended_node_does_nothing_until_it_wakes() {
    let tmp = tempfile::tempdir().unwrap();
    let out = fence(&["demo"]) // exactly the README's command
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    let slept = lines
        .iter()
        .position(|l| l.contains("node-0  SUSPENDED"))
        .unwrap();
    let woke = lines
        .iter()
        .position(|l| l.contains("node-0  WAKES UP"))
        .unwrap();
    let acted: Vec<&&str> = lines[slept + 1..woke]
        .iter()
        .filter(|l| l.contains("] node-0 "))
        .collect();
    assert!(acted.is_empty(), "node-0 acted while suspended: {acted:#?}");
}
