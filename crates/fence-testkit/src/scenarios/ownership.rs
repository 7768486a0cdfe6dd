//! Ownership-level scenarios over [`fence_core::Ownership`]: leases, takeover, epochs and the
//! resolution of ambiguous writes by reading back the write's nonce.

use std::sync::Arc;

use fence_core::record::{CellHead, LeaseBody};
use fence_core::{
    now_ms, CasGuard, CasOutcome, Commit, ConditionalStore, ErrorKind, Key, LeaseCasOutcome,
    NodeLeaseRecord, Ownership, Version,
};

use crate::faulty::{Fault, FaultyStore, OpKind};

fn ownership(
    store: Arc<dyn ConditionalStore>,
    node: &str,
    prefix: &Key,
) -> Result<Ownership, String> {
    Ownership::new(store, node)
        .with_prefix(prefix.as_str())
        .map_err(|e| e.to_string())
}

fn lease(node: &str, expires_ms: u64, generation: &str) -> NodeLeaseRecord {
    NodeLeaseRecord {
        node: node.into(),
        expires_ms,
        addr: "127.0.0.1:7000".into(),
        peer_protocol: 1,
        generation: generation.into(),
    }
}

fn lease_outcome<E: std::fmt::Display>(
    step: &str,
    r: Result<LeaseCasOutcome, E>,
) -> Result<Option<Version>, String> {
    match r {
        Ok(LeaseCasOutcome::Applied { etag }) => Ok(Some(etag)),
        Ok(LeaseCasOutcome::Rejected) => Ok(None),
        Err(e) => Err(format!("{step}: {e}")),
    }
}

/// Two processes acquire the same node lease at once (`rounds` times): exactly one is applied.
pub async fn lease_acquire_race(
    store: Arc<dyn ConditionalStore>,
    prefix: &Key,
    rounds: usize,
) -> Result<(), String> {
    let a = ownership(store.clone(), "a", prefix)?;
    let b = ownership(store, "b", prefix)?;
    let expires = now_ms() + 10_000;
    for round in 0..rounds {
        let node = format!("n{round}");
        let (la, lb) = (
            lease(&node, expires, "gen-a"),
            lease(&node, expires, "gen-b"),
        );
        let (ra, rb) = tokio::join!(
            a.cas_node_lease(CasGuard::Absent, &la),
            b.cas_node_lease(CasGuard::Absent, &lb),
        );
        let won = [lease_outcome("a", ra)?, lease_outcome("b", rb)?];
        let winners = won.iter().filter(|w| w.is_some()).count();
        if winners != 1 {
            return Err(format!(
                "round {round}: {winners} of 2 acquirers won the lease"
            ));
        }
    }
    Ok(())
}

/// Renewing with the current etag applies (new etag); with the stale etag it is rejected.
pub async fn lease_renew(store: Arc<dyn ConditionalStore>, prefix: &Key) -> Result<(), String> {
    let a = ownership(store, "a", prefix)?;
    let t = now_ms();
    let acquire = a
        .cas_node_lease(CasGuard::Absent, &lease("n", t + 10_000, "g1"))
        .await;
    let e1 = lease_outcome("acquire", acquire)?.ok_or("acquire of a free lease rejected")?;
    let renewed = lease("n", t + 20_000, "g1");
    let renew = a
        .cas_node_lease(CasGuard::Match(e1.clone()), &renewed)
        .await;
    let e2 = lease_outcome("renew", renew)?.ok_or("renew with the current etag rejected")?;
    if e2 == e1 {
        return Err("renewal kept the lease's etag".into());
    }
    let stale = a
        .cas_node_lease(CasGuard::Match(e1), &lease("n", t + 30_000, "g1"))
        .await;
    if lease_outcome("stale renew", stale)?.is_some() {
        return Err("renew with a stale etag was applied".into());
    }
    let read = a.read_node_lease("n").await.map_err(|e| e.to_string())?;
    match read {
        Some(l) if l.etag == e2 && l.record == renewed => Ok(()),
        other => Err(format!("read-back after renewals: {other:?}")),
    }
}

