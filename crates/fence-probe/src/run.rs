//! One run of the probe: the sequential checks, then the races and the identical rewrite at
//! the same time, then cleanup.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Mutex;

use bytes::Bytes;
use fence_core::{
    CasGuard, ConditionalStore, Current, DeleteOutcome, Entropy, Error, ErrorKind, Key, PutOutcome,
    Stored, Version,
};

use crate::race::{self, Round};
use crate::{delete_current, ProbeConfig, Verdict};

/// Why the probe stopped, most serious first.
#[derive(Debug)]
pub(crate) enum Stop {
    Violation(String),
    Unsupported(String),
    Error(String),
}

impl Stop {
    pub(crate) fn rank(&self) -> u8 {
        match self {
            Stop::Violation(_) => 0,
            Stop::Unsupported(_) => 1,
            Stop::Error(_) => 2,
        }
    }

    fn into_verdict(self) -> Verdict {
        match self {
            Stop::Violation(why) => Verdict::Violation(why),
            Stop::Unsupported(why) => Verdict::Unsupported(why),
            Stop::Error(why) => Verdict::Error(why),
        }
    }
}

pub(crate) type Step<T> = Result<T, Stop>;

pub(crate) fn violation<T>(why: impl Into<String>) -> Step<T> {
    Err(Stop::Violation(why.into()))
}

/// A store error as a stop: `Unsupported` is its own verdict, anything else "could not tell".
pub(crate) fn store_error(what: &str, e: &Error) -> Stop {
    if e.kind() == ErrorKind::Unsupported {
        Stop::Unsupported(format!("{what}: {e}"))
    } else {
        Stop::Error(format!("{what}: {e}"))
    }
}

pub(crate) struct ProbeRun<'a> {
    pub(crate) store: &'a dyn ConditionalStore,
    pub(crate) cfg: &'a ProbeConfig,
    prefix: String,
    nonce: u64,
    written: Mutex<BTreeSet<Key>>,
    pub(crate) steps: Vec<String>,
    pub(crate) content_versions: Option<bool>,
}

impl<'a> ProbeRun<'a> {
    pub(crate) fn new(
        store: &'a dyn ConditionalStore,
        cfg: &'a ProbeConfig,
        prefix: String,
    ) -> Self {
        ProbeRun {
            store,
            cfg,
            prefix,
            nonce: Entropy::from_os().next_u64(),
            written: Mutex::new(BTreeSet::new()),
            steps: Vec::new(),
            content_versions: None,
        }
    }

    pub(crate) fn key(&self, rel: &str) -> Step<Key> {
        Key::new(format!("{}/{rel}", self.prefix))
            .map_err(|e| Stop::Error(format!("probe key prefix: {e}")))
    }

