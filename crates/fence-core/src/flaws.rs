//! The sabotage switch a core or runtime instance carries: nothing at all without the
//! `sabotage` feature.

/// The switch of one [`Fence`](crate::Fence) and its lease core.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Flaws {
    #[cfg(feature = "sabotage")]
    pub(crate) on: Option<crate::sabotage::Sabotage>,
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
