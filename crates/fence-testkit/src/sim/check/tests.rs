//! The properties' own tests: a sound history passes, each kind of breach is caught.

use super::*;

fn head(cell: &str, node: Option<&str>, epoch: u64, payload: &'static str) -> Event {
    Event::HeadApplied {
        t: 0,
        cell: cell.into(),
        node: node.map(str::to_owned),
        epoch,
        gen: None,
        payload: Bytes::from_static(payload.as_bytes()),
        blob: None,
    }
}

fn ack(epoch: u64, payload: &'static str) -> Event {
    Event::Acked {
        t: 0,
        cell: "c".into(),
        epoch,
        node: "n".into(),
        gen: "g".into(),
        payload: Bytes::from_static(payload.as_bytes()),
    }
}

fn attempt(payload: &'static str) -> Event {
    Event::Attempt {
        cell: "c".into(),
        payload: Bytes::from_static(payload.as_bytes()),
        gen: "g".into(),
        mono: 0,
        by_claim: true,
    }
}

fn issued_at(nonce: &str, mono: u64) -> Event {
    Event::LeaseIssued {
        t: mono,
        node: "n".into(),
        gen: "g".into(),
        nonce: nonce.into(),
        mono,
    }
}

fn applied(nonce: &str) -> Event {
    Event::LeaseApplied {
        t: 0,
        node: "n".into(),
        gen: "g".into(),
        nonce: nonce.into(),
        expires_ms: 1,
    }
}

fn claimed(epoch: u64, node: &str, gen: &str, t: u64) -> Event {
    Event::Claimed {
        t,
        cell: "c".into(),
        epoch,
        node: node.into(),
        gen: gen.into(),
    }
}

fn finals(epoch: u64, payload: &'static str) -> BTreeMap<String, Option<FinalHead>> {
    let head = FinalHead {
        epoch,
        payload: Bytes::from_static(payload.as_bytes()),
    };
    BTreeMap::from([("c".to_owned(), Some(head))])
}

fn violated(events: &[Event], f: &BTreeMap<String, Option<FinalHead>>) -> Vec<Property> {
    check(events, f, 1_000)
        .into_iter()
        .map(|v| v.property)
        .collect()
}

#[test]
fn a_sound_history_passes() {
    let events = [
        issued_at("l1", 0),
        applied("l1"),
        head("c", Some("n"), 1, ""),
        claimed(1, "n", "g", 0),
        attempt("x"),
        head("c", Some("n"), 1, "x"),
        ack(1, "x"),
        head("c", None, 1, "x"),
        head("c", Some("m"), 2, "x"),
    ];
    assert!(violated(&events, &finals(2, "x")).is_empty());
}

#[test]
fn an_acknowledged_write_that_never_landed_is_lost() {
    let events = [
        issued_at("l1", 0),
        applied("l1"),
        attempt("x"),
        head("c", Some("n"), 1, "x"),
        attempt("y"),
        ack(1, "y"),
    ];
    assert_eq!(
        violated(&events, &finals(1, "x")),
        [Property::NoAckedWriteLost]
    );
}

#[test]
fn a_rolled_back_or_reapplied_payload_is_caught() {
    // An acknowledged write y is rolled back to x by a later head carrying x again.
    let events = [
        issued_at("l1", 0),
        applied("l1"),
        attempt("x"),
        attempt("y"),
        head("c", Some("n"), 1, "x"),
        head("c", Some("n"), 1, "y"),
        ack(1, "y"),
        head("c", Some("n"), 2, "x"),
    ];
    assert!(violated(&events, &finals(2, "x")).contains(&Property::NoAckedWriteLost));
    // A claim that drops the data (back to empty) is a rollback too.
    let events = [
        issued_at("l1", 0),
        applied("l1"),
        attempt("x"),
        head("c", Some("n"), 1, "x"),
        ack(1, "x"),
        head("c", Some("m"), 2, ""),
    ];
    assert!(violated(&events, &finals(2, "")).contains(&Property::NoAckedWriteLost));
}

