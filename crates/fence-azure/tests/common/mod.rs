//! Helpers shared by fence-azure's test files.
#![allow(dead_code)]

use fence_core::Error;

/// Fails if `text` appears in the error's message, its `Debug` form or any of its sources.
pub fn assert_no_text(err: &Error, text: &str) {
    let mut all = vec![err.to_string(), format!("{err:?}")];
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        all.push(s.to_string());
        source = s.source();
    }
    for t in all {
        assert!(!t.contains(text), "{text:?} leaked: {t}");
    }
}
