//! The checker against hand-made histories: known-good ones pass, known-bad ones fail.

use std::sync::Arc;

use fence_core::{CasGuard, Key, MemoryStore, Version};
use fence_testkit::linearizability::{
    check, record_and_check, Call, Operation, Return, WorkloadConfig,
};

fn key() -> Key {
    Key::new("k").unwrap()
}

fn v(s: &str) -> Version {
    Version::new(s).unwrap()
}

fn put(t: (u64, u64), body: &str, guard: Option<&str>, ret: Return) -> Operation {
    let guard = guard.map_or(CasGuard::Absent, |g| CasGuard::Match(v(g)));
    Operation {
        key: key(),
        call: Call::Put {
            guard,
            body: body.to_owned().into(),
        },
        ret,
        invoked: t.0,
        returned: t.1,
    }
}

fn get(t: (u64, u64), seen: Option<(&str, &str)>) -> Operation {
    Operation {
        key: key(),
        call: Call::Get,
        ret: Return::Read(seen.map(|(ver, body)| (v(ver), body.to_owned().into()))),
        invoked: t.0,
        returned: t.1,
    }
}

fn applied(s: &str) -> Return {
    Return::Applied(v(s))
}

#[test]
fn known_good_histories_pass() {
    let good: Vec<(&str, Vec<Operation>)> = vec![
        ("empty", vec![]),
        (
            "read of absent, then create",
            vec![get((1, 2), None), put((3, 4), "a", None, applied("1"))],
        ),
        (
            "concurrent read sees the create in flight",
            vec![
                put((1, 4), "a", None, applied("1")),
                get((2, 3), Some(("1", "a"))),
            ],
        ),
        (
            "concurrent read misses the create in flight",
            vec![
                put((1, 4), "a", None, applied("1")),
                get((2, 3), None),
                get((5, 6), Some(("1", "a"))),
            ],
        ),
        (
            "create race: one wins, one rejected",
            vec![
                put((1, 3), "a", None, applied("1")),
                put((2, 4), "b", None, Return::Rejected),
            ],
        ),
        (
            "chain with a stale rejection",
            vec![
                put((1, 2), "a", None, applied("1")),
                put((3, 4), "b", Some("1"), applied("2")),
                put((5, 6), "c", Some("1"), Return::Rejected),
                get((7, 8), Some(("2", "b"))),
            ],
        ),
        (
            "overlapping CAS: rejection explained by the concurrent winner",
            vec![
                put((1, 2), "a", None, applied("1")),
                put((3, 6), "b", Some("1"), applied("2")),
                put((4, 7), "c", Some("1"), Return::Rejected),
            ],
        ),
        (
            "ambiguous write seen later",
            vec![
                put((1, 2), "a", None, applied("1")),
                put((3, 4), "b", Some("1"), Return::Ambiguous),
                get((5, 6), Some(("x9", "b"))),
                put((7, 8), "c", Some("x9"), applied("3")),
            ],
        ),
        (
            "ambiguous write that did not land",
            vec![
                put((1, 2), "a", None, applied("1")),
                put((3, 4), "b", Some("1"), Return::Ambiguous),
                get((5, 6), Some(("1", "a"))),
            ],
        ),
        (
            "unseen ambiguous write explains a later rejection",
            vec![
                put((1, 2), "a", None, applied("1")),
                put((3, 4), "b", Some("1"), Return::Ambiguous),
                put((5, 6), "c", Some("1"), Return::Rejected),
            ],
        ),
        (
            "ambiguous write may land long after its answer",
            vec![
                put((1, 2), "a", None, Return::Ambiguous),
                get((3, 4), None),
                get((5, 6), Some(("1", "a"))),
            ],
        ),
        (
            "unseen ambiguous create explains a later rejected create",
            vec![
                put((1, 2), "a", None, Return::Ambiguous),
                put((3, 4), "b", None, Return::Rejected),
            ],
        ),
        (
            "not-committed write changes nothing",
            vec![
                put((1, 2), "a", None, Return::NotCommitted),
                get((3, 4), None),
            ],
        ),
    ];
    for (name, history) in good {
        assert!(check(&history).is_ok(), "{name}: {:?}", check(&history));
    }
}

