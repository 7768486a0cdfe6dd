//! The conformance scenarios, and [`all`]: the list [`run_all`](crate::run_all) runs.
//!
//! Each scenario is a `pub async fn` in [`store`], [`ownership`] or [`runtime`] (or
//! [`linearizability`]) taking the store and its parameters; [`all`]
//! wraps each into a named [`Scenario`] over a [`ScenarioCtx`].

pub mod ownership;
pub mod runtime;
pub mod store;
pub mod wire;

use crate::linearizability;
use crate::suite::{Scenario, ScenarioCtx, ScenarioOutcome};

fn done(r: Result<(), String>) -> ScenarioOutcome {
    r.map(|()| String::new())
}

/// Every scenario, store level first, then ownership level, then runtime level, then the
/// linearizability check.
pub fn all() -> Vec<Scenario> {
    let mut list = store_level();
    list.extend(ownership_level());
    list.extend(runtime_level());
    list.push(Scenario::new(
        "linearizability",
        |cx: ScenarioCtx| async move {
            let c = &cx.config;
            let params = linearizability::WorkloadConfig {
                ops: c.linearizability_ops,
                workers: c.linearizability_workers,
                keys: c.linearizability_keys,
                seed: c.seed,
            };
            let stats =
                linearizability::record_and_check(cx.store.clone(), &cx.prefix, &params).await?;
            Ok(stats.to_string())
        },
    ));
    list
}

/// The store-level scenarios.
pub fn store_level() -> Vec<Scenario> {
    vec![
        Scenario::new("create_twice", |cx: ScenarioCtx| async move {
            done(store::create_twice(&*cx.store, &cx.key("k")?).await)
        }),
        Scenario::new("update_current", |cx: ScenarioCtx| async move {
            done(store::update_current(&*cx.store, &cx.key("k")?).await)
        }),
        Scenario::new("update_stale", |cx: ScenarioCtx| async move {
            done(store::update_stale(&*cx.store, &cx.key("k")?).await)
        }),
        Scenario::new("update_missing", |cx: ScenarioCtx| async move {
            done(store::update_missing(&*cx.store, &cx.key("k")?, &cx.key("witness")?).await)
        }),
        Scenario::new("identical_rewrite", |cx: ScenarioCtx| async move {
            let content_versions = cx.store.capabilities().content_versions;
            store::identical_rewrite(&*cx.store, &cx.key("k")?, content_versions).await?;
            Ok(if content_versions {
                "content-hash versions, as declared"
            } else {
                "identical bytes got a new version"
            }
            .into())
        }),
        Scenario::new("create_race", |cx: ScenarioCtx| async move {
            let (racers, rounds) = (cx.config.racers, cx.config.race_rounds);
            store::create_race(cx.store.clone(), &cx.prefix, racers, rounds).await?;
            Ok(format!(
                "{rounds} rounds × {racers} racers, one winner each"
            ))
        }),
        Scenario::new("update_race", |cx: ScenarioCtx| async move {
            let (racers, rounds) = (cx.config.racers, cx.config.race_rounds);
            store::update_race(cx.store.clone(), &cx.prefix, racers, rounds).await?;
            Ok(format!(
                "{rounds} rounds × {racers} racers, one winner each"
            ))
        }),
        Scenario::new("counter", |cx: ScenarioCtx| async move {
            let (w, i) = (cx.config.counter_workers, cx.config.counter_increments);
            let attempts = store::counter(cx.store.clone(), &cx.key("counter")?, w, i).await?;
            Ok(format!(
                "{w} workers × {i} increments = {}, {attempts} write attempts",
                w * i
            ))
        }),
        Scenario::new("delete_semantics", |cx: ScenarioCtx| async move {
            let conditional = cx.conditional_delete;
            store::delete_semantics(&*cx.store, &cx.key("k")?, conditional).await?;
            Ok(if conditional {
                "conditional delete"
            } else {
                "delete unsupported, as declared"
            }
            .into())
        }),
        Scenario::new("list_prefix", |cx: ScenarioCtx| async move {
            done(store::list_prefix(&*cx.store, &cx.prefix).await)
        }),
        Scenario::new("list_all", |cx: ScenarioCtx| async move {
            let n = store::list_all(&*cx.store, &cx.prefix).await?;
            Ok(format!("{n} keys in the whole store"))
        }),
        Scenario::new("bodies", |cx: ScenarioCtx| async move {
            let cap = cx.store.capabilities().max_body.unwrap_or(usize::MAX);
            let large = cx.config.large_body_bytes.min(cap);
            store::bodies(&*cx.store, &cx.prefix, large).await?;
            Ok(format!(
                "empty, binary, {large}-byte and unicode-keyed bodies"
            ))
        }),
        Scenario::new("invalid_keys", |_cx: ScenarioCtx| async move {
            done(store::invalid_keys())
        }),
    ]
}

/// The ownership-level scenarios (over [`fence_core::Ownership`]).
pub fn ownership_level() -> Vec<Scenario> {
    vec![
        Scenario::new("lease_acquire_race", |cx: ScenarioCtx| async move {
            let rounds = cx.config.lease_rounds;
            done(ownership::lease_acquire_race(cx.store.clone(), &cx.prefix, rounds).await)
        }),
        Scenario::new("lease_renew", |cx: ScenarioCtx| async move {
            done(ownership::lease_renew(cx.store.clone(), &cx.prefix).await)
        }),
        Scenario::new("lease_takeover", |cx: ScenarioCtx| async move {
            done(ownership::lease_takeover(cx.store.clone(), &cx.prefix).await)
        }),
        Scenario::new("claim_release_epochs", |cx: ScenarioCtx| async move {
            done(ownership::claim_release_epochs(cx.store.clone(), &cx.prefix).await)
        }),
        Scenario::new("ambiguous_resolution", |cx: ScenarioCtx| async move {
            let seed = cx.config.seed;
            done(ownership::ambiguous_resolution(cx.store.clone(), &cx.prefix, seed).await)
        }),
    ]
}

/// The runtime-level scenarios (over [`fence_core::Fence`], in real time, with the TTL
/// [`SuiteConfig::runtime_ttl`](crate::SuiteConfig)).
pub fn runtime_level() -> Vec<Scenario> {
    vec![
        Scenario::new("runtime_lease_renew", |cx: ScenarioCtx| async move {
            runtime::lease_renew(cx.store.clone(), &cx.prefix, cx.config.runtime_ttl).await
        }),
        Scenario::new("runtime_release", |cx: ScenarioCtx| async move {
            runtime::release(cx.store.clone(), &cx.prefix, cx.config.runtime_ttl).await
        }),
        Scenario::new("runtime_expire_takeover", |cx: ScenarioCtx| async move {
            runtime::expire_takeover(cx.store.clone(), &cx.prefix, cx.config.runtime_ttl).await
        }),
        Scenario::new(
            "runtime_stale_writer_fenced",
            |cx: ScenarioCtx| async move {
                runtime::stale_writer_fenced_by_store(
                    cx.store.clone(),
                    &cx.prefix,
                    cx.config.runtime_ttl,
                )
                .await
            },
        ),
        Scenario::new("runtime_ambiguous_renewal", |cx: ScenarioCtx| async move {
            let seed = cx.config.seed;
            runtime::ambiguous_renewal(cx.store.clone(), &cx.prefix, seed, cx.config.runtime_ttl)
                .await
        }),
    ]
}
