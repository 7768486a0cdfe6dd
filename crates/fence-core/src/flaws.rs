//! The sabotage switch a core or runtime instance carries: nothing at all without the
//! `sabotage` feature.

/// The sabotage switch of one [`Fence`](crate::Fence) and of each pure core it drives
/// ([`LeaseCore`](crate::decide::LeaseCore), [`HeadWrite`](crate::decide::write::HeadWrite),
/// [`ClaimFlow`](crate::decide::claim::ClaimFlow), …). Empty, and always `default()`, unless
/// fence-core is built with its `sabotage` feature (the simulation and the model check only).
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