#[test]
fn known_bad_histories_fail() {
    let bad: Vec<(&str, Vec<Operation>)> = vec![
        (
            "two creates applied",
            vec![
                put((1, 3), "a", None, applied("1")),
                put((2, 4), "b", None, applied("2")),
            ],
        ),
        (
            "two updates from one version applied",
            vec![
                put((1, 2), "a", None, applied("1")),
                put((3, 5), "b", Some("1"), applied("2")),
                put((4, 6), "c", Some("1"), applied("3")),
            ],
        ),
        (
            "stale read after a completed update",
            vec![
                put((1, 2), "a", None, applied("1")),
                put((3, 4), "b", Some("1"), applied("2")),
                get((5, 6), Some(("1", "a"))),
            ],
        ),
        (
            "read of absent after a completed create",
            vec![put((1, 2), "a", None, applied("1")), get((3, 4), None)],
        ),
        (
            "read from the future",
            vec![
                get((1, 2), Some(("1", "a"))),
                put((3, 4), "a", None, applied("1")),
            ],
        ),
        (
            "rejected write read back",
            vec![
                put((1, 2), "a", None, applied("1")),
                put((3, 4), "b", Some("1"), Return::Rejected),
                get((5, 6), Some(("2", "b"))),
            ],
        ),
        (
            "rejection without a reason",
            vec![
                put((1, 2), "a", None, applied("1")),
                put((3, 4), "b", Some("1"), Return::Rejected),
            ],
        ),
        (
            "create rejected on an absent key",
            vec![put((1, 2), "a", None, Return::Rejected)],
        ),
        (
            "version repeated",
            vec![
                put((1, 2), "a", None, applied("1")),
                put((3, 4), "b", Some("1"), applied("1")),
            ],
        ),
        (
            "read saw another version than the write applied",
            vec![
                put((1, 2), "a", None, applied("1")),
                get((3, 4), Some(("7", "a"))),
            ],
        ),
        (
            "read of a body nobody wrote",
            vec![get((1, 2), Some(("1", "zzz")))],
        ),
        (
            "chain order contradicts real time",
            vec![
                put((5, 6), "a", None, applied("1")),
                put((1, 2), "b", Some("1"), applied("2")),
            ],
        ),
        (
            "not-committed write read back",
            vec![
                put((1, 2), "a", None, Return::NotCommitted),
                get((3, 4), Some(("1", "a"))),
            ],
        ),
    ];
    for (name, history) in bad {
        let verdict = check(&history);
        assert!(verdict.is_err(), "{name} passed the checker");
        println!("{name}: {}", verdict.unwrap_err());
    }
}

#[test]
fn keys_are_checked_independently() {
    let mut other = put((3, 4), "a", None, applied("1"));
    other.key = Key::new("other").unwrap();
    let history = vec![put((1, 2), "a", None, applied("1")), other];
    let checked = check(&history).unwrap();
    assert_eq!((checked.ops, checked.keys), (2, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_recorded_ops_check_on_memory_store() {
    let cfg = WorkloadConfig {
        ops: 10_000,
        workers: 8,
        keys: 32,
        seed: 42,
    };
    let stats = record_and_check(
        Arc::new(MemoryStore::new()),
        &Key::new("lin").unwrap(),
        &cfg,
    )
    .await
    .unwrap();
    println!("linearizability: {stats}");
    assert!(stats.ops >= 10_000);
    assert!(stats.applied > 0 && stats.rejected > 0, "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_and_failed_writes_are_handled_by_the_checker() {
    use fence_testkit::{FaultyStore, OpKind, RandomFaults};
    let faulty = FaultyStore::new(Arc::new(MemoryStore::new()), 5);
    let odds = RandomFaults {
        lose_answer: 0.05,
        lose_request: 0.05,
        server_error_after_apply: 0.05,
        conflict: 0.05,
        ..RandomFaults::default()
    };
    faulty.set_random(OpKind::Put, odds);
    let cfg = WorkloadConfig {
        ops: 5_000,
        workers: 4,
        keys: 8,
        seed: 3,
    };
    let stats = record_and_check(Arc::new(faulty), &Key::new("lin").unwrap(), &cfg)
        .await
        .unwrap();
    println!("with faults: {stats}");
    assert!(stats.ambiguous > 0 && stats.errors > 0, "{stats}");
}