/// A peer takes over an expired lease with `Match(etag it read)`; the old holder's renewal
/// with that etag is then rejected. Run concurrently, exactly one of the two wins.
pub async fn lease_takeover(store: Arc<dyn ConditionalStore>, prefix: &Key) -> Result<(), String> {
    let holder = ownership(store.clone(), "holder", prefix)?;
    let taker = ownership(store, "taker", prefix)?;
    for (round, concurrent) in [(0, false), (1, true)] {
        let node = format!("victim{round}");
        let expired = lease(&node, now_ms().saturating_sub(1_000), "old");
        let acquire = holder.cas_node_lease(CasGuard::Absent, &expired).await;
        let e1 = lease_outcome("acquire", acquire)?.ok_or("acquire rejected")?;
        let seen = taker
            .read_node_lease(&node)
            .await
            .map_err(|e| e.to_string())?;
        let seen = seen.ok_or("the taker cannot see the lease")?;
        if seen.etag != e1 || seen.record.expires_ms >= now_ms() {
            return Err("the taker does not see the expired lease as written".into());
        }
        let take = lease(&node, now_ms() + 10_000, "new");
        let renew = lease(&node, now_ms() + 10_000, "old");
        let (t, r) = if concurrent {
            tokio::join!(
                taker.cas_node_lease(CasGuard::Match(e1.clone()), &take),
                holder.cas_node_lease(CasGuard::Match(e1.clone()), &renew),
            )
        } else {
            let t = taker
                .cas_node_lease(CasGuard::Match(e1.clone()), &take)
                .await;
            (t, holder.cas_node_lease(CasGuard::Match(e1), &renew).await)
        };
        let (t, r) = (lease_outcome("takeover", t)?, lease_outcome("renewal", r)?);
        match (concurrent, t.is_some(), r.is_some()) {
            (false, true, false) | (true, true, false) | (true, false, true) => {}
            (_, tw, rw) => {
                return Err(format!(
                    "round {round}: takeover won {tw}, old renewal won {rw} (exactly one may)"
                ))
            }
        }
    }
    Ok(())
}

fn owner_step(step: &str, r: Result<CasOutcome, fence_core::Error>) -> Result<CasOutcome, String> {
    r.map_err(|e| format!("{step}: {e}"))
}

async fn owner_of(o: &Ownership, cell: &str) -> Result<(Option<String>, u64, Version), String> {
    let rec = o.read_owner(cell).await.map_err(|e| e.to_string())?;
    let rec = rec.ok_or("the owner record is missing")?;
    Ok((rec.node, rec.epoch, rec.etag))
}

fn expect(step: &str, got: CasOutcome, want: CasOutcome) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{step}: {got:?}, expected {want:?}"))
    }
}

/// Claims by different nodes raise the epoch; a deposed owner's write with its old etag is
/// rejected; a release keeps the epoch; the next claim takes epoch + 1; a claim that does not
/// raise the epoch is refused with [`ErrorKind::InvalidInput`]; a node that no longer owns the
/// cell cannot release it.
pub async fn claim_release_epochs(
    store: Arc<dyn ConditionalStore>,
    prefix: &Key,
) -> Result<(), String> {
    let a = ownership(store.clone(), "a", prefix)?;
    let b = ownership(store, "b", prefix)?;
    let cell = "c";
    expect(
        "a claims",
        owner_step("a claims", a.cas_owner(cell, CasGuard::Absent, 1).await)?,
        CasOutcome::Applied,
    )?;
    let (_, e1_epoch, e1) = owner_of(&b, cell).await?;
    let take = b
        .cas_owner(cell, CasGuard::Match(e1.clone()), e1_epoch + 1)
        .await;
    expect(
        "b takes over",
        owner_step("b takes over", take)?,
        CasOutcome::Applied,
    )?;
    let stale = a.cas_owner(cell, CasGuard::Match(e1), 2).await;
    expect(
        "deposed a writes",
        owner_step("deposed a writes", stale)?,
        CasOutcome::Rejected,
    )?;
    let mut epochs = vec![e1_epoch];
    let (node, epoch, _) = owner_of(&a, cell).await?;
    if node.as_deref() != Some("b") {
        return Err(format!("after the takeover the owner is {node:?}"));
    }
    epochs.push(epoch);
    expect(
        "b releases",
        owner_step("b releases", b.release_owner(cell, epoch).await)?,
        CasOutcome::Applied,
    )?;
    let (node, kept, e3) = owner_of(&a, cell).await?;
    if node.is_some() || kept != epoch {
        return Err(format!(
            "after release: owner {node:?} epoch {kept}, expected None at {epoch}"
        ));
    }
    match a.cas_owner(cell, CasGuard::Match(e3.clone()), kept).await {
        Err(e) if e.kind() == ErrorKind::InvalidInput => {}
        other => {
            return Err(format!(
                "a claim at the same epoch: {other:?}, expected InvalidInput"
            ))
        }
    }
    let claim = a.cas_owner(cell, CasGuard::Match(e3), kept + 1).await;
    expect(
        "a claims again",
        owner_step("a claims again", claim)?,
        CasOutcome::Applied,
    )?;
    let (node, epoch, e4) = owner_of(&b, cell).await?;
    if node.as_deref() != Some("a") || epoch != kept + 1 {
        return Err(format!("after re-claim: owner {node:?} epoch {epoch}"));
    }
    epochs.push(epoch);
    let release = owner_step("b releases a's cell", b.release_owner(cell, kept).await)?;
    expect("b releases a's cell", release, CasOutcome::Rejected)?;
    let again = a.cas_owner(cell, CasGuard::Match(e4), epoch + 1).await;
    expect(
        "same node claims anew",
        owner_step("same node claims anew", again)?,
        CasOutcome::Applied,
    )?;
    epochs.push(owner_of(&a, cell).await?.1);
    if epochs.windows(2).any(|w| w[1] <= w[0]) {
        return Err(format!("claim epochs not strictly increasing: {epochs:?}"));
    }
    Ok(())
}

