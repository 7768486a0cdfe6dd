//! The pure core driven by hand: each test feeds inputs and checks the effects.

use std::collections::BTreeMap;

use fence_core::decide::ObservedLease;
use fence_core::{Error, ErrorKind, LeaseConfig, NodeLeaseRecord, Version};

use super::lead::{LeadStep, LeaderCore};
use super::record::{Assignment, Notice, NoticeKind};
use super::*;
use crate::leader::LEADER_CELL;
use crate::shard::StopReason;

const WALL: u64 = 1_700_000_000_000;

fn at(mono_ms: u64) -> Now {
    Now {
        mono_ms,
        wall_ms: WALL + mono_ms,
    }
}

fn timing() -> Timing {
    // TTL 1 s: interval 200 ms, poll 100 ms, min_hold 400 ms, scan 3 s.
    Timing::for_lease(&LeaseConfig::with_ttl_ms(1_000))
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn core() -> FleetCore {
    FleetCore::new("a", names(&["c1", "c2", "c3"]), timing(), "ga", None)
}

fn seen(owner: Option<&str>, epoch: u64) -> Seen {
    Seen {
        owner: owner.map(str::to_owned),
        epoch,
    }
}

/// A record of `a` placing `cells` on it under term 1, led by `b`.
fn record(cells: &[&str], moves: &[(&str, &str)], heirs: &[(&str, &str)]) -> Assignment {
    let pairs = |v: &[(&str, &str)]| {
        v.iter()
            .map(|(c, n)| (c.to_string(), n.to_string()))
            .collect()
    };
    Assignment {
        generation: "ga".into(),
        term: 1,
        leader: "b".into(),
        cells: names(cells),
        moves: pairs(moves),
        heirs: pairs(heirs),
        ..Assignment::empty("a")
    }
}

/// The effects asking for an answer, by their debug names (what the shell waits on).
fn asks(effects: &[FleetEffect]) -> Vec<String> {
    let name = |e: &FleetEffect| {
        format!("{e:?}")
            .split([' ', '(', '{'])
            .next()
            .unwrap_or("")
            .to_owned()
    };
    effects.iter().map(name).collect()
}

/// Drives a fresh core through its first round until it holds `cells` (each free), with no
/// leadership of its own; returns it.
fn holding(cells: &[&str], now: u64) -> FleetCore {
    let mut c = core();
    c.step(at(now), FleetInput::Tick);
    c.step(
        at(now),
        FleetInput::Record(Read::Found(record(cells, &[], &[]))),
    );
    let heads = cells
        .iter()
        .map(|x| (x.to_string(), seen(None, 0)))
        .collect();
    c.step(
        at(now),
        FleetInput::Heads {
            purpose: HeadsFor::Take,
            heads,
        },
    );
    let claimed = cells.iter().map(|x| {
        (
            x.to_string(),
            Claimed::Held {
                epoch: 1,
                resumed: false,
            },
        )
    });
    c.step(at(now), FleetInput::Claimed(claimed.collect()));
    c.step(at(now), FleetInput::LeadershipClaimed(Claimed::Busy));
    c.step(
        at(now),
        FleetInput::Heads {
            purpose: HeadsFor::Join,
            heads: vec![],
        },
    );
    assert!(!c.busy(), "the round ended");
    c
}

#[test]
fn a_round_takes_free_target_cells_waits_for_held_ones_and_joins_the_leader() {
    let mut c = core();
    assert_eq!(asks(&c.step(at(0), FleetInput::Tick)), ["ReadRecord"]);
    let e = c.step(
        at(1),
        FleetInput::Record(Read::Found(record(&["c1", "c2"], &[], &[]))),
    );
    assert!(
        matches!(e.last(), Some(FleetEffect::ReadHeads { cells, purpose: HeadsFor::Take }) if *cells == names(&["c1", "c2"]))
    );
    let heads = vec![
        ("c1".into(), seen(None, 0)),
        ("c2".into(), seen(Some("x"), 3)),
    ];
    let e = c.step(
        at(2),
        FleetInput::Heads {
            purpose: HeadsFor::Take,
            heads,
        },
    );
    assert!(
        matches!(e.last(), Some(FleetEffect::Claim { cells }) if *cells == names(&["c1"])),
        "{e:?}"
    );
    let e = c.step(
        at(3),
        FleetInput::Claimed(vec![(
            "c1".into(),
            Claimed::Held {
                epoch: 1,
                resumed: false,
            },
        )]),
    );
    assert!(matches!(&e[0], FleetEffect::Install { cell, resumed: false } if cell == "c1"));
    assert!(
        matches!(e.last(), Some(FleetEffect::ClaimLeadership)),
        "{e:?}"
    );
    let e = c.step(at(4), FleetInput::LeadershipClaimed(Claimed::Busy));
    assert!(matches!(
        e.last(),
        Some(FleetEffect::ReadHeads {
            purpose: HeadsFor::Join,
            ..
        })
    ));
    let e = c.step(
        at(5),
        FleetInput::Heads {
            purpose: HeadsFor::Join,
            heads: vec![(LEADER_CELL.into(), seen(Some("b"), 1))],
        },
    );
    assert!(
        matches!(e.last(), Some(FleetEffect::Join { leader, notice }) if leader == "b" && notice.kind == NoticeKind::Joined)
    );
    let e = c.step(at(6), FleetInput::Joined(true));
    // c2 is on its way: the next round comes a quarter interval (at least a poll) later.
    assert!(matches!(e.last(), Some(FleetEffect::WakeAt(100))), "{e:?}");
    assert_eq!(c.held().collect::<Vec<_>>(), [("c1", 1)]);
    assert!(!c.busy());
}

#[test]
fn notices_are_heard_once_and_age_out() {
    let mut c = core();
    let n = |kind, cell: &str, at| Notice {
        at,
        kind,
        cell: cell.into(),
        node: "z".into(),
    };
    let now = at(10_000);
    let old = now.wall_ms - timing().notices_ms - 1;
    let heard = c.hear(
        now,
        vec![
            n(NoticeKind::Inherit, "c1", now.wall_ms),
            n(NoticeKind::Inherit, "c1", now.wall_ms),
            n(NoticeKind::Inherit, "c2", old),
            n(NoticeKind::Inherit, "nope", now.wall_ms),
            n(NoticeKind::Joined, "", now.wall_ms),
        ],
    );
    assert_eq!(heard.len(), 1, "only the join is the leader's");
    assert_eq!(c.wanted().into_iter().collect::<Vec<_>>(), ["c1"]);
    // An inherited cell is taken without reading its head first.
    let (take, unsure) = c.free_of(now, c.clone().wanted());
    assert_eq!((take, unsure.len()), (names(&["c1"]), 0));
    assert!(
        c.hear(now, vec![n(NoticeKind::Joined, "", now.wall_ms)])
            .is_empty(),
        "heard once"
    );
}

#[test]
fn a_hand_off_whose_answer_was_lost_is_settled_by_the_head() {
    let mut c = holding(&["c1"], 0);
    let t = 1_000; // past min_hold
    c.step(at(t), FleetInput::Tick);
    let rec = record(&[], &[("c1", "b")], &[]);
    let e = c.step(at(t), FleetInput::Record(Read::Found(rec)));
    assert!(
        matches!(e.last(), Some(FleetEffect::ReadReceivers { nodes }) if nodes.contains("b")),
        "{e:?}"
    );
    let e = c.step(
        at(t),
        FleetInput::Receivers(BTreeMap::from([("b".into(), "gb".into())])),
    );
    assert!(
        matches!(e.last(), Some(FleetEffect::HandOff { jobs, purpose: HandOffFor::Shed }) if jobs[0] == ("c1".into(), "b".into(), "gb".into()))
    );
    let lost = HandOffOutcome::Unsettled {
        error: Error::new(ErrorKind::Timeout, "lost"),
    };
    let e = c.step(
        at(t),
        FleetInput::HandedOff(vec![("c1".into(), "b".into(), lost)]),
    );
    assert!(matches!(&e[0], FleetEffect::Unsettle { cell } if cell == "c1"));
    while c.busy() {
        c.step(at(t), FleetInput::LeadershipClaimed(Claimed::Busy));
    }
    // The next round adopts it back (refused: it moved) and reads its head.
    let e = c.step(at(t + 500), FleetInput::Tick);
    assert!(matches!(e.last(), Some(FleetEffect::ReadRecord)));
    let e = c.step(at(t + 500), FleetInput::Record(Read::Failed));
    assert!(
        matches!(
            e.last(),
            Some(FleetEffect::Adopt {
                purpose: AdoptFor::Settle,
                ..
            })
        ),
        "{e:?}"
    );
    let e = c.step(
        at(t + 500),
        FleetInput::Adopted {
            purpose: AdoptFor::Settle,
            results: vec![("c1".into(), Err(true))],
        },
    );
    assert!(matches!(
        e.last(),
        Some(FleetEffect::ReadHeads {
            purpose: HeadsFor::Settle,
            ..
        })
    ));
    let e = c.step(
        at(t + 500),
        FleetInput::Heads {
            purpose: HeadsFor::Settle,
            heads: vec![("c1".into(), seen(Some("b"), 2))],
        },
    );
    let handed = StopReason::HandedOff {
        to: "b".into(),
        epoch: 2,
    };
    assert!(
        matches!(&e[0], FleetEffect::Finish { cell, reason } if cell == "c1" && *reason == handed),
        "{e:?}"
    );
}

#[test]
fn a_drain_hands_each_cell_to_its_heir_releases_the_rest_and_releases_the_lease() {
    let mut c = holding(&["c1", "c2"], 0);
    let e = c.step(at(50), FleetInput::Drain);
    assert!(matches!(&e[0], FleetEffect::WriteOwn { leaving: true }));
    assert!(
        matches!(&e[1], FleetEffect::Post { to } if to.contains_key("b")),
        "the leader is told"
    );
    assert!(matches!(e.last(), Some(FleetEffect::Wait { .. })));
    assert!(matches!(
        c.step(at(150), FleetInput::Waited).last(),
        Some(FleetEffect::ReadRecord)
    ));
    let rec = record(&["c1", "c2"], &[], &[("c1", "b")]);
    let e = c.step(at(150), FleetInput::Record(Read::Found(rec)));
    assert!(matches!(e.last(), Some(FleetEffect::ReadReceivers { .. })));
    let e = c.step(
        at(150),
        FleetInput::Receivers(BTreeMap::from([("b".into(), "gb".into())])),
    );
    assert!(matches!(
        e.last(),
        Some(FleetEffect::HandOff {
            purpose: HandOffFor::Drain,
            ..
        })
    ));
    let e = c.step(
        at(160),
        FleetInput::HandedOff(vec![("c1".into(), "b".into(), HandOffOutcome::Landed(2))]),
    );
    assert!(e
        .iter()
        .any(|x| matches!(x, FleetEffect::Post { to } if to["b"][0].kind == NoticeKind::Handed)));
    assert!(
        matches!(e.last(), Some(FleetEffect::Release { cells }) if *cells == names(&["c2"])),
        "{e:?}"
    );
    let e = c.step(at(170), FleetInput::Released(vec![("c2".into(), Ok(()))]));
    assert!(matches!(e.last(), Some(FleetEffect::ReleaseLease)), "{e:?}");
    let e = c.step(at(180), FleetInput::LeaseReleased(true));
    let Some(FleetEffect::Drained {
        handed_off,
        released,
        left,
        lease_released: true,
    }) = e.last()
    else {
        panic!("{e:?}");
    };
    assert_eq!((handed_off.len(), released.len(), left.len()), (1, 1, 0));
    assert!(c.is_done());
}

fn lease(node: &str) -> Option<ObservedLease> {
    let record = NodeLeaseRecord {
        node: node.into(),
        expires_ms: WALL + 60_000,
        addr: String::new(),
        peer_protocol: 1,
        generation: format!("g{node}"),
    };
    Some(ObservedLease {
        record,
        version: Version::new("v1").unwrap(),
        nonce: "n".into(),
        ttl_ms: Some(1_000),
    })
}

fn leases(nodes: &[&str]) -> LeadInput {
    let reads = nodes
        .iter()
        .map(|n| (n.to_string(), Some(lease(n))))
        .collect();
    LeadInput::Leases {
        sent_mono: 0,
        reads,
    }
}

fn published(step: LeadStep) -> BTreeMap<String, Part> {
    match step {
        LeadStep::Effect(LeadEffect::Publish { parts, .. }) => parts.into_iter().collect(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_leader_places_every_cell_once_and_moves_only_what_a_joiner_takes() {
    let cells = crate::cells::intern(names(&["c1", "c2", "c3", "c4", "c5", "c6"]));
    let mut l = LeaderCore::new("a", 1, cells, timing(), Flaws::default());
    assert_eq!(l.take_over(), LeadStep::Effect(LeadEffect::List));
    let listed = LeadInput::Listed(Some(names(&["a", "b"])));
    assert!(matches!(
        l.step(at(0), listed),
        LeadStep::Effect(LeadEffect::ReadRecords(_))
    ));
    let none = LeadInput::Records(vec![("a".into(), None), ("b".into(), None)]);
    assert!(matches!(
        l.step(at(0), none),
        LeadStep::Effect(LeadEffect::ReadLeases(_))
    ));
    assert_eq!(l.step(at(0), leases(&["a", "b"])), LeadStep::Done(vec![]));
    let parts = published(l.round(at(0), vec![]));
    let placed: Vec<&String> = parts.values().flat_map(|p| &p.cells).collect();
    assert_eq!(placed.len(), 6, "{parts:?}");
    assert_eq!(parts["a"].cells.len(), 3);
    let ok = parts.keys().map(|n| (n.clone(), true)).collect();
    assert_eq!(
        l.step(at(0), LeadInput::Published(ok)),
        LeadStep::Done(vec![])
    );
    // Nothing changed: nothing is written.
    assert_eq!(l.round(at(100), vec![]), LeadStep::Done(vec![]));
    // c joins; once it has settled, it takes two cells, one from each, and nothing else moves.
    let joined = Notice {
        at: WALL,
        kind: NoticeKind::Joined,
        cell: String::new(),
        node: "c".into(),
    };
    assert!(matches!(
        l.round(at(200), vec![joined]),
        LeadStep::Effect(LeadEffect::ReadLeases(_))
    ));
    // Admitted, it joins the watch ring (its record and its watcher's are written), but
    // holds nothing until it has settled.
    let ring = published(l.step(at(200), leases(&["c"])));
    assert!(ring["c"].cells.is_empty(), "{ring:?}");
    let ok = ring.keys().map(|n| (n.clone(), true)).collect();
    l.step(at(200), LeadInput::Published(ok));
    let after = published(l.round(at(500), vec![]));
    let moved: Vec<(&String, &String)> = after
        .iter()
        .flat_map(|(n, p)| p.moves.keys().map(move |c| (n, c)))
        .collect();
    assert_eq!(moved.len(), 2, "{after:?}");
    assert_eq!(after["c"].cells.len(), 2);
    let parts = l.parts();
    let all: Vec<&String> = parts.values().flat_map(|p| p.cells.iter()).collect();
    assert_eq!(all.len(), 6, "every cell placed once");
}

/// Found by the model check: a cell handed to a node that drains before it took the cell
/// stayed named by the node that left. The drain hears the hand-off and gives the cell on.
#[test]
fn a_drain_gives_on_a_cell_handed_to_it_that_it_had_not_taken() {
    let mut c = holding(&["c1"], 0);
    c.step(at(50), FleetInput::Drain);
    c.step(at(150), FleetInput::Waited);
    let mut rec = record(&["c1"], &[], &[("c1", "b"), ("c2", "b")]);
    rec.notices.push(Notice {
        at: WALL + 100,
        kind: NoticeKind::Handed,
        cell: "c2".into(),
        node: "b".into(),
    });
    let e = c.step(at(150), FleetInput::Record(Read::Found(rec)));
    let Some(FleetEffect::Adopt {
        cells,
        purpose: AdoptFor::Drain,
    }) = e.last()
    else {
        panic!("{e:?}");
    };
    assert_eq!(*cells, names(&["c2"]));
    let e = c.step(
        at(160),
        FleetInput::Adopted {
            purpose: AdoptFor::Drain,
            results: vec![("c2".into(), Ok(2))],
        },
    );
    assert!(
        matches!(e.last(), Some(FleetEffect::ReadReceivers { nodes }) if nodes.contains("b")),
        "{e:?}"
    );
    let e = c.step(
        at(160),
        FleetInput::Receivers(BTreeMap::from([("b".into(), "gb".into())])),
    );
    let Some(FleetEffect::HandOff { jobs, .. }) = e.last() else {
        panic!("{e:?}");
    };
    assert_eq!(jobs.len(), 2, "both cells go to their heir: {jobs:?}");
}

/// A cell placed on a draining node that it never took is adopted too: a hand-off to it
/// (which tells no notice when the placement moved the cell) may have landed.
#[test]
fn a_drain_adopts_the_cells_placed_on_it_that_it_has_not_taken() {
    let mut d = holding(&["c1"], 0);
    d.step(at(50), FleetInput::Drain);
    d.step(at(150), FleetInput::Waited);
    let rec = record(&["c1", "c3"], &[], &[]);
    let e = d.step(at(150), FleetInput::Record(Read::Found(rec)));
    let adopt =
        |e: &FleetEffect| matches!(e, FleetEffect::Adopt { cells, .. } if *cells == names(&["c3"]));
    assert!(e.last().is_some_and(adopt), "{e:?}");
}

/// Found by the model check: a cell whose holder went without giving it (a node that drained
/// before taking a cell handed to it) waited two sweep periods for its new node. Once the
/// new node has waited its patience, it asks the holder and claims the cell too: the claim
/// is `Busy` while the holder lives, and takes the cell when it is gone.
#[test]
fn a_cell_waited_for_past_patience_is_asked_for_and_claimed() {
    let mut c = core();
    c.step(at(0), FleetInput::Tick);
    c.step(
        at(0),
        FleetInput::Record(Read::Found(record(&["c1"], &[], &[]))),
    );
    let held = vec![("c1".into(), seen(Some("x"), 2))];
    let e = c.step(
        at(0),
        FleetInput::Heads {
            purpose: HeadsFor::Take,
            heads: held,
        },
    );
    assert!(
        !e.iter().any(|x| matches!(x, FleetEffect::Claim { .. })),
        "waits: {e:?}"
    );
    c.step(at(0), FleetInput::LeadershipClaimed(Claimed::Busy));
    let join = FleetInput::Heads {
        purpose: HeadsFor::Join,
        heads: vec![],
    };
    c.step(at(0), join);
    assert!(!c.busy());
    // settle + min_hold + 2 intervals later (1.2 s at this timing), a round asks and claims.
    let t = 1_300;
    c.step(at(t), FleetInput::Tick);
    let e = c.step(
        at(t),
        FleetInput::Record(Read::Found(record(&["c1"], &[], &[]))),
    );
    let held = vec![("c1".into(), seen(Some("x"), 2))];
    let e2 = c.step(
        at(t),
        FleetInput::Heads {
            purpose: HeadsFor::Take,
            heads: held,
        },
    );
    let all: Vec<&FleetEffect> = e.iter().chain(&e2).collect();
    let asked = all
        .iter()
        .any(|x| matches!(x, FleetEffect::Post { to } if to["x"][0].kind == NoticeKind::Ask));
    let claimed = all
        .iter()
        .any(|x| matches!(x, FleetEffect::Claim { cells } if *cells == names(&["c1"])));
    assert!(asked && claimed, "{all:?}");
}

/// A takeover whose listing of the records failed places nothing (it is not a fleet of one:
/// on main before the fix, the leader took itself for the only member and placed every cell
/// on itself); each round lists again, and once a listing succeeds the round goes on with
/// the placement the records show and the notices heard meanwhile.
#[test]
fn a_leader_that_cannot_list_the_records_places_nothing_until_it_can() {
    let cells = crate::cells::intern(names(&["c1", "c2", "c3", "c4"]));
    let mut l = LeaderCore::new("a", 2, cells, timing(), Flaws::default());
    assert_eq!(l.take_over(), LeadStep::Effect(LeadEffect::List));
    assert_eq!(
        l.step(at(0), LeadInput::Listed(None)),
        LeadStep::Done(vec![])
    );
    let joined = Notice {
        at: WALL,
        kind: NoticeKind::Joined,
        cell: String::new(),
        node: "c".into(),
    };
    for t in [100, 200] {
        let step = l.round(at(t), vec![joined.clone()]);
        assert_eq!(step, LeadStep::Effect(LeadEffect::List), "round at {t}");
        let failed = l.step(at(t), LeadInput::Listed(None));
        assert_eq!(failed, LeadStep::Done(vec![]), "nothing written at {t}");
        assert!(l.placement().targets.is_empty() && l.members().is_empty());
    }
    assert_eq!(l.round(at(300), vec![]), LeadStep::Effect(LeadEffect::List));
    let listed = LeadInput::Listed(Some(names(&["a", "b"])));
    assert!(matches!(
        l.step(at(300), listed),
        LeadStep::Effect(LeadEffect::ReadRecords(_))
    ));
    let mut b = Assignment::empty("b");
    b.term = 1;
    b.cells = names(&["c1", "c2", "c3", "c4"]);
    let records = LeadInput::Records(vec![("a".into(), None), ("b".into(), Some(b))]);
    assert!(matches!(
        l.step(at(300), records),
        LeadStep::Effect(LeadEffect::ReadLeases(_))
    ));
    // The rebuild is done: the round goes on with the join heard while listings failed.
    assert_eq!(
        l.step(at(300), leases(&["a", "b"])),
        LeadStep::Effect(LeadEffect::ReadLeases(names(&["c"])))
    );
    assert_eq!(l.placement().targets.len(), 4);
    assert!(l.placement().targets.values().all(|n| n == "b"));
    let parts = published(l.step(at(300), leases(&["c"])));
    assert!(parts.contains_key("c"), "{parts:?}");
    let placed: Vec<&String> = parts.values().flat_map(|p| &p.cells).collect();
    assert_eq!(placed.len(), 4, "every cell placed once: {parts:?}");
    assert!(parts["c"].cells.is_empty(), "c has not settled: {parts:?}");
}