#[test]
fn a_refused_write_that_landed_and_a_skipped_epoch_are_caught() {
    let refused = Event::Refused {
        t: 0,
        cell: "c".into(),
        payload: Bytes::from_static(b"x"),
        kind: "Fenced".into(),
    };
    let events = [attempt("x"), head("c", Some("n"), 1, "x"), refused];
    assert_eq!(
        violated(&events, &finals(1, "x")),
        [Property::NoAckedWriteLost]
    );
    let events = [head("c", Some("n"), 1, ""), head("c", Some("m"), 3, "")];
    assert_eq!(
        violated(&events, &finals(3, "")),
        [Property::EpochsIncrease]
    );
}

#[test]
fn a_stale_epoch_replacing_the_head_is_caught() {
    let events = [
        issued_at("l1", 0),
        applied("l1"),
        attempt("x"),
        attempt("y"),
        head("c", Some("m"), 2, "x"),
        head("c", Some("n"), 1, "y"),
    ];
    assert!(violated(&events, &finals(1, "y")).contains(&Property::EpochsIncrease));
}

#[test]
fn an_unsealed_claim_and_overlapping_beliefs_are_caught() {
    let events = [issued_at("l1", 0), applied("l1"), claimed(1, "n", "g", 0)];
    assert!(violated(&events, &BTreeMap::new()).contains(&Property::OneWriterPerEpoch));
    let believes = |t, gen: &str, epoch| Event::Believes {
        t,
        cell: "c".into(),
        epoch,
        node: "n".into(),
        gen: gen.into(),
        process: "n#1".into(),
    };
    let events = [
        head("c", Some("n"), 1, ""),
        claimed(1, "n", "g", 0),
        head("c", Some("m"), 2, ""),
        claimed(2, "m", "h", 5),
        believes(4, "g", 1),
        believes(6, "g", 1),
    ];
    assert_eq!(
        violated(&events, &BTreeMap::new()),
        [Property::ExclusiveBelief]
    );
    // A suspended process is not exempt: its wall clock ends its authority.
    let suspended = [
        Event::Suspended {
            t: 1,
            process: "n#1".into(),
        },
        events[4].clone(),
        events[5].clone(),
    ];
    let mut with = events[..4].to_vec();
    with.extend(suspended);
    assert_eq!(
        violated(&with, &BTreeMap::new()),
        [Property::ExclusiveBelief]
    );
}

#[test]
fn a_resume_needs_its_own_seal_and_a_vouched_generation() {
    let sealed = |t, gen: &str| Event::HeadApplied {
        t,
        cell: "c".into(),
        node: Some("n".into()),
        epoch: 1,
        gen: Some(gen.into()),
        payload: Bytes::new(),
        blob: None,
    };
    let resumed = |t, since, gen: &str, vouched: &[&str]| Event::Resumed {
        t,
        since,
        cell: "c".into(),
        epoch: 1,
        node: "n".into(),
        gen: gen.into(),
        vouched: vouched.iter().map(|v| (*v).to_owned()).collect(),
    };
    let first = [sealed(0, "g"), claimed(1, "n", "g", 0)];
    // Sealed after it was asked for, vouching for the generation that held the epoch.
    let mut ok = first.to_vec();
    ok.extend([sealed(10, "h"), resumed(11, 5, "h", &["h", "g"])]);
    assert!(violated(&ok, &BTreeMap::new()).is_empty());
    // No head naming the resumer at that epoch after it asked: it never sealed.
    let mut unsealed = first.to_vec();
    unsealed.push(resumed(11, 5, "h", &["h", "g"]));
    assert_eq!(
        violated(&unsealed, &BTreeMap::new()),
        [Property::OneWriterPerEpoch]
    );
    let mut stale = first.to_vec();
    stale.extend([sealed(3, "h"), resumed(11, 5, "h", &["h", "g"])]);
    assert_eq!(
        violated(&stale, &BTreeMap::new()),
        [Property::OneWriterPerEpoch]
    );
    // A second process at the epoch that vouched for nobody who held it.
    let mut intruder = first.to_vec();
    intruder.extend([sealed(10, "h"), resumed(11, 5, "h", &["h"])]);
    assert_eq!(
        violated(&intruder, &BTreeMap::new()),
        [Property::OneWriterPerEpoch]
    );
}