/// How a read-back resolves an ambiguous write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// The record carries our nonce: the write landed; it is ours.
    Ours,
    /// The record is still the one we replaced: the write did not land.
    Prior,
    /// Somebody else wrote (or the record is gone): we are fenced.
    Other,
}

/// Resolves an ambiguous write from the nonce read back.
pub fn resolve(found: Option<&str>, desired: &str, prior: &str) -> Resolution {
    match found {
        Some(n) if n == desired => Resolution::Ours,
        Some(n) if n == prior => Resolution::Prior,
        _ => Resolution::Other,
    }
}

struct AmbiguousCase {
    name: &'static str,
    fault: Fault,
    commit: Commit,
    interloper: bool,
    want: Resolution,
}

const CASES: [AmbiguousCase; 5] = [
    AmbiguousCase {
        name: "answer lost after applying",
        fault: Fault::LoseAnswer,
        commit: Commit::Ambiguous,
        interloper: false,
        want: Resolution::Ours,
    },
    AmbiguousCase {
        name: "5xx after applying",
        fault: Fault::ServerErrorAfterApply,
        commit: Commit::Ambiguous,
        interloper: false,
        want: Resolution::Ours,
    },
    AmbiguousCase {
        name: "request lost",
        fault: Fault::LoseRequest,
        commit: Commit::Ambiguous,
        interloper: false,
        want: Resolution::Prior,
    },
    AmbiguousCase {
        name: "409 conflict",
        fault: Fault::Conflict,
        commit: Commit::NotCommitted,
        interloper: false,
        want: Resolution::Prior,
    },
    AmbiguousCase {
        name: "another writer meanwhile",
        fault: Fault::LoseRequest,
        commit: Commit::Ambiguous,
        interloper: true,
        want: Resolution::Other,
    },
];

/// Ambiguous owner writes are resolved by reading back the nonce: a write that landed is
/// recognised as ours, one that did not leaves the prior record, and another writer's record
/// is neither. Faults come from a [`FaultyStore`] around `store`; the same for a node lease.
pub async fn ambiguous_resolution(
    store: Arc<dyn ConditionalStore>,
    prefix: &Key,
    seed: u64,
) -> Result<(), String> {
    let faulty = Arc::new(FaultyStore::new(store.clone(), seed));
    let a = ownership(faulty.clone(), "a", prefix)?;
    let b = ownership(store, "b", prefix)?;
    for (i, case) in CASES.iter().enumerate() {
        let cell = format!("amb{i}");
        let claimed = owner_step("claim", a.cas_owner(&cell, CasGuard::Absent, 1).await)?;
        expect("claim", claimed, CasOutcome::Applied)?;
        let (prior, etag) = a
            .read_head(&cell)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("owner missing")?;
        faulty.script(OpKind::Put, [case.fault]);
        let desired = a.fresh_nonce();
        let next = CellHead {
            epoch: 2,
            nonce: desired.clone(),
            ..prior.clone()
        };
        let write = a
            .put_head(&cell, &next, CasGuard::Match(etag.clone()))
            .await;
        match write {
            Err(e) if e.commit() == case.commit => {}
            other => {
                return Err(format!(
                    "{}: the write answered {other:?}, expected an error with {:?}",
                    case.name, case.commit
                ))
            }
        }
        if case.interloper {
            let took = b.cas_owner(&cell, CasGuard::Match(etag), 2).await;
            expect(
                "interloper",
                owner_step("interloper", took)?,
                CasOutcome::Applied,
            )?;
        }
        let found = a.read_head(&cell).await.map_err(|e| e.to_string())?;
        let got = resolve(
            found.as_ref().map(|(body, _)| body.nonce.as_str()),
            &desired,
            &prior.nonce,
        );
        if got != case.want {
            return Err(format!(
                "{}: read-back resolved {got:?}, expected {:?}",
                case.name, case.want
            ));
        }
    }
    ambiguous_lease(&a, &faulty).await
}

/// A node-lease renewal whose answer is lost is recognised by its nonce on read-back.
async fn ambiguous_lease(a: &Ownership, faulty: &FaultyStore) -> Result<(), String> {
    let t = now_ms() + 10_000;
    let acquire = a
        .cas_node_lease(CasGuard::Absent, &lease("amb", t, "g"))
        .await;
    let etag = lease_outcome("acquire", acquire)?.ok_or("acquire rejected")?;
    faulty.script(OpKind::Put, [Fault::LoseAnswer]);
    let nonce = a.fresh_nonce();
    let body = LeaseBody {
        record: lease("amb", t + 1, "g"),
        nonce: nonce.clone(),
        ttl_ms: Some(10_000),
        extra: Default::default(),
    };
    match a.put_lease_body(CasGuard::Match(etag), &body).await {
        Err(e) if e.is_ambiguous() => {}
        other => {
            return Err(format!(
                "lease renewal answered {other:?}, expected ambiguous"
            ))
        }
    }
    let back = a.read_node_lease("amb").await.map_err(|e| e.to_string())?;
    match back {
        Some(l) if l.nonce == nonce => Ok(()),
        other => Err(format!(
            "lease read-back does not show our nonce: {other:?}"
        )),
    }
}