    /// Notes that a write to `key` may have landed: cleanup deletes it, or reports it left
    /// behind. A key whose writes all failed without committing is never reported.
    pub(crate) fn may_have_written(&self, key: &Key) {
        self.written
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone());
    }

    pub(crate) fn body(&self, tag: &str) -> Bytes {
        Bytes::from(format!("fence-probe {tag} {:016x}", self.nonce))
    }

    /// `op` bounded by the request timeout, its error turned into a stop.
    pub(crate) async fn timed<T>(
        &self,
        what: &str,
        op: impl Future<Output = Result<T, Error>>,
    ) -> Step<T> {
        match tokio::time::timeout(self.cfg.op_timeout, op).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(store_error(what, &e)),
            Err(_) => Err(Stop::Error(format!(
                "{what}: no answer within {:?}",
                self.cfg.op_timeout
            ))),
        }
    }

    pub(crate) async fn get(&self, what: &str, key: &Key) -> Step<Option<Stored>> {
        self.timed(what, self.store.get(key)).await
    }

    /// One conditional write; an ambiguous answer (or none) is resolved by reading back:
    /// our body stored means applied, anything else means the probe cannot tell.
    pub(crate) async fn put(
        &self,
        what: &str,
        key: &Key,
        body: Bytes,
        guard: CasGuard,
    ) -> Step<PutOutcome> {
        let answer = tokio::time::timeout(
            self.cfg.op_timeout,
            self.store.put(key, body.clone(), guard),
        )
        .await;
        let may_have_landed = match &answer {
            Ok(Ok(PutOutcome::Applied(_))) | Err(_) => true,
            Ok(Ok(PutOutcome::Rejected)) => false,
            Ok(Err(e)) => e.is_ambiguous(),
        };
        if may_have_landed {
            self.may_have_written(key);
        }
        let cause = match answer {
            Ok(Ok(outcome)) => return Ok(outcome),
            Ok(Err(e)) if e.is_ambiguous() && e.kind() != ErrorKind::Unsupported => e.to_string(),
            Ok(Err(e)) => return Err(store_error(what, &e)),
            Err(_) => format!("no answer within {:?}", self.cfg.op_timeout),
        };
        match self.get(&format!("{what} (read-back)"), key).await? {
            Some(s) if s.body == body => Ok(PutOutcome::Applied(s.version)),
            _ => Err(Stop::Error(format!("{what}: {cause}; it did not land"))),
        }
    }

    /// A write that must apply; a rejection is a violation named `rejected_why`.
    async fn applied(
        &self,
        what: &str,
        key: &Key,
        body: Bytes,
        guard: CasGuard,
        rejected_why: &str,
    ) -> Step<Version> {
        match self.put(what, key, body, guard).await? {
            PutOutcome::Applied(v) => Ok(v),
            PutOutcome::Rejected => violation(rejected_why),
        }
    }

    pub(crate) async fn all(&mut self) -> Verdict {
        if let Err(stop) = self.sequential().await {
            return stop.into_verdict();
        }
        let (races, identical) = futures::join!(self.races(), self.identical_rewrite());
        let mut stops = Vec::new();
        match identical {
            Ok((repeats, step)) => {
                self.content_versions = Some(repeats);
                self.steps.push(step);
            }
            Err(stop) => stops.push(stop),
        }
        match races {
            Ok(steps) => self.steps.extend(steps),
            Err(stop) => stops.push(stop),
        }
        match stops.into_iter().min_by_key(Stop::rank) {
            Some(stop) => stop.into_verdict(),
            None => Verdict::Honest,
        }
    }

    /// The four sequential checks.
    async fn sequential(&mut self) -> Step<()> {
        let key = self.key("contract")?;
        let body1 = self.body("create");
        let absent_rejected = "create-if-absent on an absent key was rejected";
        let v1 = self
            .applied(
                "create",
                &key,
                body1.clone(),
                CasGuard::Absent,
                absent_rejected,
            )
            .await?;
        self.steps.push("create-if-absent applies".into());
        let second = self.put("second create", &key, self.body("second"), CasGuard::Absent);
        if let PutOutcome::Applied(_) = second.await? {
            return violation("a second create-if-absent was accepted (If-None-Match ignored)");
        }
        match self.get("read after second create", &key).await? {
            Some(s) if s.body == body1 && s.version == v1 => {}
            Some(s) if s.body == body1 => {
                return violation("the version changed though the second create was rejected")
            }
            _ => return violation("the rejected second create changed the stored object"),
        }
        self.steps
            .push("second create-if-absent rejected, object unchanged".into());
        let update = self.applied(
            "update",
            &key,
            self.body("update"),
            CasGuard::Match(v1.clone()),
            "an update with the current version was rejected",
        );
        let v2 = update.await?;
        if v2 == v1 {
            return violation("an update answered the version it replaced (versions repeat)");
        }
        self.steps
            .push("update with the current version applies, new version".into());
        self.stale_update(&key, v1.clone(), &v2).await?;
        if self.store.capabilities().conditional_delete {
            self.conditional_delete(&key, v1, v2).await?;
        }
        Ok(())
    }

    /// An update with the stale version `v1` is rejected; on a store that declares
    /// [`Capabilities::current_on_reject`](fence_core::Capabilities), the rejection carries
    /// the object at its current version `v2`.
    async fn stale_update(&mut self, key: &Key, v1: Version, v2: &Version) -> Step<()> {
        let body = self.body("stale");
        if !self.store.capabilities().current_on_reject {
            let stale = self.put("stale update", key, body, CasGuard::Match(v1));
            if let PutOutcome::Applied(_) = stale.await? {
                return violation("an update with a stale version was accepted (If-Match ignored)");
            }
            self.steps
                .push("update with a stale version rejected".into());
            return Ok(());
        }
        self.may_have_written(key);
        let stale = self.store.put_with_current(key, body, CasGuard::Match(v1));
        match self.timed("stale update", stale).await? {
            (PutOutcome::Applied(_), _) => {
                violation("an update with a stale version was accepted (condition ignored)")
            }
            (PutOutcome::Rejected, Current::Found(s)) if s.version == *v2 => {
                let step = "update with a stale version rejected, carrying the current object";
                self.steps.push(step.into());
                Ok(())
            }
            (PutOutcome::Rejected, current) => violation(format!(
                "the store declares that rejections carry the current object, but a stale \
                 update's rejection carried {current:?} instead of version {v2}"
            )),
        }
    }

    /// On a store with conditional delete: a delete with the stale version `v1` is rejected
    /// and leaves the object; one with the current version `v2` removes it.
    async fn conditional_delete(&mut self, key: &Key, v1: Version, v2: Version) -> Step<()> {
        let stale = self
            .timed("stale delete", self.store.delete(key, &v1))
            .await?;
        if stale == DeleteOutcome::Deleted {
            return violation("a delete with a stale version was accepted");
        }
        match self.get("read after stale delete", key).await? {
            Some(s) if s.version == v2 => {}
            _ => return violation("a rejected delete changed the stored object"),
        }
        let current = self.timed("delete", self.store.delete(key, &v2)).await?;
        if current == DeleteOutcome::Rejected {
            return violation("a delete with the current version was rejected");
        }
        if self.get("read after delete", key).await?.is_some() {
            return violation("a delete answered Deleted, but the object is still there");
        }
        self.steps.push(
            "conditional delete: a stale version rejected, the current version deletes".into(),
        );
        Ok(())
    }

    /// Identical bytes rewritten: a new version, or a repeat the store declares. Returns
    /// whether the version repeated, and the step's line.
    async fn identical_rewrite(&self) -> Step<(bool, String)> {
        let key = self.key("identical")?;
        let body = self.body("identical");
        let what = "identical rewrite";
        let absent_rejected = "create-if-absent on an absent key was rejected";
        let v1 = self
            .applied(what, &key, body.clone(), CasGuard::Absent, absent_rejected)
            .await?;
        let current_rejected = "a rewrite with the current version was rejected";
        let v2 = self
            .applied(
                what,
                &key,
                body,
                CasGuard::Match(v1.clone()),
                current_rejected,
            )
            .await?;
        let declared = self.store.capabilities().content_versions;
        if v2 == v1 && !declared {
            return violation(format!(
                "rewriting identical bytes kept version {v1}: versions are content hashes \
                 (ABA), but the store does not declare Capabilities::content_versions"
            ));
        }
        if v2 == v1 {
            let step = "identical bytes keep their version (content-hash versions, declared)";
            return Ok((true, step.into()));
        }
        let stale = self.put(what, &key, self.body("after"), CasGuard::Match(v1));
        if let PutOutcome::Applied(_) = stale.await? {
            return violation("the version replaced by an identical rewrite still matched");
        }
        Ok((false, "identical bytes get a new version".into()))
    }

    /// Every race at once; one line per kind of race.
    async fn races(&self) -> Step<Vec<String>> {
        let rounds = self.cfg.rounds.max(1);
        let creates = (0..rounds).map(|r| self.race_create(r));
        let updates = (0..rounds).map(|r| self.race_update(r));
        let (creates, updates) = futures::join!(
            futures::future::join_all(creates),
            futures::future::join_all(updates)
        );
        let creates = race::summary("create", self.cfg.racers, creates)?;
        let updates = race::summary("update", self.cfg.racers, updates)?;
        Ok(vec![creates, updates])
    }

    async fn race_create(&self, round: usize) -> Step<Round> {
        let key = self.key(&format!("race-create-{round}"))?;
        let label = format!("create race {round}");
        race::run(self, &key, CasGuard::Absent, None, &label).await
    }

    async fn race_update(&self, round: usize) -> Step<Round> {
        let key = self.key(&format!("race-update-{round}"))?;
        let base = self.body(&format!("base-{round}"));
        let label = format!("update race {round}");
        let absent_rejected = "create-if-absent on an absent key was rejected";
        let v0 = self
            .applied(
                &label,
                &key,
                base.clone(),
                CasGuard::Absent,
                absent_rejected,
            )
            .await?;
        race::run(self, &key, CasGuard::Match(v0), Some(&base), &label).await
    }

    /// Deletes what the probe wrote, if allowed; returns the keys left behind.
    ///
    /// With conditional delete, each key at the version read. Without it (most S3 stores),
    /// with the store's plain delete ([`ConditionalStore::delete_immutable`]): safe here
    /// because the keys are the probe's own scratch, under a prefix nobody else writes (a
    /// fresh random one, or one the caller keeps private), and the probe writes no more —
    /// a delete that lands late can only remove that scratch.
    pub(crate) async fn cleanup(&self) -> Vec<Key> {
        let written = self
            .written
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if !self.cfg.cleanup {
            return written.into_iter().collect();
        }
        let conditional = self.store.capabilities().conditional_delete;
        let mut left = Vec::new();
        for key in written {
            let deleted = tokio::time::timeout(self.cfg.op_timeout, async {
                if conditional {
                    delete_current(self.store, &key).await
                } else {
                    self.store.delete_immutable(&key).await.is_ok()
                }
            });
            if !matches!(deleted.await, Ok(true)) {
                left.push(key);
            }
        }
        left
    }
}
