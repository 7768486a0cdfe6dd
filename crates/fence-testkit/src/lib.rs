//! fence-testkit (work in progress).
