//! fence-gcs (work in progress).
