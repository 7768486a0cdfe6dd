//! Decision-core events and MemoryStore CAS, plus round trips per lease operation.
//!
//! `cargo bench -p fence-core --bench core`
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use fence_core::decide::*;
use fence_core::*;

fn holder() -> Holder {
    Holder {
        node: "n1".into(),
        addr: "127.0.0.1:7000".into(),
        peer_protocol: 1,
        generation: "0123456789abcdef".into(),
    }
}

/// One renewal cycle = two events (Tick → Write, Written → Held).
fn decide_events(c: &mut Criterion) {
    let v1 = Version::new("v1").unwrap();
    let v2 = Version::new("v2").unwrap();
    let mut core = LeaseCore::new(holder(), LeaseConfig::with_ttl_ms(10_000));
    core.step(
        Now {
            mono_ms: 0,
            wall_ms: 1,
        },
        LeaseEvent::Acquire { wait: false },
    );
    core.step(
        Now {
            mono_ms: 1,
            wall_ms: 2,
        },
        LeaseEvent::Written(WriteResult::Applied(v1)),
    );
    let mut t = 0u64;
    c.bench_function("decide: renewal cycle (2 events)", |b| {
        b.iter(|| {
            t += 3_334;
            let now = Now {
                mono_ms: t,
                wall_ms: 1_000 + t,
            };
            black_box(core.step(now, LeaseEvent::Tick));
            let v = if t.is_multiple_of(2) {
                v2.clone()
            } else {
                Version::new("v3").unwrap()
            };
            black_box(core.step(now, LeaseEvent::Written(WriteResult::Applied(v))));
        })
    });
    let owner = HeadView {
        node: Some("peer".into()),
        epoch: 7,
        version: Version::new("o").unwrap(),
    };
    c.bench_function("decide: claim decision (1 event)", |b| {
        b.iter(|| black_box(decide_claim("me", Some(&owner), Some(Liveness::Dead))))
    });
    c.bench_function("decide: is_held (1 query)", |b| {
        b.iter(|| {
            black_box(core.is_held(black_box(Now {
                mono_ms: t + 1,
                wall_ms: 1_000 + t,
            })))
        })
    });
}

fn memory_cas(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let store = MemoryStore::new();
    let key = Key::new("cells/c/own.json").unwrap();
    let mut version = match rt
        .block_on(store.put(&key, Bytes::from_static(b"0"), CasGuard::Absent))
        .unwrap()
    {
        PutOutcome::Applied(v) => v,
        PutOutcome::Rejected => unreachable!(),
    };
    let body = Bytes::from_static(br#"{"v":1,"node":"n1","epoch":1,"nonce":"x"}"#);
    c.bench_function("memory: CAS put (Match)", |b| {
        b.iter(|| {
            let out = rt
                .block_on(store.put(&key, body.clone(), CasGuard::Match(version.clone())))
                .unwrap();
            if let PutOutcome::Applied(v) = out {
                version = v;
            }
        })
    });
}

/// Round trips of each lease operation through the runtime, counted by the testkit.
fn round_trips(_: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let rows = rt
        .block_on(fence_testkit::round_trips::measure(
            Arc::new(MemoryStore::new()),
            &Key::new("rt").unwrap(),
            Duration::from_millis(600),
        ))
        .unwrap();
    println!("\n{rows}");
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
    targets = decide_events, memory_cas, round_trips
}
criterion_main!(benches);
