//! The sabotage switch a fleet's pure core carries: nothing at all without the `sabotage`
//! feature.

/// The sabotage switch of one fleet and of the pure cores it drives
/// ([`FleetCore`](crate::decide::FleetCore), [`LeaderCore`](crate::decide::LeaderCore)).
/// Empty, and always `default()`, unless fence-fleet is built with its `sabotage` feature
/// (the fleet's model check and sabotage test only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flaws {
    #[cfg(feature = "sabotage")]
    pub(crate) on: Option<crate::sabotage::Sabotage>,
}

impl Flaws {
    /// Flaws with `switch` on (or none).
    #[cfg(feature = "sabotage")]
    pub fn switch(switch: Option<crate::sabotage::Sabotage>) -> Flaws {
        Flaws { on: switch }
    }
}

/// Whether switch `$name` is on in `$flaws`; the constant `false` without the feature.
macro_rules! sabotaged {
    ($flaws:expr, $name:ident) => {{
        #[cfg(feature = "sabotage")]
        let on = $flaws.on == Some($crate::sabotage::Sabotage::$name);
        #[cfg(not(feature = "sabotage"))]
        let on = {
            let _ = &$flaws;
            false
        };
        on
    }};
}
pub(crate) use sabotaged;
