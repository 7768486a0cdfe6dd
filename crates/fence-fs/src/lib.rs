//! fence-fs (work in progress).