#[test]
fn a_head_pointing_at_a_deleted_payload_object_is_caught() {
    let on_blob = |name: &str| Event::HeadApplied {
        t: 0,
        cell: "c".into(),
        node: Some("n".into()),
        epoch: 1,
        gen: None,
        payload: Bytes::from_static(b"x"),
        blob: Some(name.into()),
    };
    let deleted = |name: &str| Event::BlobDeleted {
        t: 0,
        cell: "c".into(),
        name: name.into(),
    };
    // A replaced object deleted after the head moved on: fine.
    let events = [
        attempt("x"),
        on_blob("1-a"),
        head("c", Some("n"), 1, "y"),
        deleted("1-a"),
    ];
    let mut with_y = events.to_vec();
    with_y.insert(0, attempt("y"));
    assert!(violated(&with_y, &finals(1, "y")).is_empty());
    // A head landing on an object already deleted (a collection that took a co-writer's
    // object of the claim's own epoch for garbage).
    let events = [attempt("x"), deleted("1-a"), on_blob("1-a")];
    assert_eq!(
        violated(&events, &finals(1, "x")),
        [Property::NoAckedWriteLost]
    );
    // The object the head points at, deleted under it.
    let events = [attempt("x"), on_blob("1-a"), deleted("1-a")];
    assert_eq!(
        violated(&events, &finals(1, "x")),
        [Property::NoAckedWriteLost]
    );
}

#[test]
fn holding_or_writing_past_the_last_lease_write_is_caught() {
    let held = |mono| Event::Held {
        t: mono,
        node: "n".into(),
        gen: "g".into(),
        mono,
    };
    assert!(violated(
        &[issued_at("l1", 0), applied("l1"), held(999)],
        &BTreeMap::new()
    )
    .is_empty());
    assert_eq!(
        violated(
            &[issued_at("l1", 0), applied("l1"), held(1_000)],
            &BTreeMap::new()
        ),
        [Property::NoExpiredLeaseComesBack]
    );
    // A write asked for within the authority (at 500) is dated by its first send.
    let asked = Event::Attempt {
        cell: "c".into(),
        payload: Bytes::from_static(b"z"),
        gen: "g".into(),
        mono: 500,
        by_claim: true,
    };
    let sent = |mono| Event::HeadSent {
        t: mono,
        gen: Some("g".into()),
        payload: Bytes::from_static(b"z"),
        mono,
    };
    // The head read a write waited for (its base), sent at `read_mono`.
    let read = |mono| Event::HeadRead {
        t: mono,
        node: "n".into(),
        cell: "c".into(),
        mono,
    };
    let written = |read_mono, send_mono| {
        [
            issued_at("l1", 0),
            applied("l1"),
            read(400),
            asked.clone(),
            read(read_mono),
            sent(send_mono),
            sent(2_000), // a re-send does not date the write
            head("c", Some("n"), 1, "z"),
            ack(1, "z"),
        ]
    };
    let late = |read_mono, send_mono| {
        let found = violated(&written(read_mono, send_mono), &finals(1, "z"));
        found.contains(&Property::NoExpiredLeaseComesBack)
    };
    assert!(!late(400, 999));
    // Sent after its authority (0 + 1,000) with no read since it was asked for: late.
    assert!(late(400, 1_000));
    // Sent the moment its base read, sent within the authority, came back: in time.
    assert!(!late(900, 1_700));
    assert!(late(1_000, 1_700));
}
